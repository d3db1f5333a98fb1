// The commands of `nns` (see driver/help.cpp). check and run are option
// handling around the pipeline (driver/pipeline.h); each returns the exit
// code.
#pragma once

#include "backend/planner/cost_model.h"
#include "backend/planner/sim_classes.h"
#include "driver/args.h"
#include "driver/pipeline.h"

namespace nns::driver {

// The options check, run and simulate share (FILE, --config, --plan, --emit,
// --gpus/--plan-gpus, the checker's limits): kExitOk or a usage error's code.
int pipeline_options(const Args& a, bool check, Stage last, PipelineOptions& o);

int cmd_check(const Args& a);  // nns check FILE ...: up to the check stage, then a summary
int cmd_run(const Args& a);    // nns run FILE ...: up to the run stage
int cmd_profile(const Args& a);   // nns profile --out FILE: measures this backend into a device profile (driver/profile.cpp)
int cmd_simulate(const Args& a);  // nns simulate FILE --plan P --device D: the planner's replay of the rank programs
// simulate's front end: runs the pipeline of `a` (FILE, --config, --plan,
// --gpus) and lowers the plan to the rank programs the simulator replays
// (plan replica 0's unless a.all_ranks); an exit code, diagnostics printed.
// `prof`: its gradient buckets (planner::profile_bucket_bytes), if given.
int lower_for_simulation(const Args& a, Pipeline& p, backend::LoweredPlan& lp,
                         const planner::DeviceProfile* prof = nullptr);
// What nns simulate lowers by default, after the pipeline's check stage
// (p.spec set): plan replica 0's ranks in classes of equal programs
// (planner/sim_classes.h), and one rank of each class, with the peers it
// receives from, lowered with its kernel bodies into `lp`. Throws
// backend::LoweringError. classes_ms: the time the classes took.
planner::SimClasses lower_replayed_ranks(Pipeline& p, const Topology& topo, const planner::DeviceProfile& prof, int bpe,
                                         const std::string& dtype, backend::LoweredPlan& lp,
                                         double* classes_ms = nullptr);
int cmd_plan(const Args& a);      // nns plan FILE --gpus N --device D: the plan search (driver/plan_search.cpp)
int cmd_ckpt(const Args& a);   // nns ckpt merge DIR -o FILE
int cmd_dimop(const Args& a);  // nns dimop 'ANNOTATION' [--shapes ...]
int cmd_repl(const Args& a);   // nns repl [FILE]
int cmd_verify_op(const Args& a);  // nns verify-op FILE OP (driver/verify_op.cpp)

}  // namespace nns::driver
