// The REPL session's input (nns repl; repl/): one input at a time runs in
// the session scope, a child of the main file's scope, so definitions
// persist across inputs and the file's names stay visible.
#include "frontend/suggest.h"
#include "semantics/name_hints.h"
#include "semantics/interpreter.h"
#include "semantics/interpreter_internal.h"

#include "frontend/parser.h"

namespace nns::sema {

const std::shared_ptr<Env>& Interpreter::session_env() {
  if (!session_env_) session_env_ = new_env(main_env_ ? main_env_ : builtins_);
  return session_env_;
}

bool Interpreter::run_session_input(const std::string& name, std::string text, Plan* plan, std::optional<Value>* result) {
  start_budget();
  if (result) result->reset();
  failure_ = Failure::None;
  int errors_before = diags_.error_count();
  if (!main_env_) {
    diags_.error({}, "the session has no evaluated program (internal: evaluate() first)");
    return finish_phase(false);
  }
  int file = sources_.add(name, std::move(text));
  std::unique_ptr<front::Program> parsed = front::parse_program(sources_, file, diags_);
  if (diags_.error_count() != errors_before || !parsed) return finish_phase(false);
  session_programs_.push_back(std::move(parsed));
  const front::Program& prog = *session_programs_.back();
  const std::shared_ptr<Env>& env = session_env();
  plan_ = plan;
  // A failed input unwinds from anywhere; the next one starts clean.
  struct Restore {
    Interpreter& in;
    ~Restore() {
      in.plan_ = nullptr;
      in.session_program_ = nullptr;
      in.call_stack_.clear();
      in.scope_stack_.clear();
      in.composite_stack_.clear();
      in.in_method_depth_ = 0;
    }
  } restore{*this};
  try {
    for (const front::Item& item : prog.items) {
      if (auto* imp = std::get_if<front::ImportDecl>(&item.node)) {
        std::string resolved = resolve_import(imp->path, modules_[0]->path);
        if (resolved.empty())
          fail(item.loc, "cannot find module '" + imp->path + "'" + front::did_you_mean(imp->path, stdlib_modules(opts_.stdlib_dirs)) +
                             " (searched the main file's folder and the stdlib)");
        int errors = diags_.error_count();
        int dep = load_and_parse(resolved, item.loc);
        if (dep < 0 || diags_.error_count() != errors) throw StopEvaluation{};
        std::shared_ptr<Env> dep_env = run_module(dep);
        if (!imp->alias.empty()) {
          env->define(imp->alias, Value(std::make_shared<Module>(Module{imp->path, dep_env})));
        } else {
          for (const std::string& n : dep_env->order) env->define(n, dep_env->vars.at(n));
        }
      } else if (std::holds_alternative<front::ConfigDecl>(item.node)) {
        fail(item.loc, "configs are chosen when the session starts (nns repl FILE --config NAME)");
      } else if (std::holds_alternative<front::TrainDecl>(item.node)) {
        fail(item.loc, "a train block belongs in the model file; 'run' trains the file's train block");
      }
    }
    session_program_ = &prog;
    declare_items(prog, env);
    session_program_ = nullptr;
    for (size_t i = 0; i < prog.items.size(); ++i) {
      auto* s = std::get_if<front::StmtPtr>(&prog.items[i].node);
      if (!s) continue;
      auto* e = std::get_if<front::ExprStmt>(&(*s)->node);
      if (e && result && i + 1 == prog.items.size()) {
        *result = eval(*e->expr, env);
        continue;
      }
      Flow f = exec(**s, env);
      if (f != Flow::Normal)
        fail(flow_loc_, std::string(flow_keyword(f)) + (f == Flow::Return ? " outside a function" : " outside a loop"));
    }
    finalize_names();
  } catch (front::UserError& e) {
    diags_.report(std::move(e.diag));
  } catch (StopEvaluation&) {
    // reported where found
  }
  return finish_phase(diags_.error_count() == errors_before);
}

}  // namespace nns::sema
