// Derived communication: how a tensor moves from the layout its producers
// leave it in to the layout its consumers need (docs/architecture.md,
// "Layouts and adapters").
//
// A Layout describes where the pieces of one full tensor lie over an
// ordered device group: the position of a device in the group, read as a
// mixed-radix number over `factors` (outermost first), says which piece it
// holds — R(n): n replicas, V(n): n partial sums, D_j(n): split n ways
// along tensor dim j. A D digit has a stride: its weight in the block index
// along its dim. In the canonical layout the outer digits weigh more; other
// strides are what lets a layout name any device order, e.g. nnScaler's
// 0,4,1,5,2,6,3,7 (devices differing in the outer position digit hold
// neighbouring blocks). derive_adapter searches, with a volume cost, for
// the cheapest chain of primitives turning one layout into another:
//   V->R allreduce 2(n-1)/n*S   V->D reduce-scatter (n-1)/n*S
//   D->R allgather (n-1)/n*S    D_i->D_j all-to-all (n-1)/n*S
//   R->D local chunk (free)     R->V local value split (free)
// where S is the size of the piece each of the n devices of a group holds;
// a step's bytes are summed over every device that takes part. Between
// different device lists (another order, other devices, another count) a
// chain is: collectives on the source devices, one piece-wise send/recv,
// collectives on the destination devices; bytes a send/recv moves out of
// the source group weigh AdapterCost::boundary_weight times more.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "semantics/graph.h"

namespace nns::backend {

struct LayoutFactor {
  enum Kind { R, V, D } kind = R;
  int dim = -1;   // D only
  int64_t n = 1;
  // D only: the digit's weight in the block index along `dim` (block =
  // sum of digit * stride over the dim's digits). 0 until normalize() fills
  // in the canonical value (outer digits weigh more).
  int64_t stride = 0;
  bool operator==(const LayoutFactor& o) const { return kind == o.kind && dim == o.dim && n == o.n && stride == o.stride; }
};

struct Layout {
  std::vector<int> devices;          // the ordered device group
  std::vector<LayoutFactor> factors;  // product of n == devices.size()
  std::string to_string() const;      // "R(2) D0(4) over [0..7]"
};

// Fills in canonical strides, merges adjacent factors of the same kind (D:
// of the same dim, strides nesting), drops factors of 1.
Layout normalize(Layout l);
std::vector<LayoutFactor> normalized_factors(const std::vector<LayoutFactor>& fs);
// How many blocks the D factors cut the tensor into; along `dim` only.
int64_t layout_pieces(const std::vector<LayoutFactor>& fs);
int64_t layout_split(const std::vector<LayoutFactor>& fs, int dim);

struct AdapterStep {
  enum Prim { AllReduce, AllGather, ReduceScatter, AllToAll, Chunk, ValueSplit, SendRecv } prim = AllReduce;
  int dim = -1, to_dim = -1;              // AllGather/ReduceScatter/Chunk: dim; AllToAll: dim -> to_dim
  // Collectives: the device groups they run in (one collective per group).
  // SendRecv: {source, destination} pairs; each moves the part of the
  // source's piece (before the step) the destination holds after it (see
  // transfer_parts in geometry.h).
  std::vector<std::vector<int>> groups;
  double bytes = 0;                       // volume summed over the devices taking part, by the cost model above
  double cross = 0;                       // SendRecv: the part of `bytes` leaving the source group
  Layout after;                           // the layout once this step has run (what the runtime realises)
  std::string to_string() const;
};

// What a chain costs: bytes inside a device group count once, bytes that
// leave the source group (to devices outside it) count boundary_weight
// times (links between groups, e.g. between nodes, are the slow ones).
struct AdapterCost {
  double boundary_weight = 4.0;
  // A search may give up on chains costing more than this: derive_adapter
  // then throws std::invalid_argument, as when no chain exists. A caller
  // comparing alternatives passes the cheapest found so far, which prunes
  // most of each search (choosing a 64-device order: 123 s -> 1 s).
  double give_up_above = std::numeric_limits<double>::infinity();
};

struct Adapter {
  std::vector<AdapterStep> steps;
  double cost = 0;    // weighted by AdapterCost: what the search minimises
  double bytes = 0;   // total volume moved
  double cross = 0;   // of which leaves the source group
  std::string to_string() const;
};

const char* prim_name(AdapterStep::Prim p);

// Cheapest chain from `from` to `to` for a tensor of `shape` (elements of
// `elem_bytes`). Throws std::invalid_argument when no chain exists (e.g. a
// split that does not divide the dim).
// exhaustive: plain Dijkstra over every chain within one group, without the
// shortcut (one collective where one does the whole change) or the A*
// lower bound; tests compare the two.
Adapter derive_adapter(const Layout& from, const Layout& to, const sema::Shape& shape, int64_t elem_bytes, bool exhaustive = false,
                       const AdapterCost& cost = {});

// Throws std::invalid_argument unless `l` is a layout of a tensor of `shape`
// (factors multiply to the device count, splits divide, strides nest).
void check_layout(const Layout& l, const sema::Shape& shape, const char* which);

// A send/recv step from `before` to `after` (other device lists): with
// positional, device p of one list sends its whole piece to device p of the
// other (the factors must be equal; partial sums may travel); otherwise
// piece-wise: every device of `after` takes each part of its piece from one
// holder under `before` (its own part locally; replicas take turns), which
// needs both layouts free of partial sums. Throws std::invalid_argument
// when the step cannot be built.
AdapterStep transfer_step(const Layout& before, const Layout& after, bool positional, const sema::Shape& shape, int64_t elem_bytes);
// What the search pays for a step: bytes leaving the source group weigh
// boundary_weight, the rest once.
double weighted_cost(const AdapterStep& st, const AdapterCost& cost);

// The cheapest chain of collectives within one device group (the same
// device list on both sides). Used by derive_adapter; exposed for tests.
// Only cost.give_up_above applies (nothing leaves the group).
Adapter derive_in_group(const Layout& from, const Layout& to, const sema::Shape& shape, int64_t elem_bytes, bool exhaustive = false,
                        const AdapterCost& cost = {});

// What derive_in_group's chain would cost (bytes summed over `devices`)
// and how many steps it has, without building it; false when none exists.
// give_up_above: as AdapterCost's (chains dearer may be reported missing).
bool in_group_cost(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape, int64_t elem_bytes,
                   size_t devices, bool exhaustive, double& cost, int& steps,
                   double give_up_above = std::numeric_limits<double>::infinity());

// (prime_digits, significance_orders and all_layouts: layout_digits.cpp.)
// `f` as prime digits, outermost first (R(4) is R(2) R(2); D digits get
// the nested strides that name the same blocks).
std::vector<LayoutFactor> prime_digits(const LayoutFactor& f);
// `digits` with the D digits of each dim in every order of significance
// (their positions unchanged), normalised.
std::vector<std::vector<LayoutFactor>> significance_orders(const std::vector<LayoutFactor>& digits);

// Every layout of `n` devices for a tensor of `shape` (prime digits of any
// kind, D strides in every order), normalised and distinct: what the
// exhaustive tests enumerate.
std::vector<std::vector<LayoutFactor>> all_layouts(int64_t n, const sema::Shape& shape);
// Plain Dijkstra from `from` over every chain of collectives within one
// group of `devices`: each reachable layout with its cheapest cost (bytes
// summed over the devices). The reference the tests hold derive_adapter to.
std::vector<std::pair<std::vector<LayoutFactor>, double>> chain_costs_from(const std::vector<LayoutFactor>& from, const sema::Shape& shape,
                                                                         int64_t elem_bytes, int64_t devices);
// A key naming a factor list exactly (strides included), after normalising.
std::string layout_key(const std::vector<LayoutFactor>& fs);
// Whether the D digits of every dim form a mixed-radix block index (each
// stride the product of the sizes of the digits weighing less).
bool layout_strides_valid(const std::vector<LayoutFactor>& fs);

}  // namespace nns::backend
