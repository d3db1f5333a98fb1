#include "backend/planner/comm_cost.h"

#include "backend/planner/topology_comm.h"

namespace nns::planner {

using backend::PInstr;

namespace {

double numel(const backend::RankProgram& prog, int buf) {
  if (buf < 0 || static_cast<size_t>(buf) >= prog.buffers.size()) return 0;
  return static_cast<double>(prog.buffers[static_cast<size_t>(buf)].piece.numel());
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
    case PInstr::ReplicaAverage:
    case PInstr::LossAllReduce: kind = Collective::AllReduce; break;
    case PInstr::AllGather: kind = Collective::AllGather; break;
    case PInstr::ReduceScatter: kind = Collective::ReduceScatter; break;
    case PInstr::AllToAll: kind = Collective::AllToAll; break;
    default: return 0.0;
  }
  if (in.group < 0 || static_cast<size_t>(in.group) >= lp.groups.size()) return 0.0;
  return topology_collective_time(p, kind, bytes, lp.groups[static_cast<size_t>(in.group)]);
}

}  // namespace nns::planner
