// The search behind derive_in_group and in_group_cost (adapters.h): the
// cheapest chain of single-primitive moves from one factor list to another
// within one device group. Internal to lowering (adapters.cpp and its
// tests' reference search use it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/lowering/adapters.h"

namespace nns::backend {

// One move: the factors after it, its step (groups filled in only for the
// chosen path), and the factors it acts on (the source split so that the
// acted-on part is one factor) with which one.
struct ChainMove {
  std::vector<LayoutFactor> next;
  AdapterStep step;
  std::vector<LayoutFactor> acted_on;
  size_t acted = 0;
};

// Every single-primitive move from `fs`, in a fixed order (the search's
// tie-breaks follow it). Costs are for a tensor of `full_bytes`.
std::vector<ChainMove> chain_moves(const std::vector<LayoutFactor>& fs, const sema::Shape& shape, double full_bytes);

// The cheapest chain of moves from one factor list to another. It depends
// on the factors, the shape and the byte size only, not on which devices
// hold the pieces, so one search serves every edge with the same pair.
struct Chain {
  std::vector<std::pair<ChainMove, std::vector<LayoutFactor>>> moves;  // each move and the factors after it
  double cost = 0;
  std::string error;  // non-empty: no chain exists
};

// The chain from `from` to `to` (normalised factor lists), remembered
// across calls; `bound` (per device, one byte) as AdapterCost's
// give_up_above. A search under a finite bound lands in `scratch`.
const Chain& cached_chain(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to,
                          const sema::Shape& shape, bool exhaustive, double bound, Chain& scratch);

// (adapters.cpp) A key naming a factor list exactly, strides spelled out,
// as given (not normalised).
std::string factors_key(const std::vector<LayoutFactor>& fs);
// normalized_factors into `out`, with `tmp` and `dims` as scratch: no
// allocation once their capacity suffices (the search normalises every
// candidate move).
void normalize_factors_into(const std::vector<LayoutFactor>& in, std::vector<LayoutFactor>& tmp, std::vector<int>& dims,
                            std::vector<LayoutFactor>& out);

}  // namespace nns::backend
