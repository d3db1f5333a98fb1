// Which tensors hold bf16 under bf16 activation storage (precision =
// "bf16" on a backend with Backend::bf16_storage(), docs/cuda.md): the
// activations and activation gradients the nodes make. Everything the
// optimizer reads stays f32: parameters, parameter gradients, optimizer
// state; so do the loss and its seeded gradient, inputs, and every non-f32
// tensor. One rule, read by the runtime that
// allocates the tensors (the Trainer, the plan executor) and by the memory
// replay (memory_replay.h) that bounds them, so the checker and the
// simulator cost exactly what the run holds.
#pragma once

#include <vector>

#include "backend/lowering/rank_program.h"
#include "semantics/graph.h"

namespace nns::backend {

// By tensor id of a single-device graph (the Trainer's buffers): 1 = bf16.
// `keep_f32`: tensors held in f32 all the same (a --verify reference's:
// partial_sum_tensors of the plan it checks).
std::vector<char> bf16_graph_tensors(const sema::Graph& g, const std::vector<int>& keep_f32 = {});
// By local tensor id of a rank program (RankProgram::local): the outputs of
// its kernels' forward nodes and of their backward nodes, except the
// gradients of parameter inputs (SubOpKernel::bwd.grads of an input whose
// SliceIn reads a parameter's buffer), what the weight-gradient nodes
// (wgrad_nodes) make, and partial sums (an output part of a split
// reduction, a replicated input's gradient, anything collected into a
// buffer an allreduce or reduce-scatter sums): those are summed in f32
// before anything rounds them. All zeros for a program lowered for
// structure only.
std::vector<char> bf16_local_tensors(const RankProgram& prog);
// The same rule per (kernel, local tensor), for a program whose kernels
// may share local tensors (LowerOptions::shared_kernel_bodies): `half` as
// the nodes decide it (the same for every kernel of one body), and the
// tensors each kernel keeps in f32 (its parameter gradients and partial
// sums), which depend on the kernel's own instructions.
struct Bf16KernelTensors {
  std::vector<char> half;                  // by local tensor id
  std::vector<std::vector<int>> kept_f32;  // by kernel index, sorted
  bool bf16(int kernel, int t) const;
};
Bf16KernelTensors bf16_kernel_tensors(const RankProgram& prog);
// The full-graph tensors (`g`: the graph the plan was lowered from) whose
// parts the program sums in f32 (the partial sums above): values and
// gradients. The one-device --verify reference keeps them in f32 too, so
// that it rounds where the plan rounds: --verify checks partitioning and
// communication, and a rounding the plan does not do is neither.
std::vector<int> partial_sum_tensors(const RankProgram& prog, const sema::Graph& g);

}  // namespace nns::backend
