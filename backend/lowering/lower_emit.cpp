// The emission pass: every micro-batch's instructions in graph order,
// grouped into blocks (one op's forward, backward or weight-gradient
// backward of one micro-batch) that the schedule pass then orders. Forward:
// each input through its edge's adapter (lower_edges.cpp) into the op's
// kernels, outputs collected, recompute regions and recomputed sub-ops
// dropping what their backward makes again. Backward: the loss seed, output
// gradients into the kernels, input gradients out through their adapters or
// into buckets, parameter gradients into the step's sums.
#include <algorithm>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

namespace {

// Whether kernel k runs its forward again right before its own backward
// (and keeps only its inputs until then): a recomputed sub-op outside a
// recompute region, or inside one a piece co-located with other pieces of
// its op (coshard), so that the region's replay holds one piece's working
// set at a time, not every piece's. Any other kernel of a region is made
// again by the region's replay only.
bool own_recompute(RankBuild& R, int k, int region, const std::vector<int>& ks) {
  return R.P.kernels[k].recompute && (region < 0 || ks.size() > 1);
}

void slice_in(RankBuild& R, const sema::OpNode& n, const std::vector<int>& ks, size_t kk, int in, int mb) {
  for (int k : ks) {
    PInstr& si = R.emit(PInstr::SliceIn, mb);
    si.a = in;
    si.kernel = k;
    si.index = static_cast<int>(kk);
    si.scale = value_scale(R.label(in), R.P.kernels[k].in_slices[kk], false, [&] { return n.name + " input " + std::to_string(kk); },
                           [&] { return directive_of(R.plan, R.P.kernels[k].subop, "value"); });
  }
}

// A data input's piece for micro-batch mb, loaded by its first consumer
// (so that a pipeline stage loads only what it reads, when it reads it).
int load_input(RankBuild& R, int t, int mb) {
  auto it = R.A.storage.find(t);
  if (it == R.A.storage.end() || !holds(it->second, R.device())) return -1;
  int b = R.new_buffer(BufferDecl::Input, t, mb, piece_of(it->second, R.device(), R.g.tensor(t).shape));
  R.emit(PInstr::LoadInput, mb).b = b;
  return b;
}

// Tensor `src` through edge `e` for micro-batch mb, once: the transfer
// of e's carrier (CommEdge::shared_with) runs when its first consumer reads
// it, the other consumers in its segment read what it left, and a
// parameter's (per step) runs in the first micro-batch only. `again`: in a
// region's recompute, the adapter runs again on the recomputed value, in
// the backward task that recomputes (shared there too, apart from the
// first forward's).
int forward_transfer(RankBuild& R, const CommEdge& e, int src, int mb, bool again) {
  const int carrier = e.shared_with >= 0 ? e.shared_with : R.edge_index(e);
  const std::pair<int, int> key{again ? -2 - mb : e.per_step ? -1 : mb, carrier};
  if (auto got = R.received.find(key); got != R.received.end()) return got->second;
  const CommEdge& c = R.A.cp.edges[static_cast<size_t>(carrier)];
  int in = -1;
  if (again) {
    in = emit_adapter(R, c, src, mb, /*stay=*/true);
  } else {
    // The adapter is a block of its own: on a rank that runs the producer
    // it belongs to the producer's task (a send as soon as the value
    // exists; a collective at the same point on every member), elsewhere
    // to the consumer's.
    const RankBuild::Block here = R.blocks[static_cast<size_t>(R.cur_block)];
    R.open_block(mb, here.op, here.phase, c.producer >= 0 ? R.A.op_of_node[static_cast<size_t>(c.producer)] : -1);
    in = emit_adapter(R, c, src, mb);
    R.open_block(mb, here.op, here.phase);
  }
  R.received[key] = in;
  return in;
}

// forward_op and region_forward call each other (a region's recompute runs its ops' forward again).
void forward_op(RankBuild& R, const PlanAnalysis::Op& op, const std::vector<int>& ks, int mb, std::unordered_map<int, int>& value, bool again = false);

// `again`: the recompute of a region (region_forward): inputs from
// outside the region are read where the first forward left them (their
// adapters ran then), and the op's kernels stay for its backward.
void forward_op(RankBuild& R, const PlanAnalysis::Op& op, const std::vector<int>& ks, int mb, std::unordered_map<int, int>& value, bool again) {
  const sema::OpNode& n = R.g.node(op.node);
  const int region = R.A.regions.region_of_node[static_cast<size_t>(op.node)];
  for (size_t kk = 0; kk < n.inputs.size(); ++kk) {
    int t = n.inputs[kk];
    const int producer = R.g.tensor(t).producer;
    const bool outside = producer < 0 || R.A.regions.region_of_node[static_cast<size_t>(producer)] != region;
    if (again && outside) {
      auto kept = R.region_inputs.find({mb, op.node, static_cast<int>(kk)});
      int in = kept == R.region_inputs.end() ? -1 : kept->second;
      if (!ks.empty() && in < 0) fail("internal: no kept input of %" + std::to_string(t) + " for the recompute of " + n.name);
      slice_in(R, n, ks, kk, in, mb);
      continue;
    }
    int src = -1;
    if (auto it = R.param_buf.find(t); it != R.param_buf.end()) src = it->second;
    else if (auto v = value.find(t); v != value.end()) src = v->second;
    else if (R.g.tensor(t).kind == sema::TensorKind::Input) src = value[t] = load_input(R, t, mb);
    // An edge without steps leaves the piece as it is: read it in place.
    int in = src;
    if (op.in_edge[kk] && !op.in_edge[kk]->adapter.steps.empty())
      in = forward_transfer(R, *op.in_edge[kk], src, mb, again);
    if (!ks.empty() && in < 0) fail("internal: no piece of %" + std::to_string(t) + " for " + n.name);
    if (region >= 0 && outside && !again) R.region_inputs[{mb, op.node, static_cast<int>(kk)}] = in;
    slice_in(R, n, ks, kk, in, mb);
  }
  // The output buffers, then each kernel in turn: its forward, its
  // outputs collected and, for a recomputed piece, its forward values
  // dropped before the next piece runs (co-located coshard pieces hold
  // one working set at a time).
  std::vector<int> out_buf(n.outputs.size(), -1);
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (!holds(op.out_layout[o], R.device())) continue;
    out_buf[o] = R.new_buffer(BufferDecl::Value, n.outputs[o], mb, piece_of(op.out_layout[o], R.device(), R.g.tensor(n.outputs[o]).shape));
    R.emit(PInstr::Alloc, mb).b = out_buf[o];
    value[n.outputs[o]] = out_buf[o];
  }
  for (int k : ks) {
    R.emit(PInstr::Forward, mb).kernel = k;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (out_buf[o] < 0) continue;
      PInstr& c = R.emit(PInstr::CollectOut, mb);
      c.b = out_buf[o];
      c.kernel = k;
      c.index = static_cast<int>(o);
      c.scale = R.P.kernels[k].scale;
    }
    // What stays of the kernel, decided before the next piece runs. An op
    // without backward needs nothing of it any more; in a region nothing
    // stays either (the region's recompute reads the inputs again), but
    // in the region's replay the backward that follows needs it;
    // recompute(...): the sub-op keeps only its inputs until its
    // backward runs its forward again (dropout masks are counter-based,
    // so the recomputed values are the same).
    if (!op.backward || (region >= 0 && !again)) R.emit(PInstr::FreeKernel, mb).kernel = k;
    else if (own_recompute(R, k, region, ks)) R.emit(PInstr::DropForward, mb).kernel = k;
  }
}

// A recompute region's forward again, whole, at the start of the
// backward of its last op: its values are made anew from the inputs it
// kept, in the current (backward) task.
void region_forward(RankBuild& R, int region, int mb) {
  std::unordered_map<int, int> again = *R.fwd_value;  // outside values stay as the forward left them
  for (int node : R.A.regions.ops[static_cast<size_t>(region)]) {
    int i = R.A.op_of_node[static_cast<size_t>(node)];
    if (!visit_op(R, mb, i, WalkPlan::Recompute)) continue;
    // (an op without backward is made again only for the ops after it:
    // forward_op frees its kernels at once)
    forward_op(R, R.A.ops[static_cast<size_t>(i)], R.op_kernels[static_cast<size_t>(i)], mb, again, true);
  }
}

// The loss gradient is 1 wherever the loss (or a part of it) lives.
void seed_loss_gradient(RankBuild& R, int mb, std::unordered_map<int, int>& grad) {
  if (R.g.loss < 0) return;
  int last = R.g.tensor(R.g.loss).producer;
  for (const PlanAnalysis::Op& op : R.A.ops) {
    if (op.node != last) continue;
    const sema::OpNode& n = R.g.node(last);
    size_t o = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), R.g.loss) - n.outputs.begin());
    Layout gl = gradient_layout(op.out_layout[o]);
    if (!holds(gl, R.device())) continue;
    int b = R.new_buffer(BufferDecl::Grad, R.g.loss, mb, piece_of(gl, R.device(), R.g.tensor(R.g.loss).shape));
    R.emit(PInstr::Alloc, mb).b = b;
    R.emit(PInstr::SeedGrad, mb).b = b;
    grad[R.g.loss] = b;
  }
}

// Whether op i's backward runs as B then W on this rank: its segment's
// W tasks are scheduled and some kernel of it has weight-gradient nodes.
bool split_w(RankBuild& R, int i) {
  int seg = R.segment_of(R.A.ops[static_cast<size_t>(i)].node);
  return seg >= 0 && R.plan.segments[static_cast<size_t>(seg)].split_w;
}

constexpr int kHeld = -2;

// Traffic once, backward. A sharer's gradient share (CommEdge::shared_with)
// is summed on this rank until its carrier runs, which adds the sum to its
// own share and moves it in one transfer; a parameter's gradient shares
// (per step: its carrier's and its sharers') are summed over the
// micro-batches and moved by the carrier in the last. Returns the buffer
// to move now (-1: this rank holds no share), or kHeld.
int share_gradient(RankBuild& R, const CommEdge& e, int contrib, int mb) {
  auto add = [&](int from, int to) {
    PInstr& in = R.emit(PInstr::AddTo, mb);
    in.a = from;
    in.b = to;
  };
  const int self = R.edge_index(e), carrier = e.shared_with >= 0 ? e.shared_with : self;
  if (e.per_step) {
    if (contrib >= 0) {
      auto [it, fresh] = R.step_grad.emplace(carrier, -1);
      if (fresh) {
        it->second = R.new_buffer(BufferDecl::Contrib, e.tensor, -1, R.label(contrib));
        R.emit(PInstr::Alloc, mb).b = it->second;
      }
      add(contrib, it->second);
    }
    if (carrier != self || mb + 1 < static_cast<int>(R.spec.micro_batches)) return kHeld;
    auto it = R.step_grad.find(self);
    return it == R.step_grad.end() ? -1 : it->second;
  }
  if (carrier != self) {
    if (contrib >= 0) {
      auto [it, fresh] = R.pending_share.emplace(std::make_pair(mb, carrier), contrib);
      if (!fresh) add(contrib, it->second);
    }
    return kHeld;
  }
  if (auto it = R.pending_share.find({mb, self}); it != R.pending_share.end()) {
    if (contrib >= 0) add(it->second, contrib);
    R.pending_share.erase(it);
  }
  return contrib;
}

// The gradient of input kk of an op: collected from its kernels, then
// through its adapter (or into a bucket) to where the tensor lives.
void backward_input(RankBuild& R, const PlanAnalysis::Op& op, const std::vector<int>& ks, size_t kk, int mb, std::unordered_map<int, int>& grad) {
  const sema::OpNode& n = R.g.node(op.node);
  const CommEdge* e = op.grad_edge[kk];
  if (!e) return;
  int t = n.inputs[kk];
  int contrib = -1;
  if (holds(op.grad_in_layout[kk], R.device())) {
    contrib = R.new_buffer(BufferDecl::Contrib, t, mb, piece_of(op.grad_in_layout[kk], R.device(), R.g.tensor(t).shape));
    R.emit(PInstr::Alloc, mb).b = contrib;
    for (int k : ks) {
      PInstr& c = R.emit(PInstr::CollectGrad, mb);
      c.b = contrib;
      c.kernel = k;
      c.index = static_cast<int>(kk);
    }
  }
  if (!e->adapter.steps.empty() && !R.A.bucket_of.count(e)) {
    contrib = share_gradient(R, *e, contrib, mb);
    if (contrib == kHeld) return;
  }
  if (auto bk = R.A.bucket_of.find(e); bk != R.A.bucket_of.end()) {
    // Summed locally over the step's micro-batches; one fused allreduce
    // per device group at the end of the step.
    if (contrib < 0) return;
    auto [it, fresh] = R.bucket_buf.emplace(std::make_pair(bk->second, t), -1);
    if (fresh) {
      Piece p = R.label(contrib);
      p.value_index = 0;
      p.value_parts = 1;
      it->second = R.new_buffer(BufferDecl::Bucket, t, -1, p);
      R.emit(PInstr::Alloc, mb).b = it->second;
    }
    PInstr& add = R.emit(PInstr::AddTo, mb);
    add.a = contrib;
    add.b = it->second;
    return;
  }
  int moved = emit_adapter(R, *e, contrib, mb);
  if (!holds(e->to, R.device())) return;
  auto gi = grad.find(t);
  if (gi == grad.end()) {
    grad[t] = moved;
  } else {
    PInstr& add = R.emit(PInstr::AddTo, mb);
    add.a = moved;
    add.b = gi->second;
  }
}

// regather(): input kk of the kernels that dropped it after their forward
// (SubOpKernel::regather_inputs), gathered again from the shard the
// forward left (its buffer lives until here) by the same adapter, in this
// backward task, and sliced in anew. Every member of the gather's group
// runs the same op's backward, so the collective meets there.
void regather_input(RankBuild& R, const PlanAnalysis::Op& op, const std::vector<int>& ks, size_t kk, int mb) {
  std::vector<int> again;
  for (int k : ks)
    if (R.P.kernels[k].regathers(kk)) again.push_back(k);
  if (again.empty()) return;
  const sema::OpNode& n = R.g.node(op.node);
  const int t = n.inputs[kk];
  auto shard = R.fwd_value->find(t);
  if (shard == R.fwd_value->end() || !op.in_edge[kk])
    fail("internal: no shard of %" + std::to_string(t) + " to gather again for the backward of " + n.name);
  const CommEdge& e = *op.in_edge[kk];
  const CommEdge& carrier = R.A.cp.edges[static_cast<size_t>(e.shared_with >= 0 ? e.shared_with : R.edge_index(e))];
  const int in = emit_adapter(R, carrier, shard->second, mb, /*stay=*/true);
  if (in < 0) fail("internal: the gather of %" + std::to_string(t) + " again for " + n.name + " made nothing here");
  slice_in(R, n, again, kk, in, mb);
}

void backward_op(RankBuild& R, int i, const std::vector<int>& ks, int mb, std::unordered_map<int, int>& grad) {
  const PlanAnalysis::Op& op = R.A.ops[static_cast<size_t>(i)];
  const sema::OpNode& n = R.g.node(op.node);
  bool split = split_w(R, i);
  R.open_block(mb, i, sema::PipeTask::B);
  const int region = R.A.regions.region_of_node[static_cast<size_t>(op.node)];
  if (region >= 0 && R.A.regions.ops[static_cast<size_t>(region)].back() == op.node) region_forward(R, region, mb);
  for (size_t kk = 0; kk < n.inputs.size(); ++kk) regather_input(R, op, ks, kk, mb);
  // A recomputed piece runs its forward right before its own backward,
  // so that co-located pieces (coshard) hold one working set at a time.
  for (int k : ks) {
    if (own_recompute(R, k, region, ks)) R.emit(PInstr::Forward, mb).kernel = k;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      auto gi = grad.find(n.outputs[o]);
      PInstr& in = R.emit(PInstr::SliceGrad, mb);
      in.a = gi == grad.end() ? -1 : gi->second;
      in.kernel = k;
      in.index = static_cast<int>(o);
      in.scale = R.P.kernels[k].scale;
      if (in.a >= 0) value_scale(R.label(in.a), R.P.kernels[k].out_slices[o], true, [&] { return n.name + " output gradient"; });
    }
    R.emit(PInstr::Backward, mb).kernel = k;
  }
  // B: the gradients of activations (what the previous stage waits for)
  // first; with a B/W split the weights' gradients follow in the W block.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1 && split) {
      R.open_block(mb, i, sema::PipeTask::W);
      for (int k : ks)
        if (!R.P.kernels[k].wgrad_nodes.empty()) R.emit(PInstr::BackwardW, mb).kernel = k;
    }
    for (size_t kk = 0; kk < n.inputs.size(); ++kk) {
      bool weight = R.g.tensor(n.inputs[kk]).kind == sema::TensorKind::Param;
      if (weight != (pass == 1)) continue;
      backward_input(R, op, ks, kk, mb, grad);
    }
  }
  for (int k : ks) R.emit(PInstr::FreeKernel, mb).kernel = k;
}

// One micro-batch: every op's forward in graph order, the loss seed, every
// op's backward in reverse, the parameter gradients into the step's sums.
void micro_batch(RankBuild& R, int mb) {
  std::unordered_map<int, int> value, grad;  // tensor -> buffer
  R.fwd_value = &value;
  int loss_op = -1;
  for (size_t i = 0; i < R.A.ops.size(); ++i) {
    const bool makes_loss = loss_op < 0 && R.g.loss >= 0 && R.g.tensor(R.g.loss).producer == R.A.ops[i].node;
    if (makes_loss) loss_op = static_cast<int>(i);
    if (!visit_op(R, mb, static_cast<int>(i), WalkPlan::Forward)) continue;
    R.open_block(mb, static_cast<int>(i), sema::PipeTask::F);
    forward_op(R, R.A.ops[i], R.op_kernels[i], mb, value);
    // Every rank holding a copy of the loss adds its share of it: ranks
    // that hold the same pieces then run the same program (a tensor-
    // parallel group's loss copies), which nns simulate's rank classes
    // rely on, where only copy 0 adding it set one rank apart.
    if (makes_loss)
      if (auto it = value.find(R.g.loss); it != value.end()) {
        PInstr& share = R.emit(PInstr::LossShare, mb);
        share.a = it->second;
        share.scale = 1.f / static_cast<float>(R.label(it->second).replicas);
      }
  }
  // A parameter's gradient is final once the first op (in forward order)
  // that reads it has run its backward: it goes into the step's sum there,
  // in that op's block, so that it is ready for its reduction while the
  // rest of the backward runs (and its contribution buffer goes early).
  const std::unordered_map<int, size_t>& first_reader = R.A.first_reader;
  for (size_t i = R.A.ops.size(); i-- > 0;) {
    if (static_cast<int>(i) == loss_op) {
      R.open_block(mb, static_cast<int>(i), sema::PipeTask::B);
      seed_loss_gradient(R, mb, grad);
    }
    if (!R.A.ops[i].backward || !visit_op(R, mb, static_cast<int>(i), WalkPlan::Backward)) continue;
    backward_op(R, static_cast<int>(i), R.op_kernels[i], mb, grad);
    for (int t : R.g.node(R.A.ops[i].node).inputs) {
      auto fr = first_reader.find(t);
      auto gi = grad.find(t);
      if (fr == first_reader.end() || fr->second != i || gi == grad.end()) continue;
      auto slot = R.slot_of.find(t);
      if (slot == R.slot_of.end() || !R.P.params[static_cast<size_t>(slot->second)].trainable) continue;
      accumulate_param_gradient(R, t, gi->second, mb);
      grad.erase(gi);
    }
  }
  // Parameter gradients still held (none in a plan as lowered today; kept
  // so that a gradient arriving otherwise still reaches the step's sum).
  R.open_block(mb, -1, sema::PipeTask::B);
  for (const ParamSlot& slot : R.P.params) {
    auto gi = grad.find(slot.tensor);
    if (gi == grad.end() || !slot.trainable) continue;
    accumulate_param_gradient(R, slot.tensor, gi->second, mb);
  }
}

}  // namespace

void accumulate_param_gradient(RankBuild& R, int tensor, int from, int mb) {
  auto [it, fresh] = R.accum_buf.emplace(tensor, -1);
  if (fresh) {
    const ParamSlot& slot = R.P.params[static_cast<size_t>(R.slot_of.at(tensor))];
    Piece storage = R.P.buffers[static_cast<size_t>(slot.state())].piece;  // a copy: new_buffer grows the vector
    it->second = R.new_buffer(BufferDecl::Accum, tensor, -1, storage);
    R.P.params[static_cast<size_t>(R.slot_of.at(tensor))].accum = it->second;
  }
  if (!R.label(from).same_box(R.label(it->second)))
    fail("internal: the gradient of " + R.g.tensor(tensor).name + " " + region_text(R.label(from).start, R.label(from).length) + " is not in its storage piece " + region_text(R.label(it->second).start, R.label(it->second).length));
  if (fresh) R.emit(PInstr::Alloc, -1).b = it->second;
  PInstr& in = R.emit(PInstr::AddTo, mb);
  in.a = from;
  in.b = it->second;
  in.scale = 1.f / static_cast<float>(R.spec.micro_batches);
}

void emit_micro_batches(RankBuild& R) {
  const int micro_batches = static_cast<int>(R.spec.micro_batches);
  const bool replay = replay_allowed(R);
  MicroBatchTemplate tmpl;
  for (int mb = 0; mb < micro_batches; ++mb) {
    if (tmpl.valid && mb + 1 < micro_batches) {
      tmpl.replay(R, mb);
      ++R.P.replayed;
      continue;
    }
    if (replay && mb == 1) tmpl.begin(R);
    micro_batch(R, mb);
    if (replay && mb == 1) tmpl.end(R);
  }
  end_walk(R);
  R.close_blocks();
}

}  // namespace nns::backend::detail
