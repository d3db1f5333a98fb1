// fuzz_interpreter: a program parsed and evaluated as `nns check FILE` does
// up to the forward graph (driver::run_pipeline, Stage::Graph: parse, the
// stdlib and imports, the config, models, ops, the train block), then each
// of its plans (at most two) evaluated for 2 devices as the plan stage of
// `--plan P --gpus 2` evaluates them (evaluate_plan, then the "auto"
// orders), without the checker. Nothing trains and nothing is
// written but the input itself, in a private temporary folder (the
// pipeline reads files; imports resolve beside it and in stdlib/).
//
// Each evaluation has a budget of kBudgetSteps steps (--eval-budget) and
// kBudgetSeconds of wall time (--eval-timeout), so an
// endless loop ends with its located error. Exit 64/65 (diagnostics) is the
// expected outcome for bad programs; exit 70 or an exception escaping the
// pipeline is an internal error and aborts.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "backend/lowering/auto_order.h"
#include "driver/args.h"
#include "driver/pipeline.h"
#include "fuzz/fuzz_util.h"

namespace {

constexpr int64_t kBudgetSteps = 2'000'000;
constexpr double kBudgetSeconds = 0.25;
constexpr int kMaxPlans = 2;

nns::fuzz::InputFile g_input("fuzz_interpreter", "input.nns");

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nns::fuzz::silence_streams();
  g_input.create();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nns::driver;
  g_input.write(data, size);
  nns::fuzz::run_guarded("fuzz_interpreter", [&] {
    PipelineOptions o;
    o.path = g_input.path();
    o.last = Stage::Graph;
    o.eval_budget.steps = kBudgetSteps;
    o.eval_budget.seconds = kBudgetSeconds;
    Pipeline p;
    const int rc = run_pipeline(o, p);
    if (rc != kExitOk && rc != kExitUsage && rc != kExitBadInput)
      nns::fuzz::internal_error("fuzz_interpreter", "the graph stage exited " + std::to_string(rc));
    if (rc != kExitOk) return;
    int n = 0;
    for (const nns::sema::PlanInfo& info : std::vector<nns::sema::PlanInfo>(p.interp->plans())) {
      if (n++ == kMaxPlans) break;
      nns::sema::Plan plan;
      // As the plan stage does: evaluate, then choose the "auto" orders.
      if (p.interp->evaluate_plan(info.name, 2, plan)) nns::backend::choose_auto_orders(p.graph(), plan);
      p.diags.clear();  // false: diagnostics (exit 65)
    }
  });
  return 0;
}
