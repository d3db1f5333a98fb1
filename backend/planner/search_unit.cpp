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

Env make_env(const SearchModel& m, const SearchOptions& o, int tp, int dp, double s, bool rc, bool seq,
             int replica_devices, bool sel) {
  Env e{m, o, tp, dp, s, rc, sel && !rc, {}, {}};
  e.seq = seq;
  e.replica_devices = replica_devices;
  e.tp_group = range_devices(tp, 1);
  e.dp_group = range_devices(dp, replica_devices > 0 ? replica_devices : tp);
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

// The unit's optimum: the frontier DP (search_frontier.cpp), or every
// combination (tests).
double solve_unit_env(const Env& e, int unit, const Weights& w, bool exhaustive, std::vector<OpDecision>& out,
                      const std::vector<std::vector<OpDecision>>& options) {
  const SearchUnit& u = e.m.units[unit];
  const size_t n = u.ops.size();
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
  return frontier_dp(e, unit, w, options, out);
}

UnitStats unit_stats(const Env& e, int unit, const std::vector<OpDecision>& d) {
  UnitStats s;
  Env no_sync = e;
  no_sync.micro_batches = std::numeric_limits<double>::infinity();  // synchronisation is costed per step by the caller
  s.time = unit_objective_env(no_sync, unit, d, Weights{});
  const SearchUnit& u = e.m.units[unit];
  double fwd = 0, runs = 0;  // the ops' forward, and all their runs
  std::vector<double> kept_of(u.ops.size(), 0.0), work_of(u.ops.size(), 0.0);
  double made = 0;  // block recompute: the values made again up to this op
  for (size_t i = 0; i < u.ops.size(); ++i) {
    OpCost c = op_cost(e, u.ops[i], d[i]);
    fwd += c.fwd_time;
    runs += c.time;
    double kept = c.kept;
    boundary_time(e, u.ops[i], d[i], &kept);
    // Block recompute: the block's forward runs again whole before its
    // last op's backward, so at op i's backward the values of ops 0..i
    // are live (those after it freed) beside its working set: transient
    // is the largest such sum, and holds the work term.
    made += c.transient;
    if (e.rc)
      s.transient = std::max(s.transient, made + c.work);
    else
      s.transient = std::max(s.transient, c.transient);
    work_of[i] = e.rc ? 0.0 : c.work;
    s.param += c.param;
    s.param_multi += c.param_multi;
    for_each_unit_input(
        e, unit, i, [&](int p, size_t pos, int out, int k) { kept += edge_mem(e, p, d[pos], out, u.ops[i], d[i], k); });
    kept_of[i] = kept;
    s.kept += kept;
    s.sync_dp += c.sync_dp;
    s.sync_tp += c.sync_tp;
    s.sync_params += c.sync_params;
  }
  // An op's backward runs after the backward of every op after it, which
  // freed what those kept for this micro-batch: its working set counts
  // above the unit's kept less theirs (UnitStats::work).
  double after = 0;
  s.work = -kInf;
  for (size_t i = u.ops.size(); i-- > 0;) {
    s.work = std::max(s.work, work_of[i] - after);
    after += kept_of[i];
  }
  if (u.ops.empty()) s.work = 0;
  s.fwd = runs > 0 ? s.time * fwd / runs : s.time / 3;
  return s;
}

std::vector<std::vector<OpDecision>> UnitSolver::options_of(int unit, const Env& e, bool megatron) const {
  std::vector<std::vector<OpDecision>> options;
  for (int opi : m_.units[unit].ops) {
    std::vector<OpDecision> v;
    if (megatron) {
      // The layout of Megatron's structure (search.h); an op of it that
      // cannot split over this TP degree (4 heads over 8 devices) leaves
      // no option: Megatron-style does not apply at this degree, rather
      // than being costed as a half-replicated plan under its name.
      const int c = m_.megatron.choice[opi];
      if (c < 0 || e.tp == 1) {
        v.push_back(OpDecision{});
      } else {
        for (const OpDecision& x : op_options(m_, opi, e.tp, e.s, e.rc, e.sel))
          if (x.choice == c && x.k == 1) v.push_back(x);
      }
    } else {
      for (const OpDecision& d : op_options(m_, opi, e.tp, e.s, e.rc, e.sel))
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
  std::fprintf(
      stderr,
      "unit %d (%s) tp %d dp %d s %g rc %d seq %d l%d: time %.4g ms kept %.4g MB transient %.4g MB work %.4g MB param %.4g MB:",
      unit, u.key.c_str(), e.tp, e.dp, e.s, e.rc, e.seq, li, us.time * 1e3, us.kept / 1e6, us.transient / 1e6,
      us.work / 1e6, us.param / 1e6);
  for (size_t i = 0; i < u.ops.size(); ++i) {
    const SearchOp& op = m.ops[u.ops[i]];
    const OpDecision& dd = slot.first[i];
    std::fprintf(stderr, " %s=%s%s", op.name.substr(op.name.rfind('.') + 1).c_str(),
                 dd.choice < 0 ? "R" : op.choices[dd.choice].id.c_str(),
                 dd.k > 1 ? ("/" + std::to_string(dd.k)).c_str() : "");
  }
  std::fprintf(stderr, "\n");
}

}  // namespace

const UnitSolution* UnitSolver::solve(int unit, const Env& e, int li, bool megatron) {
  const SearchUnit& u = m_.units[unit];
  auto key = std::make_tuple(u.signature, e.tp, constrained_ ? e.dp : 0, e.s, e.rc, li, megatron, e.seq, e.sel);
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
  if (debug_at_least(1) && !(v < kInf))
    std::fprintf(stderr, "unit %d tp %d rc %d l%d: no solution (%g)\n", unit, e.tp, e.rc, li, v);
  if (!(v < kInf)) return nullptr;
  slot.first = d;
  slot.second = unit_stats(e, unit, d);
  if (debug_at_least(2)) print_unit_solution(m_, unit, e, li, slot);
  return &slot;
}

}  // namespace search_detail

using namespace search_detail;

double unit_objective(const SearchModel& m, int unit, const std::vector<OpDecision>& d, int tp, int dp,
                      double batch_scale, bool recompute, double lambda_act, double lambda_param,
                      const SearchOptions& o, bool seq) {
  Env e = make_env(m, o, tp, dp, batch_scale, recompute, seq);
  return unit_objective_env(e, unit, d, Weights{lambda_act, lambda_act, lambda_param});
}

double solve_unit(const SearchModel& m, int unit, int tp, int dp, double batch_scale, bool recompute, double lambda_act,
                  double lambda_param, const SearchOptions& o, bool exhaustive, std::vector<OpDecision>& out,
                  const std::vector<std::vector<OpDecision>>* allowed, bool seq) {
  Env e = make_env(m, o, tp, dp, batch_scale, recompute, seq);
  std::vector<std::vector<OpDecision>> options;
  if (allowed)
    options = *allowed;
  else
    for (int opi : m.units[unit].ops) options.push_back(op_options(m, opi, tp, batch_scale, recompute));
  return solve_unit_env(e, unit, Weights{lambda_act, lambda_act, lambda_param}, exhaustive, out, options);
}

}  // namespace nns::planner
