// The plan search's per-unit solve (search.h, step 2; search_internal.h):
// a unit's objective under fixed decisions, the frontier DP that minimises
// it, the stats a stage partition sums, and the memo over unit signatures.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#include "backend/planner/search_internal.h"

namespace nns::planner {
namespace search_detail {

Env make_env(const SearchModel& m, const SearchOptions& o, int tp, int dp, double s, bool rc, bool seq) {
  Env e{m, o, tp, dp, s, rc, {}, {}};
  e.seq = seq;
  e.tp_group = range_devices(tp, 1);
  e.dp_group = range_devices(dp, tp);
  e.micro_batches = std::max(1.0, static_cast<double>(o.global_batch) / (dp * s * static_cast<double>(m.graph_batch)));
  return e;
}

// For each activation input k of the unit's i-th op made inside the unit:
// fn(producer op, its position in the unit, its output index, k).
template <class Fn>
void for_each_unit_input(const Env& e, int unit, size_t i, Fn&& fn) {
  const SearchUnit& u = e.m.units[unit];
  const SearchOp& op = e.m.ops[u.ops[i]];
  for (size_t k = 0; k < op.in_tensor.size(); ++k) {
    int tt = op.in_tensor[k];
    if (tt < 0 || op.in_param[k]) continue;
    int p = e.m.producer[tt];
    if (p < 0 || e.m.unit_of_op[p] != unit) continue;
    size_t pos = static_cast<size_t>(std::find(u.ops.begin(), u.ops.end(), p) - u.ops.begin());
    fn(p, pos, e.m.producer_out[tt], static_cast<int>(k));
  }
}

double unit_objective_env(const Env& e, int unit, const std::vector<OpDecision>& d, const Weights& w) {
  const SearchUnit& u = e.m.units[unit];
  double total = 0;
  for (size_t i = 0; i < u.ops.size(); ++i) {
    int opi = u.ops[i];
    total += node_objective(e, opi, d[i], w);
    for_each_unit_input(e, unit, i, [&](int p, size_t pos, int out, int k) {
      total += edge_time(e, p, d[pos], out, opi, d[i], k) + w.act * edge_mem(e, p, d[pos], out, opi, d[i], k);
    });
  }
  return total;
}

// The frontier DP over one unit's ops (search.h, step 2).
double solve_unit_env(const Env& e, int unit, const Weights& w, bool exhaustive, std::vector<OpDecision>& out,
                      const std::vector<std::vector<OpDecision>>& options) {
  const SearchUnit& u = e.m.units[unit];
  const size_t n = u.ops.size();
  std::vector<int> pos_of(e.m.ops.size(), -1);  // small models only pay this once per solve
  for (size_t i = 0; i < n; ++i) pos_of[u.ops[i]] = static_cast<int>(i);
  for (size_t i = 0; i < n; ++i)
    if (options[i].empty()) return kInf;
  if (exhaustive) {
    std::vector<size_t> idx(n, 0);
    std::vector<OpDecision> d(n);
    double best = kInf;
    while (true) {
      for (size_t i = 0; i < n; ++i) d[i] = options[i][idx[i]];
      double v = unit_objective_env(e, unit, d, w);
      if (v < best) {
        best = v;
        out = d;
      }
      size_t i = 0;
      while (i < n && ++idx[i] == options[i].size()) idx[i++] = 0;
      if (i == n) break;
    }
    return best;
  }
  // last_use[i]: the last position reading an output of op i inside the unit.
  std::vector<int> last_use(n, -1);
  std::vector<std::vector<std::tuple<int, int, int>>> in_edges(n);  // (producer position, its output, input k)
  for (size_t i = 0; i < n; ++i) {
    const SearchOp& op = e.m.ops[u.ops[i]];
    for (size_t k = 0; k < op.in_tensor.size(); ++k) {
      int tt = op.in_tensor[k];
      if (tt < 0 || op.in_param[k]) continue;
      int p = e.m.producer[tt];
      if (p < 0 || pos_of[p] < 0) continue;
      in_edges[i].emplace_back(pos_of[p], e.m.producer_out[tt], static_cast<int>(k));
      last_use[pos_of[p]] = std::max(last_use[pos_of[p]], static_cast<int>(i));
    }
  }
  struct Entry {
    double cost;
    int parent;
    int option;
  };
  std::vector<std::vector<Entry>> steps(n);
  std::vector<int> live;  // positions whose choice the state holds
  std::vector<std::vector<int>> states{{}};
  std::vector<Entry> prev{{0.0, -1, -1}};
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> live_after;
    for (int p : live)
      if (last_use[p] > static_cast<int>(i)) live_after.push_back(p);
    if (last_use[i] > static_cast<int>(i)) live_after.push_back(static_cast<int>(i));
    std::vector<double> node_obj(options[i].size());
    for (size_t o = 0; o < options[i].size(); ++o) node_obj[o] = node_objective(e, u.ops[i], options[i][o], w);
    std::map<std::vector<int>, int> index;
    std::vector<std::vector<int>> next_states;
    std::vector<Entry> next;
    for (size_t si = 0; si < states.size(); ++si) {
      const std::vector<int>& st = states[si];
      auto choice_at = [&](int p) {
        for (size_t j = 0; j < live.size(); ++j)
          if (live[j] == p) return st[j];
        return -1;
      };
      for (size_t o = 0; o < options[i].size(); ++o) {
        double c = prev[si].cost + node_obj[o];
        for (const auto& [pp, pk, k] : in_edges[i]) {
          int pc = choice_at(pp);
          c += edge_time(e, u.ops[pp], options[pp][pc], pk, u.ops[i], options[i][o], k) +
               w.act * edge_mem(e, u.ops[pp], options[pp][pc], pk, u.ops[i], options[i][o], k);
        }
        std::vector<int> ns;
        for (int p : live_after) ns.push_back(p == static_cast<int>(i) ? static_cast<int>(o) : choice_at(p));
        auto [it, fresh] = index.emplace(ns, static_cast<int>(next.size()));
        if (fresh) {
          next.push_back({c, static_cast<int>(si), static_cast<int>(o)});
          next_states.push_back(std::move(ns));
        } else if (c < next[it->second].cost) {
          next[it->second] = {c, static_cast<int>(si), static_cast<int>(o)};
        }
      }
    }
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

UnitStats unit_stats(const Env& e, int unit, const std::vector<OpDecision>& d) {
  UnitStats s;
  Env no_sync = e;
  no_sync.micro_batches = std::numeric_limits<double>::infinity();  // synchronisation is costed per step by the caller
  s.time = unit_objective_env(no_sync, unit, d, Weights{});
  const SearchUnit& u = e.m.units[unit];
  for (size_t i = 0; i < u.ops.size(); ++i) {
    OpCost c = op_cost(e, u.ops[i], d[i]);
    double kept = c.kept;
    boundary_time(e, u.ops[i], d[i], &kept);
    s.kept += kept;
    if (e.rc) s.transient += c.transient;
    else s.transient = std::max(s.transient, c.transient);
    s.work = std::max(s.work, c.work);
    s.param += c.param;
    s.param_multi += c.param_multi;
    for_each_unit_input(e, unit, i, [&](int p, size_t pos, int out, int k) {
      s.kept += edge_mem(e, p, d[pos], out, u.ops[i], d[i], k);
    });
    s.sync_dp += c.sync_dp;
    s.sync_tp += c.sync_tp;
  }
  return s;
}

std::vector<std::vector<OpDecision>> UnitSolver::options_of(int unit, const Env& e, bool megatron) const {
  std::vector<std::vector<OpDecision>> options;
  for (int opi : m_.units[unit].ops) {
    std::vector<OpDecision> v;
    if (megatron) {
      int c = megatron_choice(m_.ops[opi]);
      OpDecision d{c, 1, false};
      bool ok = c >= 0 && e.tp > 1;
      if (ok) {
        bool found = false;
        for (const OpDecision& x : op_options(m_, opi, e.tp, e.s, e.rc)) found = found || (x.choice == c && x.k == 1);
        ok = found;
      }
      v.push_back(ok ? d : OpDecision{});
    } else {
      for (const OpDecision& d : op_options(m_, opi, e.tp, e.s, e.rc))
        if (!constrained_ || decision_allowed(m_.ops[opi], rules_[opi], d, e.tp, e.dp)) v.push_back(d);
    }
    options.push_back(std::move(v));
  }
  return options;
}

namespace {

bool debug_at_least(int level) {
  const char* v = std::getenv("NNS_SEARCH_DEBUG");
  return v && (level <= 1 || std::atoi(v) >= level);
}

void print_unit_solution(const SearchModel& m, int unit, const Env& e, int li, const UnitSolution& slot) {
  const SearchUnit& u = m.units[unit];
  const UnitStats& us = slot.second;
  std::fprintf(stderr, "unit %d (%s) tp %d dp %d s %g rc %d seq %d l%d: time %.4g ms kept %.4g MB transient %.4g MB work %.4g MB param %.4g MB:", unit,
               u.key.c_str(), e.tp, e.dp, e.s, e.rc, e.seq, li, us.time * 1e3, us.kept / 1e6, us.transient / 1e6, us.work / 1e6, us.param / 1e6);
  for (size_t i = 0; i < u.ops.size(); ++i) {
    const SearchOp& op = m.ops[u.ops[i]];
    const OpDecision& dd = slot.first[i];
    std::fprintf(stderr, " %s=%s%s", op.name.substr(op.name.rfind('.') + 1).c_str(), dd.choice < 0 ? "R" : op.choices[dd.choice].id.c_str(),
                 dd.k > 1 ? ("/" + std::to_string(dd.k)).c_str() : "");
  }
  std::fprintf(stderr, "\n");
}

}  // namespace

const UnitSolution* UnitSolver::solve(int unit, const Env& e, int li, bool megatron) {
  const SearchUnit& u = m_.units[unit];
  auto key = std::make_tuple(u.signature, e.tp, constrained_ ? e.dp : 0, e.s, e.rc, li, megatron, e.seq);
  auto it = memo_.find(key);
  if (it != memo_.end()) {
    if (it->second.first.empty() && !u.ops.empty()) return nullptr;
    // Same signature: same decisions, and the stats are the same too.
    return &it->second;
  }
  std::vector<std::vector<OpDecision>> options = options_of(unit, e, megatron);
  std::vector<OpDecision> d;
  ++solves_;
  const int slots = o_.optimizer_slots;
  Weights w{lambdas_[li], lambdas_[li], lambdas_[li] * (3.0 + slots)};
  double v = solve_unit_env(e, unit, w, o_.exhaustive, d, options);
  auto& slot = memo_[key];
  if (debug_at_least(1) && !(v < kInf)) std::fprintf(stderr, "unit %d tp %d rc %d l%d: no solution (%g)\n", unit, e.tp, e.rc, li, v);
  if (!(v < kInf)) return nullptr;
  slot.first = d;
  slot.second = unit_stats(e, unit, d);
  if (debug_at_least(2)) print_unit_solution(m_, unit, e, li, slot);
  return &slot;
}

}  // namespace search_detail

using namespace search_detail;

double unit_objective(const SearchModel& m, int unit, const std::vector<OpDecision>& d, int tp, int dp, double batch_scale, bool recompute,
                      double lambda_act, double lambda_param, const SearchOptions& o, bool seq) {
  Env e = make_env(m, o, tp, dp, batch_scale, recompute, seq);
  return unit_objective_env(e, unit, d, Weights{lambda_act, lambda_act, lambda_param});
}

double solve_unit(const SearchModel& m, int unit, int tp, int dp, double batch_scale, bool recompute, double lambda_act, double lambda_param,
                  const SearchOptions& o, bool exhaustive, std::vector<OpDecision>& out, const std::vector<std::vector<OpDecision>>* allowed,
                  bool seq) {
  Env e = make_env(m, o, tp, dp, batch_scale, recompute, seq);
  std::vector<std::vector<OpDecision>> options;
  if (allowed) options = *allowed;
  else
    for (int opi : m.units[unit].ops) options.push_back(op_options(m, opi, tp, batch_scale, recompute));
  return solve_unit_env(e, unit, Weights{lambda_act, lambda_act, lambda_param}, exhaustive, out, options);
}

}  // namespace nns::planner
