// The event simulator (issue 12, part 3): replays the RankPrograms of a
// LoweredPlan, the same instruction lists the runtime executes, with a time
// per instruction from a cost function. Each rank has one compute stream: a
// collective synchronises its group (it starts when the last member reaches
// it; the k-th collective of a rank on group g matches the k-th of every
// other member on g), a Send is posted and its message arrives after its
// cost, a Recv is posted and a Wait blocks until the matching message (same
// sender, receiver and tag) has arrived.
//
// Symmetry: a LoweredPlan may hold only some ranks (LowerOptions::
// first_ranks: one plan replica of several). Group members it does not
// hold are taken as reaching every collective when the held members do: the
// replicas run identical programs, so their gradient averaging costs what
// its group size and links say, without replaying them.
//
// Overlap (SimOptions::overlap_grad_reduce; see also overlap_param_gather): gradient allreduces (the
// bucketed allreduce, the replicas' average) run on a communication stream
// beside the compute, in chunks, one per gradient buffer (its share of the
// collective's time by elements, as DDP's small buckets without their extra
// latency): a chunk starts once its gradient is final (the last instruction
// making its content has run; accumulating a micro-batch's contribution
// counts from when the contribution was made) and the stream is free,
// chunks in the order they become final; the rank waits for the collective
// where the program has it. Without it they block the compute stream where
// the program has them (what the runtime does). Links are not shared
// between the streams (no contention).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"

namespace nns::planner {

struct RankTimes {
  double end = 0;            // when the rank's last instruction finishes
  double busy = 0;           // local work (kernels, copies, updates)
  double exposed_comm = 0;   // blocked while a collective or message was in flight
  double bubble = 0;         // blocked waiting for peers to reach a collective or send
  double overlapped_comm = 0;  // communication-stream time hidden behind compute
};

// One timed instruction (SimOptions::record): rank index into lp.programs,
// instruction index, [begin, end) seconds, and its track (trace.h's
// numbering: 1 compute, 2 communication, 3 local work).
struct SimEvent {
  int rank = 0, instr = 0;
  double begin = 0, end = 0;
  uint8_t track = 1;
};

struct SimResult {
  double step_time = 0;  // the latest rank's end
  std::vector<RankTimes> ranks;
  std::vector<SimEvent> events;  // with SimOptions::record
};

struct SimOptions {
  bool overlap_grad_reduce = false;
  // Megatron-LM's --overlap-param-gather: a zero1 (or distributed-optimizer)
  // parameter's all-gather of its updated shards (AllGather, edge -1, into
  // a Param buffer) runs on the communication stream under the next step's
  // forward instead of blocking the end of this one. In the steady state
  // that is the same as gathering at the step's start: the gathers are
  // chained on the stream from time 0, in the order of their parameter's
  // first use, and the first instruction reading a parameter waits for its
  // gather; the AllGather itself then costs nothing where the program has it.
  bool overlap_param_gather = false;
  bool record = false;
};

// Seconds that `in` takes on `prog`'s rank (for Send: the transfer; for a
// collective: its time once the group has met).
using InstrCost = std::function<double(const backend::RankProgram& prog, const backend::PInstr& in)>;

// Replays every program of `lp`; returns false with err when the programs
// cannot all finish (a Wait whose message is never sent, a collective some
// member never reaches): lowering produced inconsistent programs.
bool simulate(const backend::LoweredPlan& lp, const InstrCost& cost, SimResult& out, std::string& err,
              const SimOptions& opts = {});

}  // namespace nns::planner
