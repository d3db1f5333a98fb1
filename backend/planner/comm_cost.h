// The communication side of an instruction's cost: what a RankProgram's
// collective or send moves (from its buffers' pieces) and on which devices
// (its group's global ranks, taken as physical device ids, so ranks
// r / devices_per_node share a node), through topology_collective_time
// (topology_comm.h: collective_time, with an inter-node ring over every NIC
// of the group's devices on a node).
#pragma once

#include "backend/lowering/rank_program.h"
#include "backend/planner/cost_model.h"

namespace nns::planner {

// Bytes the instruction's collective is costed on (see collective_time for
// which buffer that is per kind); 0 for non-communication instructions.
double comm_bytes(const backend::RankProgram& prog, const backend::PInstr& in, int bytes_per_element);

// Alpha-beta time of a communication instruction (collectives, Send,
// bucket allreduce, replica average, loss allreduce); 0 for Recv and Wait
// (the simulator charges the matching Send) and for local instructions.
double comm_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                 const backend::PInstr& in, int bytes_per_element);

}  // namespace nns::planner
