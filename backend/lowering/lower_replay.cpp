// Micro-batch replay (part of the emission pass, lower_emit.cpp): the
// middle micro-batches of a step emit the same instructions, and the
// emission of one is copied for the others instead of being made again.
//
// Why it is the program, not an approximation of it: a micro-batch's
// emission reads the plan analysis (the same for every micro-batch), the
// rank's persistent state (parameter buffers, gradient sums, buckets, the
// per-step transfers the first micro-batch made) and its own index, which
// enters only as (a) the micro-batch field of what it makes, (b) keys of
// maps that only the same micro-batch reads, (c) whether it is the first or
// the last (per-step transfers, gradient sums moved once), and (d) the
// send/recv tags, which every rank takes from the walk's table (WalkPlan).
// So micro-batches 2 .. M-2 emit what micro-batch 1 emitted, with their own
// index, their own new buffers and tags shifted by a fixed amount, provided
// that (checked here, on every rank, or the rank emits every micro-batch):
//   - the walk's tags grow by one fixed step per middle micro-batch
//     (WalkPlan::middle_tags), and every tag micro-batch 1 used lies in
//     its own range;
//   - micro-batch 1 changed no persistent state: no parameter gradient
//     sum, bucket or per-step sum made, no entry of another micro-batch's
//     maps, no label of a buffer made before it;
//   - everything it emitted (buffers, instructions, blocks) is its own.
// Micro-batches 0 and M-1 are always emitted. LowerOptions::
// every_micro_batch (and walk_every_op) turn the replay off; the tests
// compare both lowerings instruction for instruction (lower_plan_test.cpp).
//
// Pipelines are where this matters: the SC'21 1T row lowers 512
// micro-batches per rank.
#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

namespace {

template <class Map, class Mine>
size_t others(const Map& m, const Mine& mine) {
  size_t n = 0;
  for (const auto& kv : m) n += mine(kv.first) ? 0 : 1;
  return n;
}

}  // namespace

bool replay_allowed(const RankBuild& R) {
  return R.walk && R.walk->middle_tags_uniform && !R.recording && !R.opts.walk_every_op && !R.opts.every_micro_batch &&
         R.spec.micro_batches >= 4;
}

void MicroBatchTemplate::begin(RankBuild& R) {
  R.close_blocks();
  b0 = static_cast<int>(R.P.buffers.size());
  i0 = R.P.instrs.size();
  k0 = R.blocks.size();
  before.clear();
  before.reserve(static_cast<size_t>(b0));
  for (int b = 0; b < b0; ++b) before.push_back(R.P.buffers[static_cast<size_t>(b)].piece);
  persistent = persistent_state(R);
}

std::vector<size_t> MicroBatchTemplate::persistent_state(const RankBuild& R) const {
  auto mb1 = [](const std::pair<int, int>& k) { return k.first == 1 || k.first == -3; };  // -2 - mb: recompute
  auto mb1_region = [](const std::tuple<int, int, int>& k) { return std::get<0>(k) == 1; };
  auto pending_mb1 = [](const std::pair<int, int>& k) { return k.first == 1; };
  std::vector<size_t> s = {R.accum_buf.size(),
                           R.bucket_buf.size(),
                           R.step_grad.size(),
                           R.P.kernels.size(),
                           others(R.received, mb1),
                           others(R.pending_share, pending_mb1),
                           others(R.region_inputs, mb1_region)};
  for (const ParamSlot& p : R.P.params) s.push_back(static_cast<size_t>(p.accum + 1));
  return s;
}

void MicroBatchTemplate::end(RankBuild& R) {
  R.close_blocks();
  b1 = static_cast<int>(R.P.buffers.size());
  i1 = R.P.instrs.size();
  k1 = R.blocks.size();
  valid = false;
  if (persistent_state(R) != persistent) return;
  for (int b = 0; b < b0; ++b)
    if (!same_piece(before[static_cast<size_t>(b)], R.P.buffers[static_cast<size_t>(b)].piece)) return;
  before.clear();
  before.shrink_to_fit();
  for (int b = b0; b < b1; ++b)
    if (R.P.buffers[static_cast<size_t>(b)].mb != 1) return;
  for (size_t k = k0; k < k1; ++k)
    if (R.blocks[k].mb != 1) return;
  // The walk's range of tags for micro-batch 1: (first, last].
  const uint32_t first = R.walk->tag_at[R.walk->index(1, 0, WalkPlan::Forward)];
  const uint32_t last = first + R.walk->middle_tags;
  for (size_t i = i0; i < i1; ++i) {
    const PInstr& in = R.P.instrs[i];
    if (in.mb != 1 || R.block_of[i] < static_cast<int>(k0) || R.block_of[i] >= static_cast<int>(k1)) return;
    if (in.tag != 0 && (in.tag <= first || in.tag > last)) return;
  }
  valid = true;
}

void MicroBatchTemplate::replay(RankBuild& R, int mb) const {
  R.close_blocks();
  const int buffer_shift = static_cast<int>(R.P.buffers.size()) - b0;
  const int block_shift = static_cast<int>(R.blocks.size() - k0);
  const uint32_t tag_shift = static_cast<uint32_t>(mb - 1) * R.walk->middle_tags;
  auto mine = [&](int b) { return b >= b0 && b < b1 ? b + buffer_shift : b; };
  for (int b = b0; b < b1; ++b) {
    R.P.buffers.push_back(R.P.buffers[static_cast<size_t>(b)]);
    R.P.buffers.back().mb = mb;
  }
  for (size_t k = k0; k < k1; ++k) {
    R.blocks.push_back(R.blocks[k]);
    R.blocks.back().mb = mb;
  }
  for (size_t i = i0; i < i1; ++i) {
    PInstr in = R.P.instrs[i];
    in.mb = static_cast<int16_t>(mb);
    in.a = mine(in.a);
    in.b = mine(in.b);
    if (in.tag != 0) in.tag += tag_shift;
    R.P.instrs.push_back(in);
    R.block_of.push_back(R.block_of[i] + block_shift);
  }
  R.cur_block = static_cast<int>(R.blocks.size()) - 1;
}

void set_middle_tags(WalkPlan& w) {
  w.middle_tags_uniform = false;
  if (w.micro_batches < 4 || w.ops == 0) return;
  w.middle_tags = w.tag_at[w.index(2, 0, WalkPlan::Forward)] - w.tag_at[w.index(1, 0, WalkPlan::Forward)];
  for (int mb = 2; mb + 1 < w.micro_batches; ++mb) {
    const uint32_t shift = static_cast<uint32_t>(mb - 1) * w.middle_tags;
    for (int op = 0; op < w.ops; ++op)
      for (WalkPlan::Phase ph : {WalkPlan::Forward, WalkPlan::Backward, WalkPlan::Recompute}) {
        const uint32_t one = w.tag_at[w.index(1, op, ph)], here = w.tag_at[w.index(mb, op, ph)];
        if (one == WalkPlan::kUnrecorded ? here != one : here != one + shift) return;
      }
  }
  w.middle_tags_uniform = true;
}

}  // namespace nns::backend::detail
