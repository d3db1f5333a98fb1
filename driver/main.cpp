// The nns command line: parses the flags and runs a command (driver/
// commands.h). The stages check and run go through are in
// driver/pipeline.cpp. Exit codes: 0 ok, 64 usage, 65 bad input (syntax /
// semantic / plan errors), 70 runtime failure.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "driver/allocator.h"
#include "driver/args.h"
#include "driver/commands.h"
#include "driver/help.h"
#include "driver/openmp_env.h"
#include "driver/version.h"

// jemalloc's settings (it is linked into nns statically, driver/CMakeLists.txt;
// without it the C library ignores this symbol). Checking a plan at scale
// allocates and first touches a few GB of small pieces: with 4 KiB pages the
// kernel's page faults were a third of `nns check`'s time and half its CPU.
// thp: jemalloc asks for transparent huge pages for its extents and its own
// metadata (this machine's kernel gives them on request, "madvise"). The
// decays of -1 keep freed pages mapped for reuse instead of returning them
// and faulting them in again; a process's resident set stays at its peak.
// MALLOC_CONF in the environment still overrides each of them. The long
// commands judged by their resident set (simulate, plan) take jemalloc's
// default decays back at their start (driver/allocator.h).
// (docs/status.md, "check at scale, part 11")
extern "C" {
extern const char* malloc_conf;
const char* malloc_conf = "thp:always,metadata_thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1";
}

int main(int argc, char** argv) {
  using namespace nns::driver;
  // Before anything else: it may run nns again with the OpenMP settings
  // libgomp must find at start-up (driver/openmp_env.h).
  apply_openmp_defaults(argc, argv);
  // A shell starts a script's background jobs with SIGINT and SIGQUIT
  // ignored, and ignored signals are inherited: `kill -INT` (or Ctrl-C on
  // the script) would never stop such a training run or its ranks. nns
  // takes the default back: an interrupt ends it (the REPL installs its own
  // handler).
  for (int sig : {SIGINT, SIGQUIT}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) std::signal(sig, SIG_DFL);
  }
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::cout << version_text();
    return kExitOk;
  }
  if (std::getenv("NNS_ALLOCATOR_REPORT"))
    std::atexit([] { std::fprintf(stderr, "allocator: %s\n", allocator_decay_text().c_str()); });
  Args a;
  std::string err;
  if (!parse_args(argc, argv, a, err)) return usage_error(err);
  if (a.command.empty()) {
    std::cerr << help_text() << profiles_help();
    return kExitUsage;
  }
  try {
    if (a.command == "help" && !a.positional.empty()) a.help = true, a.command = a.positional[0];
    if (a.command == "help") {
      std::cout << help_text() << profiles_help();
      return kExitOk;
    }
    if (a.help) {
      std::string text = command_help(a.command == "ckpt" ? "ckpt merge" : a.command);
      if (text.empty()) return usage_error("no help for unknown command '" + a.command + "'");
      std::cout << text;
      return kExitOk;
    }
    if (a.command == "check") return cmd_check(a);
    if (a.command == "dimop") return cmd_dimop(a);
    if (a.command == "verify-op") return cmd_verify_op(a);
    if (a.command == "ckpt") return cmd_ckpt(a);
    if (a.command == "run") return cmd_run(a);
    if (a.command == "simulate" || a.command == "plan") return_freed_memory();
    if (a.command == "simulate") return cmd_simulate(a);
    if (a.command == "plan") return cmd_plan(a);
    if (a.command == "profile") return cmd_profile(a);
    if (a.command == "repl") return cmd_repl(a);
    return usage_error("unknown command '" + a.command + "'");
  } catch (const std::exception& e) {
    std::cerr << "nns: internal error: " << e.what() << "\n";
    return kExitRuntime;
  }
}
