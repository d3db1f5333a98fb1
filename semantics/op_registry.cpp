// Registry rows of the primitive ops: each op's annotation generator (in
// op_generators_*.cpp, by op family), multiply-add count and slice facts.
#include "semantics/op_registry.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "semantics/op_generators.h"
#include "semantics/plan.h"

namespace nns::sema {

int64_t OpCall::int_attr(const std::string& name) const {
  auto it = attrs->find(name);
  if (it == attrs->end()) throw OpArgError{"missing argument '" + name + "'"};
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  throw OpArgError{"argument '" + name + "' must be an int"};
}

std::vector<int64_t> OpCall::ints_attr(const std::string& name) const {
  auto it = attrs->find(name);
  if (it == attrs->end()) throw OpArgError{"missing argument '" + name + "'"};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return {*i};
  throw OpArgError{"argument '" + name + "' must be a list of ints"};
}

bool OpCall::bool_attr(const std::string& name, bool fallback) const {
  auto it = attrs->find(name);
  if (it == attrs->end()) return fallback;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i != 0;
  throw OpArgError{"argument '" + name + "' must be a bool"};
}

namespace {

using namespace op_generators;

// ---- multiply-add counts ---------------------------------------------------------

// Matmul-like ops: every identifier is a loop of the contraction.
int64_t product_of_ids(const BoundAnno& b, const OpCall&) {
  std::set<std::string> ids;
  for (const auto& side : {&b.anno.inputs, &b.anno.outputs})
    for (const OperandAnno& op : *side)
      for (const DimAnno& d : op.dims)
        for (const DimId& id : d.ids)
          if (!id.numeric) ids.insert(id.name);
  int64_t p = 1;
  for (const std::string& id : ids) p *= b.sizes.at(id);
  return p;
}

int64_t conv_macs(const BoundAnno& b, const OpCall& c) {
  const Shape& w = tensor_shape(c, 1);
  const Shape& out = b.output_shapes.at(0);
  return numel(out) * w[1] * w[2] * w[3];
}

// sdpa, sdpa_bias: q kt over [..., s, e] x [..., e, t], then p v over [..., s, t] x [..., t, f].
int64_t sdpa_macs(const BoundAnno& b, const OpCall& c) {
  const Shape& q = tensor_shape(c, 0);
  const Shape& kt = tensor_shape(c, 1);
  const Shape& out = b.output_shapes.at(0);
  const int64_t rows = numel(out) / out.back();  // batch * s
  return rows * kt.back() * (q.back() + out.back());
}

// ---- slice facts (per-rank lowering) ---------------------------------------------

// Every input of the sub-op complete: the slice is the whole op.
bool slice_is_whole(const Graph& g, const OpNode& whole, const SubOp& s) {
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].length != g.tensor(whole.inputs[i]).shape) return false;
  return true;
}

// The dropout mask is a function of the element's index in the full tensor;
// a slice along dim 0 is contiguous, so one offset places it.
void dropout_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op) {
  auto p = op.attrs.find("p");
  bool active = p != op.attrs.end() && std::holds_alternative<double>(p->second) && std::get<double>(p->second) > 0;
  if (!active || slice_is_whole(g, whole, s)) return;
  bool only_dim0 = !whole.composite;
  for (size_t d = 1; only_dim0 && d < s.inputs[0].length.size(); ++d)
    only_dim0 = s.inputs[0].length[d] == g.tensor(whole.inputs[0]).shape[d];
  if (!only_dim0) throw std::runtime_error(whole.name + ": dropout split other than along its first dim is not supported yet");
  op.attrs["element_offset"] = s.inputs[0].start[0] * (numel(s.inputs[0].length) / std::max<int64_t>(1, s.inputs[0].length[0]));
}

// A vocab-split gather holds rows [offset, offset + rows) of the table; ids
// outside give zero rows (summed across the shards).
void gather_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op, size_t table) {
  if (whole.composite) return;
  op.attrs["vocab_offset"] = s.inputs[table].start[0];
  op.attrs["vocab_size"] = g.tensor(whole.inputs[table]).shape[0];
}
void embedding_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op) { gather_slice(g, whole, s, op, 1); }
void index_select_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op) { gather_slice(g, whole, s, op, 0); }

// Losses averaged over every element of input 0.
float elements_share(const Graph& g, const OpNode& whole, const SubOp& s) {
  const Shape& full = g.tensor(whole.inputs[0]).shape;
  return static_cast<float>(static_cast<double>(numel(s.inputs[0].length)) / static_cast<double>(numel(full)));
}

// mean over attr `dim` (default -1).
float reduced_dim_share(const Graph& g, const OpNode& whole, const SubOp& s) {
  const Shape& full = g.tensor(whole.inputs[0]).shape;
  auto it = whole.attrs.find("dim");
  int64_t d = it != whole.attrs.end() ? std::get<int64_t>(it->second) : -1;
  if (d < 0) d += static_cast<int64_t>(full.size());
  return static_cast<float>(static_cast<double>(s.inputs[0].length[d]) / static_cast<double>(full[d]));
}

OpRow* find_row(std::vector<OpRow>& rows, const char* name) {
  for (OpRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  auto add = [&](const char* name, GeneratedAnno (*gen)(const OpCall&) = nullptr,
                 int64_t (*macs)(const BoundAnno&, const OpCall&) = nullptr) {
    OpRow r;
    r.name = name;
    r.annotate = gen;
    r.macs = macs;
    rows.push_back(r);
    return &rows.back();
  };
  // Linear in the first input, so a value split (partial sums of it) is
  // legal; not linear_bias, whose every part would add the bias once
  // (`nns verify-op` finds that).
  for (const char* n : {"matmul", "bmm", "linear"}) add(n, nullptr, product_of_ids)->value_split = true;
  add("linear_bias", nullptr, product_of_ids);
  for (const char* n : {"add", "sub", "mul", "div", "maximum", "minimum"}) add(n, broadcast_binary);
  for (const char* n :
       {"add_scalar", "mul_scalar",  "gelu",       "gelu_tanh", "relu",          "sigmoid",     "tanh", "dropout",
        "softmax",    "log_softmax", "layer_norm", "embedding", "cross_entropy", "causal_mask", "silu", "exp",
        "log",        "sqrt",        "rsqrt",      "abs",       "neg",           "sin",         "cos",  "pow_scalar"})
    add(n);
  add("detach")->no_grad = true;
  // Comparisons: a float 0/1 mask, constant almost everywhere.
  for (const char* n : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    OpRow* r = add(n, broadcast_binary);
    r->no_grad = true;
    r->out_dtype = DType::F32;
  }
  add("where", broadcast_ternary)->no_grad_inputs = {0};
  add("mse", mse);
  add("sum", reduce_dim)->value_split = true;
  add("mean", reduce_dim)->value_split = true;
  add("amax", reduce_dim_frozen);
  add("amin", reduce_dim_frozen);
  OpRow* argmax = add("argmax", reduce_dim_frozen);
  argmax->out_dtype = DType::I32;
  argmax->no_grad = true;
  add("full", full)->out_dtype = DType::F32;
  add("arange", arange)->out_dtype = DType::F32;
  for (const char* n : {"zeros_like", "ones_like"}) {
    OpRow* r = add(n);
    r->no_grad = true;
    r->out_dtype = DType::F32;
  }
  add("reshape", reshape);
  add("view", reshape);
  add("permute", permute);
  add("transpose", transpose);
  add("roll", roll);
  add("concat", concat);
  add("split", split);
  add("chunk", chunk);
  add("pad", pad);
  add("sdpa", nullptr, sdpa_macs);
  add("sdpa_bias", sdpa_bias, sdpa_macs);
  add("conv2d", conv2d, conv_macs);
  add("conv2d_bias", conv2d_bias, conv_macs);
  add("max_pool2d", pool2d, pool_macs);
  add("avg_pool2d", pool2d, pool_macs);
  add("index_select", index_select);
  add("swin_relative_index", swin_relative_index)->out_dtype = DType::I32;
  add("swin_shift_mask", swin_shift_mask)->out_dtype = DType::F32;
  add("t5_relative_bucket", t5_relative_bucket)->out_dtype = DType::I32;
  // ---- scans, selection, indexed access, casts (issue 13) ----
  add("cumsum", cumsum);
  OpRow* tk = add("topk", topk);
  tk->out_dtypes = {DType::F32, DType::I32};
  add("gather", gather);
  add("scatter_add", scatter_add);
  // to_f32 passes the gradient of an f32 operand through; to_i32 none.
  OpRow* to_f32 = add("to_f32", cast);
  to_f32->out_dtype = DType::F32;
  to_f32->float_operands = false;
  OpRow* to_i32 = add("to_i32", cast);
  to_i32->out_dtype = DType::I32;
  to_i32->float_operands = false;
  to_i32->no_grad = true;
  // Ops that move 4-byte elements whatever they hold: integer tensors too.
  for (const char* n : {"reshape", "view", "permute", "transpose", "roll", "concat", "split", "chunk", "pad", "detach",
                        "zeros_like", "ones_like", "index_select"})
    find_row(rows, n)->float_operands = false;
  // What each backward reads of the forward's tensors (OpRow::backward_reads),
  // as the CPU and CUDA kernels do: the rest is kept for its shape only.
  for (const char* n : {"add", "sub", "add_scalar", "mul_scalar", "reshape", "view", "permute", "transpose"})
    find_row(rows, n)->backward_reads = std::vector<size_t>{};
  for (const char* n : {"linear", "linear_bias", "matmul", "bmm", "layer_norm", "cross_entropy"})
    find_row(rows, n)->backward_reads = std::vector<size_t>{0, 1};  // not a bias, not the output
  for (const char* n : {"gelu", "gelu_tanh"}) find_row(rows, n)->backward_reads = std::vector<size_t>{0};
  find_row(rows, "sdpa")->backward_reads = std::vector<size_t>{0, 1, 2};  // the probabilities recomputed from q, kt
  find_row(rows, "sdpa_bias")->backward_reads = std::vector<size_t>{0, 1, 2, 3};
  find_row(rows, "dropout")->slice_attrs = dropout_slice;
  find_row(rows, "embedding")->slice_attrs = embedding_slice;
  find_row(rows, "index_select")->slice_attrs = index_select_slice;
  find_row(rows, "cross_entropy")->slice_share = elements_share;
  find_row(rows, "mse")->slice_share = elements_share;
  find_row(rows, "mean")->slice_share = reduced_dim_share;
  return rows;
}

const std::vector<OpRow>& rows() {
  static const std::vector<OpRow> table = make_rows();
  return table;
}

}  // namespace

const OpRow* find_op_row(const std::string& name) {
  // By name in a hash map built once: lowering asks for every sub-op of
  // every rank (822,867 at Swin coshard on 1024 devices), where a scan of
  // the rows compared strings row after row.
  static const std::unordered_map<std::string, const OpRow*> by_name = [] {
    std::unordered_map<std::string, const OpRow*> m;
    for (const OpRow& r : rows()) m.emplace(r.name, &r);  // the first row of a name, as the scan found
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

std::vector<std::string> op_row_names() {
  std::vector<std::string> names;
  for (const OpRow& r : rows()) names.push_back(r.name);
  return names;
}

bool passes_gradient(const OpNode& node, size_t input) {
  const OpRow* row = node.composite ? nullptr : find_op_row(node.kind);
  if (!row) return true;
  return !row->no_grad && std::find(row->no_grad_inputs.begin(), row->no_grad_inputs.end(), input) == row->no_grad_inputs.end();
}

bool backward_reads_operand(const OpNode& forward, size_t operand) {
  if (forward.composite || operand >= forward.inputs.size() + forward.outputs.size()) return true;
  const OpRow* row = find_op_row(forward.kind);
  if (!row || !row->backward_reads) return true;
  return std::find(row->backward_reads->begin(), row->backward_reads->end(), operand) != row->backward_reads->end();
}

bool backward_reads_value(const Graph& g, const OpNode& backward, size_t input) {
  if (backward.forward_of < 0 || static_cast<size_t>(backward.forward_of) >= g.nodes().size()) return true;
  return backward_reads_operand(g.node(backward.forward_of), input);
}

void apply_slice_position(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& local_op) {
  const OpRow* row = find_op_row(local_op.kind);
  if (row && row->slice_attrs) row->slice_attrs(g, whole, s, local_op);
}

float slice_loss_share(const Graph& g, const OpNode& whole, const SubOp& s) {
  if (whole.composite) return 1.f;
  const OpRow* row = find_op_row(whole.kind);
  if (!row || !row->slice_share || slice_is_whole(g, whole, s)) return 1.f;
  return row->slice_share(g, whole, s);
}

}  // namespace nns::sema
