// Interpreter::instantiate_op: elaborates one top-level op again on the
// slice a sub-op owns. Per-rank lowering calls it for every sub-op a rank
// runs; going through call_op (rather than copying nodes and patching
// shapes) means a composite's body is evaluated on the sliced operands, so
// every reshape and head count inside it is right by construction.
#include <stdexcept>
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

// Swaps the interpreter's graph for the local one for the duration of a
// call (and marks it, so the local nodes' ids are not taken for graph_'s).
struct GraphSwap {
  Graph& a;
  Graph& b;
  bool& flag;
  GraphSwap(Graph& x, Graph& y, bool& f) : a(x), b(y), flag(f) {
    std::swap(a, b);
    flag = true;
  }
  ~GraphSwap() {
    std::swap(a, b);
    flag = false;
  }
};

}  // namespace

OpInstance Interpreter::instantiate_op(int node, const std::vector<Shape>& input_shapes,
                                                    const std::vector<Shape>& output_shapes,
                                                    const std::map<std::string, int64_t>& divisors, Graph& local) {
  const OpNode whole = graph_.node(node);  // a copy: the graph is swapped below
  auto rec = call_records_.find(node);
  if (rec == call_records_.end() || !rec->second.def)
    throw std::runtime_error("op " + whole.name + " cannot be elaborated again (no record of its call)");
  const CallRecord& record = rec->second;
  const OpDef& def = *record.def;
  const front::FnDef& fn = *def.decl->fn;
  if (input_shapes.size() != whole.inputs.size())
    throw std::runtime_error("op " + whole.name + ": " + std::to_string(input_shapes.size()) + " slice shapes for " +
                             std::to_string(whole.inputs.size()) + " inputs");
  std::vector<DType> dtypes;
  for (int t : whole.inputs) dtypes.push_back(graph_.tensor(t).dtype);

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
  int first_node = static_cast<int>(graph_.nodes().size());
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    TensorInfo t;
    t.kind = TensorKind::Activation;
    t.shape = input_shapes[i];
    t.dtype = dtypes[i];
    t.name = whole.name + ".in" + std::to_string(i);
    inst.inputs.push_back(graph_.add_tensor(std::move(t)));
  }

  CallArgs args;
  args.loc = whole.loc;
  size_t next_input = 0;
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
    auto it = whole.attrs.find(p.name);
    if (it == whole.attrs.end()) continue;  // left to its default
    Attr a = it->second;
    auto div = divisors.find(p.name);
    if (div != divisors.end() && std::holds_alternative<int64_t>(a)) {
      int64_t v = std::get<int64_t>(a);
      if (div->second <= 0 || v % div->second != 0)
        throw std::runtime_error("op " + whole.name + ": argument '" + p.name + "' = " + std::to_string(v) + " does not divide by " +
                                 std::to_string(div->second));
      a = v / div->second;
    }
    // reshape/view name their target shape: the sub-op's is its output slice.
    if ((whole.kind == "reshape" || whole.kind == "view") && p.name == "shape" && !output_shapes.empty())
      a = std::vector<int64_t>(output_shapes[0].begin(), output_shapes[0].end());
    args.named.emplace_back(p.name, attr_value(a));
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
    if (graph_.tensor(inst.outputs[i]).shape != output_shapes[i])
      throw std::runtime_error("op " + whole.name + ": on its slice, output " + std::to_string(i) + " has shape " +
                               shape_to_string(graph_.tensor(inst.outputs[i]).shape) + " but the plan expects " +
                               shape_to_string(output_shapes[i]));
  for (int n = first_node; n < static_cast<int>(graph_.nodes().size()); ++n)
    if (!graph_.node(n).composite) inst.nodes.push_back(n);
  return inst;
}

}  // namespace nns::sema
