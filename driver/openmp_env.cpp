#include "driver/openmp_env.h"

#include <unistd.h>

#include <cstdlib>

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

}  // namespace

void apply_openmp_defaults(char** argv) {
  if (!fill_missing()) return;
  // The new image finds every default set, so this happens once.
  ::execv("/proc/self/exe", argv);
  // No /proc (or no exec rights): run on with the spinning runtime; the
  // processes we start still inherit the setting.
}

}  // namespace nns::driver
