#include "backend/lowering/geometry.h"

#include <algorithm>
#include <stdexcept>

namespace nns::backend {

int64_t Piece::numel() const {
  int64_t n = 1;
  for (int64_t l : length) n *= l;
  return n;
}

Piece piece_of(const Layout& l, int device, const sema::Shape& shape) {
  // Layouts list their devices in ascending order (they come from ordered
  // maps): a binary search, with a linear one for any other order. Checks of
  // 1024-device plans call this for every device of every edge.
  auto it = std::lower_bound(l.devices.begin(), l.devices.end(), device);
  if (it == l.devices.end() || *it != device) it = std::find(l.devices.begin(), l.devices.end(), device);
  if (it == l.devices.end()) throw std::logic_error("internal: device " + std::to_string(device) + " is not in " + l.to_string());
  int64_t pos = it - l.devices.begin();
  // Scratch reused across calls: lowering 1024 ranks calls this millions of times.
  static thread_local std::vector<int64_t> digit, index, split;
  digit.assign(l.factors.size(), 0);
  for (size_t i = l.factors.size(); i-- > 0;) {
    digit[i] = pos % l.factors[i].n;
    pos /= l.factors[i].n;
  }
  Piece p;
  size_t rank = shape.size();
  index.assign(rank, 0);
  split.assign(rank, 1);
  // Digits of one kind compose outermost first: D digits of one dim give
  // the block index along it, V digits the value part, R digits the copy.
  for (size_t i = 0; i < l.factors.size(); ++i) {
    const LayoutFactor& f = l.factors[i];
    if (f.kind == LayoutFactor::D) {
      index[f.dim] = index[f.dim] * f.n + digit[i];
      split[f.dim] *= f.n;
    } else if (f.kind == LayoutFactor::V) {
      p.value_index = p.value_index * f.n + digit[i];
      p.value_parts *= f.n;
    } else {
      p.replica_index = p.replica_index * f.n + digit[i];
      p.replicas *= f.n;
    }
  }
  p.start.resize(rank);
  p.length.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t len = shape[d] / split[d];
    p.start[d] = index[d] * len;
    p.length[d] = len;
  }
  return p;
}

bool holds(const Layout& l, int device) {
  // Ascending device lists (the usual case) answer by binary search; the
  // linear search covers any other order.
  auto it = std::lower_bound(l.devices.begin(), l.devices.end(), device);
  if (it != l.devices.end() && *it == device) return true;
  return std::find(l.devices.begin(), l.devices.end(), device) != l.devices.end();
}

Piece piece_of_slice(const sema::OperandSlice& s) {
  Piece p;
  p.start = s.start;
  p.length = s.length;
  p.value_index = s.value_index;
  p.value_parts = s.value_parts;
  return p;
}

Piece full_piece(const sema::Shape& shape) {
  Piece p;
  p.start.assign(shape.size(), 0);
  p.length = shape;
  return p;
}

bool contains(const Piece& outer, const std::vector<int64_t>& start, const std::vector<int64_t>& length) {
  for (size_t d = 0; d < start.size(); ++d)
    if (start[d] < outer.start[d] || start[d] + length[d] > outer.start[d] + outer.length[d]) return false;
  return true;
}

bool intersect(const Piece& a, const Piece& b, std::vector<int64_t>& start, std::vector<int64_t>& length) {
  start.resize(a.start.size());
  length.resize(a.start.size());
  for (size_t d = 0; d < a.start.size(); ++d) {
    int64_t lo = std::max(a.start[d], b.start[d]), hi = std::min(a.start[d] + a.length[d], b.start[d] + b.length[d]);
    if (hi <= lo) return false;
    start[d] = lo;
    length[d] = hi - lo;
  }
  return true;
}

std::string region_text(const std::vector<int64_t>& start, const std::vector<int64_t>& length) {
  std::string s = "[";
  for (size_t d = 0; d < start.size(); ++d) s += (d ? ", " : "") + std::to_string(start[d]) + ":" + std::to_string(start[d] + length[d]);
  return s + "]";
}

std::string group_text(const std::vector<int>& g) {
  std::string s = "{";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "}";
}

}  // namespace nns::backend
