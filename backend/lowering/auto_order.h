// assign(parts, devices, order = "auto"): nns chooses which part of an op
// runs on which device of the list (sema::AutoOrder).
//
// A consumer whose parts sit in the right permuted order needs fewer
// collectives: a producer leaving V(2) D0(4) on devices 0..7 (device
// v*4 + d holds partial sum v of block d) feeds a D0(8) consumer with one
// reduce-scatter when the consumer's parts 0..7 are on devices
// 0,4,1,5,2,6,3,7, but needs more with the natural order. The candidates
// are the digit permutations of the group: n = len(devices) factored into
// primes, part i written in that mixed radix, a candidate choosing which
// digit is most significant in the device position. Each candidate is
// priced by the adapters of the edges around the op (derive_communication
// restricted to them) and the cheapest kept, the earlier on ties. The
// candidates after the given order start with those moving one digit (to
// the front first, nnScaler's move), so that the best is usually found
// early; every later search is bounded by it (AdapterCost::give_up_above),
// which is what keeps 720 candidates of 64..1024 devices to about a second.
#pragma once

#include <vector>

#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::backend {

// At most this many candidate orders per group (the identity first): the
// 6! orders of six prime digits, e.g. 64 devices.
constexpr size_t kMaxAutoOrderCandidates = 720;

// The candidate orders for a group of n parts: position[i] is the index in
// the device list of part i. Distinct, at most kMaxAutoOrderCandidates:
// the identity, the one-digit moves (to the front first), then the other
// digit permutations in lexicographic order.
std::vector<std::vector<int>> auto_order_candidates(int n);

// Chooses every group of plan.auto_orders not chosen yet, in plan order
// (a group sees the choices of the groups before it): rewrites its parts'
// devices and records the chosen devices and both costs. Every leaf of the
// plan must have a device (a plan the evaluator accepted); otherwise the
// groups are left in the given order.
void choose_auto_orders(const sema::Graph& g, sema::Plan& plan);

}  // namespace nns::backend
