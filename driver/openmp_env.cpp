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

// Whether this process will share the cores with other ranks of its own:
// `--gpus N` (or --gpus=N) with N > 1, or a rank started by a launcher.
// One device alone keeps libgomp's spinning: on an idle machine waking a
// sleeping thread costs more than the spin (gpt tiny: 1.1 ms per step
// spinning, 6-7 ms passive on this VM).
bool shares_cores(char** argv) {
  backend::LaunchEnv launch;
  std::string err;
  if (backend::detect_launch_env(backend::process_env(), launch, err) && launch.local_world_size > 1) return true;
  if (argv[0] && argv[1] && std::string(argv[1]) == "profile") return true;  // nns profile runs 2 or more ranks
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
