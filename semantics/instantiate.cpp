// Interpreter::instantiate_op: elaborates one top-level op again on the
// slice a sub-op owns. Per-rank lowering calls it for every sub-op a rank
// runs; going through call_op (rather than copying nodes and patching
// shapes) means a composite's body is evaluated on the sliced operands, so
// every reshape and head count inside it is right by construction.
#include <cstdint>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "semantics/interpreter.h"

namespace nns::sema {

namespace {

Value attr_value(const Attr& a) {
  if (auto i = std::get_if<int64_t>(&a)) return Value(*i);
  if (auto d = std::get_if<double>(&a)) return Value(*d);
  if (auto b = std::get_if<bool>(&a)) return Value(*b);
  if (auto s = std::get_if<std::string>(&a)) return Value(*s);
  List l;
  for (int64_t v : std::get<std::vector<int64_t>>(a)) l.push_back(Value(v));
  return make_list(std::move(l));
}

// Points the interpreter's current graph at the local one for the duration
// of a call (and marks it, so the local nodes' ids are not taken for the
// model graph's).
struct GraphSwap {
  Graph*& current;
  Graph* saved;
  bool& flag;
  GraphSwap(Graph*& cur, Graph& local, bool& f) : current(cur), saved(cur), flag(f) {
    current = &local;
    flag = true;
  }
  ~GraphSwap() {
    current = saved;
    flag = false;
  }
};

// The non-tensor arguments a sub-op's elaboration passes, in parameter
// order: the op's attrs with split identifiers divided (an attention split
// on `h` in two gets h / 2) and reshape/view's target shape taken from the
// output slice. instantiate_op calls the op with exactly these, and
// instantiation_key names them, so the two cannot disagree.
std::vector<std::pair<std::string, Attr>> slice_arguments(const OpNode& whole, const front::FnDef& fn,
                                                          const std::vector<int>& tensors_per_param,
                                                          const std::vector<Shape>& output_shapes,
                                                          const std::map<std::string, int64_t>& divisors) {
  std::vector<std::pair<std::string, Attr>> out;
  for (size_t pi = 0; pi < fn.params.size() && pi < tensors_per_param.size(); ++pi) {
    if (tensors_per_param[pi] >= 0) continue;  // tensors (or an optional tensor left out)
    const front::Param& p = fn.params[pi];
    auto it = whole.attrs.find(p.name);
    if (it == whole.attrs.end()) continue;  // left to its default
    Attr a = it->second;
    auto div = divisors.find(p.name);
    if (div != divisors.end() && std::holds_alternative<int64_t>(a)) {
      int64_t v = std::get<int64_t>(a);
      if (div->second <= 0 || v % div->second != 0)
        throw std::runtime_error("op " + whole.name + ": argument '" + p.name + "' = " + std::to_string(v) +
                                 " does not divide by " + std::to_string(div->second));
      a = v / div->second;
    }
    // reshape/view name their target shape: the sub-op's is its output slice.
    if ((whole.kind == "reshape" || whole.kind == "view") && p.name == "shape" && !output_shapes.empty())
      a = std::vector<int64_t>(output_shapes[0].begin(), output_shapes[0].end());
    out.emplace_back(p.name, std::move(a));
  }
  return out;
}

// Appends v to a key as fixed-size raw bytes (keys are compared, never printed).
template <class T>
void put(std::string& key, T v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& key, const std::string& s) {
  put(key, s.size());
  key += s;
}
void put_shapes(std::string& key, const std::vector<Shape>& shapes) {
  put(key, shapes.size());
  for (const Shape& s : shapes) {
    put(key, s.size());
    for (int64_t d : s) put(key, d);
  }
}

void put_attr(std::string& key, const Attr& a) {
  put(key, a.index());
  if (auto i = std::get_if<int64_t>(&a)) put(key, *i);
  if (auto d = std::get_if<double>(&a)) put(key, *d);
  if (auto b = std::get_if<bool>(&a)) put(key, *b);
  if (auto s = std::get_if<std::string>(&a)) put_string(key, *s);
  if (auto l = std::get_if<std::vector<int64_t>>(&a)) {
    put(key, l->size());
    for (int64_t v : *l) put(key, v);
  }
}

}  // namespace

const Interpreter::CallRecord& Interpreter::record_for_instantiation(int node, size_t input_shapes) const {
  const OpNode& whole = model_graph_.node(node);
  auto rec = call_records_.find(node);
  if (rec == call_records_.end() || !rec->second.def)
    throw std::runtime_error("op " + whole.name + " cannot be elaborated again (no record of its call)");
  if (input_shapes != whole.inputs.size())
    throw std::runtime_error("op " + whole.name + ": " + std::to_string(input_shapes) + " slice shapes for " +
                             std::to_string(whole.inputs.size()) + " inputs");
  return rec->second;
}

std::string Interpreter::instantiation_key(int node, const std::vector<Shape>& input_shapes,
                                           const std::vector<Shape>& output_shapes,
                                           const std::map<std::string, int64_t>& divisors) const {
  const CallRecord& record = record_for_instantiation(node, input_shapes.size());
  const OpNode& whole = model_graph_.node(node);
  std::string key;
  // The definition called (its identity: the same OpDef object), as called.
  put(key, reinterpret_cast<uintptr_t>(record.def));
  put_string(key, whole.kind);
  put(key, record.tensors_per_param.size());
  for (int c : record.tensors_per_param) put(key, c);
  std::vector<std::pair<std::string, Attr>> attrs =
      slice_arguments(whole, *record.def->decl->fn, record.tensors_per_param, output_shapes, divisors);
  put(key, attrs.size());
  for (const auto& [name, a] : attrs) {
    put_string(key, name);
    put_attr(key, a);
  }
  for (int t : whole.inputs) put(key, model_graph_.tensor(t).dtype);
  put_shapes(key, input_shapes);
  put_shapes(key, output_shapes);
  return key;
}

OpInstance Interpreter::instantiate_op(int node, const std::vector<Shape>& input_shapes,
                                                    const std::vector<Shape>& output_shapes,
                                                    const std::map<std::string, int64_t>& divisors, Graph& local) {
  const CallRecord& record = record_for_instantiation(node, input_shapes.size());
  const OpNode whole = model_graph_.node(node);  // (node ids are the model graph's)
  const OpDef& def = *record.def;
  const front::FnDef& fn = *def.decl->fn;
  std::vector<std::pair<std::string, Attr>> attrs =
      slice_arguments(whole, fn, record.tensors_per_param, output_shapes, divisors);
  std::vector<DType> dtypes;
  for (int t : whole.inputs) dtypes.push_back(model_graph_.tensor(t).dtype);

  OpInstance inst;
  // The body's evaluation is one of its own for the budget (lowering
  // elaborates thousands of sub-ops); the caller's count resumes after it.
  struct BudgetScope {
    Interpreter& in;
    int64_t ticks;
    double start;
    ~BudgetScope() {
      in.ticks_ = ticks;
      in.budget_start_ = start;
    }
  } budget_scope{*this, ticks_, budget_start_};
  start_budget();
  GraphSwap swap(graph_, local, instantiating_);
  // Names count from zero in every elaboration ("linear#0" and its body's
  // "linear#0.matmul#0"), so a kernel's names do not depend on what was
  // elaborated before it: lowering's kernel cache (kernel_cache.h) copies a
  // body instead of elaborating it again, and its copy must be what the
  // elaboration would give.
  struct CountSwap {
    std::unordered_map<std::string, std::unordered_map<std::string, int>>& counts;
    std::unordered_map<std::string, std::unordered_map<std::string, int>> saved;
    ~CountSwap() { counts = std::move(saved); }
  } count_swap{op_counts_, std::move(op_counts_)};
  op_counts_.clear();
  int first_node = static_cast<int>(graph_->nodes().size());
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    TensorInfo t;
    t.kind = TensorKind::Activation;
    t.shape = input_shapes[i];
    t.dtype = dtypes[i];
    t.name = "in" + std::to_string(i);  // not named after the op: equal elaborations give equal bodies
    inst.inputs.push_back(graph_->add_tensor(std::move(t)));
  }

  CallArgs args;
  args.loc = whole.loc;
  // In parameter order, as the call was made: tensors, then the sliced attrs.
  size_t next_input = 0, next_attr = 0;
  for (size_t pi = 0; pi < fn.params.size() && pi < record.tensors_per_param.size(); ++pi) {
    const front::Param& p = fn.params[pi];
    int count = record.tensors_per_param[pi];
    if (count == 0) continue;  // an optional tensor the call left out
    if (count > 0 && (p.type == "tensors")) {
      List l;
      for (int k = 0; k < count; ++k) l.push_back(Value(TensorV{inst.inputs[next_input++]}));
      args.named.emplace_back(p.name, make_list(std::move(l)));
      continue;
    }
    if (count > 0) {
      args.named.emplace_back(p.name, Value(TensorV{inst.inputs[next_input++]}));
      continue;
    }
    if (next_attr < attrs.size() && attrs[next_attr].first == p.name) {
      args.named.emplace_back(p.name, attr_value(attrs[next_attr].second));
      ++next_attr;
    }  // else: left to its default
  }

  Value result;
  try {
    result = call_op(def, args);
  } catch (const front::UserError& e) {
    throw std::runtime_error("op " + whole.name + " cannot run on its slice: " + e.diag.message);
  }
  if (result.is<TensorV>()) {
    inst.outputs.push_back(result.as<TensorV>().id);
  } else if (result.is<std::shared_ptr<List>>()) {
    for (const Value& v : *result.as<std::shared_ptr<List>>()) inst.outputs.push_back(v.as<TensorV>().id);
  }
  if (inst.outputs.size() != output_shapes.size())
    throw std::runtime_error("op " + whole.name + ": its slice gives " + std::to_string(inst.outputs.size()) + " outputs, expected " +
                             std::to_string(output_shapes.size()));
  for (size_t i = 0; i < inst.outputs.size(); ++i)
    if (graph_->tensor(inst.outputs[i]).shape != output_shapes[i])
      throw std::runtime_error("op " + whole.name + ": on its slice, output " + std::to_string(i) + " has shape " +
                               shape_to_string(graph_->tensor(inst.outputs[i]).shape) + " but the plan expects " +
                               shape_to_string(output_shapes[i]));
  for (int n = first_node; n < static_cast<int>(graph_->nodes().size()); ++n)
    if (!graph_->node(n).composite) inst.nodes.push_back(n);
  return inst;
}

}  // namespace nns::sema
