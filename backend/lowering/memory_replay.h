// Peak memory of one rank: replays a RankProgram's instructions in order
// and adds up what the plan executor (backend/runtime/plan_executor.cpp)
// allocates at each point, from the program's own data (no second
// description of what a rank does), so that on CPU ranks it is the peak
// `nns run --plan` reports ("peak piece memory"). `nns simulate` prints it
// and the capacity check (memory_check.h) compares it with --device-memory:
//   - persistent state: parameter pieces, zero1 shards and accumulated
//     gradients for the whole step, plus the optimizer state of each
//     updated buffer (`optimizer_slots` fp32 copies, sema::optimizer_slots)
//     and, below fp32, an fp32 master copy;
//   - every other buffer from the instruction that creates it (LoadInput,
//     Alloc, Extract, Recv, a collective's result) to its Free, or later:
//     while a kernel input still reads it in place (slice_in_place), and,
//     for a buffer still being sent, until its send's release point (the
//     Wait on the peer's answering message that the Send names,
//     lower_releases.cpp) or, without one, the step's end: the executor
//     parks it until then;
//   - the kernels' local tensors, per micro-batch and kernel (kernels of a
//     program lowered with LowerOptions::shared_kernel_bodies share the ids
//     of one body, each holding its own): SliceIn makes an
//     input (none when read in place), Forward its
//     nodes' outputs, SliceGrad an output gradient, Backward / BackwardW
//     their nodes' outputs; the kernel's release lists (SubOpKernel::
//     fwd_release / bwd_release / drop_after_collect) drop a tensor after
//     its last reader, DropForward (recompute) the forward part,
//     FreeKernel the rest.
// Elements cost `bytes_per_element` (optimizer state: 4 bytes). A program
// lowered for structure only (no kernel bodies) has no kernel tensors: the
// replay then counts its buffers alone.
#pragma once

#include <map>
#include <vector>

#include "backend/lowering/rank_program.h"

namespace nns::backend {

struct MemoryPeak {
  double peak = 0;        // bytes
  double persistent = 0;  // parameters, gradients and optimizer state: weights + gradients + optimizer
  double weights = 0;     // Param and Shard buffers
  double gradients = 0;   // Accum buffers
  double optimizer = 0;   // optimizer state (and fp32 master weights below fp32)
  int at_instr = -1;      // the instruction after which the peak is reached
  double buffers_at_peak = 0;  // non-persistent buffers live at the peak
  double kernels_at_peak = 0;  // kernels' local tensors live at the peak
  std::map<int, double> roles_at_peak;  // BufferDecl::Role -> bytes of its live buffers at the peak
  // What is live at the peak, for naming it: the non-persistent buffers,
  // and the bytes of each kernel's local tensors (by kernel index).
  std::vector<int> live_buffers;
  std::map<int, double> kernel_bytes_at_peak;
  double activations() const { return peak - persistent; }
};

// bf16_storage: the CUDA backend's bf16 activation storage (bf16_storage.h):
// with bytes_per_element 4, the local tensors the executor holds in bf16
// cost 2 bytes an element and everything else stays as costed.
MemoryPeak peak_memory(const RankProgram& prog, int bytes_per_element = 4, int optimizer_slots = 2,
                       bool bf16_storage = false);

}  // namespace nns::backend
