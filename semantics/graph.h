// The operator Graph: what the interpreter produces from a .nns file and a
// config. One uniform node type in an arena indexed by ids (ggml's tensor,
// tinygrad's UOp), so partitioning and placement treat every op the same.
// Composite ops keep their body's nodes as children (parent != -1); plans
// only see top-level nodes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "frontend/source.h"
#include "semantics/dimop.h"
#include "semantics/symbolic.h"

namespace nns::sema {

enum class DType { F32, F16, BF16, I32, I64, Bool };
const char* dtype_name(DType t);
int64_t dtype_bytes(DType t);
bool dtype_from_name(const std::string& name, DType& out);
bool dtype_is_float(DType t);

using Shape = std::vector<int64_t>;
std::string shape_to_string(const Shape& s);  // "[4, 32, 64]"
int64_t numel(const Shape& s);

// The most dimensions a tensor may have. The CPU kernels' broadcasting and
// layout loops keep per-dimension state in fixed arrays of this size
// (backend/runtime/cpu/kernels.h, kMaxRank), so the bound is enforced where
// shapes are made: a declared tensor, a shape argument, an op's output.
constexpr size_t kMaxTensorRank = 6;
// The most bytes one tensor may hold: 1 PiB, beyond any device, and small
// enough that element counts, byte sizes and sums of thousands of them stay
// far from int64 overflow everywhere downstream (memory check, simulator).
constexpr int64_t kMaxTensorBytes = int64_t{1} << 50;
// Why a tensor of this shape and dtype cannot be made (rank over
// kMaxTensorRank, or more than kMaxTensorBytes, computed without overflow),
// "" when it can.
std::string shape_size_problem(const Shape& s, DType dtype);

// A non-tensor argument of an op (an int, a list of ints, a flag...).
using Attr = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;
std::string attr_to_string(const Attr& a);

// How a parameter or input tensor gets its initial values.
struct InitSpec {
  std::string kind;              // "normal", "zeros", "ones", "uniform", "trunc_normal", "tokens", "labels", "randn"
  std::vector<double> args;      // std / bounds / vocabulary size...
  std::string to_string() const;
};

enum class TensorKind { Param, Input, Activation };

struct TensorInfo {
  int id = -1;
  TensorKind kind = TensorKind::Activation;
  std::string name;   // qualified name for params ("blocks.3.attn.wq") and inputs; "t17" for activations
  Shape shape;
  DType dtype = DType::F32;
  int producer = -1;  // top-level node that produces it (activations)
  int grad_of = -1;   // gradient tensors: the tensor they are the gradient of
  InitSpec init;      // params and inputs
  // A model buffer (`buffer` in a model): a Param in every other respect
  // (initialised, checkpointed, placed by plans) that gets no gradient and
  // no optimizer update.
  bool buffer = false;
  front::SourceLoc loc;
  // With symbolic config sizes (symbolic.h): each dim as an expression over
  // the symbols; empty when every dim is a plain number.
  std::vector<SymPtr> sym_shape;
  int64_t bytes() const { return numel(shape) * dtype_bytes(dtype); }
};

// Which part of a training step a node belongs to.
enum class Phase { Forward, Backward, Optimizer };

struct OpNode {
  int id = -1;
  Phase phase = Phase::Forward;
  int forward_of = -1;         // backward nodes: the forward (primitive) node they differentiate
  std::string kind;            // registry op or composite op name ("linear", "window_attention")
  std::string name;            // qualified name, e.g. "blocks.3.attn.linear#0"
  bool composite = false;
  int parent = -1;             // enclosing composite node, -1 at top level
  std::vector<int> children;   // composite body nodes, in execution order
  std::vector<int> inputs;     // tensor ids (non-tensor operands are attrs)
  std::vector<int> outputs;
  std::map<std::string, Attr> attrs;
  BoundAnno anno;              // the annotation bound to this call's shapes
  int64_t macs = 0;            // multiply-adds of one forward execution
  front::SourceLoc loc;        // the call site
  // Symbolic sizes (symbolic.h): identifiers whose size is an expression
  // over the symbols, and int / ints arguments that were symbolic (the
  // attrs above hold their witness values).
  std::map<std::string, SymPtr> sym_sizes;
  std::map<std::string, std::vector<SymPtr>> sym_attrs;
};

class Graph {
 public:
  int add_tensor(TensorInfo t);
  int add_node(OpNode n);
  TensorInfo& tensor(int id) { return tensors_[id]; }
  const TensorInfo& tensor(int id) const { return tensors_[id]; }
  OpNode& node(int id) { return nodes_[id]; }
  const OpNode& node(int id) const { return nodes_[id]; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<OpNode>& nodes() const { return nodes_; }
  std::vector<int> top_level_nodes() const;
  // Forward primitive nodes in execution order, composite ops replaced by
  // their bodies (what a single device runs).
  std::vector<int> flat_forward() const;
  std::vector<int> params() const;
  std::vector<int> inputs() const;

  int loss = -1;  // the tensor training minimises (-1 when there is no train block)
  // No parameter requires a gradient (`nns run --eval`): autograd adds no
  // backward and plans derive forward communication only.
  bool inference = false;

  // Sizes a config left symbolic, and the size facts the model needs for
  // every admissible value (recorded while elaborating, proved by the checker).
  std::vector<SymbolDecl> symbols;
  std::vector<SymObligation> sym_obligations;

  // --emit=graph: deterministic text (ids are arena indices, no addresses).
  std::string dump() const;

 private:
  std::vector<TensorInfo> tensors_;
  std::vector<OpNode> nodes_;
};

// What `nns check` prints.
struct GraphSummary {
  int64_t top_level_ops = 0, all_ops = 0;
  int64_t param_count = 0, param_bytes = 0;
  int64_t buffer_count = 0, buffer_bytes = 0;  // model buffers (not parameters)
  int64_t activation_bytes = 0;  // every top-level op output, forward
  int64_t input_bytes = 0;
  int64_t forward_macs = 0;
};
GraphSummary summarize(const Graph& g);
std::string format_count(double v);   // 1.23 K/M/B
std::string format_bytes(int64_t b);  // 12.3 MiB

// The ops one sub-op runs: a top-level op elaborated again on its slice into
// a rank-local graph (semantics/instantiate.cpp, called by lowering).
struct OpInstance {
  std::vector<int> inputs, outputs;  // tensors of the local graph, one per operand of the op
  std::vector<int> nodes;            // primitive nodes of the local graph, in execution order
};

}  // namespace nns::sema
