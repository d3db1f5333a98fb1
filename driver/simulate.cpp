// nns simulate FILE --plan P --gpus N --device D: lowers the plan to its
// RankPrograms (the lists `nns run` executes) and replays them on a device
// profile with the planner's simulator.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "backend/lowering/lower_plan.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/simulator.h"
#include "driver/commands.h"
#include "driver/pipeline.h"

namespace nns::driver {

int cmd_simulate(const Args& a) {
  if (a.positional.size() != 1) return usage_error("simulate needs exactly one FILE");
  if (a.plan.empty()) return usage_error("simulate needs --plan NAME");
  if (a.device.empty()) return usage_error("simulate needs --device a100|v100|h100|h200|PATH.json");
  if (!a.trace.empty()) return usage_error("simulate does not write a --trace yet");
  PipelineOptions o;
  if (int rc = pipeline_options(a, /*check=*/true, Stage::Comm, o); rc != kExitOk) return rc;
  const char* env = std::getenv("NNS_STDLIB");
  std::string profiles = std::string(env && *env ? env : NNS_STDLIB_DIR) + "/profiles";
  planner::DeviceProfile prof;
  std::string err;
  if (!planner::load_profile(a.device, profiles, prof, err)) {
    std::cerr << "nns: error: " << err << "\n";
    return kExitUsage;
  }
  Pipeline p;
  if (int rc = run_pipeline(o, p); rc != kExitOk) return rc;
  p.spec = *p.interp->train();
  backend::LoweredPlan lp;
  try {
    lp = lower_with_bodies(*p.interp, p.graph(), p.plan, p.comm, p.spec, o.topo, -1);
  } catch (const backend::LoweringError& e) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitRuntime;
  }
  planner::SimResult r;
  if (!planner::simulate(lp, planner::profile_cost(prof, lp), r, err)) {
    std::cerr << "nns: internal error: " << err << "\n";
    return kExitRuntime;
  }
  std::printf("simulated %s on %d x %s: step %.6f ms\n", a.plan.c_str(), lp.ranks(), prof.name.c_str(), r.step_time * 1e3);
  std::printf("  rank  busy_ms     exposed_comm_ms  bubble_ms\n");
  for (size_t i = 0; i < r.ranks.size(); ++i)
    std::printf("  %4d  %10.6f  %15.6f  %9.6f\n", lp.programs[i].rank, r.ranks[i].busy * 1e3, r.ranks[i].exposed_comm * 1e3,
                r.ranks[i].bubble * 1e3);
  return kExitOk;
}

}  // namespace nns::driver
