// The evaluation budget (Interpreter, EvalOptions): a header of its own so
// that option parsers can hold one without the interpreter.
#pragma once

#include <cstdint>

namespace nns::sema {

// How much work one evaluation (a file, a plan, a REPL line, a sub-op's
// body) may do before it is stopped as endless, located where it stood.
// The budget counts interpreter steps (a loop iteration, a call, a list
// element made), so a file gets the same verdict on every machine and under
// any load; a wall-clock cap exists too, off by default (--eval-timeout).
struct EvalBudget {
  // Steps. Measured 2026-11-28: the largest shipped evaluation, AlphaFold2's
  // dap plan at 128 devices, takes 3.3 million (at 32 devices 0.9 million;
  // GPT-3 175B megatron 33 thousand); the default leaves 15 times that. An
  // endless loop spends it in about 10 s (5 million steps/s on a 2-core
  // Xeon); give a plan over thousands of devices more with --eval-budget.
  static constexpr int64_t kDefaultSteps = 50'000'000;
  int64_t steps = kDefaultSteps;  // 0 = no limit (--eval-budget STEPS)
  double seconds = 0;             // 0 = no limit (--eval-timeout SECONDS)
};

}  // namespace nns::sema
