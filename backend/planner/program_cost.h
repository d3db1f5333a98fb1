// The cost of one RankProgram instruction on a device profile: what the
// simulator charges when it replays the program. Kernels (Forward,
// Backward, BackwardW) cost the roofline of each primitive node they run,
// with FLOPs = 2 x the node's multiply-adds (the registry's macs rule) and
// bytes = its operands and results in the local graph; copies (slicing,
// extracting, accumulating) cost their bytes at memory bandwidth;
// communication costs comm_time.
#pragma once

#include <string>

#include "backend/lowering/rank_program.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/simulator.h"

namespace nns::planner {

// The efficiency-curve class of a primitive op kind: "matmul" (linear,
// matmul, bmm, conv), "softmax", "layer_norm", else "elementwise".
std::string op_class(const std::string& kind);

// Time of one instruction of `prog` (bytes_per_element: what a buffer
// element costs to move; the CPU runtime computes in fp32). `dtype`
// (nns simulate --precision; empty: each tensor's own) costs every fp32
// kernel at that dtype's peak with bytes_per_element per element.
double instr_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                  const backend::PInstr& in, int bytes_per_element = 4, const std::string& dtype = "");

// instr_time bound to a profile and plan, for simulate().
InstrCost profile_cost(const DeviceProfile& p, const backend::LoweredPlan& lp, int bytes_per_element = 4,
                       const std::string& dtype = "");

}  // namespace nns::planner
