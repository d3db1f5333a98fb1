// nns repl: the interactive session (driver/main.cpp's `repl` command).
#pragma once

#include "semantics/eval_budget.h"

#include <string>
#include <vector>

namespace nns::repl {

struct ReplOptions {
  std::string file;  // may be empty
  std::string config;
  long long ngpus = 1;
  std::vector<std::string> stdlib_dirs;
  std::string nns_binary;  // this executable, for `run`
  sema::EvalBudget budget;  // --eval-budget / --eval-timeout: what one input's evaluation may take
};

// Runs the session until quit or end of input. Exit status: 0; 64/65 when
// the file cannot be loaded; when input is not a terminal, 65 if any input
// failed (so a scripted session can be checked), else 0.
int run_repl(const ReplOptions& opts);

}  // namespace nns::repl
