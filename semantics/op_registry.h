// The primitive-op registry, semantic half: one row per primitive op with
// what the interpreter and planner need — how to annotate a call whose
// annotation depends on its arguments (reshape, permute, sum over a dim...),
// how many multiply-adds it costs, its output dtype. The stdlib declares
// each primitive in .nns (parameter names, defaults, fixed annotations) and
// the declaration binds to the row of the same name. Kernels are registered
// by the backend under the same names (no kernel type appears here).
// A row also says how the op behaves when a plan runs only a slice of it
// (apply_slice_position, slice_loss_share below), so lowering has no
// op-name literal.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "semantics/dimop.h"
#include "semantics/graph.h"

namespace nns::sema {

// A call as a registry row sees it: tensor operands (shape + dtype) and the
// op's non-tensor arguments by parameter name.
struct SubOp;  // semantics/plan.h

struct OpCall {
  std::vector<InputShape> inputs;
  std::vector<DType> dtypes;
  const std::map<std::string, Attr>* attrs = nullptr;

  int64_t int_attr(const std::string& name) const;
  std::vector<int64_t> ints_attr(const std::string& name) const;  // an int becomes a 1-list
  bool bool_attr(const std::string& name, bool fallback = false) const;
};

// An annotation computed for one call, with sizes of identifiers that the
// inputs alone do not determine (output-only dims, hidden-dim factors).
struct GeneratedAnno {
  std::string text;
  std::map<std::string, int64_t> sizes;
};

// A bad argument found by a row (an axis out of range...): the interpreter
// reports it at the call site.
struct OpArgError {
  std::string message;
};

struct OpRow {
  std::string name;
  // Null: the stdlib declaration's fixed annotations are used.
  GeneratedAnno (*annotate)(const OpCall&) = nullptr;
  // Multiply-adds of one forward call (0 for ops the Swin/GPT papers do not count).
  int64_t (*macs)(const BoundAnno&, const OpCall&) = nullptr;
  std::optional<DType> out_dtype;  // default: dtype of the first float input
  bool value_split = false;        // linear in its first input: trans(op, dim="value") is legal
  // No gradient flows back through the op (detach, comparisons, argmax,
  // zeros_like/ones_like): autograd gives its outputs none and plans run no
  // backward for it.
  bool no_grad = false;
  // Tensor operands that never receive a gradient (where's condition).
  std::vector<size_t> no_grad_inputs;
  // Per output, when outputs differ (topk: f32 values, i32 indices);
  // overrides out_dtype.
  std::vector<DType> out_dtypes;
  // Its kernels read f32 from every tensor operand not declared `index`:
  // an integer tensor there is refused at the call (the interpreter points
  // at the argument) instead of being read as floats. False only for ops
  // that move 4-byte elements whatever they hold (reshape, permute,
  // concat...) or convert them (to_f32, to_i32).
  bool float_operands = true;

  // Facts for a sub-op that runs a slice of the op; null when the op's
  // result does not depend on where its slice lies. See apply_slice_position
  // and slice_loss_share for the arguments.
  // Attrs a kernel needs to know its slice's place in the full tensor
  // (dropout's element offset, a vocab shard's rows); called with a node of
  // this row's kind; throws std::runtime_error when the slice cannot run.
  void (*slice_attrs)(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& local_op) = nullptr;
  // Mean-type results (losses, mean): the slice's share of the full op, by
  // which lowering scales the slice's result and its output gradient so the
  // slices sum to the full op's value. Called only for a primitive op whose
  // slice is not the whole op.
  float (*slice_share)(const Graph& g, const OpNode& whole, const SubOp& s) = nullptr;
  // What its backward reads of the forward's tensors: places in the
  // backward node's inputs, which are the op's inputs and then its outputs
  // (the output gradients after them are always read). The others it needs
  // for their shapes only (an add's operands, a reshape's input, any
  // linear's output), so a kernel drops them after its forward
  // (backend/lowering/kernel_release.cpp) and the executor hands the
  // backward a view with a shape and no data; every backend's backward
  // kernel keeps to this list. Unset: it reads them all.
  std::optional<std::vector<size_t>> backward_reads;
};

const OpRow* find_op_row(const std::string& name);
std::vector<std::string> op_row_names();

// Whether a gradient of an output of `node` flows to its tensor operand
// `input` (false for every operand of a no_grad row and for a row's
// no_grad_inputs; true for composite ops, which are differentiated through
// their bodies). Autograd and plans' gradient flow both ask this.
bool passes_gradient(const OpNode& node, size_t input);

// Whether `backward`, a node of `g` that differentiates a primitive op
// (OpNode::forward_of), reads the value of its input `input`, or needs
// only its shape (OpRow::backward_reads). True for every other node and
// for the output gradients.
bool backward_reads_value(const Graph& g, const OpNode& backward, size_t input);
// The same asked of a forward node: whether its backward reads operand
// `operand` (its inputs, then its outputs). True for a composite (its body's
// nodes decide) and for a primitive without a backward_reads list.
bool backward_reads_operand(const OpNode& forward, size_t operand);

// Per-rank lowering of a plan: `whole` is a top-level node of the full
// graph `g`, `s` a leaf SubOp of it (its operand slices), and `local_op` a
// primitive node of the sub-op's local graph (the op re-elaborated on its
// slice; for a primitive op, the op itself). Sets the attrs through which
// the kernel of `local_op` learns where the slice lies in the full tensors,
// so slices compute exactly the values the whole op would:
//  - dropout with p > 0, when the slice is not the whole op:
//    `element_offset` (index in the full input of the slice's first
//    element; the random stream is indexed by it). Only a primitive dropout
//    split along its first dim can run (its slice is then contiguous);
//    anything else throws std::runtime_error "<op name>: dropout split
//    other than along its first dim is not supported yet";
//  - embedding (table = input 1) and index_select (table = input 0) called
//    as a primitive op: `vocab_offset` (first table row the slice holds) and
//    `vocab_size` (rows of the full table), also for the whole op.
// Ops without a slice rule are left unchanged.
void apply_slice_position(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& local_op);

// The factor by which a slice's result (and the gradient flowing into it)
// is scaled so that the slices of a mean-type op sum to the whole op's
// value: for cross_entropy and mse, elements of the slice of input 0 /
// elements of input 0; for mean, the slice's length along the reduced dim
// (attr `dim`, default -1) / the full length. 1 when the op has no share
// rule, is composite, or the slice is the whole op (every input complete).
float slice_loss_share(const Graph& g, const OpNode& whole, const SubOp& s);

}  // namespace nns::sema
