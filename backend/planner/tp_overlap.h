// Tensor-parallel communication overlap (nns simulate --tp-comm-overlap),
// as Megatron-LM's --tp-comm-overlap does it (Transformer Engine's
// userbuffers; it requires --sequence-parallel): with sequence parallelism
// a tensor-parallel allreduce is a reduce-scatter after the row-parallel
// GEMM that makes the partial sums and an all-gather before the next
// column-parallel GEMM, and each of the two is cut into as many chunks as
// the group has members and pipelined with the GEMM cut the same way (the
// GEMM of chunk i runs while chunk i-1 is reduced, or chunk i+1 gathered),
// on a communication stream of its own. Transformer Engine moves the
// chunks as a ring exchange: k-1 steps, each one hop of 1/k of the data,
// each beside one GEMM chunk.
//
// Costed on the lowered programs. A sequence-parallel plan (examples/
// gpt.nns megatron_h100_sp) has the reduce-scatters and all-gathers
// themselves (ReduceScatter, AllGather over a group, edge >= 0); a plan
// without sequence parallelism has an AllReduce there, taken as its two
// halves. A reduce-scatter (half) of a buffer a kernel instruction's matrix
// product has just made (the CollectOut / CollectGrad into it, after that
// kernel's Forward / Backward) overlaps the producer's last matrix-product
// node; an all-gather (half) overlaps the first matrix-product node that
// serves no other half in the next kernel instruction with one, when no
// collective but an all-gather, send or wait comes between (a backward's
// output-gradient gather and its regathered input, regather(), get one
// each). A half with no such GEMM stays whole (exposed). With k members, a GEMM node of time G (already charged
// to its kernel) and its time g at the chunk shape (1/k of its FLOPs and
// bytes: the profile's efficiency at that size), and a ring step c (the
// ring collective's time over k-1: a hop's latency, 1/k of the bytes), the
// pair takes
//   g + (k-1) max(g, c)
// (the first GEMM chunk alone, then each step beside the next chunk) and
// the allreduce is charged what that adds to G: the exposed chunk
// transfers and the GEMM's loss of efficiency at the chunk shape. Each GEMM
// node serves one half at most.
//
// What is not modelled: the communication stream's use of SMs does not slow
// the GEMM; under an allreduce plan the ops between the two GEMMs run on
// the whole sequence, as that plan has them.
#pragma once

#include <string>

#include "backend/planner/cost_model.h"
#include "backend/planner/simulator.h"

namespace nns::planner {

// The time a chunked collective and a chunked GEMM take together (see above).
double pipelined_time(double gemm_chunk, double ring_step, int chunks);

// `base` with each overlappable tensor-parallel AllReduce charged as above.
InstrCost tp_overlap_cost(const DeviceProfile& p, const backend::LoweredPlan& lp, int bytes_per_element,
                          const std::string& dtype, InstrCost base);

}  // namespace nns::planner
