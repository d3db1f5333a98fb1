// The Interpreter's construction, errors and loading (imports, parsing, module
// evaluation, declarations, configs). Statements are in interpreter_statements.cpp,
// expressions in interpreter_expressions.cpp and interpreter_binary.cpp; calls (functions,
// models, ops) in calls.cpp; builtins in builtins.cpp; plan evaluation in plan_eval.cpp;
// the REPL session's input in session_input.cpp.
#include "semantics/interpreter.h"
#include "frontend/regular_file.h"
#include "frontend/suggest.h"
#include "semantics/check_deadline.h"
#include "semantics/config_overrides.h"
#include "semantics/interpreter_internal.h"
#include "semantics/name_hints.h"
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
void install_weights_builtins(Env& env);  // weights_eval.cpp

Interpreter::Interpreter(front::SourceManager& sources, front::DiagnosticEngine& diags, EvalOptions opts)
    : sources_(sources), diags_(diags), opts_(std::move(opts)) {
  builtins_ = new_env(nullptr);
  install_builtins(*builtins_);
  install_plan_builtins(*builtins_);
  install_weights_builtins(*builtins_);
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
    diags_.error(from, "cannot read file '" + path + "'" + front::why_unreadable(path));
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
        diags_.error(item.loc, "cannot find module '" + imp->path + "'" + front::did_you_mean(imp->path, stdlib_modules(opts_.stdlib_dirs)) +
                                   " (searched the importing file's folder and the stdlib)");
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
    diags_.error({}, "cannot read file '" + path + "'" + front::why_unreadable(path));
    return finish_phase(false);
  }
  // The main file keeps the path the user typed, so diagnostics show it.
  int file = sources_.load(path);
  if (file < 0) {
    diags_.error({}, "cannot read file '" + path + "'" + front::why_unreadable(path));
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
        diags_.error(item.loc, "cannot find module '" + imp->path + "'" + front::did_you_mean(imp->path, stdlib_modules(opts_.stdlib_dirs)) +
                                   " (searched the importing file's folder and the stdlib)");
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
      } else if (auto* w = std::get_if<front::WeightsDecl>(&item.node)) {
        if (&prog == main_program_) {
          for (const PlanInfo& other : weight_maps_)
            if (other.name == w->fn->name) fail(w->fn->loc, "weights '" + w->fn->name + "' is defined twice");
          weight_maps_.push_back(PlanInfo{w->fn->name, w->fn, env});
        } else if (&prog == session_program_) {
          fail(w->fn->loc, "a weights block belongs in the model's file, not at the REPL prompt");
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
      std::vector<std::string> known;
      for (const front::ConfigDecl* c : configs_) {
        names += (names.empty() ? "" : ", ") + c->name;
        known.push_back(c->name);
      }
      failure_ = Failure::UnknownConfig;
      fail({}, "unknown config '" + opts_.config + "'" + front::did_you_mean(opts_.config, known) +
                   (names.empty() ? " (the file defines none)" : "; available: " + names));
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
  if (std::string err = register_symbols(*record, *graph_); !err.empty()) {
    SourceLoc where;
    for (const SymbolDecl& d : graph_->symbols)
      if (err.find("'" + d.name + "'") != std::string::npos && !where.valid()) where = d.loc;
    fail(where, err);
  }
  env->define("cfg", Value(record));
}

void Interpreter::finalize_names() {
  for (auto& [tensor, owner] : param_owners_) {
    std::string prefix = owner->path();
    std::string local = graph_->tensor(tensor).name;
    graph_->tensor(tensor).name = prefix.empty() ? local : prefix + "." + local;
  }
  param_owners_.clear();
}

}  // namespace nns::sema
