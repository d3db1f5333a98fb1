// Plan evaluation (phase 3): runs a `plan` block of the program against the
// forward graph and returns the Plan it builds. The block's statements call
// the plan builtins (plan_builtins.cpp: select, trans, assign...; the
// constraint tables of checker/table_builtins.cpp), which act on the Plan
// through Interpreter::active_plan().
//
// Plan parameters: the one named `ngpus` is bound from the command line —
// the plan's device count that the driver passes as `ngpus`: `--plan-gpus K`
// when given, else `--gpus N` (`nns check|run FILE --plan P`); in the REPL,
// the session's device count (`gpus N`). Every other parameter takes its
// default value; one without a default is an error. The same number becomes
// Plan::ngpus, against which assign/replicate check device indices.
#include <algorithm>

#include "frontend/suggest.h"
#include "semantics/interpreter.h"

namespace nns::sema {

// Room for the sub-ops a plan usually makes: every op split over the
// devices, and once more into groups first (Swin's coshard: images over
// the data-parallel groups, then heads within a group). split_in_plan grows
// the array as it must; reserving here spares the relocations, each of
// which moves every sub-op into freshly faulted pages: they were 11-15 % of
// evaluating AlphaFold2's dap (400k sub-ops) and Swin's coshard (823k). The
// room left unused is address space only (no page of it is touched); the
// cap keeps it under a gigabyte.
static void reserve_subops(Plan& plan) {
  constexpr size_t kMaxReserved = size_t{1} << 22;
  const size_t ops = plan.subops.size();
  const size_t per_op = 1 + 2 * static_cast<size_t>(std::max<int64_t>(plan.ngpus, 1));
  const size_t want = per_op > kMaxReserved / std::max<size_t>(ops, 1) ? kMaxReserved : ops * per_op;
  plan.subops.reserve(std::max(want, ops));
}

bool Interpreter::evaluate_plan(const std::string& name, int64_t ngpus, Plan& out) {
  start_budget();
  failure_ = Failure::None;
  const PlanInfo* info = nullptr;
  for (const PlanInfo& p : plans_)
    if (p.name == name) info = &p;
  if (!info) {
    std::string names;
    std::vector<std::string> known;
    for (const PlanInfo& p : plans_) {
      names += (names.empty() ? "" : ", ") + p.name;
      known.push_back(p.name);
    }
    diags_.error({}, "unknown plan '" + name + "'" + front::did_you_mean(name, known) +
                         (names.empty() ? " (the file defines none)" : "; available: " + names));
    failure_ = Failure::UnknownPlan;
    return finish_phase(false);
  }
  out = new_plan(name, ngpus);
  reserve_subops(out);
  try {
    // Plan parameters: `ngpus` comes from the command line, the rest from defaults.
    auto env = new_env(info->env ? info->env : main_env_);
    for (const front::Param& p : info->fn->params) {
      if (p.name == "ngpus") {
        env->define(p.name, Value(ngpus));
      } else if (p.default_value) {
        env->define(p.name, eval(*p.default_value, env));
      } else {
        fail(p.loc, "plan parameter '" + p.name + "' has no default value (only 'ngpus' is bound from the command line)");
      }
    }
    plan_ = &out;
    struct Reset {
      Plan*& p;
      ~Reset() { p = nullptr; }
    } reset{plan_};
    Flow flow = exec_block(info->fn->body, env);
    if (flow != Flow::Normal && flow != Flow::Return) fail(info->fn->loc, "'break' or 'continue' outside a loop in plan '" + name + "'");
    // Every leaf sub-op must run somewhere.
    std::vector<int> missing;
    for (int leaf : out.leaves())
      if (out.subops[leaf].devices.empty()) missing.push_back(leaf);
    if (!missing.empty()) {
      front::Diagnostic d{front::Severity::Error,
                          info->fn->loc,
                          "plan '" + name + "' leaves " + std::to_string(missing.size()) +
                              " op(s) without a device; first: '" + graph_->node(out.subops[missing[0]].node).name +
                              "' (assign or replicate it, e.g. replicate(unassigned(), 0..ngpus))",
                          {}};
      if (out.subops[missing[0]].split_loc.valid())
        d.notes.push_back({front::Severity::Note, out.subops[missing[0]].split_loc, "it was split here", {}});
      d.notes.push_back(
          {front::Severity::Note, graph_->node(out.subops[missing[0]].node).loc, "the op is called here", {}});
      throw front::UserError{std::move(d)};
    }
  } catch (front::UserError& e) {
    diags_.report(std::move(e.diag));
    return finish_phase(false);
  }
  return finish_phase(true);
}

// The plan before any directive.
Plan Interpreter::new_plan(const std::string& name, int64_t ngpus) const {
  Plan out;
  out.name = name;
  out.ngpus = ngpus;
  out.root_of_node.assign(graph_->nodes().size(), -1);
  out.segment_of_node.assign(graph_->nodes().size(), -1);
  for (const OpNode& n : graph_->nodes()) {
    if (n.parent >= 0 || n.phase != Phase::Forward) continue;
    out.root_of_node[n.id] = static_cast<int>(out.subops.size());
    out.subops.push_back(whole_op(*graph_, n.id));
  }
  return out;
}

}  // namespace nns::sema
