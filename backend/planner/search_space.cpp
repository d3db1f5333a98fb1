// The plan search's space (search.h, step 3; search_internal.h): the
// constraint tables resolved per op, the outer (pp, tp, dp) grid, the
// micro-batch counts and lambdas tried at each point, the space's size and
// the activation bytes crossing each cut between units.
#include <algorithm>
#include <cmath>

#include "backend/planner/search_internal.h"

namespace nns::planner::search_detail {

namespace {

// split_only: the dims named (the batch by its identifier); two tables on
// one op both hold.
void add_split_only(const sema::PlanConstraint& c, const SearchOp& op, OpRules& r) {
  std::vector<std::string> ids;
  bool batch = false;
  for (const std::string& dname : c.dims) {
    if (dname == "batch") {
      batch = true;
      ids.push_back(op.batch_id);
    } else {
      ids.push_back(dname);
      if (op.batch_ok && dname == op.batch_id) batch = true;
    }
  }
  if (r.has_split_only) {  // two tables: both hold
    std::vector<std::string> both;
    for (const std::string& x : r.split_only)
      if (std::find(ids.begin(), ids.end(), x) != ids.end()) both.push_back(x);
    ids = both;
  }
  r.has_split_only = true;
  r.split_only = ids;
  if (!batch) r.dp_forbidden = true;
}

}  // namespace

std::vector<OpRules> resolve_constraints(const SearchModel& m, const SearchOptions& o, bool& constrained) {
  std::vector<OpRules> rules(m.ops.size());
  constrained = false;
  if (!o.constraints || !o.constraint_plan) return rules;
  for (const sema::PlanConstraint& c : *o.constraints) {
    for (int sub : c.ops) {
      if (sub < 0 || static_cast<size_t>(sub) >= o.constraint_plan->subops.size()) continue;
      int node = o.constraint_plan->subops[sub].node;
      int opi = node >= 0 && static_cast<size_t>(node) < m.op_of_node.size() ? m.op_of_node[node] : -1;
      if (opi < 0) continue;
      OpRules& r = rules[opi];
      const SearchOp& op = m.ops[opi];
      constrained = true;
      switch (c.kind) {
        case sema::PlanConstraint::SplitOnly: add_split_only(c, op, r); break;
        case sema::PlanConstraint::SplitCounts: r.counts = c.values; break;
        case sema::PlanConstraint::SameSplit:
          if (c.dims.empty() || c.dims[0] == "batch" || (op.batch_ok && c.dims[0] == op.batch_id)) r.same_split_batch = true;
          break;
        case sema::PlanConstraint::PlaceOn: r.place_on = c.values; std::sort(r.place_on.begin(), r.place_on.end()); break;
      }
    }
  }
  return rules;
}

std::vector<GridPoint> outer_grid(const SearchModel& m, const SearchOptions& o) {
  const int N = o.gpus;
  const int U = static_cast<int>(m.units.size());
  std::vector<GridPoint> grid;
  for (int tp = 1; tp <= N; ++tp) {
    if (N % tp) continue;
    for (int pp = 1; pp <= N / tp; ++pp) {
      if ((N / tp) % pp || pp > U) continue;
      int dp = N / tp / pp;
      if (o.global_batch % dp) continue;
      grid.push_back({pp, tp, dp});
    }
  }
  return grid;
}

std::vector<int64_t> micro_batch_counts(const SearchOptions& o, int dp, int pp) {
  int64_t per = o.global_batch / dp;
  std::vector<int64_t> all;
  for (int64_t mcount = 1; mcount <= per; ++mcount)
    if (per % mcount == 0) all.push_back(mcount);
  if (o.fixed_micro_batches > 0) return per % o.fixed_micro_batches == 0 ? std::vector<int64_t>{o.fixed_micro_batches} : std::vector<int64_t>{};
  if (o.exhaustive || static_cast<int>(all.size()) <= o.max_micro_batch_options) return all;
  // The largest counts (smallest bubble) and the first at or above pp
  // (the least activation memory in flight for its bubble).
  std::vector<int64_t> pick(all.end() - (o.max_micro_batch_options - 2), all.end());
  for (int64_t x : all)
    if (x >= pp) {
      pick.push_back(x);
      break;
    }
  pick.push_back(all.front());
  std::sort(pick.begin(), pick.end());
  pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  return pick;
}

std::vector<int> chunk_counts(const SearchModel& m, const SearchOptions& o, int pp, int64_t mcount) {
  const int U = static_cast<int>(m.units.size());
  int layers = 0;  // units of a layer (the ops between layers excluded)
  for (const SearchUnit& u : m.units) layers += u.key.empty() ? 0 : 1;
  // v > 1 needs m a multiple of pp (interleaved_order takes micro-batches
  // in groups of pp) and at least one unit per chunk; the layers dividing
  // evenly over the pp x v chunks keeps the chunks even, as the memory
  // estimate assumes and as Megatron requires of its virtual stages.
  auto allowed = [&](int v) {
    return v == 1 || (pp > 1 && mcount % pp == 0 && pp * v <= U && layers > 0 && layers % (pp * v) == 0);
  };
  if (o.fixed_vp > 0) return allowed(o.fixed_vp) ? std::vector<int>{o.fixed_vp} : std::vector<int>{};
  std::vector<int> vs{1};
  for (int v = 2; v <= o.max_vp && pp > 1; v *= 2)
    if (allowed(v)) vs.push_back(v);
  return vs;
}

std::vector<int> recompute_modes(const SearchModel& m, const SearchOptions& o) {
  if (o.fixed_recompute == 1 && !has_score_core(m)) return {};
  if (o.fixed_recompute >= 0) return {o.fixed_recompute};
  if (has_score_core(m)) return {0, 1, 2};
  return {0, 2};
}

std::vector<double> lambda_grid(const SearchOptions& o) {
  return o.exhaustive ? std::vector<double>{0.0} : std::vector<double>{0, 1e-14, 1e-13, 3e-13, 1e-12, 3e-12, 1e-11, 1e-10};
}

// Per (tp, batch scale, rc, sel) the product of the ops' option counts.
double SpaceSize::log_op_space(int tp, int dp, double s, bool rc, bool with_rules, bool sel) {
  auto key = std::make_tuple(tp, with_rules ? dp : 0, s, rc, with_rules, sel);
  auto it = log_ops_.find(key);
  if (it != log_ops_.end()) return it->second;
  double l = 0;
  for (size_t i = 0; i < m_.ops.size() && l > -kInf; ++i) {
    size_t count = 0;
    for (const OpDecision& d : op_options(m_, static_cast<int>(i), tp, s, rc, sel))
      if (!with_rules || decision_allowed(m_.ops[i], rules_[i], d, tp, dp)) ++count;
    if (with_rules && rules_[i].dp_forbidden && m_.ops[i].batch_ok && dp > 1) count = 0;
    l = count ? l + std::log10(static_cast<double>(count)) : -kInf;
  }
  return log_ops_[key] = l;
}

// The space: op layouts x stage partitions (x zero1 on/off).
void SpaceSize::add(int pp, int tp, int dp, double s, bool rc, bool dp_bad, const std::vector<int>& vps, bool sel) {
  const int U = static_cast<int>(m_.units.size());
  if (vps.empty()) return;
  double part = -kInf;
  for (int v : vps) part = log10_sum(part, log10_binom(U - 1, pp * v - 1));
  part += std::log10(2.0);
  all = log10_sum(all, log_op_space(tp, dp, s, rc, false, sel) + part);
  if (!dp_bad) constrained = log10_sum(constrained, log_op_space(tp, dp, s, rc, true, sel) + part);
}

CutBytes::CutBytes(const SearchModel& m) : batch(m.units.size(), 0), fixed(m.units.size(), 0), none(m.units.size(), 0), m_(m) {
  for (size_t t = 0; t < m.producer.size(); ++t) {
    int p = m.producer[t];
    if (p < 0) continue;
    int last = -1;
    for (const auto& [c, ck] : m.consumers[t]) last = std::max(last, m.unit_of_op[c]);
    const SearchOp& P = m.ops[p];
    double b = static_cast<double>(P.out_bytes[m.producer_out[t]]);
    bool is_batch = P.batch_ok && P.out_batch[m.producer_out[t]];
    for (int u = m.unit_of_op[p]; u < last; ++u) (is_batch ? batch : fixed)[u] += b;
  }
}

// The batch-carrying bytes crossing each cut that a sequence-parallel
// boundary splits (their token dim divides by tp).
const std::vector<double>& CutBytes::seq(int tp) {
  auto it = seq_.find(tp);
  if (it != seq_.end()) return it->second;
  std::vector<double> v(m_.units.size(), 0);
  for (size_t t = 0; t < m_.producer.size(); ++t) {
    int p = m_.producer[t];
    if (p < 0 || m_.seq_len[t] <= 0 || m_.seq_len[t] % tp != 0) continue;
    const SearchOp& P = m_.ops[p];
    if (!(P.batch_ok && P.out_batch[m_.producer_out[t]])) continue;
    int last = -1;
    for (const auto& [c, ck] : m_.consumers[t]) last = std::max(last, m_.unit_of_op[c]);
    for (int u = m_.unit_of_op[p]; u < last; ++u) v[u] += static_cast<double>(P.out_bytes[m_.producer_out[t]]);
  }
  return seq_[tp] = std::move(v);
}

}  // namespace nns::planner::search_detail

namespace nns::planner {

bool dp_as_replicas(const SearchModel& m, const SearchOptions& o, int dp, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (dp <= 1) return no("no data parallelism");
  if (o.dp_in_plan) return no("--dp-in-plan");
  if (o.constraints)
    for (const sema::PlanConstraint& c : *o.constraints)
      if (c.kind == sema::PlanConstraint::PlaceOn)
        return no("a place_on table numbers the devices of the plan with its data parallelism inside");
  // A tensor carries the batch when it is a data input or an output of an
  // op along that op's batch; an op reading one without a batch split runs
  // on the whole batch inside the plan (replicated over its stage).
  std::vector<char> carries(m.producer.size(), 0);
  for (size_t t = 0; t < m.data_input.size(); ++t) carries[t] = m.data_input[t];
  for (const SearchOp& op : m.ops) {
    bool reads = false;
    for (size_t k = 0; k < op.in_tensor.size(); ++k)
      reads = reads || (op.in_tensor[k] >= 0 && !op.in_param[k] && carries[static_cast<size_t>(op.in_tensor[k])]);
    if (reads && !op.batch_ok) return no(op.name + " reads the batch but does not split along it");
    for (size_t k = 0; k < op.out_tensor.size(); ++k)
      if (op.out_tensor[k] >= 0 && op.batch_ok && op.out_batch[k]) carries[static_cast<size_t>(op.out_tensor[k])] = 1;
  }
  if (why) why->clear();
  return true;
}

}  // namespace nns::planner
