// The step-end pass: what follows the micro-batches once per step. Buckets
// (gradients summed locally over the micro-batches) reduced in one fused
// allreduce per device group, or for zero1 reduce-scattered into shards;
// plan replicas average their gradients; the loss and gradient norm are
// reduced over every rank; clipping; each parameter's update; zero1's
// updated shards gathered back into the whole piece. Runs after the
// schedule pass: these instructions belong to no task.
#include <algorithm>
#include <map>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

namespace {

// zero1: the bucketed gradient `buf` of a sharded parameter, summed over
// the group and cut into its shards: this rank keeps its own, which its
// Shard buffer (the part of the parameter it updates) matches.
void zero1_scatter(RankBuild& R, int buf, const std::vector<int>& devs) {
  const int t = R.P.buffers[static_cast<size_t>(buf)].tensor;
  const int dim = R.A.zero1_dim.at(t);
  const int64_t k = static_cast<int64_t>(devs.size());
  const Piece whole = R.P.buffers[static_cast<size_t>(R.param_buf.at(t))].piece;
  // Each group sums its own copy of the gradient: where the data-parallel
  // group is one of several (a weight also replicated inside a tensor-
  // parallel group), every shard has as many copies as the bucket piece
  // has replicas, and the gradient norm and the assembled gradients must
  // count one of them.
  const Piece& summed = R.P.buffers[static_cast<size_t>(buf)].piece;
  RankBuild::Zero1Shards z;
  z.group = R.group_of(devs);
  int me = -1;
  for (int64_t i = 0; i < k; ++i) {
    Piece sh = whole;
    sh.length[static_cast<size_t>(dim)] /= k;
    sh.start[static_cast<size_t>(dim)] += i * sh.length[static_cast<size_t>(dim)];
    sh.replica_index = summed.replica_index;
    sh.replicas = summed.replicas;
    sh.value_index = 0;
    sh.value_parts = 1;
    z.shards.push_back(sh);
    if (devs[static_cast<size_t>(i)] == R.device()) me = static_cast<int>(i);
  }
  if (me < 0) fail("internal: zero1 group of " + R.g.tensor(t).name + " lacks device " + std::to_string(R.device()));
  const Piece mine = z.shards[static_cast<size_t>(me)];
  int grad = R.new_buffer(BufferDecl::Transit, t, -1, mine);
  PInstr& in = R.emit(PInstr::ReduceScatter, -1);
  in.a = buf;
  in.b = grad;
  in.group = z.group;
  in.index = R.slot_of.at(t);
  in.geom = static_cast<int>(R.P.geoms.size());
  CollectiveGeom geom;
  geom.send = z.shards;
  R.P.geoms.push_back(std::move(geom));
  R.zero1[t] = std::move(z);
  ParamSlot& slot = R.P.params[static_cast<size_t>(R.slot_of.at(t))];
  slot.shard = R.new_buffer(BufferDecl::Shard, t, -1, mine);
  accumulate_param_gradient(R, t, grad, -1);
}

// Inserts `at` (instruction, the index it goes before; sorted by index)
// into the rank's instructions. Task spans keep their instructions: one
// inserted at a span's end goes after the span, not into it.
void insert_instructions(RankBuild& R, const std::vector<std::pair<int, PInstr>>& at) {
  std::vector<PInstr> out;
  out.reserve(R.P.instrs.size() + at.size());
  size_t k = 0;
  for (size_t i = 0; i <= R.P.instrs.size(); ++i) {
    for (; k < at.size() && at[k].first == static_cast<int>(i); ++k) out.push_back(at[k].second);
    if (i < R.P.instrs.size()) out.push_back(R.P.instrs[i]);
  }
  auto before = [&](int idx, bool inclusive) {
    int n = 0;
    for (const auto& [q, in] : at) n += inclusive ? q <= idx : q < idx;
    return n;
  };
  for (RankProgram::TaskSpan& t : R.P.tasks) {
    t.first += before(t.first, true);
    t.last += before(t.last, false);
  }
  R.P.instrs = std::move(out);
}

// The distributed optimizer (LowerOptions::distributed_optimizer): slot's
// parameter, whole on every replica, gets a Shard of about 1/replicas of
// its piece, this replica's, which the Update and the optimizer state
// cover; the step end gathers the shards back over the replicas (R.zero1,
// as for a plan's zero1). The piece is cut along its first dimension that
// divides evenly, else along its longest into parts one row apart in size,
// the first the largest (Megatron-LM shards its flat gradient buffer,
// padded to a multiple of the data-parallel size: equal shards, within a
// row of these). A parameter the
// plan's zero1 already shards, or with no dimension as long as the replica
// count, stays whole and is averaged as before.
void shard_over_replicas(RankBuild& R, ParamSlot& slot, int group, int replicas) {
  if (slot.shard >= 0 || !slot.trainable) return;
  const Piece whole = R.P.buffers[static_cast<size_t>(slot.param)].piece;
  int dim = -1, longest = -1;
  for (size_t d = 0; d < whole.length.size(); ++d) {
    if (dim < 0 && whole.length[d] >= replicas && whole.length[d] % replicas == 0) dim = static_cast<int>(d);
    if (longest < 0 || whole.length[d] > whole.length[static_cast<size_t>(longest)]) longest = static_cast<int>(d);
  }
  if (dim < 0 && longest >= 0 && whole.length[static_cast<size_t>(longest)] >= replicas) dim = longest;
  if (dim < 0) return;
  RankBuild::Zero1Shards z;
  z.group = group;
  const int64_t len = whole.length[static_cast<size_t>(dim)];
  for (int64_t j = 0; j < replicas; ++j) {
    Piece sh = whole;
    // Boundaries rounded up: replica 0 holds the largest part, so that its
    // program (what simulate and the memory check lower) is the slowest and
    // the largest of the replicas'.
    const int64_t from = (j * len + replicas - 1) / replicas, to = ((j + 1) * len + replicas - 1) / replicas;
    sh.start[static_cast<size_t>(dim)] += from;
    sh.length[static_cast<size_t>(dim)] = to - from;
    z.shards.push_back(sh);
  }
  slot.shard = R.new_buffer(BufferDecl::Shard, slot.tensor, -1, z.shards[static_cast<size_t>(R.P.replica)]);
  R.zero1[slot.tensor] = std::move(z);
}

}  // namespace

// The replicas' gradient averages, in buckets placed where their gradients
// are final: after the task holding a gradient's last contribution (its
// last micro-batch's accumulation), so that the bucket's allreduce runs
// while the rest of the backward does. Gradients are taken in the order
// they become final and cut into buckets of replica_bucket_bytes, closed
// only between two places (a bucket is one run of replica-average
// instructions, which the executor posts as one allreduce). Every replica
// of a device runs the same program, so the buckets match across them.
void place_replica_averages(RankBuild& R) {
  const int replicas = R.opts.replicas;
  std::vector<int> across;
  for (int j = 0; j < replicas; ++j) across.push_back(j * R.devices + R.device());
  const int grp = R.groups.intern(across);
  // Buffer -> the last instruction naming it (-1: none). A vector, not a
  // map: a 280-micro-batch program names over a million buffers.
  std::vector<int> last_touch(R.P.buffers.size(), -1);
  for (size_t i = 0; i < R.P.instrs.size(); ++i)
    for (int b : {R.P.instrs[i].a, R.P.instrs[i].b})
      if (b >= 0 && static_cast<size_t>(b) < last_touch.size())
        last_touch[static_cast<size_t>(b)] = static_cast<int>(i);
  struct Ready {
    int at;  // the instruction index the average goes before
    int buf;
    size_t bytes;
  };
  std::vector<Ready> ready;
  size_t total = 0;
  for (ParamSlot& s : R.P.params) {
    if (s.accum < 0) continue;
    if (R.opts.distributed_optimizer) shard_over_replicas(R, s, grp, replicas);
    int at = last_touch[static_cast<size_t>(s.accum)] + 1;
    for (const RankProgram::TaskSpan& t : R.P.tasks)
      if (t.first < at && at < t.last) at = t.last;
    size_t bytes = static_cast<size_t>(R.label(s.accum).numel()) * 4;
    ready.push_back({at, s.accum, bytes});
    total += bytes;
  }
  std::stable_sort(ready.begin(), ready.end(), [](const Ready& x, const Ready& y) { return x.at < y.at; });
  const size_t cap = R.opts.replica_bucket_bytes > 0 ? R.opts.replica_bucket_bytes : replica_bucket_bytes(total);
  std::vector<std::pair<int, PInstr>> at;
  size_t filled = 0, open = 0;  // bytes in the open bucket; its first entry
  int bucket = 0;
  for (size_t i = 0; i < ready.size(); ++i) {
    filled += ready[i].bytes;
    const bool last = i + 1 == ready.size();
    if (!last && (filled < cap || ready[i + 1].at == ready[i].at)) continue;
    for (size_t j = open; j <= i; ++j) {
      PInstr in;
      in.kind = PInstr::ReplicaAverage;
      in.mb = -1;
      in.a = ready[j].buf;
      in.group = grp;
      in.scale = 1.f / static_cast<float>(replicas);
      const int t = R.P.buffers[static_cast<size_t>(in.a)].tensor;
      if (R.P.params[static_cast<size_t>(R.slot_of.at(t))].shard >= 0 && R.zero1.at(t).group == grp) {
        in.count = replicas;  // reduce-scattered: the distributed optimizer's shard
        in.step = bucket;     // its bucket, which the shard's gather joins (step_end)
      }
      at.emplace_back(ready[i].at, in);
    }
    open = i + 1;
    filled = 0;
    ++bucket;
  }
  insert_instructions(R, at);
}

void step_end(RankBuild& R) {
  // Buckets in key order, each one fused allreduce over its device group.
  R.P.buckets.assign(static_cast<size_t>(R.A.buckets), {});
  for (auto& [key, buf] : R.bucket_buf) R.P.buckets[static_cast<size_t>(key.first)].push_back(buf);
  for (int b = 0; b < R.A.buckets; ++b) {
    if (R.P.buckets[static_cast<size_t>(b)].empty()) continue;
    const std::vector<int>* devs = R.my_devices(*R.A.bucket_step[static_cast<size_t>(b)]);
    if (!devs) fail("internal: bucket " + std::to_string(b) + " has no group of device " + std::to_string(R.device()));
    if (devs->size() > 1 && !R.A.bucket_zero1[static_cast<size_t>(b)]) {
      PInstr& in = R.emit(PInstr::BucketAllReduce, -1);
      in.index = b;
      in.group = R.group_of(*devs);
    }
    if (R.A.bucket_zero1[static_cast<size_t>(b)]) {
      for (int buf : R.P.buckets[static_cast<size_t>(b)]) zero1_scatter(R, buf, *devs);
      continue;
    }
    for (int buf : R.P.buckets[static_cast<size_t>(b)]) accumulate_param_gradient(R, R.P.buffers[static_cast<size_t>(buf)].tensor, buf, -1);
  }
  int replicas = R.opts.replicas;
  if (replicas > 1) place_replica_averages(R);
  // The loss and gradient norm, over every rank (one rank: no collective).
  {
    std::lock_guard<std::mutex> lock(R.groups.mu);
    if (R.groups.world < 0) {
      std::vector<int> world;
      for (int r = 0; r < R.devices * replicas; ++r) world.push_back(r);
      R.groups.world = R.groups.intern_locked(world);
    }
    R.emit(PInstr::LossAllReduce, -1).group = R.groups.world;
  }
  if (R.spec.clip > 0) R.emit(PInstr::Clip, -1);
  for (size_t i = 0; i < R.P.params.size(); ++i)
    if (R.P.params[i].accum >= 0) {
      PInstr& in = R.emit(PInstr::Update, -1);
      in.a = R.P.params[i].state();
      in.b = R.P.params[i].accum;
      in.index = static_cast<int>(i);
    }
  // zero1: every member's updated shard back into the whole piece. The
  // distributed optimizer's gathers come last, by the bucket of their
  // reduce-scatter (step; count = replicas): Megatron-LM gathers a bucket's
  // parameters as one all-gather, and the cost model prices a run of them
  // so (comm_cost.cpp).
  std::map<int, int> bucket_of;  // Accum buffer -> its reduce-scatter's bucket
  for (const PInstr& in : R.P.instrs)
    if (in.kind == PInstr::ReplicaAverage && in.count > 1) bucket_of[in.a] = in.step;
  std::vector<std::pair<int, size_t>> order;  // (bucket or -1, slot)
  for (size_t i = 0; i < R.P.params.size(); ++i) {
    const ParamSlot& s = R.P.params[i];
    if (s.shard < 0) continue;
    auto b = bucket_of.find(s.accum);
    order.emplace_back(b != bucket_of.end() ? b->second : -1, i);
  }
  std::stable_sort(order.begin(), order.end());
  for (const auto& [bucket, i] : order) {
    const ParamSlot& s = R.P.params[i];
    const RankBuild::Zero1Shards& z = R.zero1.at(s.tensor);
    PInstr& in = R.emit(PInstr::AllGather, -1);
    in.a = s.shard;
    in.b = s.param;
    in.group = z.group;
    if (bucket >= 0) {
      in.count = replicas;
      in.step = bucket;
    }
    in.index = static_cast<int>(i);
    in.geom = static_cast<int>(R.P.geoms.size());
    CollectiveGeom geom;
    geom.recv = z.shards;
    R.P.geoms.push_back(std::move(geom));
  }
}

}  // namespace nns::backend::detail

namespace nns::backend {

size_t replica_bucket_bytes(size_t total) { return std::clamp<size_t>(total / 4, size_t{64} << 10, size_t{16} << 20); }

}  // namespace nns::backend
