#include "backend/lowering/auto_order.h"
#include "semantics/check_deadline.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "backend/lowering/comm_plan.h"

namespace nns::backend {

namespace {

// Ascending, with multiplicity: 12 -> 2, 2, 3.
std::vector<int> prime_factors(int n) {
  std::vector<int> out;
  for (int p = 2; p * p <= n; ++p)
    while (n % p == 0) {
      out.push_back(p);
      n /= p;
    }
  if (n > 1) out.push_back(n);
  return out;
}

// Part i's position in the device list: the digits of i (radices `radix`,
// digit 0 the most significant) read in the order `perm` (perm[0] the most
// significant). The identity permutation gives position i.
std::vector<int> positions(const std::vector<int>& radix, const std::vector<int>& perm, int n) {
  std::vector<int> out(static_cast<size_t>(n));
  std::vector<int> digit(radix.size());
  for (int i = 0; i < n; ++i) {
    int rest = i;
    for (size_t j = radix.size(); j-- > 0;) {
      digit[j] = rest % radix[j];
      rest /= radix[j];
    }
    int pos = 0;
    for (int j : perm) pos = pos * radix[static_cast<size_t>(j)] + digit[static_cast<size_t>(j)];
    out[static_cast<size_t>(i)] = pos;
  }
  return out;
}

// What an order costs around the op: edges left without a chain first (an
// order must never lose one the given order has), then the adapters' cost.
struct Score {
  int underivable = 0;
  double cost = 0;
  // Strictly cheaper: a difference below rounding is a tie, which keeps the
  // earlier candidate (the given order first).
  bool better_than(const Score& o) const {
    if (underivable != o.underivable) return underivable < o.underivable;
    return cost < o.cost - 1e-9 * std::max(1.0, o.cost);
  }
  // What AutoOrder records: infinite when some edge has no adapter.
  double total() const { return underivable ? std::numeric_limits<double>::infinity() : cost; }
};

// `give_up_above`: the best score so far. Searches stop at chains costing
// more, so that the many losing orders cost little to rule out; an edge
// given up on is left with a note, which makes the order lose (only passed
// while the best has every edge derived).
Score score_around(const sema::Graph& g, const sema::Plan& plan, const std::vector<bool>& nodes, double give_up_above) {
  AdapterCost cost;
  cost.give_up_above = give_up_above;
  Score s;
  for (const CommEdge& e : derive_communication(g, plan, &nodes, cost).edges) {
    if (!e.note.empty()) ++s.underivable;
    else s.cost += e.adapter.cost;
  }
  return s;
}

void place_parts(sema::Plan& plan, const sema::AutoOrder& group, const std::vector<int>& position) {
  for (size_t i = 0; i < group.subops.size(); ++i)
    plan.subops[static_cast<size_t>(group.subops[i])].devices = {group.devices[static_cast<size_t>(position[i])]};
}

// The top-level ops the group's parts belong to: the edges touching them
// are the ones its order changes.
std::vector<bool> nodes_of(const sema::Plan& plan, const sema::AutoOrder& group) {
  std::vector<bool> nodes(plan.root_of_node.size(), false);
  for (int sub : group.subops) nodes[static_cast<size_t>(plan.subops[static_cast<size_t>(sub)].node)] = true;
  return nodes;
}

// Deriving communication reads every leaf's devices.
bool every_leaf_placed(const sema::Plan& plan) {
  for (const sema::SubOp& s : plan.subops)
    if (s.leaf() && s.devices.empty()) return false;
  return true;
}

// The group's parts must still be the leaves it placed (one device each).
bool group_intact(const sema::Plan& plan, const sema::AutoOrder& group) {
  if (group.subops.size() != group.devices.size() || group.subops.empty()) return false;
  for (int sub : group.subops)
    if (sub < 0 || static_cast<size_t>(sub) >= plan.subops.size() || !plan.subops[static_cast<size_t>(sub)].leaf() ||
        plan.subops[static_cast<size_t>(sub)].devices.size() != 1)
      return false;
  return true;
}

constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// The index of the cheapest candidate, each priced within the best so far;
// `given` gets the score of the given order (candidate 0).
size_t cheapest_candidate(const sema::Graph& g, sema::Plan& plan, const sema::AutoOrder& group, const std::vector<bool>& nodes,
                          const std::vector<std::vector<int>>& candidates, Score& given) {
  size_t best = 0;
  Score best_score;
  for (size_t c = 0; c < candidates.size(); ++c) {
    sema::CheckDeadline::poll_now();
    place_parts(plan, group, candidates[c]);
    bool bounded = c > 0 && best_score.underivable == 0;
    Score s = score_around(g, plan, nodes, bounded ? best_score.cost : kUnbounded);
    if (c == 0) given = best_score = s;
    else if (s.better_than(best_score)) {
      best = c;
      best_score = s;
    }
  }
  return best;
}

void choose(const sema::Graph& g, sema::Plan& plan, sema::AutoOrder& group) {
  std::vector<bool> nodes = nodes_of(plan, group);
  std::vector<std::vector<int>> candidates = auto_order_candidates(static_cast<int>(group.subops.size()));
  Score given;
  size_t best = cheapest_candidate(g, plan, group, nodes, candidates, given);
  Score best_score = given;
  if (best != 0) {
    // Priced again without a bound, as check and run will derive it: a
    // bounded search may find what the unbounded one gives up on (its
    // expansion cap), and the choice must never lose an adapter.
    place_parts(plan, group, candidates[best]);
    best_score = score_around(g, plan, nodes, kUnbounded);
    if (!best_score.better_than(given)) {
      best = 0;
      best_score = given;
    }
  }
  place_parts(plan, group, candidates[best]);
  group.chosen.clear();
  for (int pos : candidates[best]) group.chosen.push_back(group.devices[static_cast<size_t>(pos)]);
  group.cost_given = given.total();
  group.cost_chosen = best_score.total();
}

}  // namespace

std::vector<std::vector<int>> auto_order_candidates(int n) {
  std::vector<int> radix = prime_factors(n);
  std::vector<int> identity(radix.size());
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<int>> out;
  std::set<std::vector<int>> seen;
  auto offer = [&](const std::vector<int>& perm) {
    if (out.size() >= kMaxAutoOrderCandidates) return;
    std::vector<int> pos = positions(radix, perm, n);
    if (seen.insert(pos).second) out.push_back(std::move(pos));
  };
  offer(identity);
  // One digit moved elsewhere next, to the front first: nnScaler's
  // 0,4,1,5,2,6,3,7 moves the last digit to the front. The likely winners,
  // priced early, bound the searches of all the others.
  auto moved = [&](size_t from, size_t to) {
    std::vector<int> perm = identity;
    int digit = perm[from];
    perm.erase(perm.begin() + static_cast<long>(from));
    perm.insert(perm.begin() + static_cast<long>(to), digit);
    return perm;
  };
  for (size_t from = identity.size(); from-- > 1;) offer(moved(from, 0));
  for (size_t from = 0; from < identity.size(); ++from)
    for (size_t to = 1; to < identity.size(); ++to)
      if (from != to) offer(moved(from, to));
  // Then every other permutation, in lexicographic order.
  std::vector<int> perm = identity;
  while (out.size() < kMaxAutoOrderCandidates && std::next_permutation(perm.begin(), perm.end())) offer(perm);
  return out;
}

void choose_auto_orders(const sema::Graph& g, sema::Plan& plan) {
  if (plan.auto_orders.empty() || !every_leaf_placed(plan)) return;
  for (sema::AutoOrder& group : plan.auto_orders)
    if (group.chosen.empty() && group_intact(plan, group)) choose(g, plan, group);
}

}  // namespace nns::backend
