// Loading, declarations, statements and expressions. Calls (functions,
// models, ops) are in calls.cpp; builtins in builtins.cpp; plan evaluation
// in plan_eval.cpp; the REPL session's input in session_input.cpp.
#include "semantics/interpreter.h"
#include "semantics/config_overrides.h"
#include "semantics/check_deadline.h"
#include "semantics/interpreter_internal.h"
#include "semantics/symbolic_values.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <filesystem>

#include "frontend/parser.h"

namespace nns::sema {

using front::SourceLoc;
namespace fs = std::filesystem;

void install_builtins(Env& env);       // builtins.cpp
void install_plan_builtins(Env& env);  // plan_builtins.cpp

Interpreter::Interpreter(front::SourceManager& sources, front::DiagnosticEngine& diags, EvalOptions opts)
    : sources_(sources), diags_(diags), opts_(std::move(opts)) {
  builtins_ = new_env(nullptr);
  install_builtins(*builtins_);
  install_plan_builtins(*builtins_);
  if (opts_.stdlib_dirs.empty()) opts_.stdlib_dirs.push_back(NNS_STDLIB_DIR);
}

// Scopes and the closures in them point at each other (a function is a
// value of the scope it closes over; a model instance's scope holds its
// methods, which hold the instance): shared_ptr cycles that would outlive
// the interpreter. Emptying every scope still alive breaks them all.
Interpreter::~Interpreter() {
  std::vector<std::shared_ptr<Env>> live;
  for (const std::weak_ptr<Env>& w : envs_)
    if (std::shared_ptr<Env> e = w.lock()) live.push_back(std::move(e));
  for (const std::shared_ptr<Env>& e : live) {
    e->vars.clear();
    e->parent.reset();
  }
}

std::shared_ptr<Env> Interpreter::new_env(std::shared_ptr<Env> parent) {
  if (envs_.size() >= envs_prune_at_) {
    // Most scopes (call frames, loop bodies) are gone again: forget them, so
    // that the list stays within twice the live scopes.
    envs_.erase(std::remove_if(envs_.begin(), envs_.end(), [](const std::weak_ptr<Env>& w) { return w.expired(); }), envs_.end());
    envs_prune_at_ = std::max<size_t>(1024, 2 * envs_.size());
  }
  auto env = std::make_shared<Env>(std::move(parent));
  envs_.push_back(env);
  return env;
}

void Interpreter::fail(SourceLoc loc, const std::string& msg) {
  front::Diagnostic d{front::Severity::Error, loc, msg, {}};
  // Show where the failing code was reached from (innermost first, bounded).
  // A frame at the error's own place, or at the previous frame's place
  // (recursion), adds nothing.
  auto same = [](const SourceLoc& a, const SourceLoc& b) { return a.file == b.file && a.line == b.line && a.col == b.col; };
  SourceLoc last = loc;
  for (auto it = call_stack_.rbegin(); it != call_stack_.rend() && d.notes.size() < 4; ++it) {
    if (same(it->second, last)) continue;
    last = it->second;
    d.notes.push_back({front::Severity::Note, it->second, "in call to '" + it->first + "'", {}});
  }
  throw front::UserError{std::move(d)};
}

// ---- loading ------------------------------------------------------------------

std::string Interpreter::resolve_import(const std::string& spec, const std::string& from_file) {
  bool relative = spec.rfind("./", 0) == 0 || spec.rfind("../", 0) == 0 || spec.find('/') != std::string::npos;
  std::string name = spec;
  if (name.size() < 4 || name.substr(name.size() - 4) != ".nns") name += ".nns";
  if (relative) {
    fs::path p = fs::path(from_file).parent_path() / name;
    if (fs::exists(p)) return fs::weakly_canonical(p).string();
    if (fs::exists(name)) return fs::weakly_canonical(name).string();
    return "";
  }
  for (const std::string& dir : opts_.stdlib_dirs) {
    fs::path p = fs::path(dir) / name;
    if (fs::exists(p)) return fs::weakly_canonical(p).string();
  }
  fs::path local = fs::path(from_file).parent_path() / name;
  if (fs::exists(local)) return fs::weakly_canonical(local).string();
  return "";
}

// Parses a file and, recursively, its imports. Returns the module index or -1.
int Interpreter::load_and_parse(const std::string& path, SourceLoc from) {
  auto found = module_index_.find(path);
  if (found != module_index_.end()) return found->second;
  int file = sources_.load(path);
  if (file < 0) {
    diags_.error(from, "cannot read file '" + path + "'");
    return -1;
  }
  auto m = std::make_unique<Loaded>();
  m->path = path;
  m->file = file;
  int errors_before = diags_.error_count();
  m->program = front::parse_program(sources_, file, diags_);
  int index = static_cast<int>(modules_.size());
  module_index_[path] = index;
  modules_.push_back(std::move(m));
  if (diags_.error_count() != errors_before) return index;
  for (const front::Item& item : modules_[index]->program->items) {
    if (auto* imp = std::get_if<front::ImportDecl>(&item.node)) {
      std::string resolved = resolve_import(imp->path, path);
      if (resolved.empty()) {
        diags_.error(item.loc, "cannot find module '" + imp->path + "' (searched the importing file's folder and the stdlib)");
        continue;
      }
      load_and_parse(resolved, item.loc);
    }
  }
  return index;
}

bool Interpreter::finish_phase(bool ok) {
  if (ok) failure_ = Failure::None;
  else if (failure_ == Failure::None) failure_ = Failure::Other;
  return ok;
}

bool Interpreter::parse(const std::string& path) {
  failure_ = Failure::None;
  if (!fs::exists(path)) {
    diags_.error({}, "cannot read file '" + path + "'");
    return finish_phase(false);
  }
  // The main file keeps the path the user typed, so diagnostics show it.
  int file = sources_.load(path);
  if (file < 0) {
    diags_.error({}, "cannot read file '" + path + "'");
    return finish_phase(false);
  }
  return finish_phase(parse_main(file, fs::weakly_canonical(path).string()));
}

bool Interpreter::parse_text(const std::string& name, std::string text) {
  failure_ = Failure::None;
  int file = sources_.add(name, std::move(text));
  return finish_phase(parse_main(file, (fs::current_path() / name).string()));
}

// Parses the loaded main file, the prelude and the main file's imports.
bool Interpreter::parse_main(int file, const std::string& main_path) {
  std::string prelude = resolve_import("prelude", main_path);
  if (prelude.empty()) {
    diags_.error({}, "cannot find the stdlib prelude (stdlib/prelude.nns); set NNS_STDLIB to the stdlib folder");
    return false;
  }
  auto m = std::make_unique<Loaded>();
  m->path = main_path;
  m->file = file;
  m->program = front::parse_program(sources_, file, diags_);
  main_program_ = m->program.get();
  module_index_[main_path] = 0;
  modules_.push_back(std::move(m));
  if (diags_.has_errors()) return false;
  load_and_parse(prelude, {});
  for (const front::Item& item : main_program_->items) {
    if (auto* imp = std::get_if<front::ImportDecl>(&item.node)) {
      std::string resolved = resolve_import(imp->path, main_path);
      if (resolved.empty()) {
        diags_.error(item.loc, "cannot find module '" + imp->path + "' (searched the importing file's folder and the stdlib)");
        continue;
      }
      load_and_parse(resolved, item.loc);
    }
  }
  return !diags_.has_errors();
}

std::vector<std::string> Interpreter::config_names() const {
  std::vector<std::string> names;
  for (const front::ConfigDecl* c : configs_) names.push_back(c->name);
  return names;
}

// Runs a module once (imports first); returns its top-level scope.
std::shared_ptr<Env> Interpreter::run_module(int index) {
  Loaded& m = *modules_[index];
  if (m.env) return m.env;
  if (m.running) fail({}, "import cycle through '" + m.path + "'");
  m.running = true;
  auto env = new_env(prelude_ ? prelude_ : builtins_);
  for (const front::Item& item : m.program->items) {
    auto* imp = std::get_if<front::ImportDecl>(&item.node);
    if (!imp) continue;
    std::string resolved = resolve_import(imp->path, m.path);
    int dep = module_index_.at(resolved);
    if (modules_[dep]->running) fail(item.loc, "import cycle: '" + imp->path + "' is being imported already");
    std::shared_ptr<Env> dep_env = run_module(dep);
    if (!imp->alias.empty()) {
      env->define(imp->alias, Value(std::make_shared<Module>(Module{imp->path, dep_env})));
    } else {
      for (const std::string& name : dep_env->order) env->define(name, dep_env->vars.at(name));
    }
  }
  declare_items(*m.program, env);
  if (m.program.get() == main_program_) eval_config(*m.program, env);
  // Top-level statements, then (main file only) the train block.
  for (const front::Item& item : m.program->items) {
    if (auto* s = std::get_if<front::StmtPtr>(&item.node)) {
      Flow f = exec(**s, env);
      if (f != Flow::Normal)
        fail(flow_loc_, std::string(flow_keyword(f)) + (f == Flow::Return ? " outside a function" : " outside a loop"));
    }
  }
  m.env = env;
  m.running = false;
  return env;
}

bool Interpreter::evaluate() {
  start_budget();
  failure_ = Failure::None;
  if (modules_.empty()) return finish_phase(false);
  try {
    std::string prelude_path = resolve_import("prelude", modules_[0]->path);
    int prelude_index = module_index_.at(prelude_path);
    prelude_ = run_module(prelude_index);
    std::shared_ptr<Env> env = run_module(0);
    main_env_ = env;
    const front::TrainDecl* train = nullptr;
    SourceLoc train_loc;
    for (const front::Item& item : main_program_->items)
      if (auto* t = std::get_if<front::TrainDecl>(&item.node)) {
        if (train) fail(item.loc, "a file has at most one train block");
        train = t;
        train_loc = item.loc;
      }
    if (train) run_train(*train, env, train_loc);
    finalize_names();
  } catch (front::UserError& e) {
    diags_.report(std::move(e.diag));
  } catch (StopEvaluation&) {
    // errors were reported where they were found
  }
  return finish_phase(!diags_.has_errors());
}

// Declarations are hoisted: ops, functions, models and plans are visible to
// every statement of their module, whatever the order in the file.
void Interpreter::declare_items(const front::Program& prog, const std::shared_ptr<Env>& env) {
  int errors_before = diags_.error_count();
  for (const front::Item& item : prog.items) {
    try {
      if (auto* op = std::get_if<front::OpDecl>(&item.node)) {
        auto def = std::make_shared<OpDef>();
        def->name = op->fn->name;
        def->decl = op;
        def->closure = env;
        for (const front::Annotation& a : op->annotations) {
          try {
            def->annotations.push_back(parse_normalized(a.text));
          } catch (const DimopError& e) {
            SourceLoc l = a.loc;
            l.col += 1 + static_cast<int>(e.column);  // +1 skips the opening quote
            l.length = 1;
            fail(l, "bad dimop annotation for op '" + def->name + "': " + e.message);
          }
        }
        if (!op->has_body) {
          def->row = find_op_row(def->name);
          if (!def->row) fail(op->fn->loc, "primitive op '" + def->name + "' has no registry row (no kernel or shape rule); give it a body to make it a composite op");
          if (!def->row->annotate && def->annotations.empty())
            fail(op->fn->loc, "primitive op '" + def->name + "' needs an annotation");
        } else if (op->annotations.empty()) {
          fail(op->fn->loc, "composite op '" + def->name + "' needs a dimop annotation (: \"...\"); use 'fn' for a plain function");
        }
        if (env->find_local(def->name)) diags_.warning(op->fn->loc, "op '" + def->name + "' redefines an earlier name");
        env->define(def->name, Value(def));
      } else if (auto* f = std::get_if<front::FnStmt>(&item.node)) {
        env->define(f->fn->name, Value(std::make_shared<Function>(Function{f->fn, env, nullptr})));
      } else if (auto* m = std::get_if<front::ModelDecl>(&item.node)) {
        env->define(m->name, Value(std::make_shared<ModelClass>(ModelClass{m, env})));
      } else if (auto* p = std::get_if<front::PlanDecl>(&item.node)) {
        if (&prog == main_program_) {
          for (const PlanInfo& other : plans_)
            if (other.name == p->fn->name) fail(p->fn->loc, "plan '" + p->fn->name + "' is defined twice");
          plans_.push_back(PlanInfo{p->fn->name, p->fn, env});
        } else if (&prog == session_program_) {
          // At the REPL prompt a plan may be redefined, as a function may.
          auto same = std::find_if(plans_.begin(), plans_.end(), [&](const PlanInfo& o) { return o.name == p->fn->name; });
          if (same != plans_.end()) *same = PlanInfo{p->fn->name, p->fn, env};
          else plans_.push_back(PlanInfo{p->fn->name, p->fn, env});
        }
      } else if (auto* c = std::get_if<front::ConfigDecl>(&item.node)) {
        if (&prog == main_program_) {
          for (const front::ConfigDecl* other : configs_)
            if (other->name == c->name) fail(item.loc, "config '" + c->name + "' is defined twice");
          configs_.push_back(c);
        }
      }
    } catch (front::UserError& e) {
      // Keep declaring: report every bad declaration of the file at once.
      diags_.report(std::move(e.diag));
    }
  }
  if (diags_.error_count() != errors_before) throw StopEvaluation{};
}

// Binds `cfg` (a record of the chosen preset's entries). Entries may use
// earlier entries by name and `extends` a base preset.
void Interpreter::eval_config(const front::Program&, const std::shared_ptr<Env>& env) {
  const front::ConfigDecl* chosen = nullptr;
  if (opts_.config.empty()) {
    if (!configs_.empty()) chosen = configs_.front();
  } else {
    for (const front::ConfigDecl* c : configs_)
      if (c->name == opts_.config) chosen = c;
    if (!chosen) {
      std::string names;
      for (const front::ConfigDecl* c : configs_) names += (names.empty() ? "" : ", ") + c->name;
      failure_ = Failure::UnknownConfig;
      fail({}, "unknown config '" + opts_.config + "'" + (names.empty() ? " (the file defines none)" : "; available: " + names));
    }
  }
  auto record = std::make_shared<Record>();
  record->kind = "config";
  std::vector<ConfigOverride> overrides;  // --set
  if (std::string err = parse_config_overrides(opts_.overrides, overrides); !err.empty()) fail({}, err);
  if (!chosen && !overrides.empty()) fail({}, "--set " + overrides[0].key + ": the file defines no config");
  if (chosen) {
    config_name_ = chosen->name;
    std::vector<const front::ConfigDecl*> chain{chosen};
    while (!chain.back()->base.empty()) {
      const front::ConfigDecl* base = nullptr;
      for (const front::ConfigDecl* c : configs_)
        if (c->name == chain.back()->base) base = c;
      if (!base) fail(chain.back()->base_loc, "unknown base config '" + chain.back()->base + "'");
      if (std::find(chain.begin(), chain.end(), base) != chain.end())
        fail(chain.back()->base_loc, "config inheritance cycle through '" + base->name + "'");
      chain.push_back(base);
    }
    auto scope = new_env(env);
    std::string why;  // a --set value that does not parse
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      for (const front::ConfigEntry& e : (*it)->entries) {
        Value v = eval(*e.value, scope);
        for (ConfigOverride& o : overrides)  // --set replaces the value here: later entries see it
          if (o.key == e.name && (o.used = true) && !typed_override(Value(v), o, v, why)) fail({}, why);
        name_symbol(v, e.name, e.value->loc);  // symbolic(...) takes the entry's name
        scope->define(e.name, v);
        bool replaced = false;
        for (auto& [k, old] : record->fields)
          if (k == e.name) { old = v; replaced = true; }
        if (!replaced) record->fields.emplace_back(e.name, v);
      }
    }
    std::vector<std::string> entries;
    for (const auto& [k, v] : record->fields) entries.push_back(k);
    for (const ConfigOverride& o : overrides)
      if (!o.used) fail({}, unknown_override_message(o.key, entries, chosen->name));
  }
  if (std::string err = register_symbols(*record, graph_); !err.empty()) {
    SourceLoc where;
    for (const SymbolDecl& d : graph_.symbols)
      if (err.find("'" + d.name + "'") != std::string::npos && !where.valid()) where = d.loc;
    fail(where, err);
  }
  env->define("cfg", Value(record));
}

void Interpreter::finalize_names() {
  for (auto& [tensor, owner] : param_owners_) {
    std::string prefix = owner->path();
    std::string local = graph_.tensor(tensor).name;
    graph_.tensor(tensor).name = prefix.empty() ? local : prefix + "." + local;
  }
  param_owners_.clear();
}

// ---- statements ----------------------------------------------------------------

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
    auto scope = new_env(env);
    return exec_block(cond ? n->then_block : n->else_block, scope);
  } else if (auto* n = std::get_if<ForStmt>(&s.node)) {
    Value iter = eval(*n->iter, env);
    auto run_body = [&](Value item) -> Flow {
      auto scope = new_env(env);
      scope->define(n->var, std::move(item));
      Flow f = exec_block(n->body, scope);
      return f;
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

// `x = v` rebinds the nearest existing x or defines it in this scope;
// `a[i] = v` and `obj.m = v` update lists and instances.
void Interpreter::assign(const front::Expr& target, Value v, const std::shared_ptr<Env>& env, SourceLoc loc) {
  if (auto* n = std::get_if<front::Name>(&target.node)) {
    if (Value* slot = env->find(n->id); slot && !env->find_local(n->id)) {
      // Do not let a local assignment overwrite a builtin or a declaration.
      if (slot->is<std::shared_ptr<Builtin>>() || slot->is<std::shared_ptr<OpDef>>() || slot->is<std::shared_ptr<ModelClass>>()) {
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
      fail(n->index->loc, "list index " + std::to_string(given) + " out of range (length " + std::to_string(list.size()) + ")");
    check_no_cycle(list, v, target.loc);
    list[i] = std::move(v);
    return;
  }
  if (auto* n = std::get_if<front::Member>(&target.node)) {
    Value obj = eval(*n->object, env);
    if (!obj.is<std::shared_ptr<Instance>>()) fail(target.loc, "cannot set member '" + n->member + "' of a value of type " + type_name(obj));
    obj.as<std::shared_ptr<Instance>>()->env->define(n->member, std::move(v));
    return;
  }
  fail(loc, "cannot assign to this expression");
}

static std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// param w: [h, d] = normal(0.02) inside a model; input x: [b, s] i32 = tokens(v) in train.
void Interpreter::declare_tensor(const front::TensorDecl& t, const std::shared_ptr<Env>& env, SourceLoc loc) {
  // Params may sit in a nested block of the model body (`if has_bias {...}`);
  // they always become members of the instance.
  std::shared_ptr<Instance> owner;
  if (Value* sv = env->find("self"); sv && sv->is<std::shared_ptr<Instance>>()) owner = sv->as<std::shared_ptr<Instance>>();
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
    if (d <= 0) fail(t.shape->loc, "tensor '" + t.name + "' has a non-positive dimension in " + shape_to_string(info.shape));
  info.dtype = DType::F32;
  if (!t.dtype.empty() && !dtype_from_name(t.dtype, info.dtype))
    fail(t.dtype_loc, "unknown dtype '" + t.dtype + "'; expected one of f32, f16, bf16, i32, i64, bool");
  if (t.init) {
    Value init = eval(*t.init, env);
    if (!init.is<std::shared_ptr<Record>>() || init.as<std::shared_ptr<Record>>()->kind.rfind("init:", 0) != 0)
      fail(t.init->loc, "initializer must be an init spec such as normal(0.02), zeros(), ones(), uniform(a, b) or tokens(n); got " + type_name(init));
    const Record& r = *init.as<std::shared_ptr<Record>>();
    info.init.kind = r.kind.substr(5);
    for (const auto& [k, v] : r.fields) info.init.args.push_back(to_float(v, t.init->loc, "initializer argument"));
    bool int_init = info.init.kind == "tokens" || info.init.kind == "labels";
    if (int_init && dtype_is_float(info.dtype))
      fail(t.init->loc, "'" + info.init.kind + "' draws integers; declare '" + t.name + "' with an integer dtype (i32)");
    if (!int_init && !dtype_is_float(info.dtype))
      fail(t.init->loc, "'" + info.init.kind + "' draws floats but '" + t.name + "' is " + dtype_name(info.dtype));
    if (info.init.kind == "rotary" && (info.shape.size() < 2 || info.shape.back() % 2 != 0))
      fail(t.init->loc, "rotary() fills a [..., positions, dim] table with an even dim, but '" + t.name + "' has shape " +
                            shape_to_string(info.shape));
  } else {
    info.init.kind = t.is_param ? "zeros" : (dtype_is_float(info.dtype) ? "randn" : "zeros");
  }
  info.loc = loc;
  std::shared_ptr<Env> target = owner ? owner->env : env;
  if (target->find_local(t.name)) fail(loc, "'" + t.name + "' is already defined in this scope");
  int id = graph_.add_tensor(std::move(info));
  if (owner) {
    owner->params.emplace_back(t.name, id);
    param_owners_.emplace_back(id, owner);
  }
  target->define(t.name, Value(TensorV{id}));
}

// ---- expressions ---------------------------------------------------------------

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
      fail(loc, "a shape dimension must be an int, got " + type_name(d) + (d.is<double>() ? " (use // for integer division)" : ""));
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
            // Suggest a close name: same prefix, or a config entry.
            std::string hint;
            if (Value* cfg = env->find("cfg"); cfg && cfg->is<std::shared_ptr<Record>>() && cfg->as<std::shared_ptr<Record>>()->get(n.id))
              hint = " (did you mean 'cfg." + n.id + "'?)";
            fail(e.loc, "undefined name '" + n.id + "'" + hint);
          }
          return *v;
        } else if constexpr (std::is_same_v<T, ListLit>) {
          List items;
          for (const ExprPtr& it : n.items) items.push_back(eval(*it, env));
          return make_list(std::move(items));
        } else if constexpr (std::is_same_v<T, ListComp>) {
          Value iter = eval(*n.iter, env);
          List items;
          auto visit_item = [&](Value item) {
            auto scope = new_env(env);
            scope->define(n.var, std::move(item));
            tick(n.iter->loc);
            if (n.filter && !truthy(eval(*n.filter, scope), n.filter->loc)) return;
            items.push_back(eval(*n.item, scope));
            if (static_cast<int64_t>(items.size()) > kMaxListElements) check_list_size(static_cast<int64_t>(items.size()), e.loc);
          };
          if (iter.is<RangeV>()) {
            if (!n.filter) check_list_size(iter.as<RangeV>().hi - iter.as<RangeV>().lo, e.loc);
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
          if (n.op == "not") return Value(!truthy(v, n.operand->loc));
          if (n.op == "+") return v;
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
          if (n.op == "and") {
            Value a = eval(*n.lhs, env);
            if (!truthy(a, n.lhs->loc)) return Value(false);
            return Value(truthy(eval(*n.rhs, env), n.rhs->loc));
          }
          if (n.op == "or") {
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
          if (Value* sv = env->find("self"); sv && sv->is<std::shared_ptr<Instance>>()) self = sv->as<std::shared_ptr<Instance>>();
          return Value(std::make_shared<Function>(Function{n.fn, env, self}));
        }
      },
      e.node);
}

static bool is_number(const Value& v) { return v.is<int64_t>() || v.is<double>() || v.is<bool>(); }

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

void Interpreter::check_list_size(int64_t n, SourceLoc loc) {
  if (n > kMaxListElements)
    fail(loc, "this list would hold " + std::to_string(n) + " elements (at most " + std::to_string(kMaxListElements) + ")");
  // Making a big list is work the loop ticks do not see (a list doubled in
  // a loop spends its time copying): its elements count as steps.
  if (n >= 0x4000) {
    ticks_ += n;
    check_budget(loc);
  }
}

namespace {
double steady_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
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

Value Interpreter::eval_binary(const std::string& op, Value a, Value b, SourceLoc loc) {
  // Tensors: arithmetic becomes graph ops (elementwise with broadcasting).
  // Comparing with none (an optional tensor argument) is a plain test.
  if ((op == "==" || op == "!=") && (a.is<NoneV>() || b.is<NoneV>())) {
    bool eq = a.is<NoneV>() && b.is<NoneV>();
    return Value(op == "==" ? eq : !eq);
  }
  if (a.is<TensorV>() || b.is<TensorV>()) {
    if (op == "@") return call_op_by_name("matmul", {a, b}, {}, loc);
    // Comparisons give a float 0/1 mask (no gradient flows through it).
    static const std::pair<const char*, const char*> comparisons[] = {{"==", "eq"}, {"!=", "ne"}, {"<", "lt"},
                                                                      {"<=", "le"}, {">", "gt"}, {">=", "ge"}};
    const char* comparison = nullptr;
    for (const auto& [sym, name] : comparisons)
      if (op == sym) comparison = name;
    if (a.is<TensorV>() && b.is<TensorV>()) {
      static const std::pair<const char*, const char*> ops[] = {{"+", "add"}, {"-", "sub"}, {"*", "mul"}, {"/", "div"}};
      for (const auto& [sym, name] : ops)
        if (op == sym) return call_op_by_name(name, {a, b}, {}, loc);
      if (comparison) return call_op_by_name(comparison, {a, b}, {}, loc);
      fail(loc, "operator '" + op + "' is not defined on tensors");
    }
    bool tensor_left = a.is<TensorV>();
    Value t = tensor_left ? a : b;
    Value s = tensor_left ? b : a;
    if (!is_number(s)) fail(loc, "operator '" + op + "' between a tensor and " + a_type_name(s));
    double x = to_float(s, loc, "scalar operand");
    if (comparison) {
      // The number becomes a one-element constant, broadcast against the tensor.
      Value c = call_op_by_name("full", {make_list({Value(int64_t{1})}), Value(x)}, {}, loc);
      return call_op_by_name(comparison, {tensor_left ? t : c, tensor_left ? c : t}, {}, loc);
    }
    if (op == "**" && tensor_left) return call_op_by_name("pow_scalar", {t, Value(x)}, {}, loc);
    if (op == "+") return call_op_by_name("add_scalar", {t, Value(x)}, {}, loc);
    if (op == "*") return call_op_by_name("mul_scalar", {t, Value(x)}, {}, loc);
    if (op == "-" && tensor_left) return call_op_by_name("add_scalar", {t, Value(-x)}, {}, loc);
    if (op == "-") return call_op_by_name("add_scalar", {call_op_by_name("mul_scalar", {t, Value(-1.0)}, {}, loc), Value(x)}, {}, loc);
    if (op == "/" && tensor_left) {
      if (x == 0) fail(loc, "division of a tensor by zero");
      return call_op_by_name("mul_scalar", {t, Value(1.0 / x)}, {}, loc);
    }
    fail(loc, "operator '" + op + "' between " + a_type_name(a) + " and " + a_type_name(b) + " is not supported");
  }
  if (op == "==" || op == "!=") {
    if (is_sym(a) || is_sym(b)) fail(loc, sym_misuse(is_sym(a) ? a : b, "operator '" + op + "'"));
    bool eq;
    if (is_number(a) && is_number(b)) eq = to_float(a, loc, "") == to_float(b, loc, "");
    else if (a.is<std::string>() && b.is<std::string>()) eq = a.as<std::string>() == b.as<std::string>();
    else if (a.is<NoneV>() || b.is<NoneV>()) eq = a.is<NoneV>() && b.is<NoneV>();
    else fail(loc, "cannot compare " + a_type_name(a) + " with " + a_type_name(b));
    return Value(op == "==" ? eq : !eq);
  }
  if (op == "in") {
    if (b.is<RangeV>()) {
      int64_t x = to_int(a, loc, "left operand of 'in'");
      return Value(x >= b.as<RangeV>().lo && x < b.as<RangeV>().hi);
    }
    if (b.is<std::shared_ptr<List>>()) {
      for (const Value& item : *b.as<std::shared_ptr<List>>()) {
        // == on tensors builds a mask op; membership needs a yes or no.
        bool tensor = a.is<TensorV>() || item.is<TensorV>(), none = a.is<NoneV>() || item.is<NoneV>();
        if (tensor && !none) fail(loc, "'in' cannot test tensors for membership (== on tensors is elementwise)");
        if (eval_binary("==", a, item, loc).as<bool>()) return Value(true);
      }
      return Value(false);
    }
    fail(loc, "'in' needs a list or range on the right, got " + type_name(b));
  }
  if (op == "+" && a.is<std::string>() && b.is<std::string>()) return Value(a.as<std::string>() + b.as<std::string>());
  if (op == "+" && a.is<std::shared_ptr<List>>() && b.is<std::shared_ptr<List>>()) {
    check_list_size(static_cast<int64_t>(a.as<std::shared_ptr<List>>()->size() + b.as<std::shared_ptr<List>>()->size()), loc);
    List r = *a.as<std::shared_ptr<List>>();
    for (const Value& v : *b.as<std::shared_ptr<List>>()) r.push_back(v);
    return make_list(std::move(r));
  }
  if (op == "*" && a.is<std::shared_ptr<List>>() && b.is<int64_t>()) {
    int64_t times = std::max<int64_t>(0, b.as<int64_t>()), size = static_cast<int64_t>(a.as<std::shared_ptr<List>>()->size()), total = 0;
    if (__builtin_mul_overflow(times, size, &total)) total = std::numeric_limits<int64_t>::max();
    check_list_size(total, loc);
    List r;
    for (int64_t i = 0; i < b.as<int64_t>(); ++i)
      for (const Value& v : *a.as<std::shared_ptr<List>>()) r.push_back(v);
    return make_list(std::move(r));
  }
  if (is_sym(a) || is_sym(b)) {
    // Symbolic sizes keep their expression through integer arithmetic;
    // anything else would make the program depend on the witness value.
    if (auto r = sym_arith(op, a, b)) return *r;
    fail(loc, sym_misuse(is_sym(a) ? a : b, "operator '" + op + "'"));
  }
  if (!is_number(a) || !is_number(b))
    fail(loc, "operator '" + op + "' is not defined between " + a_type_name(a) + " and " + a_type_name(b));
  bool ints = !a.is<double>() && !b.is<double>();
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    double x = to_float(a, loc, ""), y = to_float(b, loc, "");
    bool r = op == "<" ? x < y : op == "<=" ? x <= y : op == ">" ? x > y : x >= y;
    return Value(r);
  }
  if (ints) {
    int64_t x = to_int(a, loc, ""), y = to_int(b, loc, "");
    // Ints are 64-bit and never wrap: an overflow is an error at the operator.
    auto overflow = [&]() -> Value {
      fail(loc, "integer overflow: " + std::to_string(x) + " " + op + " " + std::to_string(y) + " does not fit in 64 bits");
    };
    int64_t r = 0;
    if (op == "+") return __builtin_add_overflow(x, y, &r) ? overflow() : Value(r);
    if (op == "-") return __builtin_sub_overflow(x, y, &r) ? overflow() : Value(r);
    if (op == "*") return __builtin_mul_overflow(x, y, &r) ? overflow() : Value(r);
    if (op == "/") {
      if (y == 0) fail(loc, "division by zero");
      return Value(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail(loc, op == "%" ? "modulo by zero" : "division by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        if (op == "%") return Value(int64_t{0});
        overflow();
      }
      int64_t q = x / y;
      r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) { --q; r += y; }  // floor semantics
      return Value(op == "//" ? q : r);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      // Square and multiply: at most 2 x 63 steps whatever the exponent.
      int64_t result = 1, base = x;
      for (int64_t e = y; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
        // A square is taken only while higher bits remain, and the highest
        // bit is always set: a square that overflows makes the result overflow.
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value(result);
    }
  } else {
    double x = to_float(a, loc, ""), y = to_float(b, loc, "");
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      if (y == 0) fail(loc, "division by zero");
      return Value(x / y);
    }
    if (op == "//") {
      if (y == 0) fail(loc, "division by zero");
      return Value(std::floor(x / y));
    }
    if (op == "%") {
      if (y == 0) fail(loc, "modulo by zero");
      return Value(x - std::floor(x / y) * y);
    }
    if (op == "**") return Value(std::pow(x, y));
  }
  fail(loc, "operator '" + op + "' is not defined on numbers");
}

Value Interpreter::member(const Value& obj, const std::string& name, SourceLoc loc) {
  if (obj.is<TensorV>()) {
    const TensorInfo& t = graph_.tensor(obj.as<TensorV>().id);
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
