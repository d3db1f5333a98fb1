// fuzz_env: the launch and NNS_* environment variables on arbitrary
// values. The input is NAME=VALUE lines; detect_launch_env must either
// refuse them with a message or describe a launch that makes sense: rank
// within a world of at most 65536, local rank and world consistent, a TCP
// port, NNS_* values within their declared ranges.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "backend/runtime/comm/env_vars.h"
#include "backend/runtime/comm/launch_env.h"
#include "fuzz/fuzz_util.h"

namespace {

void run(const std::string& text) {
  using namespace nns::backend;
  std::map<std::string, std::string> vars;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (size_t eq = line.find('='); eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  EnvLookup env = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  LaunchEnv launch;
  std::string err;
  if (!detect_launch_env(env, launch, err)) {
    if (err.empty()) nns::fuzz::internal_error("fuzz_env", "a refused environment without a message");
    return;
  }
  if (!check_nns_variables(env).empty())
    nns::fuzz::internal_error("fuzz_env", "accepted although " + check_nns_variables(env));
  bool ok = launch.world_size >= 1 && launch.world_size <= 65536 && launch.rank >= 0 &&
            launch.rank < launch.world_size && launch.local_world_size >= 1 &&
            launch.local_world_size <= launch.world_size && launch.local_rank >= 0 && launch.master_port >= 1 &&
            launch.master_port <= 65535;
  if (!ok)
    nns::fuzz::internal_error(
        "fuzz_env", "accepted an inconsistent launch: rank " + std::to_string(launch.rank) + " of " +
                        std::to_string(launch.world_size) + ", local " + std::to_string(launch.local_rank) + " of " +
                        std::to_string(launch.local_world_size) + ", port " + std::to_string(launch.master_port));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nns::fuzz::run_guarded("fuzz_env", [&] { run(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
