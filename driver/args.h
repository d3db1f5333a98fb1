// The command line as data: the flags as given, and the few values that are
// parsed once for every command (exit codes, the device/rank topology, the
// checker's limits).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/runtime/comm/launch_env.h"
#include "semantics/checker/checker.h"
#include "semantics/eval_budget.h"

namespace nns::driver {

// docs/architecture.md, "Exit codes".
constexpr int kExitOk = 0, kExitUsage = 64, kExitBadInput = 65, kExitRuntime = 70;
// `--seed-bug KIND` (a test hook) on a plan where KIND has nothing to
// corrupt: the programs were not changed, so nothing was tested.
constexpr int kExitSeedNotApplicable = 69;

// Prints "nns: error: MSG" and the --help hint; returns kExitUsage.
int usage_error(const std::string& msg);

// Every flag as the user wrote it (values unparsed; empty = not given).
struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::string config, emit, shapes;
  std::vector<std::string> sets = {};  // --set KEY=VALUE, repeatable (config overrides)
  std::string plan, gpus, plan_gpus, output, seed_bug;
  std::string device_memory, check_timeout, eval_budget, eval_timeout;
  std::string device;  // simulate, plan: a shipped profile's name or a profile .json; run: cpu | cuda
  std::string comm;    // run: --comm auto | gloo | nccl (where a plan's collectives run)
  std::string precision;  // simulate: fp32 | bf16 | fp16 (what kernels and transfers are costed in)
  bool overlap_grad = false, all_ranks = false;  // simulate: --overlap-grad-reduce, --all-ranks
  bool verify_programs = false;                  // simulate: --verify-programs (program verification of plan replica 0)
  bool distributed_optimizer = false;            // check, simulate, run: --distributed-optimizer (Topology)
  bool overlap_param_gather = false;             // simulate: --overlap-param-gather
  bool tp_comm_overlap = false;                  // simulate: --tp-comm-overlap
  std::string nodes, top;  // plan: --nodes K (devices over K nodes), --top K (runners-up)
  std::string vp;          // plan: --vp V (pipeline chunks per rank: 1 = 1F1B, > 1 interleaved; default: searched)
  std::string recompute;   // plan: --recompute none|selective|block (default: all searched)
  bool no_check = false;   // plan: --no-check (print the plan without proving it)
  bool simulate = false;   // plan: --simulate (lower the plan found and replay it, beside the prediction)
  bool dp_in_plan = false;  // plan: --dp-in-plan (data parallelism inside the plan, not as plan replicas)
  std::string ranks;   // profile: --ranks R
  bool quick = false;  // profile: --quick (fewer sizes and repetitions)
  std::string steps, stop_after, save_best, tensorboard, seed = "0", threads, init, data, save, save_every, resume,
                                                         dump_grads, trace, metrics;
  bool reference = false, verify = false, eval = false;
  bool verify_drift =
      false;          // --verify-drift: --verify plus a free-running one-device copy (weight drift, information)
  bool help = false;  // CMD --help: that command's help page
  bool stats = false;  // run: --stats (each step's host<->device bytes)
  bool peak_by_rank = false;  // run --plan: every rank's exact peak piece memory
  std::string init_map;  // run: --init-map NAME (a weights block: --init is in that layout); ckpt export: --map NAME
  bool init_partial = false;  // run: --init-partial (parameters --init lacks keep their initializers)
  std::string dump_outputs;   // run --eval: --dump-outputs FILE
};

// "--flag VALUE" and "--flag=VALUE"; false with `err` for an unknown option
// or a flag without its value.
bool parse_args(int argc, char** argv, Args& a, std::string& err);

// A whole decimal integer (no sign check); false for "", "4x", "x".
bool parse_int(const std::string& text, long long& out);

// Where the standard library is: $NNS_STDLIB, then the source tree's stdlib/.
std::vector<std::string> stdlib_dirs();

// --gpus N and --plan-gpus K, parsed and validated once. `devices` are
// a plan's (what `ngpus` is bound to when the plan is evaluated), `ranks`
// are processes; on a CPU-only runtime neither is a GPU.
struct Topology {
  int64_t ranks = 1;     // --gpus N: the rank processes `run` starts, the world `check` verifies the programs for
  int64_t devices = 1;   // devices of one plan replica: --plan-gpus K, default N; 1 without --plan
  int64_t replicas = 1;  // ranks / devices: data-parallel copies of the plan (without one, of the model)
  // --distributed-optimizer: optimizer state sharded over the replicas
  // (backend::LowerOptions::distributed_optimizer): check, simulate and run.
  bool distributed_optimizer = false;
  // run: the launcher that started this process as one of several ranks
  // (torchrun, srun, mpirun, or NNS_* by hand); world_size 1 when nns
  // launches its own ranks.
  backend::LaunchEnv launch;
  bool external() const { return launch.world_size > 1; }
};

// False with the usage message when N or K is not a positive integer, K does
// not divide N, or --plan-gpus is given without --plan. Without --plan, N
// ranks are N replicas of the implicit one-device plan. Unless
// `plan_flags_only` (check: no rank is started), the launcher's variables
// are read into t.launch: --gpus defaults to their world and must agree.
bool parse_topology(const Args& a, bool plan_flags_only, Topology& t, std::string& usage);

// --eval-budget STEPS (interpreter steps; 0 = none) and --eval-timeout
// SECONDS (wall clock; 0 = none, the default) into `budget`; false with the
// usage message when one is malformed.
bool parse_eval_budget(const Args& a, sema::EvalBudget& budget, std::string& usage);

// --device-memory and --check-timeout into the checker's options; false with
// the usage message when one is malformed or given without --plan.
bool parse_check_limits(const Args& a, sema::check::CheckOptions& opts, std::string& usage);

}  // namespace nns::driver
