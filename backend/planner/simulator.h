// The event simulator (issue 12, part 3 — the replay core): replays the
// RankPrograms of a LoweredPlan, the same instruction lists the runtime
// executes, with a time per instruction from a cost function. Each rank has
// one stream: a collective synchronises its group (it starts when the last
// member reaches it; the k-th collective of a rank on group g matches the
// k-th of every other member on g), a Send is posted and its message
// arrives after its cost, a Recv is posted and a Wait blocks until the
// matching message (same sender, receiver and tag) has arrived.
// Not yet modelled: the bucket allreduce overlapping compute (it is costed
// as a blocking collective).
#pragma once

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
};

struct SimResult {
  double step_time = 0;  // the latest rank's end
  std::vector<RankTimes> ranks;
};

// Seconds that `in` takes on `prog`'s rank (for Send: the transfer; for a
// collective: its time once the group has met).
using InstrCost = std::function<double(const backend::RankProgram& prog, const backend::PInstr& in)>;

// Replays every program of `lp`; returns false with err when the programs
// cannot all finish (a Wait whose message is never sent, a collective some
// member never reaches): lowering produced inconsistent programs.
bool simulate(const backend::LoweredPlan& lp, const InstrCost& cost, SimResult& out, std::string& err);

}  // namespace nns::planner
