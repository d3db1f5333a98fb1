// The plan executor's lazy zeros. An Alloc promises a zeroed buffer, and
// most of them are first written whole: a kernel's output or gradient
// collected into a buffer of exactly its piece, or a contribution added to
// a fresh accumulator. Filling such a buffer with zeros and then adding
// into it reads and writes it twice for nothing (it was a third of a
// small-kernel step's local work). So Alloc only marks the buffer; the
// first writer that covers all of it writes (0 + x is x), and any other
// first touch fills it first. The values are those of the program as
// written; only the memory traffic changes. An add-to whose source dies
// right after (a contribution into its bucket, a bucket into its
// accumulator: add_to_sources_freed_next) does not even copy: the source's
// block becomes the target's. Memory is allocated at Alloc
// as before, so the replayed peak (memory_replay.h) is unchanged.
#include <algorithm>

#include "backend/runtime/plan_executor.h"

namespace nns::backend {

void PlanExecutor::mark_zero(int b) {
  char& z = zero_pending_[static_cast<size_t>(b)];
  if (!z) ++zero_pending_count_;
  z = 1;
}

bool PlanExecutor::take_zero(int b) {
  char& z = zero_pending_[static_cast<size_t>(b)];
  if (!z) return false;
  z = 0;
  --zero_pending_count_;
  return true;
}

void PlanExecutor::settle_zeros(const PInstr& in) {
  bool all = false;
  instr_buffers(P, in, touched_, all);
  if (all) return settle_all_zeros();
  // A first writer's target is its own to settle (first_write).
  const bool writes_b = in.kind == PInstr::CollectOut || in.kind == PInstr::CollectGrad || in.kind == PInstr::AddTo;
  for (int b : touched_) {
    if (writes_b && b == in.b) continue;
    if (take_zero(b)) be.fill(bufs[static_cast<size_t>(b)].data(), bufs[static_cast<size_t>(b)].numel(), 0.f);
  }
}

void PlanExecutor::settle_all_zeros() {
  for (size_t b = 0; b < zero_pending_.size() && zero_pending_count_ > 0; ++b)
    if (take_zero(static_cast<int>(b))) be.fill(bufs[b].data(), bufs[b].numel(), 0.f);
}

// The first write of a marked buffer, when it covers all of it. A kernel
// output that the kernel drops after this collect and that is the buffer's
// exact piece, unscaled, becomes the buffer (the allocated block goes back
// in its place, so memory is as the program says).
bool PlanExecutor::first_write(const PInstr& in) {
  const bool writes_b = in.kind == PInstr::CollectOut || in.kind == PInstr::CollectGrad || in.kind == PInstr::AddTo;
  if (!writes_b || in.b < 0 || !zero_pending_[static_cast<size_t>(in.b)]) return false;
  if (whole_write(in)) return true;
  // One of the collects that tile the buffer: each writes its region, the
  // zeros are never made (plan_executor_views.cpp).
  if (in.kind != PInstr::AddTo && tile_write(in)) {
    take_zero(in.b);
    return false;
  }
  // A part only (one of several pieces, a value part): zeros first.
  take_zero(in.b);
  be.fill(bufs[static_cast<size_t>(in.b)].data(), bufs[static_cast<size_t>(in.b)].numel(), 0.f);
  return false;
}

bool PlanExecutor::whole_write(const PInstr& in) {
  DeviceBuffer& dst = bufs[static_cast<size_t>(in.b)];
  if (in.kind == PInstr::AddTo) {
    DeviceBuffer& src = bufs[static_cast<size_t>(in.a)];
    if (src.numel() != dst.numel()) return false;
    take_zero(in.b);
    if (src_dies_base_ != P.instrs.data() || src_dies_.size() != P.instrs.size()) {
      src_dies_ = add_to_sources_freed_next(P);
      src_dies_base_ = P.instrs.data();
    }
    // (`in` is an element of P.instrs: run_step executes them in place.)
    const bool listed = &in >= P.instrs.data() && &in < P.instrs.data() + P.instrs.size();
    const size_t i = listed ? static_cast<size_t>(&in - P.instrs.data()) : src_dies_.size();
    // A source the program frees next, that no kernel reads in place and
    // no send still reads: its block becomes the target (equal sizes: the
    // memory counts stay as they are; the target's block goes at the Free).
    const bool hand_over = i < src_dies_.size() && src_dies_[i] && buf_refs_[static_cast<size_t>(in.a)] == 0 &&
                           send_pending_.find(in.a) == send_pending_.end();
    if (hand_over)
      std::swap(dst, src);
    else
      be.copy(dst.data(), src.data(), src.bytes());
    if (in.scale != 1.f) be.scale(fview(dst), in.scale);
    return true;
  }
  const SubOpKernel& kn = P.kernels[static_cast<size_t>(in.kernel)];
  const size_t i = static_cast<size_t>(in.index);
  int local = -1;
  const Piece* sl = nullptr;
  if (in.kind == PInstr::CollectOut) {
    local = kn.inst.outputs[i];
    sl = &kn.out_slices[i];
  } else if (in.kind == PInstr::CollectGrad) {
    auto gt = kn.bwd.grads.find(kn.inst.inputs[i]);
    if (gt == kn.bwd.grads.end() || gt->second < 0) return false;
    local = gt->second;
    sl = &kn.in_slices[i];
  } else {
    return false;
  }
  if (!sl->same_box(piece(in.b)) || (*alias_cur)[static_cast<size_t>(local)] >= 0) return false;
  DeviceBuffer& from = (*lbuf_cur)[static_cast<size_t>(local)];
  const bool half = local_bf16(local);  // a bf16 tensor: widened into the f32 buffer, never swapped in
  if (!half && from.numel() != dst.numel()) return false;
  const float scale = in.kind == PInstr::CollectOut ? in.scale : 1.f;
  take_zero(in.b);
  // The kernel's tensor is not needed after this: an output the kernel
  // drops after its collect, or an input's gradient that no other input
  // shares (the backward is done; FreeKernel would only drop it).
  bool dropped = in.kind == PInstr::CollectOut && i < kn.drop_after_collect.size() && kn.drop_after_collect[i];
  if (in.kind == PInstr::CollectGrad) {
    int sharing = 0;
    for (int x : kn.inst.inputs)
      if (auto g = kn.bwd.grads.find(x); g != kn.bwd.grads.end() && g->second == local) ++sharing;
    dropped = sharing == 1 && std::count(kn.inst.inputs.begin(), kn.inst.inputs.end(), kn.inst.inputs[i]) == 1;
  }
  if (half) {
    // What the f32 path below leaves live, the memory replay's model: an
    // output dropped after its collect goes; one the kernel still reads is
    // read in the buffer (the same values: bf16 widened exactly); a
    // gradient stays until the kernel drops it.
    BoxCopy box = region_box(*sl, piece(in.b), sl->start, sl->length);
    box.src_bf16 = true;
    be.copy_box(dst.data(), from.data(), box, false, scale);
    if (in.kind == PInstr::CollectOut && dropped)
      drop_local(local);
    else if (in.kind == PInstr::CollectOut && collect_out_whole(P, in))
      read_in_place(local, in.b, 0);
    return true;
  }
  if (in.kind == PInstr::CollectOut && collect_out_whole(P, in)) {
    std::swap(dst, from);  // equal sizes: the memory counts stay as they are
    if (dropped)
      drop_local(local);  // (the allocated block, now in the kernel's slot)
    else
      read_in_place(local, in.b, 0);  // the kernel still reads its output: where it now lives
    return true;
  }
  if (dropped && scale == 1.f) {
    // Equal sizes: the memory counts stay as they are. The kernel keeps the
    // allocated block in its tensor's place until it would have dropped
    // the tensor (its release list, FreeKernel), so memory is what the
    // program's replay says (memory_replay.h).
    std::swap(dst, from);
    if (in.kind == PInstr::CollectOut) drop_local(local);
    return true;
  }
  be.copy(dst.data(), from.data(), from.bytes());
  if (scale != 1.f) be.scale(fview(dst), scale);
  if (dropped) drop_local(local);
  return true;
}

}  // namespace nns::backend
