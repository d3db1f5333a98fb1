// Derived communication: how a tensor moves from the layout its producers
// leave it in to the layout its consumers need (DESIGN.md section 3).
//
// A Layout describes where the pieces of one full tensor lie over an
// ordered device group: the position of a device in the group, read as a
// mixed-radix number over `factors` (outermost first), says which piece it
// holds — R(n): n replicas, V(n): n partial sums, D_j(n): split n ways
// along tensor dim j. derive_adapter searches, with a volume cost, for the
// cheapest chain of primitives turning one layout into another over the
// same devices:
//   V->R allreduce 2(n-1)/n*S   V->D reduce-scatter (n-1)/n*S
//   D->R allgather (n-1)/n*S    D_i->D_j all-to-all (n-1)/n*S
//   R->D local chunk (free)     R->V local value split (free)
// where S is the size of the piece the group of n devices exchanges. Moves
// between different device groups become point-to-point send/recv.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "semantics/graph.h"

namespace nns::backend {

struct LayoutFactor {
  enum Kind { R, V, D } kind = R;
  int dim = -1;   // D only
  int64_t n = 1;
  bool operator==(const LayoutFactor& o) const { return kind == o.kind && dim == o.dim && n == o.n; }
};

struct Layout {
  std::vector<int> devices;          // the ordered device group
  std::vector<LayoutFactor> factors;  // product of n == devices.size()
  std::string to_string() const;      // "R(2) D0(4) over [0..7]"
};

// Merges adjacent factors of the same kind (and dim), drops factors of 1.
Layout normalize(Layout l);

struct AdapterStep {
  enum Prim { AllReduce, AllGather, ReduceScatter, AllToAll, Chunk, ValueSplit, SendRecv } prim = AllReduce;
  int dim = -1, to_dim = -1;              // AllGather/ReduceScatter/Chunk: dim; AllToAll: dim -> to_dim
  std::vector<std::vector<int>> groups;   // device groups the primitive runs in (one collective per group)
  double bytes = 0;                       // volume per device, by the cost model above
  Layout after;                           // the layout once this step has run (what the runtime realises)
  std::string to_string() const;
};

struct Adapter {
  std::vector<AdapterStep> steps;
  double cost = 0;
  std::string to_string() const;
};

const char* prim_name(AdapterStep::Prim p);

// Cheapest chain from `from` to `to` for a tensor of `shape` (elements of
// `elem_bytes`). Throws std::invalid_argument when no chain exists (e.g. a
// split that does not divide the dim).
// exhaustive: plain Dijkstra over every chain, without the shortcut (one
// collective where one does the whole change) or the A* lower bound; tests
// compare the two.
Adapter derive_adapter(const Layout& from, const Layout& to, const sema::Shape& shape, int64_t elem_bytes, bool exhaustive = false);

}  // namespace nns::backend
