// The plan executor's collectives: allreduce, allgather, reduce-scatter,
// send/recv and the bucketed gradient allreduce posted to overlap the backward.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/plan_executor.h"
#include "backend/runtime/trace.h"

namespace nns::backend {

namespace {

// NNS_TEST_FAULT=wrong-group: the group an allreduce runs over instead of
// the plan's `grp`. The world's ranks are cut the other way into groups of
// the same size (contiguous blocks where the plan's group is not one, else
// every (world / size)-th rank), so that every rank still meets peers that
// run the same instruction (no deadlock) but sums the wrong partial sums;
// a group that is the whole world has no other of its size, so there the
// rank sums alone (a member lost).
std::vector<int> wrong_group(const std::vector<int>& grp, int rank, int world) {
  const int g = static_cast<int>(grp.size());
  if (g >= world || world % g != 0) return {rank};
  std::vector<int> block;
  for (int i = 0; i < g; ++i) block.push_back(rank / g * g + i);
  if (block != grp) return block;
  const int stride = world / g;
  std::vector<int> strided;
  for (int i = 0; i < g; ++i) strided.push_back(rank % stride + i * stride);
  return strided;
}

}  // namespace

void PlanExecutor::exec_collective(const PInstr& in) {
  const std::vector<int>* grp = in.group >= 0 ? &group(in) : nullptr;
  bool talk = world > 1 && grp && grp->size() > 1;
  switch (in.kind) {
    case PInstr::AllReduce: {
      DeviceBuffer& b = bufs[static_cast<size_t>(in.a)];
      // NNS_TEST_FAULT=skip-allreduce: a test-only seeded bug (the
      // activation allreduces are skipped), which --verify must catch.
      if (talk && fault_wrong_group) {
        const std::vector<int> wrong = wrong_group(*grp, coll->rank(), world);
        if (wrong.size() > 1) coll->allreduce(b.data(), b.numel(), wrong, false);
        return;
      }
      if (talk && !fault_skip_allreduce) coll->allreduce(b.data(), b.numel(), *grp, false);
      return;
    }
    case PInstr::AllGather: {
      if (in.count > 1) return replica_gather(in, talk);  // the distributed optimizer's (plan_executor_sharded.cpp)
      const CollectiveGeom& geo = P.geoms[static_cast<size_t>(in.geom)];
      const DeviceBuffer& src = bufs[static_cast<size_t>(in.a)];
      const int64_t n = static_cast<int64_t>(geo.recv.size()), chunk = src.numel();
      DeviceBuffer tmp = alloc(n * chunk), out = alloc(piece(in.b).numel());
      if (talk)
        coll->allgather(src.data(), tmp.data(), chunk, *grp);
      else
        be.copy(tmp.data(), src.data(), src.bytes());
      for (int64_t i = 0; i < n; ++i) {
        const Piece& r = geo.recv[static_cast<size_t>(i)];
        be.copy_box(out.data(), tmp.element(i * chunk), region_box(r, piece(in.b), r.start, r.length), false, 1.f);
      }
      return set_buf(in.b, std::move(out));
    }
    case PInstr::ReduceScatter: {
      const CollectiveGeom& geo = P.geoms[static_cast<size_t>(in.geom)];
      const int64_t n = static_cast<int64_t>(geo.send.size()), chunk = piece(in.b).numel();
      DeviceBuffer tmp = alloc(n * chunk), out = alloc(chunk);
      for (int64_t i = 0; i < n; ++i) {
        const Piece& sd = geo.send[static_cast<size_t>(i)];
        be.copy_box(tmp.element(i * chunk), bufs[static_cast<size_t>(in.a)].data(),
                    region_box(piece(in.a), sd, sd.start, sd.length), false, 1.f);
      }
      // zero1's gradient reduce-scatter (index: its ParamSlot) reduces in bf16 under grad_reduce = "bf16".
      if (talk)
        coll->reduce_scatter(tmp.data(), out.data(), chunk, *grp, in.index >= 0 && round_bf16());
      else
        be.copy(out.data(), tmp.data(), out.bytes());
      return set_buf(in.b, std::move(out));
    }
    case PInstr::AllToAll: {
      const CollectiveGeom& geo = P.geoms[static_cast<size_t>(in.geom)];
      const int64_t n = static_cast<int64_t>(geo.send.size()), chunk = n ? geo.send[0].numel() : 0;
      DeviceBuffer tmp = alloc(n * chunk), recv, out = alloc(piece(in.b).numel());
      for (int64_t i = 0; i < n; ++i) {
        const Piece& sd = geo.send[static_cast<size_t>(i)];
        be.copy_box(tmp.element(i * chunk), bufs[static_cast<size_t>(in.a)].data(),
                    region_box(piece(in.a), sd, sd.start, sd.length), false, 1.f);
      }
      if (talk) {
        recv = alloc(n * chunk);
        coll->all_to_all(tmp.data(), recv.data(), chunk, *grp);
      } else {
        recv = std::move(tmp);  // a group of one: what it sends is what it receives
      }
      for (int64_t i = 0; i < n; ++i) {
        const Piece& r = geo.recv[static_cast<size_t>(i)];
        be.copy_box(out.data(), recv.element(i * chunk), region_box(r, piece(in.b), r.start, r.length), false, 1.f);
      }
      return set_buf(in.b, std::move(out));
    }
    case PInstr::Send: {
      const DeviceBuffer& b = bufs[static_cast<size_t>(in.a)];
      if (world > 1) {
        Sends& reqs = send_pending_[in.a];
        reqs.push_back(
            coll->post_send(b.data(), b.numel(), in.peer, in.tag + static_cast<uint32_t>(step - 1) * P.tags));
        if (in.index >= 0)
          send_release_[{in.peer, static_cast<uint32_t>(in.index)}].emplace_back(in.a, reqs.back().get());
      }
      return;
    }
    case PInstr::Recv: {
      set_buf(in.b, alloc(piece(in.b).numel()));
      if (world > 1) {
        DeviceBuffer& b = bufs[static_cast<size_t>(in.b)];
        PendingTable::Entry e;
        e.buffers = {in.b};
        e.op = coll->post_recv(b.data(), b.numel(), in.peer, in.tag + static_cast<uint32_t>(step - 1) * P.tags);
        pending_.post(std::move(e));
        recv_open_.insert(in.b);
      }
      return;
    }
    case PInstr::BucketAllReduce:
      // A group of one has nothing to sum: the gradients stay as they are.
      if (talk) post_bucket(in);
      return;
    case PInstr::ReplicaAverage:
      return replica_average(in, talk);
    case PInstr::LossAllReduce: {
      // Gradient norm: each piece once (copies of a replicated piece count
      // once; replicas hold the same averaged values, replica 0 counts).
      // A slot the distributed optimizer shards over the replicas counts
      // each replica's shard, where its average is.
      double ss = 0;
      for (size_t i = 0; i < P.params.size(); ++i) {
        const ParamSlot& s = P.params[i];
        if (s.accum < 0) continue;
        const double copies = static_cast<double>(piece(s.accum).replicas);
        if (replica_sharded(i))
          ss += be.sum_of_squares({fview(box_of(s.accum, piece(s.shard)))}) / copies;
        else if (P.replica == 0)
          ss += be.sum_of_squares({fview(bufs[static_cast<size_t>(s.accum)])}) / copies;
      }
      float lv[2] = {static_cast<float>(loss), static_cast<float>(ss)};
      if (talk) coll->allreduce_host(lv, 2, *grp);
      loss = lv[0] / static_cast<double>(lowered.replicas);
      // The gradients carry the loss scale (1 without fp16). An inf or NaN
      // anywhere makes the all-reduced sum inf or NaN on every rank, so all
      // skip the same step; otherwise this rank's pieces are unscaled here.
      const float scale = scaler.scale();
      grad_norm = std::sqrt(static_cast<double>(lv[1])) / scale;
      skip_update = !scaler.finish_step(static_cast<double>(lv[1]));
      // Unscaled by multiplying with the reciprocal, as the single-device
      // Trainer does (the same as dividing for power-of-two scales, the
      // defaults; otherwise what one device computes).
      if (scale != 1.f && !skip_update)
        for (const ParamSlot& s : P.params)
          if (s.accum >= 0) be.scale(fview(bufs[static_cast<size_t>(s.accum)]), 1.0f / scale);
      return;
    }
    default: throw RuntimeError(std::string("internal: unexpected instruction ") + instr_name(in.kind));
  }
}

// A bucket's gradients, flattened into one buffer and posted as one
// allreduce; the reduced values go back into the gradients when the first
// instruction touching one of them runs (pending_), so that on the device
// path the allreduce overlaps the rest of the backward. Nothing writes the
// bucket's gradients after its BucketAllReduce (lowering places it after
// their last contribution), so the copy back overwrites nothing.
void PlanExecutor::post_bucket(const PInstr& in) {
  post_flat_allreduce(P.buckets[static_cast<size_t>(in.index)], group(in), 1.f);
}

// `members` concatenated and posted as one allreduce over `grp`; when it
// completes, each member gets its part back, times `scale` unless 1.
void PlanExecutor::post_flat_allreduce(const std::vector<int>& members, const std::vector<int>& grp, float scale) {
  int64_t total = 0;
  for (int b : members) total += bufs[static_cast<size_t>(b)].numel();
  auto flat = std::make_shared<DeviceBuffer>(alloc_uninit(total));  // every element copied in below
  int64_t off = 0;
  for (int b : members) {
    const DeviceBuffer& v = bufs[static_cast<size_t>(b)];
    be.copy(flat->element(off), v.data(), v.bytes());
    off += v.numel();
  }
  PendingTable::Entry e;
  e.buffers = members;
  e.op = coll->post_allreduce(flat->data(), total, grp, round_bf16());
  e.done = [this, flat, members, scale] {
    int64_t at_ = 0;
    for (int b : members) {
      DeviceBuffer& v = bufs[static_cast<size_t>(b)];
      be.copy(v.data(), flat->element(at_), v.bytes());
      if (scale != 1.f) be.scale(fview(v), scale);
      at_ += v.numel();
    }
  };
  // NNS_TEST_FAULT=consume-before-wait: kept away from the first consumer
  // (completed at the step end), the bug the bookkeeping exists to prevent.
  (fault_consume_before_wait ? late_ : pending_).post(std::move(e));
}

// Consecutive replica averages over one group, with one scale, are the
// replicas' gradient bucket (rank_program.h), placed by lowering right
// after its gradients' last contributions: the first of the run posts them
// all as one allreduce of their concatenation (the sums are elementwise,
// so the values are those of one allreduce each, with far fewer messages),
// which overlaps the rest of the backward; the averaged values land in the
// gradients, scaled, when an instruction first touches one of them
// (pending_), as a bucket's do. The others of the run find theirs posted.
// Members with count > 1 (the distributed optimizer's) are reduce-scattered
// instead, all of the run's in one collective (plan_executor_sharded.cpp).
void PlanExecutor::replica_average(const PInstr& in, bool talk) {
  auto same_bucket = [&in](const PInstr& o) { return o.kind == PInstr::ReplicaAverage && o.group == in.group && o.scale == in.scale; };
  const size_t first = static_cast<size_t>(&in - P.instrs.data());
  if (first > 0 && same_bucket(P.instrs[first - 1])) return;
  size_t end = first + 1;
  while (end < P.instrs.size() && same_bucket(P.instrs[end])) ++end;
  std::vector<int> members, sharded;
  for (size_t i = first; i < end; ++i) (P.instrs[i].count > 1 ? sharded : members).push_back(P.instrs[i].a);
  // The run's members were last written before it (lowering places it
  // after their last contributions): what is posted on them completes, and
  // one that nothing wrote this step is zeros.
  for (const std::vector<int>* list : {&members, &sharded})
    for (int b : *list) {
      pending_.complete(b);
      if (take_zero(b)) be.fill(bufs[static_cast<size_t>(b)].data(), bufs[static_cast<size_t>(b)].numel(), 0.f);
    }
  const float scale = fault_grad_scale_1pct ? in.scale * 1.01f : in.scale;  // NNS_TEST_FAULT=grad-scale-1pct
  if (!sharded.empty()) replica_reduce_scatter(sharded, group(in), talk, scale);
  if (members.empty()) return;
  if (!talk) {
    for (int b : members) be.scale(fview(bufs[static_cast<size_t>(b)]), scale);
    return;
  }
  post_flat_allreduce(members, group(in), scale);
}

}  // namespace nns::backend
