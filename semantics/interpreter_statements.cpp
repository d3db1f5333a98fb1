// Statements: blocks, assignment targets, tensor declarations.
#include "semantics/interpreter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "semantics/check_deadline.h"
#include "semantics/interpreter_internal.h"
#include "semantics/symbolic_values.h"

namespace nns::sema {

using front::SourceLoc;

Interpreter::Flow Interpreter::exec_block(const front::Block& b, const std::shared_ptr<Env>& env) {
  for (const front::StmtPtr& s : b) {
    Flow f = exec(*s, env);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const front::Stmt& s, const std::shared_ptr<Env>& env) {
  using namespace front;
  if (auto* n = std::get_if<LetStmt>(&s.node)) {
    env->define(n->name, eval(*n->value, env));
  } else if (auto* n = std::get_if<AssignStmt>(&s.node)) {
    Value v = eval(*n->value, env);
    if (n->op != "=") {
      Value old = eval(*n->target, env);
      v = eval_binary(n->op.substr(0, 1), old, v, s.loc);
    }
    assign(*n->target, std::move(v), env, s.loc);
  } else if (auto* n = std::get_if<ReturnStmt>(&s.node)) {
    return_value_ = n->value ? eval(*n->value, env) : Value();
    flow_loc_ = s.loc;
    return Flow::Return;
  } else if (auto* n = std::get_if<IfStmt>(&s.node)) {
    bool cond = truthy(eval(*n->test, env), n->test->loc);
    const Block& taken = cond ? n->then_block : n->else_block;
    // A branch that defines nothing of its own runs in the enclosing scope:
    // an empty scope between them would change no lookup (plans run such
    // branches hundreds of thousands of times).
    if (!defines_names(taken)) return exec_block(taken, env);
    return exec_block(taken, new_env(env));
  } else if (auto* n = std::get_if<ForStmt>(&s.node)) {
    Value iter = eval(*n->iter, env);
    std::shared_ptr<Env> scope;  // each iteration's, reused while nothing keeps it (reuse_scope)
    auto run_body = [&](Value item) -> Flow {
      reuse_scope(scope, env);
      scope->define(n->var, std::move(item));
      return exec_block(n->body, scope);
    };
    if (iter.is<RangeV>()) {
      for (int64_t i = iter.as<RangeV>().lo; i < iter.as<RangeV>().hi; ++i) {
        tick(n->iter->loc);
        Flow f = run_body(Value(i));
        if (f == Flow::Break) break;
        if (f == Flow::Return) return f;
      }
    } else if (iter.is<std::shared_ptr<List>>()) {
      auto list = iter.as<std::shared_ptr<List>>();  // keep alive while iterating
      for (size_t i = 0; i < list->size(); ++i) {
        tick(n->iter->loc);
        Flow f = run_body((*list)[i]);
        if (f == Flow::Break) break;
        if (f == Flow::Return) return f;
      }
    } else {
      fail(n->iter->loc, "cannot iterate over a value of type " + type_name(iter));
    }
  } else if (std::get_if<BreakStmt>(&s.node)) {
    flow_loc_ = s.loc;
    return Flow::Break;
  } else if (std::get_if<ContinueStmt>(&s.node)) {
    flow_loc_ = s.loc;
    return Flow::Continue;
  } else if (auto* n = std::get_if<BlockStmt>(&s.node)) {
    return exec_block(n->body, new_env(env));
  } else if (auto* n = std::get_if<ExprStmt>(&s.node)) {
    eval(*n->expr, env);
  } else if (auto* n = std::get_if<FnStmt>(&s.node)) {
    std::shared_ptr<Instance> self;
    if (Value* sv = env->find_local("self"); sv && sv->is<std::shared_ptr<Instance>>())
      self = sv->as<std::shared_ptr<Instance>>();
    env->define(n->fn->name, Value(std::make_shared<Function>(Function{n->fn, env, self})));
  } else if (auto* n = std::get_if<TensorDecl>(&s.node)) {
    declare_tensor(*n, env, s.loc);
  }
  return Flow::Normal;
}

bool Interpreter::defines_names(const front::Block& b) {
  for (const front::StmtPtr& s : b) {
    if (std::holds_alternative<front::LetStmt>(s->node) || std::holds_alternative<front::FnStmt>(s->node) ||
        std::holds_alternative<front::TensorDecl>(s->node))
      return true;
    // `x = v` defines x here when no enclosing scope has it (assign below).
    if (auto* a = std::get_if<front::AssignStmt>(&s->node); a && std::holds_alternative<front::Name>(a->target->node))
      return true;
  }
  return false;
}

void Interpreter::reuse_scope(std::shared_ptr<Env>& scope, const std::shared_ptr<Env>& parent) {
  // Held only here (no closure, instance or value kept it): emptying it
  // gives the next iteration a scope indistinguishable from a new one,
  // without allocating one per iteration.
  if (scope && scope.use_count() == 1 && scope->parent == parent) {
    scope->vars.clear();
    scope->order.clear();
    return;
  }
  scope = new_env(parent);
}

// `x = v` rebinds the nearest existing x or defines it in this scope;
// `a[i] = v` and `obj.m = v` update lists and instances.
void Interpreter::assign(const front::Expr& target, Value v, const std::shared_ptr<Env>& env, SourceLoc loc) {
  if (auto* n = std::get_if<front::Name>(&target.node)) {
    if (Value* slot = env->find(n->id); slot && !env->find_local(n->id)) {
      // Do not let a local assignment overwrite a builtin or a declaration.
      if (slot->is<std::shared_ptr<Builtin>>() || slot->is<std::shared_ptr<OpDef>>() ||
          slot->is<std::shared_ptr<ModelClass>>()) {
        env->define(n->id, std::move(v));
        return;
      }
      *slot = std::move(v);
      return;
    }
    env->define(n->id, std::move(v));
    return;
  }
  if (auto* n = std::get_if<front::Index>(&target.node)) {
    Value obj = eval(*n->object, env);
    Value idx = eval(*n->index, env);
    if (!obj.is<std::shared_ptr<List>>()) fail(target.loc, "cannot assign into a value of type " + type_name(obj));
    auto& list = *obj.as<std::shared_ptr<List>>();
    int64_t given = to_int(idx, n->index->loc, "list index");
    int64_t i = given < 0 ? given + static_cast<int64_t>(list.size()) : given;
    if (i < 0 || i >= static_cast<int64_t>(list.size()))
      fail(n->index->loc,
           "list index " + std::to_string(given) + " out of range (length " + std::to_string(list.size()) + ")");
    check_no_cycle(list, v, target.loc);
    list[i] = std::move(v);
    return;
  }
  if (auto* n = std::get_if<front::Member>(&target.node)) {
    Value obj = eval(*n->object, env);
    if (!obj.is<std::shared_ptr<Instance>>())
      fail(target.loc, "cannot set member '" + n->member + "' of a value of type " + type_name(obj));
    obj.as<std::shared_ptr<Instance>>()->env->define(n->member, std::move(v));
    return;
  }
  fail(loc, "cannot assign to this expression");
}

// param w: [h, d] = normal(0.02) inside a model; input x: [b, s] i32 = tokens(v) in train.
void Interpreter::declare_tensor(const front::TensorDecl& t, const std::shared_ptr<Env>& env, SourceLoc loc) {
  // Params may sit in a nested block of the model body (`if has_bias {...}`);
  // they always become members of the instance.
  std::shared_ptr<Instance> owner;
  if (Value* sv = env->find("self"); sv && sv->is<std::shared_ptr<Instance>>())
    owner = sv->as<std::shared_ptr<Instance>>();
  if (in_method_depth_ > 0) owner = nullptr;  // not inside forward() or any function
  const char* keyword = t.is_buffer ? "buffer" : "param";
  if (t.is_param && !owner) fail(loc, std::string("'") + keyword + "' declarations belong in a model body");
  if (!t.is_param && owner) fail(loc, "'input' declarations belong in the train block, not in a model");
  TensorInfo info;
  info.kind = t.is_param ? TensorKind::Param : TensorKind::Input;
  info.buffer = t.is_buffer;
  info.name = t.name;
  info.shape = to_shape(eval(*t.shape, env), t.shape->loc, &info.sym_shape);
  for (int64_t d : info.shape)
    if (d <= 0)
      fail(t.shape->loc, "tensor '" + t.name + "' has a non-positive dimension in " + shape_to_string(info.shape));
  info.dtype = DType::F32;
  if (!t.dtype.empty() && !dtype_from_name(t.dtype, info.dtype))
    fail(t.dtype_loc, "unknown dtype '" + t.dtype + "'; expected one of f32, f16, bf16, i32, i64, bool");
  if (std::string why = shape_size_problem(info.shape, info.dtype); !why.empty())
    fail(t.shape->loc, "tensor '" + t.name + "' " + why);
  if (t.init) {
    Value init = eval(*t.init, env);
    if (!init.is<std::shared_ptr<Record>>() || init.as<std::shared_ptr<Record>>()->kind.rfind("init:", 0) != 0)
      fail(t.init->loc,
           "initializer must be an init spec such as normal(0.02), zeros(), ones(), uniform(a, b) or tokens(n); got " +
               type_name(init));
    const Record& r = *init.as<std::shared_ptr<Record>>();
    info.init.kind = r.kind.substr(5);
    for (const auto& [k, v] : r.fields) info.init.args.push_back(to_float(v, t.init->loc, "initializer argument"));
    bool int_init = info.init.kind == "tokens" || info.init.kind == "labels";
    if (int_init && dtype_is_float(info.dtype))
      fail(t.init->loc,
           "'" + info.init.kind + "' draws integers; declare '" + t.name + "' with an integer dtype (i32)");
    if (!int_init && !dtype_is_float(info.dtype))
      fail(t.init->loc, "'" + info.init.kind + "' draws floats but '" + t.name + "' is " + dtype_name(info.dtype));
    if (info.init.kind == "rotary" && (info.shape.size() < 2 || info.shape.back() % 2 != 0))
      fail(t.init->loc, "rotary() fills a [..., positions, dim] table with an even dim, but '" + t.name +
                            "' has shape " + shape_to_string(info.shape));
  } else {
    info.init.kind = t.is_param ? "zeros" : (dtype_is_float(info.dtype) ? "randn" : "zeros");
  }
  info.loc = loc;
  std::shared_ptr<Env> target = owner ? owner->env : env;
  if (target->find_local(t.name)) fail(loc, "'" + t.name + "' is already defined in this scope");
  int id = graph_->add_tensor(std::move(info));
  if (owner) {
    owner->params.emplace_back(t.name, id);
    param_owners_.emplace_back(id, owner);
  }
  target->define(t.name, Value(TensorV{id}));
}

}  // namespace nns::sema
