// Piece geometry: which block of a full tensor one device holds under a
// layout, and the box arithmetic lowering needs to move data between
// pieces. Pure functions of shapes and layouts (no data); the runtime copies
// bytes along the boxes these functions describe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/lowering/adapters.h"
#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::backend {

// The piece of a tensor one device holds: a box (start, length per dim) of
// the full tensor, which of the V partial sums it is, which of the R copies.
struct Piece {
  std::vector<int64_t> start, length;
  // 32-bit: millions of buffers hold a piece (labels count devices).
  int32_t value_index = 0, value_parts = 1;
  int32_t replica_index = 0, replicas = 1;
  int64_t numel() const;
  bool same_box(const Piece& o) const { return start == o.start && length == o.length; }
};

// Equal boxes and equal partial-sum and replica labels.
bool same_piece(const Piece& a, const Piece& b);
bool same_pieces(const std::vector<Piece>& a, const std::vector<Piece>& b);

// The piece `device` holds under layout `l` (throws if it holds none).
Piece piece_of(const Layout& l, int device, const sema::Shape& shape);
// Whether `device` holds a piece under `l`.
bool holds(const Layout& l, int device);
// The piece a sub-op operand slice reads or writes.
Piece piece_of_slice(const sema::OperandSlice& s);
// The whole tensor as one piece.
Piece full_piece(const sema::Shape& shape);
// Box arithmetic in full-tensor coordinates.
bool contains(const Piece& outer, const std::vector<int64_t>& start, const std::vector<int64_t>& length);
bool intersect(const Piece& a, const Piece& b, std::vector<int64_t>& start, std::vector<int64_t>& length);
// Where box `want` lies in a row-major buffer laid out as box `have`: its
// first element and, when it is columns of the buffer's rows (contiguous
// over every dimension but the last, which is partial), the buffer's row
// length (0: contiguous: ones, one partial dimension, full ones). False
// when `want` is outside `have` or neither.
bool region_view(const Piece& have, const Piece& want, int64_t& offset, int64_t& row_stride);

// Fits a layout over devices in exactly the order `order` (its positions)
// to the piece each of them holds (pieces[i] on order[i]): D digits of any
// stride, partial-sum labels in any numbering. False when no mixed-radix
// layout over this order names these pieces.
bool fit_layout(const std::vector<int>& order, const std::vector<Piece>& pieces, const sema::Shape& shape, Layout& out);
// The same on flat data: blocks[i * rank + d] is the block index along dim
// d of the piece order[i] holds, labels[i] its partial-sum label.
bool fit_blocks(const std::vector<int>& order, const std::vector<int64_t>& blocks, const std::vector<int64_t>& labels, int64_t value_parts,
                const sema::Shape& shape, Layout& out);

// One part of what a send/recv step delivers to a device: the box (and
// partial-sum label) it takes from device `from` (itself: a local copy).
struct TransferPart {
  int from = -1;
  Piece box;
};
// What send/recv step `st` delivers to `device` (before: the layout before
// the step): one part per pair {source, device} whose source piece meets the
// piece the device holds after it. The parts of a valid step tile that piece.
std::vector<TransferPart> transfer_parts(const AdapterStep& st, const Layout& before, int device, const sema::Shape& shape);
bool tiles(const Piece& want, const std::vector<TransferPart>& parts);

// Printers shared by lowering, verification and the runtime's messages.
std::string region_text(const std::vector<int64_t>& start, const std::vector<int64_t>& length);  // [0:4, 0:32]
std::string group_text(const std::vector<int>& g);                                               // {0,1,2}

}  // namespace nns::backend
