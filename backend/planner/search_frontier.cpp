// The frontier DP over one unit's ops (search.h, step 2; search_internal.h):
// ops in graph order, the state the choice class of every op whose output
// is still to be read inside the unit.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "backend/planner/search_internal.h"

namespace nns::planner::search_detail {

namespace {

struct Entry {
  double cost;
  int parent;  // state index at the step before
  int option;  // this step's option
};

// The unit's internal data flow by position.
struct Flow {
  std::vector<int> last_use;  // the last position reading an output of op i (-1: none inside)
  std::vector<std::vector<std::tuple<int, int, int>>> in_edges;  // (producer position, its output, input k)
};

Flow unit_flow(const Env& e, const SearchUnit& u) {
  const size_t n = u.ops.size();
  std::unordered_map<int, int> pos_of;
  for (size_t i = 0; i < n; ++i) pos_of[u.ops[i]] = static_cast<int>(i);
  Flow f{std::vector<int>(n, -1), std::vector<std::vector<std::tuple<int, int, int>>>(n)};
  for (size_t i = 0; i < n; ++i) {
    const SearchOp& op = e.m.ops[u.ops[i]];
    for (size_t k = 0; k < op.in_tensor.size(); ++k) {
      int tt = op.in_tensor[k];
      if (tt < 0 || op.in_param[k]) continue;
      auto it = pos_of.find(e.m.producer[tt]);
      if (it == pos_of.end()) continue;
      f.in_edges[i].emplace_back(it->second, e.m.producer_out[tt], static_cast<int>(k));
      f.last_use[it->second] = std::max(f.last_use[it->second], static_cast<int>(i));
    }
  }
  return f;
}

// What a live op's choice means to the ops still to read it is only the
// layout of each output and (for an edge's memory) whether it is recomputed
// alone: choices alike there are one class (coshard k = 2, 4 and 8 of one
// identifier; splits that leave the outputs replicated). cls: option ->
// class; rep: class -> an option (edges are costed with it).
void choice_classes(const Env& e, const SearchOp& op, const std::vector<OpDecision>& opts, std::vector<int>& cls,
                    std::vector<int>& rep) {
  std::map<std::vector<int>, int> seen;
  for (size_t o = 0; o < opts.size(); ++o) {
    std::vector<int> key{opts[o].rc && !e.rc ? 1 : 0};
    for (size_t k = 0; k < op.out_tensor.size(); ++k) key.push_back(out_layout(op, opts[o], k));
    auto [it, fresh] = seen.emplace(std::move(key), static_cast<int>(rep.size()));
    if (fresh) rep.push_back(static_cast<int>(o));
    cls.push_back(it->second);
  }
}

// An edge inside the unit, its cost per (producer class, consumer option)
// computed once per solve rather than once per state.
struct EdgeTable {
  int from;                  // producer position
  size_t width;              // consumer options
  std::vector<double> cost;  // [class * width + option]
};

// The frontier's bound. A model whose names show no layers (a U-Net written
// with named submodules, tests/planner/unet_flat.nns) is one unit whose
// skip connections and timestep embedding stay live across it: the exact
// frontier grows as the product of their choice classes (29 s for the
// flat U-Net tiny on 4 devices). Past this many states a step keeps the
// cheapest so far (a beam): exact wherever the frontier is narrower, as in
// every layered model (a Transformer block: a few dozen states).
constexpr size_t kMaxStates = 256;

void keep_cheapest(std::vector<Entry>& next, std::vector<std::string>& next_states) {
  std::vector<size_t> order(next.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::nth_element(order.begin(), order.begin() + kMaxStates, order.end(), [&](size_t a, size_t b) {
    return next[a].cost != next[b].cost ? next[a].cost < next[b].cost : a < b;
  });
  order.resize(kMaxStates);
  std::sort(order.begin(), order.end());  // keep the first-seen order: the result does not depend on the sort
  std::vector<Entry> kept;
  std::vector<std::string> kept_states;
  for (size_t j : order) {
    kept.push_back(next[j]);
    kept_states.push_back(std::move(next_states[j]));
  }
  next = std::move(kept);
  next_states = std::move(kept_states);
}

}  // namespace

double frontier_dp(const Env& e, int unit, const Weights& w, const std::vector<std::vector<OpDecision>>& options,
                   std::vector<OpDecision>& out) {
  const SearchUnit& u = e.m.units[unit];
  const size_t n = u.ops.size();
  const Flow f = unit_flow(e, u);
  std::vector<std::vector<int>> cls(n), rep(n);
  for (size_t i = 0; i < n; ++i) choice_classes(e, e.m.ops[u.ops[i]], options[i], cls[i], rep[i]);
  std::vector<std::vector<EdgeTable>> edges(n);
  for (size_t i = 0; i < n; ++i)
    for (const auto& [pp, pk, k] : f.in_edges[i]) {
      EdgeTable t{pp, options[i].size(), std::vector<double>(rep[pp].size() * options[i].size())};
      for (size_t c = 0; c < rep[pp].size(); ++c)
        for (size_t o = 0; o < options[i].size(); ++o) {
          const OpDecision& pd = options[pp][rep[pp][c]];
          t.cost[c * t.width + o] = edge_time(e, u.ops[pp], pd, pk, u.ops[i], options[i][o], k) +
                                    w.act * edge_mem(e, u.ops[pp], pd, pk, u.ops[i], options[i][o], k);
        }
      edges[i].push_back(std::move(t));
    }
  // A state: one byte per live position, its class (short strings stay in
  // place: no allocation up to 15 live ops).
  std::vector<std::vector<Entry>> steps(n);
  std::vector<int> live;
  std::vector<std::string> states{std::string()};
  std::vector<Entry> prev{{0.0, -1, -1}};
  std::vector<int> slot_of(n, -1);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> live_after;
    for (int p : live)
      if (f.last_use[p] > static_cast<int>(i)) live_after.push_back(p);
    if (f.last_use[i] > static_cast<int>(i)) live_after.push_back(static_cast<int>(i));
    std::vector<double> node_obj(options[i].size());
    for (size_t o = 0; o < options[i].size(); ++o) node_obj[o] = node_objective(e, u.ops[i], options[i][o], w);
    std::fill(slot_of.begin(), slot_of.end(), -1);
    for (size_t j = 0; j < live.size(); ++j) slot_of[live[j]] = static_cast<int>(j);
    std::unordered_map<std::string, int> index;
    index.reserve(states.size() * options[i].size());
    std::vector<std::string> next_states;
    std::vector<Entry> next;
    std::string ns(live_after.size(), '\0');
    for (size_t si = 0; si < states.size(); ++si) {
      const std::string& st = states[si];
      for (size_t o = 0; o < options[i].size(); ++o) {
        double c = prev[si].cost + node_obj[o];
        for (const EdgeTable& t : edges[i]) c += t.cost[static_cast<unsigned char>(st[slot_of[t.from]]) * t.width + o];
        for (size_t j = 0; j < live_after.size(); ++j)
          ns[j] = live_after[j] == static_cast<int>(i) ? static_cast<char>(static_cast<unsigned char>(cls[i][o]))
                                                       : st[slot_of[live_after[j]]];
        auto [it, fresh] = index.emplace(ns, static_cast<int>(next.size()));
        if (fresh) {
          next.push_back({c, static_cast<int>(si), static_cast<int>(o)});
          next_states.push_back(ns);
        } else if (c < next[it->second].cost) {
          next[it->second] = {c, static_cast<int>(si), static_cast<int>(o)};
        }
      }
    }
    if (next.size() > kMaxStates) keep_cheapest(next, next_states);
    steps[i] = next;
    states = std::move(next_states);
    prev = std::move(next);
    live = std::move(live_after);
  }
  int best = 0;
  for (size_t si = 1; si < prev.size(); ++si)
    if (prev[si].cost < prev[best].cost) best = static_cast<int>(si);
  double cost = prev.empty() ? kInf : prev[best].cost;
  out.assign(n, OpDecision{});
  for (int i = static_cast<int>(n) - 1, si = best; i >= 0; --i) {
    const Entry& en = steps[i][si];
    out[i] = options[i][en.option];
    si = en.parent;
  }
  return cost;
}

}  // namespace nns::planner::search_detail
