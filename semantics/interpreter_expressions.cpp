// Expressions: conversions, eval, list checks, the evaluation budget, members and
// indexing. Binary operators are in interpreter_binary.cpp.
#include "semantics/interpreter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "semantics/check_deadline.h"
#include "semantics/interpreter_internal.h"
#include "semantics/name_hints.h"
#include "semantics/symbolic_values.h"

namespace nns::sema {

using front::SourceLoc;

bool Interpreter::truthy(const Value& v, SourceLoc loc) {
  if (v.is<bool>()) return v.as<bool>();
  if (v.is<int64_t>()) return v.as<int64_t>() != 0;
  if (v.is<NoneV>()) return false;
  fail(loc, "expected a bool, got " + type_name(v));
}

int64_t Interpreter::to_int(const Value& v, SourceLoc loc, const char* what) {
  if (v.is<int64_t>()) return v.as<int64_t>();
  if (is_sym(v)) fail(loc, sym_misuse(v, *what ? what : "this operation"));
  if (v.is<bool>()) return v.as<bool>();
  if (v.is<double>()) {
    double d = v.as<double>();
    if (std::floor(d) == d) return static_cast<int64_t>(d);
  }
  fail(loc, std::string(what) + " must be an int, got " + type_name(v));
}

double Interpreter::to_float(const Value& v, SourceLoc loc, const char* what) {
  if (v.is<double>()) return v.as<double>();
  if (is_sym(v)) fail(loc, sym_misuse(v, *what ? what : "this operation"));
  if (v.is<int64_t>()) return static_cast<double>(v.as<int64_t>());
  fail(loc, std::string(what) + " must be a number, got " + type_name(v));
}

std::vector<int64_t> Interpreter::to_shape(const Value& v, SourceLoc loc, std::vector<SymPtr>* sym) {
  std::vector<int64_t> shape;
  std::vector<SymPtr> exprs;
  bool symbolic = false;
  auto dim = [&](const Value& d) {
    if (sym && is_sym(d) && sym_of(d)) {
      shape.push_back(d.as<std::shared_ptr<SymInt>>()->witness);
      exprs.push_back(sym_of(d));
      symbolic = true;
      return;
    }
    // A float dim (8.0, or x / 2 where x // 2 was meant) is an error even
    // when it is whole: sizes are integers, and a float here is a slip.
    if (d.is<double>() || d.is<bool>())
      fail(loc, "a shape dimension must be an int, got " + type_name(d) +
                    (d.is<double>() ? " (use // for integer division)" : ""));
    shape.push_back(to_int(d, loc, "shape dimension"));
    exprs.push_back(sym_const(shape.back()));
  };
  if (v.is<std::shared_ptr<List>>()) {
    for (const Value& d : *v.as<std::shared_ptr<List>>()) dim(d);
    if (sym && symbolic) *sym = std::move(exprs);
  } else if (sym && is_sym(v)) {
    dim(v);
    *sym = std::move(exprs);
  } else if (v.is<int64_t>()) {
    shape.push_back(v.as<int64_t>());
  } else {
    fail(loc, "a shape must be a list of ints, got " + type_name(v));
  }
  return shape;
}

Value Interpreter::eval(const front::Expr& e, const std::shared_ptr<Env>& env) {
  using namespace front;
  return std::visit(
      [&](const auto& n) -> Value {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, IntLit>) {
          return Value(static_cast<int64_t>(n.value));
        } else if constexpr (std::is_same_v<T, FloatLit>) {
          return Value(n.value);
        } else if constexpr (std::is_same_v<T, StringLit>) {
          return Value(n.value);
        } else if constexpr (std::is_same_v<T, BoolLit>) {
          return Value(n.value);
        } else if constexpr (std::is_same_v<T, NoneLit>) {
          return Value();
        } else if constexpr (std::is_same_v<T, Name>) {
          Value* v = env->find(n.id);
          if (!v) {
            fail(e.loc, "undefined name '" + n.id + "'" + undefined_name_hint(n.id, *env, opts_.stdlib_dirs));
          }
          return *v;
        } else if constexpr (std::is_same_v<T, ListLit>) {
          List items;
          for (const ExprPtr& it : n.items) items.push_back(eval(*it, env));
          return make_list(std::move(items));
        } else if constexpr (std::is_same_v<T, ListComp>) {
          Value iter = eval(*n.iter, env);
          List items;
          std::shared_ptr<Env> scope;  // each item's, reused while nothing keeps it (reuse_scope)
          auto visit_item = [&](Value item) {
            reuse_scope(scope, env);
            scope->define(n.var, std::move(item));
            tick(n.iter->loc);
            if (n.filter && !truthy(eval(*n.filter, scope), n.filter->loc)) return;
            items.push_back(eval(*n.item, scope));
            if (static_cast<int64_t>(items.size()) > kMaxListElements)
              check_list_size(static_cast<int64_t>(items.size()), e.loc);
          };
          if (iter.is<RangeV>()) {
            if (!n.filter) {
              check_list_size(iter.as<RangeV>().hi - iter.as<RangeV>().lo, e.loc);
              items.reserve(static_cast<size_t>(iter.as<RangeV>().hi - iter.as<RangeV>().lo));
            }
            for (int64_t i = iter.as<RangeV>().lo; i < iter.as<RangeV>().hi; ++i) visit_item(Value(i));
          } else if (iter.is<std::shared_ptr<List>>()) {
            auto list = iter.as<std::shared_ptr<List>>();
            for (const Value& v : *list) visit_item(v);
          } else {
            fail(n.iter->loc, "cannot iterate over a value of type " + type_name(iter));
          }
          return make_list(std::move(items));
        } else if constexpr (std::is_same_v<T, DictLit>) {
          auto r = std::make_shared<Record>();
          r->kind = "dict";
          for (const auto& [k, v] : n.entries) r->fields.emplace_back(k, eval(*v, env));
          return Value(r);
        } else if constexpr (std::is_same_v<T, Unary>) {
          Value v = eval(*n.operand, env);
          if (std::string_view(n.op) == "not") return Value(!truthy(v, n.operand->loc));
          if (std::string_view(n.op) == "+") return v;
          if (v.is<int64_t>()) {
            if (v.as<int64_t>() == std::numeric_limits<int64_t>::min())
              fail(e.loc, "integer overflow: -(" + std::to_string(v.as<int64_t>()) + ") does not fit in 64 bits");
            return Value(-v.as<int64_t>());
          }
          if (is_sym(v) && n.op == "-") {
            if (auto r = sym_arith("-", v, Value())) return *r;
          }
          if (v.is<double>()) return Value(-v.as<double>());
          if (v.is<TensorV>()) return call_op_by_name("mul_scalar", {v, Value(-1.0)}, {}, e.loc);
          fail(e.loc, "cannot negate a value of type " + type_name(v));
        } else if constexpr (std::is_same_v<T, Binary>) {
          if (std::string_view(n.op) == "and") {
            Value a = eval(*n.lhs, env);
            if (!truthy(a, n.lhs->loc)) return Value(false);
            return Value(truthy(eval(*n.rhs, env), n.rhs->loc));
          }
          if (std::string_view(n.op) == "or") {
            Value a = eval(*n.lhs, env);
            if (truthy(a, n.lhs->loc)) return Value(true);
            return Value(truthy(eval(*n.rhs, env), n.rhs->loc));
          }
          Value a = eval(*n.lhs, env);
          Value b = eval(*n.rhs, env);
          return eval_binary(n.op, std::move(a), std::move(b), e.loc);
        } else if constexpr (std::is_same_v<T, RangeExpr>) {
          int64_t lo = to_int(eval(*n.lo, env), n.lo->loc, "range start");
          int64_t hi = to_int(eval(*n.hi, env), n.hi->loc, "range end");
          return Value(RangeV{lo, std::max(lo, hi)});
        } else if constexpr (std::is_same_v<T, CondExpr>) {
          if (truthy(eval(*n.test, env), n.test->loc)) return eval(*n.then_value, env);
          return eval(*n.else_value, env);
        } else if constexpr (std::is_same_v<T, Call>) {
          return eval_call(n, env, e.loc);
        } else if constexpr (std::is_same_v<T, Index>) {
          Value obj = eval(*n.object, env);
          Value idx = eval(*n.index, env);
          return index(obj, idx, n.index->loc);
        } else if constexpr (std::is_same_v<T, Member>) {
          Value obj = eval(*n.object, env);
          return member(obj, n.member, e.loc);
        } else if constexpr (std::is_same_v<T, Lambda>) {
          std::shared_ptr<Instance> self;
          if (Value* sv = env->find("self"); sv && sv->is<std::shared_ptr<Instance>>())
            self = sv->as<std::shared_ptr<Instance>>();
          return Value(std::make_shared<Function>(Function{n.fn, env, self}));
        }
      },
      e.node);
}

void Interpreter::check_no_cycle(const List& list, const Value& v, SourceLoc loc) {
  // Depth-first through the lists and records `v` reaches, each once.
  std::vector<const Value*> todo{&v};
  std::set<const void*> seen;
  while (!todo.empty()) {
    const Value* x = todo.back();
    todo.pop_back();
    if (x->is<std::shared_ptr<List>>()) {
      const List* l = x->as<std::shared_ptr<List>>().get();
      if (l == &list) fail(loc, "this would put the list inside itself");
      if (!seen.insert(l).second) continue;
      for (const Value& y : *l) todo.push_back(&y);
    } else if (x->is<std::shared_ptr<Record>>()) {
      const Record* r = x->as<std::shared_ptr<Record>>().get();
      if (!seen.insert(r).second) continue;
      for (const auto& f : r->fields) todo.push_back(&f.second);
    }
  }
}

void Interpreter::check_string_size(int64_t n, SourceLoc loc) {
  if (n > kMaxStringBytes)
    fail(loc,
         "this string would hold " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxStringBytes) + ")");
}

void Interpreter::check_list_size(int64_t n, SourceLoc loc) {
  if (n > kMaxListElements)
    fail(loc,
         "this list would hold " + std::to_string(n) + " elements (at most " + std::to_string(kMaxListElements) + ")");
  // Making a big list is work the loop ticks do not see (a list doubled in
  // a loop spends its time copying): its elements count as steps.
  if (n >= 0x4000) {
    ticks_ += n;
    check_budget(loc);
  }
}

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Interpreter::start_budget() {
  budget_start_ = steady_seconds();
  ticks_ = 0;
  step_limit_ = opts_.budget.steps > 0 ? opts_.budget.steps : std::numeric_limits<int64_t>::max();
}

void Interpreter::check_budget(SourceLoc loc) {
  CheckDeadline::poll_now();  // --check-timeout, when a plan is evaluated for a check
  if (ticks_ > step_limit_)
    fail(loc, "evaluation ran past its budget of " + std::to_string(opts_.budget.steps) +
                  " steps here (an endless loop?); --eval-budget STEPS sets it");
  double limit = opts_.budget.seconds;
  if (limit > 0 && steady_seconds() - budget_start_ > limit) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", limit);
    fail(loc, std::string("evaluation ran past its time limit of ") + text + " s here; --eval-timeout SECONDS sets it");
  }
}

static std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Value Interpreter::member(const Value& obj, const std::string& name, SourceLoc loc) {
  if (obj.is<TensorV>()) {
    const TensorInfo& t = graph_->tensor(obj.as<TensorV>().id);
    if (name == "shape") {
      List dims;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (d < t.sym_shape.size() && t.sym_shape[d] && !sym_is_const(t.sym_shape[d])) {
          auto s = std::make_shared<SymInt>();
          s->witness = t.shape[d];
          s->expr = t.sym_shape[d];
          dims.push_back(Value(s));
        } else {
          dims.push_back(Value(t.shape[d]));
        }
      }
      return make_list(std::move(dims));
    }
    if (name == "rank") return Value(static_cast<int64_t>(t.shape.size()));
    if (name == "dtype") return Value(std::string(dtype_name(t.dtype)));
    if (name == "numel") return Value(numel(t.shape));
    fail(loc, "a tensor has no member '" + name + "' (it has shape, rank, dtype, numel)");
  }
  if (obj.is<std::shared_ptr<Instance>>()) {
    const auto& inst = obj.as<std::shared_ptr<Instance>>();
    if (Value* v = inst->env->find_local(name)) return *v;
    fail(loc, "model " + inst->class_name + " has no member '" + name + "'");
  }
  if (obj.is<std::shared_ptr<Record>>()) {
    const auto& r = obj.as<std::shared_ptr<Record>>();
    if (const Value* v = r->get(name)) return *v;
    std::vector<std::string> keys;
    for (const auto& [k, v] : r->fields) keys.push_back(k);
    fail(loc, (r->kind == "config" ? "config has no entry '" : "no field '") + name + "'" +
                  (keys.empty() ? "" : "; it has: " + join_names(keys)));
  }
  if (obj.is<std::shared_ptr<Module>>()) {
    if (Value* v = obj.as<std::shared_ptr<Module>>()->env->find_local(name)) return *v;
    fail(loc, "module '" + obj.as<std::shared_ptr<Module>>()->path + "' has no name '" + name + "'");
  }
  fail(loc, "a value of type " + type_name(obj) + " has no member '" + name + "'");
}

Value Interpreter::index(const Value& obj, const Value& idx, SourceLoc loc) {
  auto bounded = [&](int64_t given, int64_t size) {
    int64_t i = given < 0 ? given + size : given;
    if (i < 0 || i >= size)
      fail(loc, "index " + std::to_string(given) + " out of range (length " + std::to_string(size) + ")");
    return i;
  };
  if (obj.is<std::shared_ptr<List>>()) {
    const List& l = *obj.as<std::shared_ptr<List>>();
    return l[bounded(to_int(idx, loc, "list index"), static_cast<int64_t>(l.size()))];
  }
  if (obj.is<RangeV>()) {
    const RangeV& r = obj.as<RangeV>();
    return Value(r.lo + bounded(to_int(idx, loc, "range index"), r.hi - r.lo));
  }
  if (obj.is<std::string>()) {
    const std::string& s = obj.as<std::string>();
    return Value(std::string(1, s[bounded(to_int(idx, loc, "string index"), static_cast<int64_t>(s.size()))]));
  }
  if (obj.is<std::shared_ptr<Record>>() && idx.is<std::string>()) return member(obj, idx.as<std::string>(), loc);
  fail(loc, "cannot index a value of type " + type_name(obj));
}
}  // namespace nns::sema
