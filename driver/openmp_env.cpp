#include "driver/openmp_env.h"

#include "backend/runtime/comm/launch_env.h"
#include "driver/args.h"

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

// Whether this process will share the cores with other ranks of its own:
// `nns run` with `--gpus N` and N > 1, `nns profile`, or a rank started by
// a launcher. The command line is read by the parser main() uses next
// (args.h); one it refuses starts nothing. One device alone keeps libgomp's
// spinning: on an idle machine waking a sleeping thread costs more than the
// spin (gpt tiny: 1.1 ms per step spinning, 6-7 ms passive on this VM).
// check, plan and simulate take --gpus too, but run no kernels on ranks: a
// second start would only cost time.
bool shares_cores(int argc, char** argv) {
  backend::LaunchEnv launch;
  std::string err;
  if (backend::detect_launch_env(backend::process_env(), launch, err) && launch.local_world_size > 1) return true;
  Args a;
  if (!parse_args(argc, argv, a, err)) return false;
  if (a.command == "profile") return true;  // nns profile runs 2 or more ranks
  return a.command == "run" && std::atoll(a.gpus.c_str()) > 1;
}

}  // namespace

void apply_openmp_defaults(int argc, char** argv) {
  if (!shares_cores(argc, argv) || !fill_missing()) return;
  // The new image finds every default set, so this happens once.
  ::execv("/proc/self/exe", argv);
  // No /proc (or no exec rights): run on with the spinning runtime; the
  // processes we start still inherit the setting.
}

}  // namespace nns::driver
