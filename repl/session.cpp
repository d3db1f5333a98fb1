// The session core: starting, dispatching inputs, running .nns text, plan
// state and undo. The commands are in commands.cpp, help texts in help.cpp.
#include "repl/session.h"

#include <regex>

#include <algorithm>
#include <functional>
#include <ostream>
#include <set>

#include "backend/lowering/auto_order.h"
#include "repl/plan_text.h"
#include "repl/report.h"
#include "repl/signals.h"
#include "semantics/op_registry.h"


namespace nns::repl {

using sema::Plan;
using sema::Value;

Session::Session(SessionOptions opts, std::ostream& out, std::ostream& err) : opts_(std::move(opts)), out_(out), err_(err) {}
Session::~Session() = default;

bool Session::start(int& exit_code) {
  sources_ = std::make_unique<front::SourceManager>();
  diags_ = std::make_unique<front::DiagnosticEngine>(*sources_);
  interp_ = std::make_unique<sema::Interpreter>(*sources_, *diags_, sema::EvalOptions{opts_.config, opts_.stdlib_dirs, opts_.budget});
  bool ok = opts_.file.empty() ? interp_->parse_text("<repl>", "") : interp_->parse(opts_.file);
  if (ok) ok = interp_->evaluate();
  if (!ok) {
    exit_code = interp_->failure() == sema::Interpreter::Failure::UnknownConfig ? 64 : 65;
    print_diagnostics();
    return false;
  }
  print_diagnostics();  // warnings
  model_nodes_ = interp_->graph().nodes().size();
  plan_ = interp_->new_plan("session", opts_.ngpus);
  facts_ = analyse(plan_);
  define_ngpus();
  return true;
}

std::string Session::banner() const {
  const sema::Graph& g = interp_->graph();
  sema::GraphSummary s = sema::summarize(g);
  std::string what = opts_.file.empty() ? std::string("no model file") : opts_.file;
  if (!interp_->config_name().empty()) what += " (config " + interp_->config_name() + ")";
  return "nns repl: " + what + ": " + std::to_string(s.top_level_ops) + " ops, " + sema::format_count(static_cast<double>(s.param_count)) +
         " parameters; the plan spreads them over " + std::to_string(plan_.ngpus) +
         " device(s).\n'help' lists the commands; Tab completes; Ctrl-C cancels; Ctrl-D ends the session.\n";
}

void Session::print_diagnostics() {
  if (diags_->all().empty()) return;
  out_.flush();
  for (const front::Diagnostic& d : diags_->all()) err_ << diags_->format(d, opts_.colour);
  err_.flush();
  diags_->clear();
}

// Only blank lines and comments: nothing to run (and no input number used).
static bool nothing_to_run(const std::string& input) {
  size_t i = 0;
  while (i < input.size()) {
    size_t end = input.find('\n', i);
    if (end == std::string::npos) end = input.size();
    size_t first = input.find_first_not_of(" \t\r", i);
    if (first < end && input[first] != '#') return false;
    i = end + 1;
  }
  return true;
}

bool Session::handle(const std::string& input) {
  if (nothing_to_run(input)) return true;
  Command c;
  bool is_command = input.find('\n') == std::string::npos && parse_command(input, c);
  // Evaluation cannot be stopped halfway (the interpreter has no
  // cancellation points); `run` can, and handles Ctrl-C itself.
  bool busy = !(is_command && c.name == "run");
  if (busy) set_busy(true);
  bool ok = false;
  try {
    ok = is_command ? run_command(c) : run_nns(input);
  } catch (const std::exception& e) {
    diags_->clear();
    err_ << "nns: internal error: " << e.what() << " (the session goes on)\n";
  }
  if (busy) {
    set_busy(false);
    if (take_interrupt()) out_ << "  (Ctrl-C came while this input was evaluated, which cannot be stopped halfway; three in a row end nns)\n";
  }
  out_.flush();
  return ok;
}

void Session::define_ngpus() { interp_->session_env()->define("ngpus", Value(static_cast<int64_t>(plan_.ngpus))); }

PlanFacts Session::analyse(const Plan& p) const {
  sema::check::CheckOptions o;
  o.timeout_ms = 5000;  // an answer while the user waits; "gave up" is reported, not an error
  o.sources = sources_.get();
  const sema::TrainSpec spec = interp_->train() ? *interp_->train() : sema::TrainSpec{};
  o.micro_batches = spec.micro_batches;
  sema::Interpreter& interp = *interp_;
  backend::Elaborator elaborate = [&interp](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                                            const std::map<std::string, int64_t>& divisors, sema::Graph& local) {
    return interp.instantiate_op(node, ins, outs, divisors, local);
  };
  return repl::analyse(interp_->graph(), p, o, spec, elaborate);
}

std::string Session::verdict(const Plan& p, const PlanFacts& facts) {
  for (const front::Diagnostic& d : facts.check.diagnostics) diags_->report(d);
  print_diagnostics();
  // (No solve times here: scripted sessions compare their output.)
  if (facts.check.verdict == sema::check::Verdict::Illegal) return "  verdict illegal: the Z3 checker found the conflict above\n";
  int unplaced = unplaced_leaves(p);
  std::string line = "  verdict ";
  if (unplaced == 0) line += "legal and complete: every sub-op has a device";
  else line += "legal so far: " + std::to_string(unplaced) + " sub-op(s) have no device yet (counted above as on every device)";
  if (facts.check.verdict == sema::check::Verdict::Unknown) line += "; the Z3 checker gave up (" + facts.check.reason + ")\n";
  else line += "; proved by the Z3 checker\n";
  return line;
}

bool Session::run_nns(const std::string& text) {
  std::string name = "<repl:" + std::to_string(++inputs_) + ">";
  Plan before = plan_;
  size_t nodes_before = interp_->graph().nodes().size();
  std::optional<Value> result;
  bool ok = false;
  try {
    ok = interp_->run_session_input(name, text, &plan_, &result);
  } catch (const std::exception& e) {
    // Out of memory (a list of a billion items) or a bug: this input
    // fails, the session does not.
    diags_->error({}, std::string("internal error while running the input: ") + e.what());
  }
  print_diagnostics();
  if (!ok) {
    bool rolled_back = !same_plan(before, plan_);
    if (rolled_back) {
      Plan partial = std::move(plan_);
      plan_ = before;
      forget_stale_handles(partial, plan_);
    }
    // Say so whenever the input tried a directive, so that "refused" is
    // never ambiguous.
    static const char* prims[] = {"trans", "assign", "replicate", "order", "recompute", "regather"};
    bool directive = rolled_back;
    for (const char* p : prims)
      if (text.find(std::string(p) + "(") != std::string::npos) directive = true;
    if (directive) out_ << "  refused: the plan is unchanged" << (rolled_back ? " (the input's earlier changes were rolled back)" : "") << "\n";
    return false;
  }
  choose_auto_orders();
  if (result && !result->is<sema::NoneV>()) out_ << format_value(*result, interp_->graph(), &plan_) << "\n";
  if (!same_plan(before, plan_)) {
    PlanFacts facts = analyse(plan_);
    std::string line = verdict(plan_, facts);
    if (facts.check.verdict == sema::check::Verdict::Illegal) {
      // Legal for plan evaluation, refused by the checker: as any refusal,
      // the plan stays as it was.
      Plan refused = std::move(plan_);
      plan_ = std::move(before);
      forget_stale_handles(refused, plan_);
      out_ << line << "  refused: the plan is unchanged\n";
      return false;
    }
    ChangeReport r = report_change(interp_->graph(), before, facts_, plan_, facts, opts_.colour);
    undo_.push_back(std::move(before));
    facts_ = std::move(facts);
    out_ << r.text << line;
  }
  if (nodes_before == model_nodes_ && interp_->graph().nodes().size() > model_nodes_)
    out_ << "  note: ops called at the prompt are evaluated (shapes) but are not part of the model: plans, ops and run see the file's model only\n";
  return true;
}

bool Session::set_plan(Plan next, bool push_undo, const std::string& why, bool refuse_illegal) {
  if (same_plan(plan_, next)) {
    out_ << "  " << why << ": the plan is unchanged\n";
    return true;
  }
  PlanFacts facts = analyse(next);
  std::string line = verdict(next, facts);
  if (facts.check.verdict == sema::check::Verdict::Illegal && refuse_illegal) {
    out_ << line << "  refused: the plan is unchanged\n";
    return false;
  }
  ChangeReport r = report_change(interp_->graph(), plan_, facts_, next, facts, opts_.colour);
  Plan old = std::move(plan_);
  plan_ = std::move(next);
  facts_ = std::move(facts);
  forget_stale_handles(old, plan_);
  if (push_undo) undo_.push_back(std::move(old));
  define_ngpus();
  out_ << "  " << why << "\n" << r.text << line;
  return true;
}

// assign(..., order = "auto") typed at the prompt is chosen at once, with
// the sub-ops still without a device counted as on every device (as the
// change report counts them).
void Session::choose_auto_orders() {
  bool pending = false;
  for (const sema::AutoOrder& a : plan_.auto_orders) pending = pending || a.chosen.empty();
  if (!pending) return;
  Plan full = completed(plan_);
  backend::choose_auto_orders(interp_->graph(), full);
  for (const sema::AutoOrder& a : full.auto_orders)
    for (size_t i = 0; i < a.chosen.size(); ++i) plan_.subops[static_cast<size_t>(a.subops[i])].devices = {a.chosen[i]};
  plan_.auto_orders = std::move(full.auto_orders);
}

void Session::forget_stale_handles(const Plan& old_plan, const Plan& new_plan) {
  // Sub-ops are appended, never reordered: the prefix both plans share is
  // the same sub-ops; handles past it named sub-ops the new plan lacks (or
  // has made differently).
  size_t keep = 0;
  while (keep < old_plan.subops.size() && keep < new_plan.subops.size()) {
    const sema::SubOp &a = old_plan.subops[keep], &b = new_plan.subops[keep];
    if (a.node != b.node || a.parent != b.parent || a.split_id != b.split_id || a.split_index != b.split_index || a.split_num != b.split_num)
      break;
    ++keep;
  }
  std::set<const void*> seen;
  std::function<void(Value&)> visit = [&](Value& v) {
    if (v.is<sema::OpHandle>()) {
      if (v.as<sema::OpHandle>().subop >= static_cast<int>(keep)) v.as<sema::OpHandle>().subop = -1;
    } else if (v.is<std::shared_ptr<sema::List>>()) {
      auto l = v.as<std::shared_ptr<sema::List>>();
      if (l && seen.insert(l.get()).second)
        for (Value& item : *l) visit(item);
    } else if (v.is<std::shared_ptr<sema::Record>>()) {
      auto r = v.as<std::shared_ptr<sema::Record>>();
      if (r && seen.insert(r.get()).second)
        for (auto& field : r->fields) visit(field.second);
    }
  };
  for (sema::Env* e = interp_->session_env().get(); e; e = e->parent.get())
    for (auto& entry : e->vars) visit(entry.second);
}

int Session::find_op(const std::string& name) const {
  const sema::Graph& g = interp_->graph();
  for (size_t n = 0; n < plan_.root_of_node.size(); ++n)
    if (plan_.root_of_node[n] >= 0 && g.node(static_cast<int>(n)).name == name) return static_cast<int>(n);
  return -1;
}

// The ops a pattern selects, through the plan primitive select() itself.
std::vector<int> Session::select_ops(const std::string& pattern, bool& ok) {
  std::vector<int> nodes;
  ok = false;
  if (pattern.find_first_of("\"\\\n") != std::string::npos) {
    err_ << "nns: error: a pattern cannot contain quotes or backslashes\n";
    return nodes;
  }
  Plan scratch = plan_;
  std::optional<Value> result;
  bool good = interp_->run_session_input("<pattern:" + std::to_string(++internal_inputs_) + ">", "select(\"" + pattern + "\", allow_empty = true)", &scratch, &result);
  print_diagnostics();
  if (!good || !result || !result->is<std::shared_ptr<sema::List>>()) return nodes;
  for (const Value& v : *result->as<std::shared_ptr<sema::List>>())
    if (v.is<sema::OpHandle>() && v.as<sema::OpHandle>().subop >= 0) nodes.push_back(scratch.subops[v.as<sema::OpHandle>().subop].node);
  ok = true;
  return nodes;
}

std::string Session::plan_text(const std::string& name) const { return plan_to_nns(interp_->graph(), plan_, name); }

std::string Session::unique_plan_name() const {
  std::set<std::string> taken;
  for (const sema::PlanInfo& p : interp_->plans()) taken.insert(p.name);
  std::string name = "session";
  for (int i = 2; taken.count(name); ++i) name = "session_" + std::to_string(i);
  return name;
}

// ---- completion -------------------------------------------------------------------

namespace {

// Expressions completion may evaluate: a name or dotted chain, select("...")
// or by_name("..."), each optionally indexed by integers. Nothing that can
// call a user function or change the plan.
bool harmless_op_expression(const std::string& e) {
  static const std::regex form(R"(^([A-Za-z_][A-Za-z_0-9.]*|(select|by_name)\("[^"\\]*"\))(\[[0-9]+\])*$)");
  return std::regex_match(e, form);
}

void add_ids(const sema::OpNode& node, std::set<std::string>& ids) {
  for (const auto* side : {&node.anno.anno.inputs, &node.anno.anno.outputs})
    for (const sema::OperandAnno& o : *side)
      for (const sema::DimAnno& d : o.dims)
        for (const sema::DimId& id : d.ids)
          if (!id.numeric && id.reduce != sema::Reduce::Frozen) ids.insert(id.name);
}

}  // namespace

std::vector<std::string> Session::anno_ids_of(const std::string& expr) const {
  if (!harmless_op_expression(expr)) return {};
  // Evaluated on a scratch copy of the plan; its diagnostics are dropped
  // (a name that is not an op handle simply gives no identifiers).
  Plan scratch = plan_;
  std::optional<Value> result;
  bool ok = interp_->run_session_input("<completion>", expr, &scratch, &result);
  diags_->clear();
  if (!ok || !result) return {};
  std::set<std::string> ids;
  auto add = [&](const Value& v) {
    if (v.is<sema::OpHandle>() && v.as<sema::OpHandle>().subop >= 0 &&
        v.as<sema::OpHandle>().subop < static_cast<int>(scratch.subops.size()))
      add_ids(interp_->graph().node(scratch.subops[static_cast<size_t>(v.as<sema::OpHandle>().subop)].node), ids);
  };
  if (result->is<std::shared_ptr<sema::List>>())
    for (const Value& v : *result->as<std::shared_ptr<sema::List>>()) add(v);
  else
    add(*result);
  return {ids.begin(), ids.end()};
}

Completion Session::complete(const std::string& before, bool first_line) const {
  const sema::Graph& g = interp_->graph();
  if (!completion_ready_) {
    // Names of the model do not change during a session.
    completion_.commands = command_names();
    completion_.help_topics = command_names();
    for (const char* p : {"trans", "assign", "replicate", "order", "recompute", "regather", "select", "unassigned",
                          "splittable", "kind", "directives", "keys"})
      completion_.help_topics.push_back(p);
    std::set<std::string> ids;
    for (size_t n = 0; n < plan_.root_of_node.size(); ++n) {
      if (plan_.root_of_node[n] < 0) continue;
      const sema::OpNode& node = g.node(static_cast<int>(n));
      completion_.op_names.push_back(node.name);
      add_ids(node, ids);
    }
    completion_.anno_ids.assign(ids.begin(), ids.end());
    for (const sema::TensorInfo& t : g.tensors())
      if (t.kind != sema::TensorKind::Activation && !t.name.empty()) completion_.param_names.push_back(t.name);
    completion_ready_ = true;
  }
  CompletionData data = completion_;
  data.plan_names.clear();
  for (const sema::PlanInfo& p : interp_->plans()) data.plan_names.push_back(p.name);
  // Names in scope: the session's, the file's, the stdlib's and the builtins.
  std::set<std::string> names;
  for (sema::Env* e = interp_->session_env().get(); e; e = e->parent.get())
    for (const auto& entry : e->vars)
      if (entry.first.rfind("__", 0) != 0) names.insert(entry.first);
  data.names.assign(names.begin(), names.end());
  sema::Env* session = interp_->session_env().get();
  data.members = [session, &g](const std::string& chain) {
    std::vector<std::string> out;
    // Follow a.b.c through records, modules and instances (no evaluation).
    size_t start = 0;
    const Value* v = nullptr;
    while (start <= chain.size()) {
      size_t dot = chain.find('.', start);
      std::string part = chain.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!v) {
        v = session->find(part);
      } else if (v->is<std::shared_ptr<sema::Record>>()) {
        v = v->as<std::shared_ptr<sema::Record>>()->get(part);
      } else if (v->is<std::shared_ptr<sema::Module>>()) {
        v = v->as<std::shared_ptr<sema::Module>>()->env->find_local(part);
      } else if (v->is<std::shared_ptr<sema::Instance>>()) {
        v = v->as<std::shared_ptr<sema::Instance>>()->env->find_local(part);
      } else {
        v = nullptr;
      }
      if (!v) return out;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (v->is<std::shared_ptr<sema::Record>>()) {
      for (const auto& f : v->as<std::shared_ptr<sema::Record>>()->fields) out.push_back(f.first);
    } else if (v->is<std::shared_ptr<sema::Module>>()) {
      out = v->as<std::shared_ptr<sema::Module>>()->env->order;
    } else if (v->is<std::shared_ptr<sema::Instance>>()) {
      out = v->as<std::shared_ptr<sema::Instance>>()->env->order;
    } else if (v->is<sema::TensorV>()) {
      out = {"shape", "rank", "dtype", "numel"};
    }
    (void)g;
    return out;
  };
  data.op_anno_ids = [this](const std::string& expr) { return anno_ids_of(expr); };
  return complete_input(before, first_line, data);
}

}  // namespace nns::repl
