#include "driver/pipeline.h"
#include "driver/check_stage.h"
#include "semantics/check_deadline.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "backend/lowering/auto_order.h"
#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_check.h"
#include "backend/lowering/program.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_classes.h"
#include "backend/lowering/schedule_view.h"
#include "driver/setup_notice.h"
#include "driver/train.h"
#include "driver/weights.h"
#include "frontend/ast_printer.h"
#include "frontend/parser.h"
#include "frontend/regular_file.h"

namespace nns::driver {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void print_diagnostics(Pipeline& p) {
  p.diags.print(std::cerr, front::want_colour());
  p.diags.clear();
}

namespace {

struct StageName {
  Stage stage;
  const char* name;
};
constexpr StageName kStages[] = {{Stage::Tokens, "tokens"},   {Stage::Ast, "ast"},   {Stage::Graph, "graph"},
                                 {Stage::Plan, "plan"},       {Stage::Check, "check"}, {Stage::Comm, "comm"},
                                 {Stage::Program, "program"}, {Stage::Schedule, "schedule"},
                                 {Stage::TrainingGraph, "training-graph"}};

// The exit code of a failed stage: 64 when the interpreter says the
// failure is a usage problem (an unknown --config or --plan), else `code`.
int failed(Pipeline& p, int code) {
  sema::Interpreter::Failure f = p.interp ? p.interp->failure() : sema::Interpreter::Failure::Other;
  if (f == sema::Interpreter::Failure::UnknownConfig || f == sema::Interpreter::Failure::UnknownPlan) code = kExitUsage;
  print_diagnostics(p);
  return code;
}

// Devices of 0..ngpus-1 that no sub-op of a fully placed plan runs on: a
// plan written for fewer devices (a 2-stage pipeline under --gpus 4) would
// otherwise leave them idle without a word. Unplaced ops are the checker's
// error, so a plan with some says nothing here.
void warn_idle_devices(const sema::Plan& plan) {
  std::vector<bool> used(static_cast<size_t>(std::max<int64_t>(plan.ngpus, 0)), false);
  for (int leaf : plan.leaves()) {
    if (plan.subops[leaf].devices.empty()) return;
    for (int d : plan.subops[leaf].devices)
      if (d >= 0 && d < static_cast<int>(used.size())) used[d] = true;
  }
  std::string idle;
  size_t count = 0;
  for (size_t d = 0; d < used.size(); ++d)
    if (!used[d]) idle += (count++ ? ", " : "") + std::to_string(d);
  if (count == 0) return;
  std::cerr
      << "nns: warning: plan " << plan.name << " on " << plan.ngpus << " devices leaves "
      << (count == 1 ? "device " : "devices ") << idle
      << " idle (no op is placed there); pass --gpus with the devices it uses, or --plan-gpus to run replicas of it\n";
}

// plan: --plan evaluated for topo.devices devices (the plan parameter `ngpus`).
int plan_stage(const PipelineOptions& o, Pipeline& p, std::ostream& report) {
  auto t0 = std::chrono::steady_clock::now();
  sema::CheckDeadline::stage("plan evaluation");
  if (!p.interp->evaluate_plan(o.plan, o.topo.devices, p.plan)) return failed(p, kExitBadInput);
  print_diagnostics(p);
  warn_idle_devices(p.plan);
  double eval_ms = ms_since(t0);
  // Before anything reads the devices: --emit=plan, check, comm and run all
  // see the chosen orders.
  auto t_auto = std::chrono::steady_clock::now();
  sema::CheckDeadline::stage("choosing device orders (order = \"auto\")");
  backend::choose_auto_orders(p.graph(), p.plan);
  double auto_ms = ms_since(t_auto);
  char line[512];
  std::snprintf(line, sizeof line, "plan %s on %lld device(s): %zu sub-ops, %zu order constraint(s), evaluated in %.1f ms\n", o.plan.c_str(),
                static_cast<long long>(o.topo.devices), p.plan.leaves().size(), p.plan.orders.size(), eval_ms);
  report << line;
  if (!p.plan.auto_orders.empty()) {
    std::snprintf(line, sizeof line, "  order auto: %zu group(s) chosen by adapter cost in %.1f ms\n", p.plan.auto_orders.size(), auto_ms);
    report << line;
  }
  if (!p.plan.task_orders.empty()) {
    report << "  tasks: " << p.plan.segments.size() << " segment(s), " << p.plan.task_orders.size() << " task order(s)";
    if (!p.plan.schedules.empty()) report << " from schedule(\"" << p.plan.schedules[0].kind << "\")";
    report << "\n";
  }
  return kExitOk;
}

}  // namespace

const char* emit_stage_names() { return "tokens|ast|graph|plan|check|comm|program|schedule|training-graph"; }

bool emit_stage(const std::string& name, Stage& out) {
  for (const StageName& s : kStages)
    if (name == s.name) {
      out = s.stage;
      return true;
    }
  return false;
}

bool stage_needs_plan(Stage s) { return s == Stage::Plan || s == Stage::Check || s == Stage::Comm; }

int run_pipeline(const PipelineOptions& o, Pipeline& p) {
  // Stages report a line or two on stdout (the plan's size, the checker's
  // verdict, program verification); --emit prints only its stage, and the
  // check stage's output is that report.
  std::ostream quiet(nullptr);
  auto report = [&](Stage s) -> std::ostream& { return !o.emit || (s == Stage::Check && o.last == s) ? std::cout : quiet; };
  auto emits = [&](Stage s) { return o.emit && o.last == s; };
  const bool plan = !o.plan.empty();

  // tokens: the file alone, before any parsing.
  if (o.last == Stage::Tokens) {
    int file = p.sources.load(o.path);
    if (file < 0) {
      std::cerr << "nns: error: cannot read file '" << o.path << "'" << front::why_unreadable(o.path) << "\n";
      return kExitBadInput;
    }
    if (!front::check_utf8(p.sources, file, p.diags)) return failed(p, kExitBadInput);
    std::cout << front::dump_tokens(p.sources, file);
    return kExitOk;
  }

  // ast
  auto t0 = std::chrono::steady_clock::now();
  p.interp = std::make_unique<sema::Interpreter>(p.sources, p.diags, sema::EvalOptions{o.config, stdlib_dirs(), o.eval_budget, o.sets});
  if (!p.interp->parse(o.path)) return failed(p, kExitBadInput);
  if (emits(Stage::Ast)) {
    std::cout << front::dump_ast(*p.interp->main_program());
    return kExitOk;
  }

  // graph: the program evaluated with its config; the forward operator graph.
  {
    SetupNotice notice("elaborating " + o.path + (o.config.empty() ? "" : " (config " + o.config + ")"));
    if (!p.interp->evaluate()) return failed(p, kExitBadInput);
  }
  if (o.run.eval) prepare_eval(p.graph());  // nns run --eval, also with --emit
  p.elaborate_ms = ms_since(t0);
  print_diagnostics(p);  // warnings
  if (emits(Stage::Graph)) {
    std::cout << p.graph().dump();
    return kExitOk;
  }
  if (o.last >= Stage::Program && !p.interp->train()) {
    std::cerr << "nns: error: " << o.path << " has no train block; nothing to run\n";
    return kExitBadInput;
  }
  // nns check: the file's weights maps name parameters the model has.
  if (o.last == Stage::Check && !o.emit)
    if (int rc = check_weight_maps(p); rc != kExitOk) return rc;
  // --init through a weights map (or --init-partial): read before anything
  // is lowered, so a checkpoint that does not fit fails in seconds.
  if (o.last == Stage::Run && !o.emit)
    if (int rc = import_init_weights(p, o.run); rc != kExitOk) return rc;

  // plan, check, comm: only with --plan (evaluated on the forward graph).
  if (plan && o.last >= Stage::Plan) {
    // --check-timeout bounds plan evaluation through program verification.
    struct DeadlineScope {
      explicit DeadlineScope(unsigned ms) { sema::CheckDeadline::start(ms); }
      ~DeadlineScope() { sema::CheckDeadline::clear(); }
    } deadline(o.check.total_timeout_ms);
    try {
      SetupNotice notice("checking plan " + o.plan + " on " + std::to_string(o.topo.devices) +
                         " device(s) (Z3, then program verification)");
      if (int rc = plan_stage(o, p, report(Stage::Plan)); rc != kExitOk) return rc;
      if (emits(Stage::Plan)) {
        std::cout << p.plan.dump(p.graph());
        return kExitOk;
      }
      if (o.last >= Stage::Check)
        if (int rc = check_stage(o, p, report(Stage::Check)); rc != kExitOk) return rc;
    } catch (const sema::CheckTimeout& e) {
      std::cout.flush();
      print_diagnostics(p);
      std::cerr << "nns: error: the check of plan " << o.plan << " did not finish: " << e.what() << " (raise --check-timeout)\n";
      return kExitRuntime;
    }
  }
  p.planned = plan;
  if (!plan && o.topo.ranks > 1 && o.last >= Stage::Check)
    if (int rc = implicit_plan_stage(o, p, report(Stage::Check)); rc != kExitOk) return rc;
  if (plan && emits(Stage::Comm)) {
    // With the train block's micro-batches the dump adds the step's totals.
    const int mbs = p.interp->train() ? static_cast<int>(p.interp->train()->micro_batches) : 1;
    std::cout << p.comm.dump(p.graph(), mbs);
  }
  if (o.last <= Stage::Comm) return kExitOk;

  // program: what each rank runs. On one device without a plan, the
  // device's Program is lowered from the training graph, so that stage is
  // built for it here.
  p.spec = *p.interp->train();
  if (o.steps > 0) {
    // The run's length is the schedule's horizon unless the train block
    // pins one (cosine_lr(steps = N)), as Megatron's decay iterations
    // default to its train iterations.
    p.spec.steps = o.steps;
    if (!p.spec.schedule.pinned) p.spec.schedule.steps = o.steps;
  }
  if (emits(Stage::Schedule)) {
    if (!plan) {
      std::cerr << "nns: error: --emit=schedule needs --plan NAME (a schedule is part of a plan)\n";
      return kExitUsage;
    }
    try {
      backend::LowerOptions lo;
      lo.comm = &p.comm;
      lo.replicas = static_cast<int>(o.topo.replicas);
      lo.communication_only = true;  // the task order is all it needs
      std::cout << backend::schedule_text(p.graph(), p.plan, backend::lower_plan(p.graph(), p.plan, p.spec, lo));
    } catch (const backend::LoweringError& e) {
      return report_lowering_error(p, e);
    }
    return kExitOk;
  }
  if (emits(Stage::Program)) {
    if (p.planned) return emit_program(p, o.topo, o.program_pass);
    sema::TrainingGraphInfo info = sema::build_training_graph(p.graph(), p.spec.optimizer.kind);
    std::cout << backend::lower_single_device(p.graph(), info).dump(p.graph());
    return kExitOk;
  }

  // training-graph: autograd's backward ops and the optimizer's updates appended.
  p.info = sema::build_training_graph(p.graph(), p.spec.optimizer.kind);
  if (emits(Stage::TrainingGraph)) {
    std::cout << p.graph().dump();
    return kExitOk;
  }

  // run (a pipeline built up to here only, as validation's is, stops)
  if (o.last < Stage::Run) return kExitOk;
  if (o.run.eval) return run_eval(p, o);
  return run_training(p, o);
}

backend::LowerOptions lower_options(sema::Interpreter& interp, const backend::CommPlan& comm, const Topology& topo) {
  backend::LowerOptions lo;
  lo.comm = &comm;
  lo.replicas = static_cast<int>(topo.replicas);
  lo.distributed_optimizer = topo.distributed_optimizer;
  lo.elaborate = [&interp](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                           const std::map<std::string, int64_t>& divisors, sema::Graph& local) {
    return interp.instantiate_op(node, ins, outs, divisors, local);
  };
  // Each distinct kernel elaborated once (backend/lowering/kernel_cache.h).
  lo.elaboration_key = [&interp](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                                 const std::map<std::string, int64_t>& divisors) {
    return interp.instantiation_key(node, ins, outs, divisors);
  };
  return lo;
}

backend::LoweredPlan lower_with_bodies(sema::Interpreter& interp, const sema::Graph& g, const sema::Plan& plan, const backend::CommPlan& comm,
                                       const sema::TrainSpec& spec, const Topology& topo, int only_rank, const std::string& stop_after) {
  backend::LowerOptions lo = lower_options(interp, comm, topo);
  lo.only_rank = only_rank;
  lo.stop_after = stop_after;
  return backend::lower_plan(g, plan, spec, lo);
}

int emit_program(Pipeline& p, const Topology& topo, const std::string& stop_after) {
  try {
    std::cout << lower_with_bodies(*p.interp, p.graph(), p.plan, p.comm, p.spec, topo, -1, stop_after).dump(p.graph());
  } catch (const backend::LoweringError& e) {
    return report_lowering_error(p, e);
  }
  return kExitOk;
}

int report_lowering_error(Pipeline& p, const backend::LoweringError& e) {
  std::cout.flush();
  if (!e.loc.valid()) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitRuntime;
  }
  p.diags.error(e.loc, e.what());
  print_diagnostics(p);
  return kExitRuntime;
}

void keep_until_exit(Pipeline&& p) {
  // Neither the list nor what it holds is ever destroyed (pipeline.h).
  static std::vector<Pipeline*>* kept = new std::vector<Pipeline*>;
  kept->push_back(new Pipeline(std::move(p)));
}

}  // namespace nns::driver
