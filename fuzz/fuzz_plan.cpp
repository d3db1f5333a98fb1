// fuzz_plan: the input is the body of a plan, evaluated for 2 devices
// against one fixed small model (two linears and a norm: ops of several
// kinds, a pipeline of two blocks), as `nns check --plan p --gpus 2` does up
// to the checker: evaluate_plan, then the "auto" orders. Where
// fuzz_interpreter mutates whole files and rarely reaches a plan that
// evaluates, every input here does: the mutations land in the plan
// builtins' argument lists (assign, trans, replicate, zero1, recompute,
// order, the tables) and in schedules (schedule("1f1b"/"interleaved"/...),
// fwd/bwd, micro-batch counts).
//
// A budget of kBudgetSteps steps and kBudgetSeconds of wall time bounds
// each evaluation. Exit 64/65 is expected for bad plans; anything else
// aborts (fuzz_util.h).
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

// The model every plan runs against; the input goes between the braces of
// `plan p(ngpus) { ... }`.
constexpr const char* kModel = R"(model Block(d) {
  param w: [d, d] = normal(0.02)
  fn forward(x) { return relu(linear(x, w)) }
}
model Net() {
  blocks = [Block(16), Block(16)]
  param g: [16] = ones()
  param bias: [16] = zeros()
  fn forward(x) {
    let h = x
    for b in blocks { h = b(h) }
    return layer_norm(h, g, bias)
  }
}
train {
  model = Net()
  input x: [8, 16] = randn()
  loss = mse(model(x), x)
  optimizer = sgd(lr = 0.1)
}
plan p(ngpus) {
)";

nns::fuzz::InputFile g_input("fuzz_plan", "input.nns");

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nns::fuzz::silence_streams();
  g_input.create();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nns::driver;
  const std::string text = std::string(kModel) + std::string(reinterpret_cast<const char*>(data), size) + "\n}\n";
  g_input.write(text.data(), text.size());
  nns::fuzz::run_guarded("fuzz_plan", [&] {
    PipelineOptions o;
    o.path = g_input.path();
    o.last = Stage::Graph;
    o.eval_budget.steps = kBudgetSteps;
    o.eval_budget.seconds = kBudgetSeconds;
    Pipeline p;
    const int rc = run_pipeline(o, p);
    if (rc != kExitOk && rc != kExitUsage && rc != kExitBadInput)
      nns::fuzz::internal_error("fuzz_plan", "the graph stage exited " + std::to_string(rc));
    if (rc != kExitOk) return;
    nns::sema::Plan plan;
    if (p.interp->evaluate_plan("p", 2, plan)) nns::backend::choose_auto_orders(p.graph(), plan);
    p.diags.clear();
  });
  return 0;
}
