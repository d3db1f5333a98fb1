// Calls: functions, model instantiation and methods, and op calls — the
// place where an op call becomes a Graph node with an annotation bound to
// its shapes.
#include <algorithm>
#include <map>

#include "semantics/interpreter.h"
#include "semantics/symbolic_values.h"

namespace nns::sema {

using front::SourceLoc;

const Value* CallArgs::get(const std::string& name) const {
  for (const auto& [k, v] : named)
    if (k == name) return &v;
  return nullptr;
}

namespace {
constexpr size_t kMaxCallDepth = 200;

// Frames pushed while a call runs, so errors can say where they came from.
struct FrameGuard {
  std::vector<std::pair<std::string, SourceLoc>>& stack;
  FrameGuard(std::vector<std::pair<std::string, SourceLoc>>& s, std::string name, SourceLoc loc) : stack(s) {
    stack.emplace_back(std::move(name), loc);
  }
  ~FrameGuard() { stack.pop_back(); }
};

template <class T>
struct StackGuard {
  std::vector<T>& stack;
  StackGuard(std::vector<T>& s, T v) : stack(s) { stack.push_back(std::move(v)); }
  ~StackGuard() { stack.pop_back(); }
};
}  // namespace

Value Interpreter::eval_call(const front::Call& c, const std::shared_ptr<Env>& env, SourceLoc loc) {
  Value callee = eval(*c.callee, env);
  CallArgs args;
  args.loc = loc;
  args.positional.reserve(c.args.size());
  args.arg_locs.reserve(c.args.size());
  bool seen_named = false;
  for (const front::Arg& a : c.args) {
    if (a.name.empty()) {
      if (seen_named) fail(a.loc, "positional argument after a keyword argument");
      args.positional.push_back(eval(*a.value, env));
      args.arg_locs.push_back(a.value->loc);
    } else {
      seen_named = true;
      for (const auto& [k, v] : args.named)
        if (k == a.name) fail(a.loc, "argument '" + a.name + "' given twice");
      args.named.emplace_back(a.name, eval(*a.value, env));
      args.named_locs.push_back(a.loc);
    }
  }
  return call(callee, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  tick(args.loc);
  if (call_stack_.size() >= kMaxCallDepth) fail(args.loc, "calls nested too deeply (more than " + std::to_string(kMaxCallDepth) + "); is there unbounded recursion?");
  if (callee.is<std::shared_ptr<Function>>()) {
    const Function& f = *callee.as<std::shared_ptr<Function>>();
    FrameGuard frame(call_stack_, f.fn->name, args.loc);
    return call_function(f, args);
  }
  if (callee.is<std::shared_ptr<OpDef>>()) {
    const OpDef& op = *callee.as<std::shared_ptr<OpDef>>();
    // abs, sqrt, exp, log, sin, cos: prelude ops on a tensor, the builtins
    // of the same name when no argument is one (numbers).
    Value* twin = op.row ? builtins_->find_local(op.name) : nullptr;
    if (twin) {
      bool tensor = false;
      for (const Value& v : args.positional) tensor = tensor || v.is<TensorV>();
      for (const auto& [k, v] : args.named) tensor = tensor || v.is<TensorV>();
      if (!tensor) return call(*twin, args);
    }
    return call_op(op, args);
  }
  if (callee.is<std::shared_ptr<ModelClass>>()) {
    const ModelClass& m = *callee.as<std::shared_ptr<ModelClass>>();
    FrameGuard frame(call_stack_, m.decl->name, args.loc);
    return instantiate(m, args);
  }
  if (callee.is<std::shared_ptr<Instance>>()) {
    const auto& inst = callee.as<std::shared_ptr<Instance>>();
    Value* fwd = inst->env->find_local("forward");
    if (!fwd || !fwd->is<std::shared_ptr<Function>>()) fail(args.loc, "model " + inst->class_name + " has no 'forward' method to call");
    return call(*fwd, args);
  }
  if (callee.is<std::shared_ptr<Builtin>>()) {
    const Builtin& b = *callee.as<std::shared_ptr<Builtin>>();
    check_builtin_call(*this, b.name, b.signature, args);
    return b.fn(*this, args);
  }
  fail(args.loc, "a value of type " + type_name(callee) + " cannot be called");
}

// Binds arguments to parameters: positional first, then by name, then
// defaults (evaluated in the callee's scope, left to right).
std::shared_ptr<Env> Interpreter::bind_params(const std::vector<front::Param>& params, CallArgs& args,
                                              const std::shared_ptr<Env>& closure, const std::string& what) {
  auto env = new_env(closure);
  if (args.positional.size() > params.size())
    fail(args.positional_loc(params.size()), what + " takes " + std::to_string(params.size()) + " argument" + (params.size() == 1 ? "" : "s") +
                       " but " + std::to_string(args.positional.size()) + " were given");
  std::vector<bool> set(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    env->define(params[i].name, args.positional[i]);
    set[i] = true;
  }
  for (size_t a = 0; a < args.named.size(); ++a) {
    const auto& [name, value] = args.named[a];
    size_t i = 0;
    while (i < params.size() && params[i].name != name) ++i;
    if (i == params.size()) {
      std::string names;
      for (const front::Param& p : params) names += (names.empty() ? "" : ", ") + p.name;
      fail(args.named_loc(a), what + " has no parameter '" + name + "' (parameters: " + names + ")");
    }
    if (set[i]) fail(args.named_loc(a), what + ": argument '" + name + "' given twice");
    env->define(name, value);
    set[i] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (set[i]) continue;
    if (!params[i].default_value) fail(args.loc, what + ": missing argument '" + params[i].name + "'");
    env->define(params[i].name, eval(*params[i].default_value, env));
  }
  return env;
}

Value Interpreter::call_function(const Function& f, CallArgs& args) {
  auto env = bind_params(f.fn->params, args, f.closure, "function '" + f.fn->name + "'");
  std::optional<StackGuard<std::shared_ptr<Instance>>> scope;
  if (f.self) scope.emplace(scope_stack_, f.self);
  ++in_method_depth_;
  Flow flow;
  try {
    flow = exec_block(f.fn->body, env);
  } catch (...) {
    --in_method_depth_;
    throw;
  }
  --in_method_depth_;
  if (flow == Flow::Return) {
    Value v = std::move(return_value_);
    return_value_ = Value();
    return v;
  }
  if (flow != Flow::Normal) fail(flow_loc_, std::string(flow_keyword(flow)) + " outside a loop in '" + f.fn->name + "'");
  return Value();
}

// Runs a model body in a fresh instance scope; bindings whose values are
// instances (or lists of them) become submodules, named after the binding.
Value Interpreter::instantiate(const ModelClass& cls, CallArgs& args) {
  auto inst = std::make_shared<Instance>();
  inst->class_name = cls.decl->name;
  inst->env = bind_params(cls.decl->params, args, cls.closure, "model '" + cls.decl->name + "'");
  inst->env->define("self", Value(inst));
  {
    StackGuard<std::shared_ptr<Instance>> scope(scope_stack_, inst);
    int saved_depth = in_method_depth_;
    in_method_depth_ = 0;
    Flow flow;
    try {
      flow = exec_block(cls.decl->body, inst->env);
    } catch (...) {
      in_method_depth_ = saved_depth;
      throw;
    }
    in_method_depth_ = saved_depth;
    if (flow != Flow::Normal)
      fail(flow_loc_, std::string(flow_keyword(flow)) + " in the body of model '" + cls.decl->name + "'" +
                          (flow == Flow::Return ? " (a model body builds the instance; return from its methods)" : " outside a loop"));
  }
  auto adopt = [&](const std::shared_ptr<Instance>& child, const std::string& name) {
    if (child->parent || child == inst) return;  // shared submodules keep their first name
    child->parent = inst.get();
    child->local_name = name;
    inst->children.push_back(child);
  };
  for (const std::string& name : inst->env->order) {
    const Value& v = inst->env->vars.at(name);
    if (name == "self") continue;
    if (v.is<std::shared_ptr<Instance>>()) {
      adopt(v.as<std::shared_ptr<Instance>>(), name);
    } else if (v.is<std::shared_ptr<List>>()) {
      const List& l = *v.as<std::shared_ptr<List>>();
      for (size_t i = 0; i < l.size(); ++i)
        if (l[i].is<std::shared_ptr<Instance>>()) adopt(l[i].as<std::shared_ptr<Instance>>(), name + "." + std::to_string(i));
    }
  }
  // Break the self-reference cycle's hold on lifetime: the env keeps `self`
  // for methods; instances live as long as the interpreter anyway.
  return Value(inst);
}

std::string Interpreter::op_prefix() const {
  if (!composite_stack_.empty()) return graph_->node(composite_stack_.back()).name + ".";
  if (!scope_stack_.empty()) {
    std::string p = scope_stack_.back()->path();
    return p.empty() ? "" : p + ".";
  }
  return "";
}

Value Interpreter::call_op_by_name(const std::string& name, std::vector<Value> positional,
                                   std::vector<std::pair<std::string, Value>> named, SourceLoc loc) {
  Value* op = prelude_ ? prelude_->find(name) : nullptr;
  if (!op || !op->is<std::shared_ptr<OpDef>>()) fail(loc, "the stdlib does not declare op '" + name + "'");
  CallArgs args;
  args.positional = std::move(positional);
  args.named = std::move(named);
  args.loc = loc;
  return call_op(*op->as<std::shared_ptr<OpDef>>(), args);
}

namespace {
// Generated annotations repeat (every layer reshapes the same way): parse
// each distinct text once.
const OpAnno& parsed_annotation(const std::string& text) {
  static std::unordered_map<std::string, OpAnno> cache;
  auto it = cache.find(text);
  if (it == cache.end()) it = cache.emplace(text, parse_normalized(text)).first;
  return it->second;
}

bool is_attr_type(const std::string& t) {
  return t == "int" || t == "float" || t == "bool" || t == "str" || t == "ints" || t == "list";
}
}  // namespace

// What an op call's arguments become: tensor operands (in parameter order)
// and attributes, with the sizes they fix for the annotation.
struct Interpreter::OpOperands {
  OpCall call;  // shapes and dtypes of `inputs`; call.attrs points at `attrs`
  std::map<std::string, Attr> attrs;
  std::vector<int> inputs;
  std::map<std::string, int64_t> given;                  // int arguments, by parameter name
  std::map<std::string, SymPtr> sym_given;               // symbolic sizes (symbolic.h)
  std::map<std::string, std::vector<SymPtr>> sym_attrs;
  CallRecord record;
};

Value Interpreter::call_op(const OpDef& op, CallArgs& args) {
  const front::FnDef& fn = *op.decl->fn;
  std::string what = "op '" + op.name + "'";
  auto env = bind_params(fn.params, args, op.closure, what);
  OpOperands ops;
  split_operands(op, args, env, what, ops);
  std::shared_ptr<const BoundAnno> bound = bind_annotation(op, args, what, ops);
  std::vector<int> outputs = emit_node(op, args, env, ops, *bound);
  if (outputs.size() == 1) return Value(TensorV{outputs[0]});
  List results;
  for (int t : outputs) results.push_back(Value(TensorV{t}));
  return make_list(std::move(results));
}

// A primitive whose kernels read f32 (op_registry.h: float_operands) given
// an integer or half tensor: a type error at the argument, not garbage read
// as floats at run time.
void Interpreter::check_float_operand(const OpDef& op, int tensor, SourceLoc at, const std::string& what, const std::string& param) {
  if (!op.row || !op.row->float_operands) return;
  DType dt = graph_->tensor(tensor).dtype;
  if (dt == DType::F32) return;
  std::string hint = dtype_is_float(dt) ? "" : " (convert it with to_f32)";
  fail(at, what + ": argument '" + param + "' has dtype " + dtype_name(dt) + ", but '" + op.name + "' takes f32 tensors" + hint);
}

// Splits the bound arguments into tensor operands (in parameter order) and attributes.
void Interpreter::split_operands(const OpDef& op, CallArgs& args, const std::shared_ptr<Env>& env, const std::string& what,
                                 OpOperands& out) {
  const front::FnDef& fn = *op.decl->fn;
  out.call.attrs = &out.attrs;
  out.record.def = &op;
  std::map<std::string, Attr>& attrs = out.attrs;
  // A bad argument is reported at the argument itself when the call wrote it.
  auto arg_loc = [&](size_t index, const std::string& name) {
    if (index < args.positional.size()) return args.positional_loc(index);
    for (size_t j = 0; j < args.named.size(); ++j)
      if (args.named[j].first == name) return args.named_loc(j);
    return args.loc;
  };
  for (size_t pi = 0; pi < fn.params.size(); ++pi) {
    const front::Param& p = fn.params[pi];
    const Value& v = *env->find_local(p.name);
    SourceLoc al = arg_loc(pi, p.name);
    std::string arg_what = what + ": argument '" + p.name + "'";
    if (p.type.empty() || p.type == "tensor" || p.type == "index") {
      if (v.is<NoneV>() && p.default_value) {  // optional tensor left out
        out.record.tensors_per_param.push_back(0);
        continue;
      }
      if (!v.is<TensorV>()) fail(al, what + " expects a tensor for '" + p.name + "', got " + type_name(v));
      // `index`: a tensor of indices (token ids, labels, gather positions).
      // A float tensor here would be read as integers at run time.
      if (p.type == "index") {
        DType dt = graph_->tensor(v.as<TensorV>().id).dtype;
        if (dt != DType::I32 && dt != DType::I64)
          fail(al, what + " expects an integer tensor of indices for '" + p.name + "', got a " + dtype_name(dt) +
                       " tensor (declare the input with i32, e.g. `input ids: [4, 32] i32 = tokens(vocab)`)");
      }
      if (p.type != "index") check_float_operand(op, v.as<TensorV>().id, al, what, p.name);
      out.inputs.push_back(v.as<TensorV>().id);
      out.record.tensors_per_param.push_back(1);
    } else if (p.type == "tensors") {
      if (!v.is<std::shared_ptr<List>>()) fail(al, what + " expects a list of tensors for '" + p.name + "', got " + type_name(v));
      for (const Value& t : *v.as<std::shared_ptr<List>>()) {
        if (!t.is<TensorV>()) fail(al, what + " expects a list of tensors for '" + p.name + "', found " + a_type_name(t));
        check_float_operand(op, t.as<TensorV>().id, al, what, p.name);
        out.inputs.push_back(t.as<TensorV>().id);
      }
      out.record.tensors_per_param.push_back(static_cast<int>(v.as<std::shared_ptr<List>>()->size()));
    } else if (is_attr_type(p.type)) {
      out.record.tensors_per_param.push_back(-1);
      if (p.type == "int" && is_sym(v) && sym_of(v)) {
        // A symbolic size: the op runs with the witness, the checker sees the expression.
        attrs[p.name] = v.as<std::shared_ptr<SymInt>>()->witness;
        out.given[p.name] = std::get<int64_t>(attrs[p.name]);
        out.sym_given[p.name] = sym_of(v);
        out.sym_attrs[p.name] = {sym_of(v)};
      } else if (p.type == "int") {
        attrs[p.name] = to_int(v, al, arg_what.c_str());
        out.given[p.name] = std::get<int64_t>(attrs[p.name]);
      } else if (p.type == "float") {
        attrs[p.name] = to_float(v, al, arg_what.c_str());
      } else if (p.type == "bool") {
        if (!v.is<bool>()) fail(al, arg_what + " must be a bool, got " + type_name(v));
        attrs[p.name] = v.as<bool>();
      } else if (p.type == "str") {
        if (!v.is<std::string>()) fail(al, arg_what + " must be a str, got " + type_name(v));
        attrs[p.name] = v.as<std::string>();
      } else {
        std::vector<SymPtr> sym;
        attrs[p.name] = to_shape(v, al, &sym);
        if (!sym.empty()) out.sym_attrs[p.name] = sym;
      }
    } else {
      fail(p.loc, "unknown parameter type '" + p.type + "'; expected tensor, index, tensors, int, float, bool, str or ints");
    }
  }
  for (int t : out.inputs) {
    const TensorInfo& info = graph_->tensor(t);
    out.call.inputs.push_back(InputShape{true, info.shape});
    out.call.dtypes.push_back(info.dtype);
  }
}

namespace {
// What one binding of an op's annotation depends on besides the op: the
// input shapes and the sizes the call gives and, for an op whose registry
// row generates its annotation, everything the generator reads (the input
// dtypes and the call's attributes). Bytes, not text: it is a key, never shown.
class BindingKey {
 public:
  void put(int64_t v) { key_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void put(const std::string& s) {
    put(static_cast<int64_t>(s.size()));
    key_ += s;
  }
  void put(const Attr& a) {
    put(static_cast<int64_t>(a.index()));
    if (auto* i = std::get_if<int64_t>(&a))
      put(*i);
    else if (auto* d = std::get_if<double>(&a))
      key_.append(reinterpret_cast<const char*>(d), sizeof *d);
    else if (auto* b = std::get_if<bool>(&a))
      put(static_cast<int64_t>(*b));
    else if (auto* str = std::get_if<std::string>(&a))
      put(*str);
    else
      put(std::get<std::vector<int64_t>>(a));
  }
  void put(const std::vector<int64_t>& list) {
    put(static_cast<int64_t>(list.size()));
    for (int64_t v : list) put(v);
  }
  std::string take() { return std::move(key_); }

 private:
  std::string key_;
};

std::string binding_key(const OpDef& op, const OpCall& call, const std::map<std::string, int64_t>& given) {
  BindingKey key;
  key.put(static_cast<int64_t>(call.inputs.size()));
  for (const InputShape& in : call.inputs) {
    key.put(in.is_tensor ? static_cast<int64_t>(in.shape.size()) : -1);
    for (int64_t d : in.shape) key.put(d);
  }
  key.put(static_cast<int64_t>(given.size()));
  for (const auto& [name, size] : given) {
    key.put(name);
    key.put(size);
  }
  if (op.row && op.row->annotate) {
    for (DType d : call.dtypes) key.put(static_cast<int64_t>(d));
    key.put(static_cast<int64_t>(call.attrs->size()));
    for (const auto& [name, attr] : *call.attrs) {
      key.put(name);
      key.put(attr);
    }
  }
  return key.take();
}

// Distinct bindings kept per op: a program that calls one op with ever new
// shapes binds the rest afresh instead of growing the memo without bound.
constexpr size_t kMaxBindingsPerOp = 4096;
}  // namespace

// Binds the op's annotation (the row's generated one, else the stdlib
// declaration's) to these shapes: a shape error points at the call. Each
// distinct binding is made once per op (OpDef::bindings): AlphaFold2's
// 28k op calls make a few hundred distinct bindings.
std::shared_ptr<const BoundAnno> Interpreter::bind_annotation(const OpDef& op, CallArgs& args, const std::string& what,
                                                              const OpOperands& ops) {
  try {
    std::string key = binding_key(op, ops.call, ops.given);
    if (auto it = op.bindings.find(key); it != op.bindings.end()) return it->second;
    std::shared_ptr<const BoundAnno> bound;
    if (op.row && op.row->annotate) {
      GeneratedAnno gen = op.row->annotate(ops.call);
      std::map<std::string, int64_t> sizes = ops.given;
      for (auto& [k, v] : gen.sizes) sizes[k] = v;
      bound = std::make_shared<const BoundAnno>(bind(parsed_annotation(gen.text), ops.call.inputs, sizes));
    } else {
      bound = std::make_shared<const BoundAnno>(bind_first(op.annotations, ops.call.inputs, ops.given));
    }
    if (op.bindings.size() < kMaxBindingsPerOp) op.bindings.emplace(std::move(key), bound);
    return bound;
  } catch (const DimopError& e) {
    // The parameters and inputs among the operands the message names come
    // first, by name and declared shape: the user fixes a declaration, not
    // an annotation identifier.
    std::string named;
    std::vector<int> declared;
    for (size_t i = 0; i < ops.inputs.size(); ++i) {
      if (e.message.find("input " + std::to_string(i) + " ") == std::string::npos) continue;
      const TensorInfo& t = graph_->tensor(ops.inputs[i]);
      if (t.kind == TensorKind::Activation) continue;
      named += std::string(named.empty() ? "" : ", ") + (t.kind == TensorKind::Param ? "parameter '" : "input '") + t.name +
               "' of shape " + shape_to_string(t.shape) + " (input " + std::to_string(i) + ")";
      declared.push_back(ops.inputs[i]);
    }
    std::string msg = "shape error in call to " + what + ": " + (named.empty() ? "" : named + (declared.size() > 1 ? " do" : " does") + " not fit its annotation: ") + e.message;
    front::Diagnostic d{front::Severity::Error, args.loc, msg, {}};
    for (int t : declared)
      if (graph_->tensor(t).loc.line > 0)
        d.notes.push_back(
            {front::Severity::Note, graph_->tensor(t).loc, "'" + graph_->tensor(t).name + "' declared here", {}});
    if (!op.decl->annotations.empty())
      d.notes.push_back({front::Severity::Note, op.decl->annotations[0].loc, "annotation of '" + op.name + "' declared here", {}});
    for (auto it = call_stack_.rbegin(); it != call_stack_.rend() && d.notes.size() < 4; ++it)
      d.notes.push_back({front::Severity::Note, it->second, "in call to '" + it->first + "'", {}});
    throw front::UserError{std::move(d)};
  } catch (const OpArgError& e) {
    // Rows prefix some messages with the op's name ("reshape: ..."); the
    // diagnostic names the op already.
    std::string msg = e.message;
    if (msg.rfind(op.name + ": ", 0) == 0) msg.erase(0, op.name.size() + 2);
    fail(args.loc, "in call to " + what + ": " + msg);
  }
}

// Adds the op's node to the graph and makes its outputs: a primitive op
// gets fresh tensors, a composite op runs its body. Returns the outputs.
std::vector<int> Interpreter::emit_node(const OpDef& op, CallArgs& args, const std::shared_ptr<Env>& env, OpOperands& ops,
                                        const BoundAnno& bound) {
  OpNode node;
  node.kind = op.name;
  std::string prefix = op_prefix();
  int n = op_counts_[prefix][op.name]++;
  node.name = prefix + op.name + "#" + std::to_string(n);
  node.composite = op.decl->has_body;
  node.parent = composite_stack_.empty() ? -1 : composite_stack_.back();
  node.inputs = ops.inputs;
  node.attrs = ops.attrs;
  node.anno = bound;
  node.loc = args.loc;
  node.sym_attrs = std::move(ops.sym_attrs);
  if (op.row && op.row->macs) node.macs = op.row->macs(bound, ops.call);
  int id = graph_->add_node(std::move(node));
  if (!instantiating_) call_records_[id] = std::move(ops.record);
  if (graph_->node(id).parent >= 0) graph_->node(graph_->node(id).parent).children.push_back(id);

  // Output dtype: the row's rule, else the first float input's dtype.
  DType out_dtype = DType::F32;
  const std::vector<DType>* per_output = op.row && !op.row->out_dtypes.empty() ? &op.row->out_dtypes : nullptr;
  if (op.row && op.row->out_dtype) {
    out_dtype = *op.row->out_dtype;
  } else {
    bool found = false;
    for (DType d : ops.call.dtypes)
      if (dtype_is_float(d)) { out_dtype = d; found = true; break; }
    if (!found && !ops.call.dtypes.empty()) out_dtype = ops.call.dtypes[0];
  }

  std::vector<int> outputs;
  if (op.decl->has_body) {
    outputs = run_composite_body(op, args, env, id, ops.inputs, bound);
  } else {
    for (size_t oi = 0; oi < bound.output_shapes.size(); ++oi) {
      const Shape& s = bound.output_shapes[oi];
      TensorInfo t;
      t.kind = TensorKind::Activation;
      t.shape = s;
      t.dtype = per_output && oi < per_output->size() ? (*per_output)[oi] : out_dtype;
      if (std::string why = shape_size_problem(t.shape, t.dtype); !why.empty())
        fail(args.loc, op.name + "(): output " + std::to_string(oi) + " " + why);
      t.producer = id;
      t.loc = args.loc;
      t.name = "t" + std::to_string(graph_->tensors().size());
      outputs.push_back(graph_->add_tensor(std::move(t)));
    }
  }
  graph_->node(id).outputs = outputs;
  bind_symbolic(*graph_, id, ops.sym_given, op.row && op.row->annotate);
  return outputs;
}

// Composite op `id`: runs the body; its results are the op's outputs and
// must have the shapes the annotation promises.
std::vector<int> Interpreter::run_composite_body(const OpDef& op, CallArgs& args, const std::shared_ptr<Env>& env, int id,
                                                 const std::vector<int>& inputs, const BoundAnno& bound) {
  const front::FnDef& fn = *op.decl->fn;
  std::vector<int> outputs;
  StackGuard<int> inside(composite_stack_, id);
  FrameGuard frame(call_stack_, op.name, args.loc);
  Flow flow = exec_block(fn.body, env);
  if (flow == Flow::Break || flow == Flow::Continue)
    fail(flow_loc_, std::string(flow_keyword(flow)) + " outside a loop in op '" + op.name + "'");
  Value result = flow == Flow::Return ? std::move(return_value_) : Value();
  return_value_ = Value();
  // Problems with the results are the body's: point at its return.
  SourceLoc ret_loc = flow == Flow::Return ? flow_loc_ : fn.loc;
  std::vector<Value> results;
  if (result.is<std::shared_ptr<List>>()) results = *result.as<std::shared_ptr<List>>();
  else results.push_back(result);
  if (results.size() != bound.output_shapes.size())
    fail(ret_loc, "composite op '" + op.name + "' returned " + std::to_string(results.size()) + " value(s) but its annotation has " +
                     std::to_string(bound.output_shapes.size()) + " output(s)");
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].is<TensorV>()) fail(ret_loc, "composite op '" + op.name + "' must return tensors, got " + type_name(results[i]));
    int t = results[i].as<TensorV>().id;
    if (graph_->tensor(t).shape != bound.output_shapes[i])
      fail(ret_loc, "composite op '" + op.name + "': its body returned output " + std::to_string(i) + " with shape " +
                        shape_to_string(graph_->tensor(t).shape) + " but the annotation gives " +
                        shape_to_string(bound.output_shapes[i]));
    if (std::find(inputs.begin(), inputs.end(), t) != inputs.end() || graph_->tensor(t).producer < 0 ||
        graph_->node(graph_->tensor(t).producer).parent != id) {
      // Returning an input unchanged: give the op a distinct output anyway.
      fail(ret_loc, "composite op '" + op.name + "' must compute its outputs with ops in its body");
    }
    graph_->tensor(t).producer = id;
    outputs.push_back(t);
  }
  for (int c : graph_->node(id).children) graph_->node(id).macs += graph_->node(c).macs;
  return outputs;
}

}  // namespace nns::sema
