#include "driver/openmp_env.h"

#include "backend/runtime/comm/launch_env.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace nns::driver {
namespace {

// What nns sets unless the user did. PASSIVE makes libgomp's spin count 0
// (a waiting thread sleeps on a futex at once), and LLVM's libomp's block
// time 0 instead of 200 ms; GOMP_SPINCOUNT or KMP_BLOCKTIME, if the user
// set them, still win in their runtimes.
struct Default {
  const char* name;
  const char* value;
};
constexpr Default kDefaults[] = {{"OMP_WAIT_POLICY", "PASSIVE"}};

// Sets each default the environment lacks; true if one was missing.
bool fill_missing() {
  bool missing = false;
  for (const Default& d : kDefaults) {
    if (std::getenv(d.name)) continue;
    ::setenv(d.name, d.value, 0);
    missing = true;
  }
  return missing;
}

// The command word (driver/args.cpp takes the first argument that is not a
// flag; a flag's value may come first, so the first known command word is
// taken), or "" when there is none.
std::string command_word(char** argv) {
  static const char* const kCommands[] = {"check",    "dimop", "verify-op", "ckpt", "run",
                                          "simulate", "plan",  "profile",   "repl"};
  for (int i = 1; argv[i]; ++i)
    for (const char* c : kCommands)
      if (std::string(argv[i]) == c) return c;
  return "";
}

// Whether this process will share the cores with other ranks of its own:
// `nns run` with `--gpus N` (or --gpus=N) and N > 1, `nns profile`, or a
// rank started by a launcher. One device alone keeps libgomp's spinning: on
// an idle machine waking a sleeping thread costs more than the spin (gpt
// tiny: 1.1 ms per step spinning, 6-7 ms passive on this VM). check, plan
// and simulate take --gpus too, but run no kernels on ranks: a second start
// would only cost time.
bool shares_cores(char** argv) {
  backend::LaunchEnv launch;
  std::string err;
  if (backend::detect_launch_env(backend::process_env(), launch, err) && launch.local_world_size > 1) return true;
  const std::string command = command_word(argv);
  if (command == "profile") return true;  // nns profile runs 2 or more ranks
  if (command != "run") return false;
  for (int i = 1; argv[i]; ++i) {
    std::string a = argv[i];
    const char* value = nullptr;
    if (a == "--gpus" && argv[i + 1]) value = argv[i + 1];
    else if (a.rfind("--gpus=", 0) == 0) value = argv[i] + 7;
    if (value && std::atoll(value) > 1) return true;
  }
  return false;
}

}  // namespace

void apply_openmp_defaults(char** argv) {
  if (!shares_cores(argv) || !fill_missing()) return;
  // The new image finds every default set, so this happens once.
  ::execv("/proc/self/exe", argv);
  // No /proc (or no exec rights): run on with the spinning runtime; the
  // processes we start still inherit the setting.
}

}  // namespace nns::driver
