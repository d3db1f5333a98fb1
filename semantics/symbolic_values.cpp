// Symbolic sizes in the interpreter: values, the symbolic() builtin, config
// registration, and propagation through op annotations.
#include "semantics/symbolic_values.h"

#include <algorithm>
#include <stdexcept>

#include "semantics/interpreter.h"

namespace nns::sema {

bool is_sym(const Value& v) { return v.is<std::shared_ptr<SymInt>>(); }

SymPtr sym_of(const Value& v) {
  if (v.is<int64_t>()) return sym_const(v.as<int64_t>());
  if (is_sym(v)) return v.as<std::shared_ptr<SymInt>>()->expr;  // null while unnamed
  return nullptr;
}

std::string sym_misuse(const Value& v, const std::string& what) {
  const SymInt& s = *v.as<std::shared_ptr<SymInt>>();
  if (!s.expr) return "symbolic() declares a size of a config: write it as a config entry of its own (batch = symbolic(8))";
  std::vector<std::string> names;
  sym_symbols(s.expr, names);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
  return what + " needs a plain number, but it is the symbolic size " + sym_text(s.expr) + " (config " + list +
         "): the program's structure would depend on it; give " + (names.size() == 1 ? "it" : "them") + " a concrete value";
}

std::optional<Value> sym_arith(const std::string& op, const Value& a, const Value& b) {
  static const std::pair<const char*, SymExpr::Op> ops[] = {
      {"+", SymExpr::Add}, {"-", SymExpr::Sub}, {"*", SymExpr::Mul}, {"//", SymExpr::FloorDiv}, {"%", SymExpr::Mod}};
  SymExpr::Op kind = SymExpr::Const;
  for (const auto& [s, k] : ops)
    if (op == s) kind = k;
  if (kind == SymExpr::Const) return std::nullopt;
  SymPtr x = sym_of(a), y = b.is<NoneV>() ? nullptr : sym_of(b);
  bool unary = b.is<NoneV>();
  if (!x || (!unary && !y)) return std::nullopt;
  auto out = std::make_shared<SymInt>();
  if (unary) {
    out->expr = sym_binary(SymExpr::Sub, sym_const(0), x);
    out->witness = -(is_sym(a) ? a.as<std::shared_ptr<SymInt>>()->witness : a.as<int64_t>());
  } else {
    out->expr = sym_binary(kind, x, y);
    int64_t wx = is_sym(a) ? a.as<std::shared_ptr<SymInt>>()->witness : a.as<int64_t>();
    int64_t wy = is_sym(b) ? b.as<std::shared_ptr<SymInt>>()->witness : b.as<int64_t>();
    out->witness = sym_eval(sym_binary(kind, sym_const(wx), sym_const(wy)), {});
  }
  if (sym_is_const(out->expr)) return Value(out->expr->value);
  return Value(out);
}

// ---- the builtin and config registration -------------------------------------------

namespace {

Value b_symbolic(Interpreter& in, CallArgs& a) {
  if (a.positional.empty()) in.fail(a.loc, "symbolic(WITNESS, \"constraint\", ...) needs a witness value");
  if (is_sym(a.positional[0])) in.fail(a.loc, "symbolic(): the witness must be a plain number");
  int64_t w = in.to_int(a.positional[0], a.positional_loc(0), "symbolic(): the witness");
  if (w < 1) in.fail(a.positional_loc(0), "symbolic(): the witness is a size, at least 1 (got " + std::to_string(w) + ")");
  auto s = std::make_shared<SymInt>();
  s->witness = w;
  s->loc = a.loc;
  for (size_t i = 1; i < a.positional.size(); ++i) {
    if (!a.positional[i].is<std::string>()) in.fail(a.positional_loc(i), "symbolic(): constraints are strings (\"batch % 8 == 0\")");
    s->constraints.push_back(a.positional[i].as<std::string>());
  }
  return Value(s);
}

}  // namespace

void install_symbolic_builtins(Env& env) {
  define_builtins(env, {{"symbolic", b_symbolic, "witness, /, constraints..."}});
}

std::string name_symbol(Value& v, const std::string& key, front::SourceLoc loc) {
  if (!is_sym(v)) return "";
  const SymInt& s = *v.as<std::shared_ptr<SymInt>>();
  if (s.expr) return "";  // an expression of earlier symbols
  auto named = std::make_shared<SymInt>(s);
  named->expr = sym_var(key);
  named->pending_name = key;
  if (!named->loc.valid()) named->loc = loc;
  v = Value(named);
  return "";
}

std::string register_symbols(const Record& cfg, Graph& g) {
  g.symbols.clear();
  std::map<std::string, int64_t> witness;
  for (const auto& [key, v] : cfg.fields) {
    if (!is_sym(v)) continue;
    const SymInt& s = *v.as<std::shared_ptr<SymInt>>();
    if (s.pending_name != key || !s.expr || s.expr->op != SymExpr::Var) continue;
    SymbolDecl d;
    d.name = key;
    d.witness = s.witness;
    d.constraint_text = s.constraints;
    d.loc = s.loc;
    witness[key] = s.witness;
    g.symbols.push_back(std::move(d));
  }
  for (SymbolDecl& d : g.symbols)
    for (const std::string& text : d.constraint_text) {
      SymPtr c;
      try {
        c = sym_parse(text);
      } catch (const std::runtime_error& e) {
        return "symbolic size '" + d.name + "': cannot read the constraint " + e.what();
      }
      std::vector<std::string> names;
      sym_symbols(c, names);
      for (const std::string& n : names)
        if (!witness.count(n)) return "symbolic size '" + d.name + "': the constraint \"" + text + "\" names '" + n + "', which is not a symbolic size of this config";
      if (sym_eval(c, witness) == 0) {
        std::string values;
        for (const std::string& n : names) values += (values.empty() ? "" : ", ") + n + " = " + std::to_string(witness[n]);
        return "symbolic size '" + d.name + "': the witness values (" + values + ") do not satisfy \"" + text + "\"";
      }
      d.constraints.push_back(c);
    }
  return "";
}

// ---- propagation through annotations -------------------------------------------------

namespace {

SymPtr dim_expr(const TensorInfo& t, size_t d) {
  if (d < t.sym_shape.size() && t.sym_shape[d]) return t.sym_shape[d];
  return sym_const(d < t.shape.size() ? t.shape[d] : 1);
}

// The symbolic form of a size a registry rule generates (op_generators_*.cpp),
// for the rules whose formula the checker models; null otherwise.
SymPtr generated_size(const OpNode& n, const std::string& id, std::map<std::string, SymPtr>& size) {
  auto attr = [&](const char* name) -> SymPtr {
    auto s = n.sym_attrs.find(name);
    if (s != n.sym_attrs.end() && s->second.size() == 1) return s->second[0];
    auto a = n.attrs.find(name);
    if (a != n.attrs.end() && std::holds_alternative<int64_t>(a->second)) return sym_const(std::get<int64_t>(a->second));
    return nullptr;
  };
  if ((n.kind == "conv2d" || n.kind == "conv2d_bias") && (id == "oh" || id == "ow")) {
    // (in + 2 padding - kernel) // stride + 1, as conv2d_impl computes it.
    std::string in = id == "oh" ? "h" : "w", kernel = id == "oh" ? "kh" : "kw";
    SymPtr stride = attr("stride"), padding = attr("padding");
    if (!size.count(in) || !size.count(kernel) || !stride || !padding) return nullptr;
    SymPtr padded = sym_binary(SymExpr::Add, size[in], sym_binary(SymExpr::Mul, sym_const(2), padding));
    return sym_binary(SymExpr::Add, sym_binary(SymExpr::FloorDiv, sym_binary(SymExpr::Sub, padded, size[kernel]), stride), sym_const(1));
  }
  if ((n.kind == "max_pool2d" || n.kind == "avg_pool2d") && (id == "oh" || id == "ow")) {
    // The same formula with the square kernel an attribute (op_generators_other.cpp, pool2d).
    SymPtr kernel = attr("kernel"), stride = attr("stride"), padding = attr("padding");
    std::string in = id == "oh" ? "h" : "w";
    if (!size.count(in) || !kernel || !stride || !padding) return nullptr;
    SymPtr padded = sym_binary(SymExpr::Add, size[in], sym_binary(SymExpr::Mul, sym_const(2), padding));
    return sym_binary(SymExpr::Add, sym_binary(SymExpr::FloorDiv, sym_binary(SymExpr::Sub, padded, kernel), stride), sym_const(1));
  }
  return nullptr;
}

// An obligation on the op's symbolic sizes, unless it holds whatever the sizes.
void add_obligation(Graph& g, int node, SymPtr holds, const std::string& msg) {
  if (sym_is_const(holds) && holds->value) return;
  const OpNode& n = g.node(node);
  g.sym_obligations.push_back({holds, "op '" + n.name + "': " + msg, node, n.loc});
}

// Brackets: one unknown identifier is the dim over the others.
void solve_brackets(Graph& g, int node, const std::vector<std::pair<const DimAnno*, SymPtr>>& brackets,
                    std::map<std::string, SymPtr>& size) {
  auto oblige = [&](SymPtr holds, const std::string& msg) { add_obligation(g, node, holds, msg); };
  for (const auto& [dim, e] : brackets) {
    std::vector<size_t> unknown;
    SymPtr known = sym_const(1);
    for (size_t k = 0; k < dim->ids.size(); ++k) {
      const DimId& id = dim->ids[k];
      if (id.numeric) known = sym_binary(SymExpr::Mul, known, sym_const(std::stoll(id.name)));
      else if (size.count(id.name)) known = sym_binary(SymExpr::Mul, known, size[id.name]);
      else unknown.push_back(k);
    }
    std::string text = "(";
    for (size_t k = 0; k < dim->ids.size(); ++k) text += (k ? " " : "") + dim->ids[k].name;
    text += ")";
    if (unknown.size() == 1) {
      oblige(sym_binary(SymExpr::Eq, sym_binary(SymExpr::Mod, e, known), sym_const(0)),
             "bracket " + text + " of size " + sym_text(e) + " is not a multiple of " + sym_text(known));
      size[dim->ids[unknown[0]].name] = sym_binary(SymExpr::FloorDiv, e, known);
    } else if (unknown.empty()) {
      oblige(sym_binary(SymExpr::Eq, known, e), "bracket " + text + " is " + sym_text(known) + " but the dim is " + sym_text(e));
    }
  }
}

// The outputs' symbolic dims from the identifiers' sizes; a reshape's
// target as written, and a composite body's outputs, must agree with them.
void bind_outputs(Graph& g, int node, std::map<std::string, SymPtr>& size, bool generated,
                  const std::vector<SymPtr>* reshape_target) {
  auto oblige = [&](SymPtr holds, const std::string& msg) { add_obligation(g, node, holds, msg); };
  const OpNode& n = g.node(node);
  const OpAnno& anno = n.anno.anno;
  for (size_t o = 0; o < anno.outputs.size() && o < n.outputs.size(); ++o) {
    const OperandAnno& op = anno.outputs[o];
    if (op.non_tensor) continue;
    TensorInfo& t = g.tensor(n.outputs[o]);
    std::vector<SymPtr> dims;
    bool symbolic = false;
    for (size_t d = 0; d < op.dims.size() && d < t.shape.size(); ++d) {
      SymPtr e = sym_const(1);
      for (const DimId& id : op.dims[d].ids) {
        SymPtr s;
        if (id.numeric) {
          int64_t lit = std::stoll(id.name);
          s = generated && lit != 1 ? sym_opaque(lit, "dim " + std::to_string(d) + " of output " + std::to_string(o) + " of op '" + n.name + "'")
                                    : sym_const(lit);
        } else {
          s = size.count(id.name) ? size[id.name] : sym_const(1);
        }
        e = sym_binary(SymExpr::Mul, e, s);
      }
      if (reshape_target && o == 0 && d < reshape_target->size()) {
        if (!sym_same(e, (*reshape_target)[d]))
          oblige(sym_binary(SymExpr::Eq, e, (*reshape_target)[d]),
                 "reshape to dim " + std::to_string(d) + " of size " + sym_text((*reshape_target)[d]) + ", but the input gives " + sym_text(e));
        e = (*reshape_target)[d];
      }
      if (d < t.sym_shape.size() && t.sym_shape[d] && !sym_same(t.sym_shape[d], e)) {
        // A composite op's body made this output: the annotation must agree.
        oblige(sym_binary(SymExpr::Eq, t.sym_shape[d], e), "its body returns dim " + std::to_string(d) + " of output " + std::to_string(o) +
                                                              " as " + sym_text(t.sym_shape[d]) + " but the annotation gives " + sym_text(e));
        e = t.sym_shape[d];
      }
      if (!sym_is_const(e)) symbolic = true;
      dims.push_back(e);
    }
    if (symbolic) t.sym_shape = dims;
  }
}

}  // namespace

void bind_symbolic(Graph& g, int node, const std::map<std::string, SymPtr>& given, bool generated) {
  OpNode& n = g.node(node);
  bool tainted = !given.empty() || !n.sym_attrs.empty();
  for (int t : n.inputs)
    if (!g.tensor(t).sym_shape.empty()) tainted = true;
  if (!tainted) return;
  const OpAnno& anno = n.anno.anno;
  std::map<std::string, SymPtr> size;
  auto oblige = [&](SymPtr holds, const std::string& msg) { add_obligation(g, node, holds, msg); };
  auto bind_id = [&](const std::string& id, const SymPtr& e, const std::string& where) {
    auto it = size.find(id);
    if (it == size.end()) {
      size[id] = e;
      return;
    }
    if (sym_same(it->second, e)) return;
    oblige(sym_binary(SymExpr::Eq, it->second, e),
           "identifier '" + id + "' is " + sym_text(it->second) + " in one operand but " + sym_text(e) + " in " + where);
  };
  for (const auto& [id, e] : given) bind_id(id, e, "the argument '" + id + "'");
  // Plain dims bind identifiers; numeric dims must keep their literal size.
  std::vector<std::pair<const DimAnno*, SymPtr>> brackets;
  auto scan = [&](const std::vector<OperandAnno>& operands, const std::vector<int>& tensors, const std::vector<std::vector<SymPtr>>* dims,
                  const char* side) {
    for (size_t k = 0; k < operands.size() && k < (dims ? dims->size() : tensors.size()); ++k) {
      const OperandAnno& op = operands[k];
      if (op.non_tensor) continue;
      for (size_t d = 0; d < op.dims.size(); ++d) {
        const DimAnno& dim = op.dims[d];
        SymPtr e = dims ? (d < (*dims)[k].size() ? (*dims)[k][d] : nullptr) : dim_expr(g.tensor(tensors[k]), d);
        if (!e || dim.unknown || dim.ids.empty()) continue;
        std::string where = std::string(side) + " " + std::to_string(k) + " dim " + std::to_string(d);
        if (dim.ids.size() > 1) {
          brackets.push_back({&dim, e});
        } else if (dim.ids[0].numeric) {
          oblige(sym_binary(SymExpr::Eq, e, sym_const(std::stoll(dim.ids[0].name))), where + " must be " + dim.ids[0].name + " but is " + sym_text(e));
        } else {
          bind_id(dim.ids[0].name, e, where);
        }
      }
    }
  };
  scan(anno.inputs, n.inputs, nullptr, "input");
  // reshape / view: the symbolic target gives the output dims.
  std::vector<std::vector<SymPtr>> target;
  // The target as written: symbolic entries, or plain numbers — which, with
  // a symbolic input, hold only for the witness (the obligations say so).
  std::vector<SymPtr> written;
  if (auto sa = n.sym_attrs.find("shape"); sa != n.sym_attrs.end()) {
    written = sa->second;
  } else if (auto a = n.attrs.find("shape"); a != n.attrs.end() && std::holds_alternative<std::vector<int64_t>>(a->second)) {
    for (int64_t v : std::get<std::vector<int64_t>>(a->second)) written.push_back(sym_const(v));
  }
  bool is_reshape = (n.kind == "reshape" || n.kind == "view") && !written.empty() && n.outputs.size() == 1;
  if (is_reshape) {
    std::vector<SymPtr> dims = written;
    const TensorInfo& in = g.tensor(n.inputs[0]);
    SymPtr total = sym_const(1), known = sym_const(1);
    for (size_t d = 0; d < in.shape.size(); ++d) total = sym_binary(SymExpr::Mul, total, dim_expr(in, d));
    int infer = -1;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (sym_is_const(dims[d]) && dims[d]->value == -1) infer = static_cast<int>(d);
      else known = sym_binary(SymExpr::Mul, known, dims[d]);
    }
    if (infer >= 0) {
      oblige(sym_binary(SymExpr::Eq, sym_binary(SymExpr::Mod, total, known), sym_const(0)),
             "reshape cannot infer -1: " + sym_text(total) + " elements are not a multiple of " + sym_text(known));
      dims[infer] = sym_binary(SymExpr::FloorDiv, total, known);
    }
    target.push_back(dims);
    scan(anno.outputs, n.outputs, &target, "output");
  }
  solve_brackets(g, node, brackets, size);
  // Identifiers no operand determined: a literal of the annotation or an
  // argument — constant unless a registry rule computed it from witnesses.
  // The rules the checker models symbolically are checked against the
  // rule's own value at the witness; any other stays Opaque.
  std::map<std::string, int64_t> witness;
  for (const SymbolDecl& d : g.symbols) witness[d.name] = d.witness;
  for (const auto& [id, value] : n.anno.sizes) {
    if (size.count(id)) continue;
    SymPtr e = generated ? generated_size(n, id, size) : sym_const(value);
    bool agrees = false;
    try {
      agrees = e && sym_eval(e, witness) == value;
    } catch (const std::exception&) {
    }
    size[id] = agrees ? e : sym_opaque(value, "size of '" + id + "' of op '" + n.name + "'");
  }
  bind_outputs(g, node, size, generated, is_reshape ? &target[0] : nullptr);
  for (const auto& [id, e] : size)
    if (!sym_is_const(e)) n.sym_sizes[id] = e;
}

}  // namespace nns::sema
