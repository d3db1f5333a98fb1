// The step-end pass: what follows the micro-batches once per step. Buckets
// (gradients summed locally over the micro-batches) reduced in one fused
// allreduce per device group, or for zero1 reduce-scattered into shards;
// plan replicas average their gradients; the loss and gradient norm are
// reduced over every rank; clipping; each parameter's update; zero1's
// updated shards gathered back into the whole piece. Runs after the
// schedule pass: these instructions belong to no task.
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

}  // namespace

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
  if (replicas > 1) {
    std::vector<int> across;
    for (int j = 0; j < replicas; ++j) across.push_back(j * R.devices + R.device());
    int grp = R.groups.intern(across);
    for (const ParamSlot& s : R.P.params)
      if (s.accum >= 0) {
        PInstr& in = R.emit(PInstr::ReplicaAverage, -1);
        in.a = s.accum;
        in.group = grp;
        in.scale = 1.f / static_cast<float>(replicas);
      }
  }
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
  // zero1: every member's updated shard back into the whole piece.
  for (size_t i = 0; i < R.P.params.size(); ++i) {
    const ParamSlot& s = R.P.params[i];
    if (s.shard < 0) continue;
    const RankBuild::Zero1Shards& z = R.zero1.at(s.tensor);
    PInstr& in = R.emit(PInstr::AllGather, -1);
    in.a = s.shard;
    in.b = s.param;
    in.group = z.group;
    in.index = static_cast<int>(i);
    in.geom = static_cast<int>(R.P.geoms.size());
    CollectiveGeom geom;
    geom.recv = z.shards;
    R.P.geoms.push_back(std::move(geom));
  }
}

}  // namespace nns::backend::detail
