// The plan executor's distributed optimizer over plan replicas
// (LowerOptions::distributed_optimizer, Megatron-LM's
// --use-distributed-optimizer): each replica updates a Shard of every
// parameter it can cut, about 1/replicas of the piece, and keeps the
// optimizer state for that shard only. The program says so with two
// instructions (rank_program.h): a ReplicaAverage with count > 1 (the
// replicas' gradient average reduce-scattered: only this replica's shard
// of the Accum holds the average) and an AllGather with edge -1 and
// count > 1 (every replica's updated Shard back into the whole Param).
//
// Consecutive ones of a bucket run as one collective over a flat buffer,
// as Megatron-LM reduces and gathers its flat bucket: block j of the flat
// buffer is the concatenation of replica j's shards of the bucket's
// parameters. Lowering cuts a parameter into shards one row apart in size
// when the replica count does not divide it, so blocks may differ in
// length; each is padded to the longest (the collectives move equal
// chunks) and the padding is never read.
#include <algorithm>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/plan_executor.h"

namespace nns::backend {

// Which slots the distributed optimizer shards, and the boxes of their
// shards on every replica: the geometry of the slot's gather (the
// ReplicaAverage names no geometry; the gather's blocks are the same
// shards). Also checks what the executor relies on: every reduce-scattered
// average belongs to such a slot.
void PlanExecutor::find_replica_shards() {
  replica_shard_geom.assign(P.params.size(), -1);
  accum_slot_.clear();
  for (size_t i = 0; i < P.params.size(); ++i)
    if (P.params[i].accum >= 0) accum_slot_[P.params[i].accum] = static_cast<int>(i);
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::AllGather && in.count > 1) {
      if (in.index < 0 || static_cast<size_t>(in.index) >= P.params.size() || in.geom < 0)
        throw RuntimeError("internal: a distributed optimizer gather without its parameter slot");
      const CollectiveGeom& geo = P.geoms[static_cast<size_t>(in.geom)];
      if (static_cast<int64_t>(geo.recv.size()) != in.count || P.replica >= in.count)
        throw RuntimeError("internal: a distributed optimizer gather over " + std::to_string(geo.recv.size()) +
                           " shards for " + std::to_string(in.count) + " replicas");
      replica_shard_geom[static_cast<size_t>(in.index)] = in.geom;
    }
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::ReplicaAverage && in.count > 1 &&
        replica_shard_geom[static_cast<size_t>(accum_slot(in.a))] < 0)
      throw RuntimeError("internal: gradient b" + std::to_string(in.a) +
                         " is reduce-scattered but its shards are never gathered");
}

int PlanExecutor::accum_slot(int accum) const {
  auto it = accum_slot_.find(accum);
  if (it == accum_slot_.end())
    throw RuntimeError("internal: b" + std::to_string(accum) + " is no parameter's gradient");
  return it->second;
}

const std::vector<Piece>& PlanExecutor::replica_shards(size_t slot) const {
  return P.geoms[static_cast<size_t>(replica_shard_geom[slot])].recv;
}

// The replicas' average of `members` (Accum buffers of sharded slots),
// reduce-scattered: each replica's shard of each member is summed over
// `grp` (the replicas of this device, in replica order) and written back,
// times `scale`, into this replica's shard of the member. The rest of the
// member keeps this replica's own sum; nothing reads it (Update, the norm
// and the assembled gradients read the shard).
void PlanExecutor::replica_reduce_scatter(const std::vector<int>& members, const std::vector<int>& grp, bool talk,
                                          float scale) {
  const int64_t n = static_cast<int64_t>(grp.size());
  const size_t me = static_cast<size_t>(P.replica);
  if (me >= grp.size() || grp[me] != P.rank)
    throw RuntimeError("internal: replica group " + group_text(grp) + " without this rank in place " +
                       std::to_string(me));
  std::vector<int64_t> block(grp.size(), 0);
  for (int b : members) {
    const std::vector<Piece>& sh = replica_shards(static_cast<size_t>(accum_slot(b)));
    if (static_cast<int64_t>(sh.size()) != n)
      throw RuntimeError("internal: gradient b" + std::to_string(b) + " cut for another replica count");
    for (size_t j = 0; j < sh.size(); ++j) block[j] += sh[j].numel();
  }
  const int64_t chunk = *std::max_element(block.begin(), block.end());
  const bool padded = std::any_of(block.begin(), block.end(), [chunk](int64_t k) { return k != chunk; });
  DeviceBuffer flat = padded ? alloc(n * chunk) : alloc_uninit(n * chunk);
  std::vector<int64_t> at(grp.size(), 0);
  for (int b : members) {
    const std::vector<Piece>& sh = replica_shards(static_cast<size_t>(accum_slot(b)));
    for (size_t j = 0; j < sh.size(); ++j) {
      be.copy_box(flat.element(static_cast<int64_t>(j) * chunk + at[j]), bufs[static_cast<size_t>(b)].data(),
                  region_box(piece(b), sh[j], sh[j].start, sh[j].length), false, 1.f);
      at[j] += sh[j].numel();
    }
  }
  DeviceBuffer mine = alloc_uninit(chunk);
  if (talk)
    coll->reduce_scatter(flat.data(), mine.data(), chunk, grp, round_bf16());
  else
    be.copy(mine.data(), flat.element(static_cast<int64_t>(me) * chunk), mine.bytes());
  int64_t off = 0;
  for (int b : members) {
    const Piece& s = replica_shards(static_cast<size_t>(accum_slot(b)))[me];
    be.copy_box(bufs[static_cast<size_t>(b)].data(), mine.element(off), region_box(s, piece(b), s.start, s.length),
                false, scale);
    off += s.numel();
  }
}

// The gathers of one bucket (consecutive AllGathers with count > 1 over one
// group and one bucket, `step`): every replica's updated shards written
// into the whole parameters, in place (the step's kernels have dropped
// them). The first of the run does the run's work; the others find it done.
void PlanExecutor::replica_gather(const PInstr& in, bool talk) {
  auto same_run = [&in](const PInstr& o) {
    return o.kind == PInstr::AllGather && o.count > 1 && o.group == in.group && o.step == in.step;
  };
  const size_t first = static_cast<size_t>(&in - P.instrs.data());
  if (first >= P.instrs.size()) throw RuntimeError("internal: a gather outside the rank's program");
  if (first > 0 && same_run(P.instrs[first - 1])) return;
  size_t end = first + 1;
  while (end < P.instrs.size() && same_run(P.instrs[end])) ++end;
  const std::vector<int>& grp = group(in);
  const size_t me = static_cast<size_t>(P.replica);
  std::vector<int64_t> block(grp.size(), 0);
  for (size_t i = first; i < end; ++i) {
    const std::vector<Piece>& sh = P.geoms[static_cast<size_t>(P.instrs[i].geom)].recv;
    if (sh.size() != grp.size())
      throw RuntimeError("internal: a gather of " + std::to_string(sh.size()) + " shards over " + group_text(grp));
    if (bufs[static_cast<size_t>(P.instrs[i].a)].numel() != sh[me].numel())
      throw RuntimeError("internal: shard b" + std::to_string(P.instrs[i].a) +
                         " is not this replica's block of its gather");
    for (size_t j = 0; j < sh.size(); ++j) block[j] += sh[j].numel();
  }
  const int64_t n = static_cast<int64_t>(grp.size()), chunk = *std::max_element(block.begin(), block.end());
  DeviceBuffer mine = alloc(chunk), all = alloc_uninit(n * chunk);  // zeros: the padding it sends
  int64_t off = 0;
  for (size_t i = first; i < end; ++i) {
    const DeviceBuffer& s = bufs[static_cast<size_t>(P.instrs[i].a)];
    be.copy(mine.element(off), s.data(), s.bytes());
    off += s.numel();
  }
  if (talk)
    coll->allgather(mine.data(), all.data(), chunk, grp);
  else
    be.copy(all.data(), mine.data(), mine.bytes());
  std::vector<int64_t> at(grp.size(), 0);
  for (size_t i = first; i < end; ++i) {
    const PInstr& g = P.instrs[i];
    const std::vector<Piece>& sh = P.geoms[static_cast<size_t>(g.geom)].recv;
    for (size_t j = 0; j < sh.size(); ++j) {
      if (!fault_gather_own_shard || j == me)
        be.copy_box(bufs[static_cast<size_t>(g.b)].data(), all.element(static_cast<int64_t>(j) * chunk + at[j]),
                    region_box(sh[j], piece(g.b), sh[j].start, sh[j].length), false, 1.f);
      at[j] += sh[j].numel();
    }
  }
}

// The part of buffer b in `box` (inside b's piece), in a buffer of its own:
// the shard's gradient the Update and the norm read.
DeviceBuffer PlanExecutor::box_of(int b, const Piece& box) {
  DeviceBuffer out = alloc_uninit(box.numel());
  be.copy_box(out.data(), bufs[static_cast<size_t>(b)].data(), region_box(piece(b), box, box.start, box.length), false,
              1.f);
  return out;
}

}  // namespace nns::backend
