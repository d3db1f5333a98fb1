// Which ops each rank walks, and the send/recv tags it takes where it
// skips (lower_internal.h, WalkPlan): the global sequence's cost per rank
// becomes the rank's own ops, not the whole graph's.
#include <string>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

namespace {

void mark(std::vector<char>& on, const std::vector<int>& devices) {
  for (int d : devices)
    if (d >= 0 && d < static_cast<int>(on.size())) on[static_cast<size_t>(d)] = 1;
}

// Every device an edge's adapter touches: the holders before and after
// and every member of every step's groups (send/recv pairs included).
void mark_edge(std::vector<char>& on, const CommEdge& e) {
  mark(on, e.from.devices);
  mark(on, e.to.devices);
  for (const AdapterStep& st : e.adapter.steps) {
    mark(on, st.after.devices);
    for (const std::vector<int>& grp : st.groups) mark(on, grp);
  }
}

// [op][device]: whether the device can emit anything for the op.
std::vector<std::vector<char>> op_devices(const PlanAnalysis& A, int devices) {
  const std::vector<CommEdge>& edges = A.cp.edges;
  auto carrier = [&edges](const CommEdge* e) {
    return e->shared_with >= 0 ? e->shared_with : static_cast<int>(e - edges.data());
  };
  // An edge that shares a transfer reads what its carrier left (forward) or
  // leaves its share for the carrier (backward): every op of such a group
  // is walked by every device any edge of the group touches.
  std::vector<std::vector<char>> shared(edges.size());
  auto group_of = [&](const CommEdge* e) -> std::vector<char>& {
    std::vector<char>& on = shared[static_cast<size_t>(carrier(e))];
    if (on.empty()) on.assign(static_cast<size_t>(devices), 0);
    return on;
  };
  for (const PlanAnalysis::Op& op : A.ops)
    for (const auto* list : {&op.in_edge, &op.grad_edge})
      for (const CommEdge* e : *list)
        if (e) mark_edge(group_of(e), *e);
  std::vector<std::vector<char>> on(A.ops.size(), std::vector<char>(static_cast<size_t>(devices), 0));
  for (size_t i = 0; i < A.ops.size(); ++i) {
    const PlanAnalysis::Op& op = A.ops[i];
    std::vector<char>& mine = on[i];
    for (const auto& entry : op.leaves_on) mark(mine, {entry.first});
    for (const auto* layouts : {&op.in_layout, &op.out_layout, &op.grad_in_layout})
      for (const Layout& l : *layouts) mark(mine, l.devices);
    for (const auto* list : {&op.in_edge, &op.grad_edge})
      for (const CommEdge* e : *list)
        if (e) {
          const std::vector<char>& grp = group_of(e);
          for (size_t d = 0; d < grp.size(); ++d) mine[d] |= grp[d];
        }
  }
  // A recompute region's forward runs again at the backward of its last
  // op: every op of it is walked by every device of any of its ops.
  for (const std::vector<int>& region : A.regions.ops) {
    std::vector<char> all(static_cast<size_t>(devices), 0);
    for (int node : region)
      if (int i = A.op_of_node[static_cast<size_t>(node)]; i >= 0)
        for (size_t d = 0; d < all.size(); ++d) all[d] |= on[static_cast<size_t>(i)][d];
    for (int node : region)
      if (int i = A.op_of_node[static_cast<size_t>(node)]; i >= 0) on[static_cast<size_t>(i)] = all;
  }
  return on;
}

}  // namespace

WalkPlan plan_walk(const PlanAnalysis& analysis, const sema::TrainSpec& spec, const LowerOptions& opts,
                   GroupTable& groups, int devices) {
  WalkPlan w;
  w.ops = static_cast<int>(analysis.ops.size());
  w.micro_batches = static_cast<int>(spec.micro_batches);
  std::vector<std::vector<char>> by_op = op_devices(analysis, devices);
  w.walks.assign(static_cast<size_t>(devices), std::vector<char>(analysis.ops.size(), 0));
  for (size_t i = 0; i < by_op.size(); ++i)
    for (size_t d = 0; d < by_op[i].size(); ++d) w.walks[d][i] = by_op[i][d];
  w.tag_at.assign(w.index(w.micro_batches, 0, WalkPlan::Forward), WalkPlan::kUnrecorded);
  // The tags: one rank that holds no device walks every op.
  RankBuild R(analysis, spec, opts, groups, devices, 0);
  R.P.device = -1;
  R.recording = &w;
  make_kernels(R);
  make_params(R);
  emit_micro_batches(R);
  if (!R.P.instrs.empty())
    fail("internal: the walk of a rank holding no device emitted " + std::to_string(R.P.instrs.size()) +
         " instruction(s)");
  set_middle_tags(w);
  return w;
}

bool visit_op(RankBuild& R, int mb, int i, WalkPlan::Phase phase) {
  if (R.recording) {
    R.recording->tag_at[R.recording->index(mb, i, phase)] = R.tag;
    return true;
  }
  if (!R.walk) return true;
  const uint32_t t = R.walk->tag_at[R.walk->index(mb, i, phase)];
  if (R.opts.walk_every_op) {
    if (R.tag != t)
      fail("internal: rank " + std::to_string(R.P.rank) + " reaches " +
           R.g.node(R.A.ops[static_cast<size_t>(i)].node).name + " (micro-batch " + std::to_string(mb) +
           ") with send/recv tag " + std::to_string(R.tag) + ", the walk of a rank holding nothing with " +
           std::to_string(t));
    return true;
  }
  if (!R.walk->walks[static_cast<size_t>(R.device())][static_cast<size_t>(i)]) return false;
  R.tag = t;
  return true;
}

void end_walk(RankBuild& R) {
  if (R.recording) {
    R.recording->tag_end = R.tag;
    return;
  }
  if (!R.walk) return;
  if (R.opts.walk_every_op && R.tag != R.walk->tag_end)
    fail("internal: rank " + std::to_string(R.P.rank) + " ends its micro-batches with send/recv tag " +
         std::to_string(R.tag) + ", the walk of a rank holding nothing with " + std::to_string(R.walk->tag_end));
  R.tag = R.walk->tag_end;
}

}  // namespace nns::backend::detail
