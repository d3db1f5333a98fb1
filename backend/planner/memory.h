// Peak memory of one rank (helper-megatron, issue 12): walks a RankProgram's
// instructions in order and adds up what is live at each point, from the
// program's own data (no second description of what a rank does):
//   - persistent buffers (parameters, accumulated gradients, zero1 shards)
//     for the whole step, plus the optimizer state: AdamW's two fp32
//     moments of each updated buffer and, below fp32, an fp32 master copy;
//   - every other buffer from the first instruction that names it to its
//     Free;
//   - the kernels' local tensors: a Forward makes its nodes' outputs, a
//     Backward its backward nodes' outputs; DropForward (recompute) frees the
//     forward part, FreeKernel all of them.
// Elements cost `bytes_per_element` (optimizer state: 4 bytes).
#pragma once

#include <map>

#include "backend/lowering/rank_program.h"

namespace nns::planner {

struct MemoryPeak {
  double peak = 0;        // bytes
  double persistent = 0;  // parameters, gradients and optimizer state
  int at_instr = -1;      // the instruction after which the peak is reached
  double buffers_at_peak = 0;  // non-persistent buffers live at the peak
  double kernels_at_peak = 0;  // kernels' local tensors live at the peak
  std::map<int, double> roles_at_peak;  // BufferDecl::Role -> bytes of its live buffers at the peak
};

MemoryPeak peak_memory(const backend::RankProgram& prog, int bytes_per_element = 4);

}  // namespace nns::planner
