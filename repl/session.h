// One REPL session: the model file evaluated once by the Interpreter, a
// current Plan that directives typed at the prompt build up, and the undo
// history of that plan. Every input is either a REPL command (`ops`,
// `show`, `plan`, `run`, ... see help.cpp) or .nns text, which runs in the
// interpreter's session scope with the plan primitives acting on the
// current plan; an input that changes the plan is a directive and is
// answered with what changed. A refused input leaves the plan as it was.
//
// Output goes to the streams given (stdout/stderr in nns repl, strings in
// tests); only `run` writes through the process's own descriptors, since
// its output comes from a child process.
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frontend/diagnostics.h"
#include "repl/completion.h"
#include "repl/input.h"
#include "repl/report.h"
#include "semantics/interpreter.h"

namespace nns::repl {

struct SessionOptions {
  std::string file;    // the model file; empty: a session over the prelude only
  std::string config;  // preset name; empty: the file's first
  int64_t ngpus = 1;   // devices the plan spreads over
  std::vector<std::string> stdlib_dirs;
  std::string nns_binary;  // the nns executable `run` starts
  bool colour = false;
  sema::EvalBudget budget;  // what one input's evaluation may take
};

class Session {
 public:
  Session(SessionOptions opts, std::ostream& out, std::ostream& err);
  ~Session();

  // Parses and evaluates the file. On failure the diagnostics are printed
  // and `exit_code` says why (64 usage: unknown config; 65 bad input).
  bool start(int& exit_code);
  std::string banner() const;

  // Handles one complete input; false when it failed (the error is printed).
  bool handle(const std::string& input);
  bool quit_requested() const { return quit_; }

  Completion complete(const std::string& before_cursor, bool first_line) const;
  // Annotation identifiers of the op(s) `expr` names, for completion after
  // dim = "; empty when it names none or is not a plain name, select(...)
  // or by_name(...) (completion evaluates nothing else).
  std::vector<std::string> anno_ids_of(const std::string& expr) const;

  // ---- state, for tests and the driver ----
  const sema::Plan& plan() const { return plan_; }
  sema::Interpreter& interpreter() { return *interp_; }
  size_t undo_depth() const { return undo_.size(); }
  // The current plan as a .nns plan block named `name`.
  std::string plan_text(const std::string& name) const;

 private:
  bool run_nns(const std::string& text);
  bool run_command(const Command& c);
  // Replaces the current plan (pushing the old one for undo when asked)
  // and reports what changed.
  // `refuse_illegal`: keep the old plan when the checker proves the new one
  // illegal (plan NAME); undo and reset report the verdict only. False when refused.
  bool set_plan(sema::Plan next, bool push_undo, const std::string& why, bool refuse_illegal = false);
  // Op handles that outlived their sub-op (after undo, reset, plan NAME)
  // are marked stale so no directive can act on a different sub-op.
  void forget_stale_handles(const sema::Plan& old_plan, const sema::Plan& new_plan);
  void choose_auto_orders();
  void print_diagnostics();
  // Collectives and the Z3 checker's result for a plan (sub-ops without a
  // device counted as on every device).
  PlanFacts analyse(const sema::Plan& p) const;
  // The verdict line; prints the checker's diagnostics (the conflict of an
  // illegal plan, or warnings).
  std::string verdict(const sema::Plan& p, const PlanFacts& facts);
  int find_op(const std::string& name) const;  // top-level forward node by exact name, or -1
  std::vector<int> select_ops(const std::string& pattern, bool& ok);
  void define_ngpus();
  // Model + plan (or the plan only) to `path`; the plan block is `body`
  // when given, else the session's plan pinned to its device count.
  bool write_runnable(const std::string& path, const std::string& plan_name, bool plan_only, std::string& error,
                      const std::string* body = nullptr) const;
  // The session's plan as a block parametric in ngpus when a fresh
  // evaluation shows it is this plan at this count and a complete plan at
  // another (repl/save_check.cpp); else "" and why it stays pinned.
  std::string parametric_plan(const std::string& name, std::string& why_pinned) const;
  std::string unique_plan_name() const;

  bool cmd_help(const Command& c);
  bool cmd_ops(const Command& c);
  bool cmd_show(const Command& c);
  bool show_op(int node);
  bool show_tensor(int tensor);
  bool cmd_status(const Command& c);
  bool cmd_comm(const Command& c);
  bool cmd_schedule(const Command& c);
  bool cmd_plan(const Command& c);
  bool cmd_plan_search(const Command& c);  // plan search DEVICE [NODES] (repl/plan_search.cpp)
  int searches_ = 0;
  bool cmd_undo(const Command& c);
  bool cmd_reset(const Command& c);
  bool cmd_gpus(const Command& c);
  bool cmd_config(const Command& c);  // repl/config_command.cpp
  bool cmd_save(const Command& c);
  bool cmd_run(const Command& c);
  bool usage(const std::string& command);

  SessionOptions opts_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<front::SourceManager> sources_;
  std::unique_ptr<front::DiagnosticEngine> diags_;
  std::unique_ptr<sema::Interpreter> interp_;
  sema::Plan plan_;
  PlanFacts facts_;  // of plan_
  std::vector<sema::Plan> undo_;
  size_t model_nodes_ = 0;  // graph nodes of the model; more are ops called at the prompt
  int inputs_ = 0;
  int internal_inputs_ = 0;
  bool quit_ = false;
  mutable CompletionData completion_;   // the fixed lists, filled once
  mutable bool completion_ready_ = false;
};

}  // namespace nns::repl
