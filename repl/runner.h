// Runs a child process for the REPL's `run` (the nns binary's own run
// path, so training is never implemented twice). The child gets its own
// process group; Ctrl-C in the REPL is forwarded to that group (SIGINT,
// then SIGKILL if it has not stopped three seconds later), so an
// interrupted run ends every rank it launched and the session goes on.
#pragma once

#include <string>
#include <vector>

namespace nns::repl {

struct ChildResult {
  int exit_code = -1;       // the exit status, or 128 + signal
  bool interrupted = false;  // Ctrl-C was forwarded to it
  bool started = true;
  std::string captured;     // stdout + stderr when captured
};

// `capture`: collect stdout and stderr instead of sharing the REPL's.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& cwd, bool capture);

}  // namespace nns::repl
