// The cost of one RankProgram instruction on a device profile: what the
// simulator charges when it replays the program. Kernels (Forward,
// Backward, BackwardW) cost the roofline of each primitive node they run,
// with FLOPs = 2 x the node's multiply-adds (the registry's macs rule; a
// matrix product's backward node: 2 x its forward's multiply-adds per
// gradient it computes) and bytes = its operands and results in the local
// graph; copies (slicing, extracting, accumulating) cost their bytes at
// memory bandwidth; communication costs comm_time.
//
// A measured profile (cost_model.h) adds what the CPU runtime
// (backend/runtime/plan_executor.cpp) spends beyond that: instr_overhead
// per instruction, kernel_overhead per node; its copy / accumulate lines for the region an instruction
// moves (a kernel's input or output slice, a buffer's box), its update
// line for Update; the local copies around AllGather, ReduceScatter,
// AllToAll and BucketAllReduce; and the gradient norm's pass over the
// accumulated gradients at LossAllReduce; and its in-situ extras
// (cost_model.h: in_situ, measured by running a calibration program), once
// per instruction at the program's length. Without those fields the costs
// are the plain roofline and bandwidth terms above.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/simulator.h"

namespace nns::planner {

// The efficiency-curve class of a primitive op kind: "matmul" (linear,
// einsum, conv), "attention" (matmul and bmm: the batched products of
// attention, which fall back to the matmul curve), "softmax", "layer_norm",
// else "elementwise"; a "<kind>_backward" node gets "<class>_backward".
std::string op_class(const std::string& kind);

// What one primitive node of a graph costs: its class, FLOPs and bytes.
struct NodeWork {
  std::string op;    // op_class of its kind
  std::string kind;  // the node's own kind: a measured profile's curve for it, if any, wins over the class's
  std::string dtype = "fp32";
  double flops = 0, bytes = 0;
  // Part of an attention's score path (its two batched products, the
  // scaling, the mask and the softmax, forward or backward). A profile with
  // a "fused_attention" curve runs that path as one kernel (FlashAttention,
  // cuDNN SDPA): the products at that curve, the rest inside them.
  enum class AttentionPart { None, Product, Inner } attention_part = AttentionPart::None;
  bool causal = false;  // of the attention: a fused causal kernel skips the masked half
  // A backward node of it: a profile's "fused_attention_backward" curve,
  // where it has one (the fused backward kernel runs slower than the forward).
  bool backward = false;
};
NodeWork node_work(const sema::Graph& g, const sema::OpNode& n);
// kernel_overhead + compute_time of the node's work, with the profile's
// efficiency curve of the node's kind where it has one (key "op:<kind>";
// gelu costs several times add per element), else of its class.
double node_time(const DeviceProfile& p, const NodeWork& w);

// Time of one instruction of `prog` (bytes_per_element: what a buffer
// element costs to move; the CPU runtime computes in fp32). `dtype`
// (nns simulate --precision; empty: each tensor's own) costs every fp32
// kernel at that dtype's peak with bytes_per_element per element.
double instr_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                  const backend::PInstr& in, int bytes_per_element = 4, const std::string& dtype = "");

// instr_time bound to a profile and plan, for simulate().
// Whether a program's buffers and kernel tensors together exceed the
// profile's cache share (cache_bytes): it is then costed with the profile's
// cold lines. Always false for a profile without them (the GPU profiles).
bool out_of_cache(const DeviceProfile& p, const backend::RankProgram& prog, int bytes_per_element = 4);

// The primitive nodes (ids in prog.local) a kernel instruction (Forward,
// Backward, BackwardW) runs and what each costs, in execution order; their
// sum is the instruction's time less the per-instruction overhead. Empty for
// other instructions. For nns simulate --trace's per-node events.
std::vector<std::pair<int, double>> kernel_node_times(const DeviceProfile& p, const backend::RankProgram& prog,
                                                     const backend::PInstr& in, int bytes_per_element = 4,
                                                     const std::string& dtype = "");

InstrCost profile_cost(const DeviceProfile& p, const backend::LoweredPlan& lp, int bytes_per_element = 4,
                       const std::string& dtype = "");

}  // namespace nns::planner
