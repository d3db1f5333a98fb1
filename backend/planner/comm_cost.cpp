#include "backend/planner/comm_cost.h"

#include "backend/planner/topology_comm.h"

namespace nns::planner {

using backend::PInstr;

namespace {

double numel(const backend::RankProgram& prog, int buf) {
  if (buf < 0 || static_cast<size_t>(buf) >= prog.buffers.size()) return 0;
  return static_cast<double>(prog.buffers[static_cast<size_t>(buf)].piece.numel());
}

// The run of consecutive ReplicaAverage instructions over the same group
// that `in` is part of: the executor posts such a run (one gradient bucket
// of replica_bucket_bytes) as one allreduce. A reduce-scattered run (the
// distributed optimizer's, count > 1) is one reduce-scatter per bucket
// (step), and a run of its gathers of one bucket one all-gather.
// Returns the run's elements (of a, or for a gather of b); just `in`'s
// when it is not an instruction of `prog`.
double bucket_elements(const backend::RankProgram& prog, const PInstr& in) {
  const bool gather = in.kind == PInstr::AllGather;
  auto elems_of = [&](const PInstr& x) { return numel(prog, gather ? x.b : x.a); };
  const auto& v = prog.instrs;
  if (v.empty() || &in < v.data() || &in >= v.data() + v.size()) return elems_of(in);
  const size_t at = static_cast<size_t>(&in - v.data());
  auto same = [&](size_t i) {
    return v[i].kind == in.kind && v[i].group == in.group && v[i].count == in.count &&
           (in.count <= 1 || v[i].step == in.step);
  };
  size_t lo = at, hi = at;
  while (lo > 0 && same(lo - 1)) --lo;
  while (hi + 1 < v.size() && same(hi + 1)) ++hi;
  double elems = 0;
  for (size_t i = lo; i <= hi; ++i) elems += elems_of(v[i]);
  return elems;
}

}  // namespace

double comm_bytes(const backend::RankProgram& prog, const PInstr& in, int bytes_per_element) {
  double elems = 0;
  switch (in.kind) {
    case PInstr::AllReduce:
    case PInstr::ReduceScatter:
    case PInstr::AllToAll:
    case PInstr::Send:
    case PInstr::ReplicaAverage:
      elems = numel(prog, in.a);
      break;
    case PInstr::AllGather:
      elems = numel(prog, in.b);  // the gathered result
      break;
    case PInstr::BucketAllReduce:
      if (in.index >= 0 && static_cast<size_t>(in.index) < prog.buckets.size())
        for (int buf : prog.buckets[static_cast<size_t>(in.index)]) elems += numel(prog, buf);
      break;
    case PInstr::LossAllReduce:
      elems = 2;  // the step loss and the squared gradient norm
      break;
    default:
      break;
  }
  return elems * bytes_per_element;
}

double comm_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                 const PInstr& in, int bytes_per_element) {
  double bytes = comm_bytes(prog, in, bytes_per_element);
  if (in.kind == PInstr::Send) return collective_time(p, Collective::SendRecv, bytes, {prog.rank, in.peer});
  Collective kind;
  switch (in.kind) {
    case PInstr::AllReduce:
    case PInstr::BucketAllReduce:
    case PInstr::LossAllReduce: kind = Collective::AllReduce; break;
    case PInstr::ReplicaAverage: kind = in.count > 1 ? Collective::ReduceScatter : Collective::AllReduce; break;
    case PInstr::AllGather: kind = Collective::AllGather; break;
    case PInstr::ReduceScatter: kind = Collective::ReduceScatter; break;
    case PInstr::AllToAll: kind = Collective::AllToAll; break;
    default: return 0.0;
  }
  if (in.group < 0 || static_cast<size_t>(in.group) >= lp.groups.size()) return 0.0;
  const auto& group = lp.groups[static_cast<size_t>(in.group)];
  const bool bucketed =
      in.kind == PInstr::ReplicaAverage || (in.kind == PInstr::AllGather && in.edge < 0 && in.count > 1);
  if (bucketed && bytes > 0) {
    // One collective per bucket: each member pays its share, by elements, of
    // the bucket's time, so the bucket pays the ring latency once.
    double bucket = bucket_elements(prog, in) * bytes_per_element;
    if (bucket > bytes) return topology_collective_time(p, kind, bucket, group) * (bytes / bucket);
  }
  return topology_collective_time(p, kind, bytes, group);
}

}  // namespace nns::planner
