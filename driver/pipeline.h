// The stages of nns, in order, in one function (Halide's lower_impl, MLIR
// Toy's emitAction): run_pipeline runs them up to the one asked for and, with
// --emit, prints that one's result instead of the stage reports. `check` and
// `run` (driver/commands.cpp) are option handling around it.
//
//   tokens -> ast -> graph -> plan -> check -> comm -> program -> training-graph -> run
//
// plan, check and comm do something only for a plan (--plan); without one,
// N > 1 ranks get the implicit plan (N data-parallel replicas of one device)
// at the check stage, whose programs are verified and run like a plan's;
// run trains (driver/train.h).
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>
#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_check.h"
#include "backend/lowering/rank_program.h"
#include "backend/runtime/safetensors.h"

#include "driver/args.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"
#include "semantics/autograd.h"
#include "semantics/checker/checker.h"
#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::driver {

enum class Stage { Tokens, Ast, Graph, Plan, Check, Comm, Program, Schedule, TrainingGraph, Run };

// The --emit names, in order: "tokens|ast|graph|plan|check|comm|program|schedule|training-graph".
const char* emit_stage_names();
// --emit=NAME -> its stage (every stage but run); false for an unknown name.
bool emit_stage(const std::string& name, Stage& out);
// Whether a stage needs --plan to print anything (plan, check, comm).
bool stage_needs_plan(Stage s);

// --verify, --save and the other flags of the run stage.
struct RunOptions {
  uint64_t seed = 0;
  int threads = 0;  // kernel threads per rank; 0 = the default
  std::string init, data, save, resume, dump_grads;
  std::string init_map;       // --init-map NAME: --init is read through that weights block (weight_import.h)
  bool init_partial = false;  // --init-partial
  std::string dump_outputs;   // --eval --dump-outputs FILE: the train block's named tensors after step 1 (one device)
  std::string save_best;   // --save-best CKPT: saved after each validation loss lower than all before
  int64_t save_every = 0;  // --save-every K: also save after every K-th step (0: only after the last)
  // --stop-after K: this invocation ends after step K, though the run (and
  // its learning-rate horizon) is --steps long; --resume continues it.
  int64_t stop_after = 0;
  std::string metrics;     // --metrics OUT.jsonl: one JSON line per step, losses exact (%.17g)
  std::string tensorboard;  // --tensorboard DIR: event files of the step scalars (backend/runtime/tensorboard.h)
  std::string trace;  // --trace OUT.json: a Chrome trace of every rank's steps (backend/runtime/trace.h)
  bool reference = false, verify = false;
  bool verify_drift = false;  // --verify-drift (implies verify)
  bool peak_by_rank = false;  // --peak-by-rank: every rank's exact peak, gathered after the last step
  bool eval = false;  // --eval: forward passes only (driver/train.h, run_eval)
  std::string device = "cpu";  // --device, resolved (run_device.h): cpu | cuda
  std::string comm = "gloo";   // --comm, resolved (run_device.h): gloo | nccl
  std::string comm_why;        // why (the banner's second line)
  bool stats = false;          // --stats: each step's host<->device bytes (rank 0's)
};

struct PipelineOptions {
  std::vector<std::string> sets = {};  // --set KEY=VALUE: config overrides
  std::string path, config;
  std::string plan;  // --plan NAME; empty: none
  Topology topo;
  sema::check::CheckOptions check;  // --device-memory, --check-timeout
  std::string seed_bug;             // --seed-bug (a test hook)
  sema::EvalBudget eval_budget;     // --eval-budget STEPS, --eval-timeout SECONDS: what one evaluation may take
  int64_t steps = -1;               // --steps: overrides the train block's, and its schedule's horizon unless pinned
  // The check stage's capacity check (lowering plan replica 0 with its
  // kernel bodies): always with --device-memory, else for the report's
  // "memory: peak" line unless turned off (nns simulate prints the same
  // replay's peak itself).
  bool memory_report = true;
  // Program verification in the check stage (nns simulate turns it off
  // unless --verify-programs: nns check --plan is the command that verifies
  // the programs, and at SC'21 scale verifying them all costs minutes).
  bool verify_programs = true;
  // --precision bf16-storage: the memory check costs the CUDA backend's
  // bf16 activation storage (lowering/bf16_storage.h), as a run on a CUDA
  // device with precision = "bf16" holds it (set then too).
  bool bf16_storage = false;
  Stage last = Stage::Check;        // the stages run up to this one
  bool emit = false;                // print `last`'s result instead of the stage reports
  std::string program_pass;         // --emit=program:PASS: the programs after that lowering pass
  RunOptions run;                   // for Stage::Run
};

// What the stages have built, for the stages after them and the command's report.
struct Pipeline {
  front::SourceManager sources;
  front::DiagnosticEngine diags{sources};
  std::unique_ptr<sema::Interpreter> interp;
  sema::Plan plan;                 // the evaluated --plan, or the implicit plan (see `implicit`)
  // Whether `plan` holds a plan to lower and run: --plan's, or on several
  // ranks without one the implicit data-parallel plan (sema::implicit_plan;
  // `implicit` set), so that every multi-rank run is a RankProgram per rank.
  bool planned = false, implicit = false;
  backend::CommPlan comm;          // its derived communication (after the check stage; read by verification, --emit=comm and lowering)
  // The lowering analysis of (graph, plan, comm), shared by the check's
  // structure lowering and its capacity check (LowerOptions::analysis_cache);
  // made anew whenever `comm` is derived.
  std::shared_ptr<backend::AnalysisCache> analysis_cache;
  sema::TrainSpec spec;            // the train block, --steps applied
  sema::TrainingGraphInfo info;    // after the training-graph stage: the graph has its backward and optimizer ops
  double elaborate_ms = 0;         // parse + evaluate
  // --init read through --init-map (driver/weights.cpp), once, before the
  // ranks start: they load their pieces from it. Null without a map.
  std::shared_ptr<const backend::SafetensorsFile> init_weights;
  // Lowerings no later stage reads (the check's structure, after program
  // verification; the capacity check's bodies, after the replay), freed
  // with the pipeline: a command that keeps it until exit
  // (keep_until_exit) never frees them, and the check does not wait for it.
  // Only commands that stop before running (a run frees them at once).
  std::vector<backend::LoweredPlan> spent;
  sema::Graph& graph() { return interp->graph(); }
};

// Runs the stages of `o` in order, up to o.last. Returns kExitOk when they
// all ran, or the exit code of the first that failed (its diagnostics
// printed): 64 unknown --config or --plan, 65 bad input or illegal plan, 70
// a checker time-out, wrong programs or a failed run.
int run_pipeline(const PipelineOptions& o, Pipeline& p);

// A command's last use of its pipeline: what the stages built stays
// allocated until the process exits, which gives the pages back at once,
// instead of being freed object by object (AlphaFold2 dap on 32 devices:
// 0.1-0.2 s of `nns check`'s 1.5-2 s for 400k sub-ops, their slices and
// the lowered programs; compilers skip their own teardown for the same
// reason). Reachable from a static, so a leak checker does not report it.
void keep_until_exit(Pipeline&& p);

// The program stage of a plan: prints every rank's program (--emit=program),
// lowered here with the sub-ops elaborated (no rank is started); with
// `stop_after` (--emit=program:PASS) as it stands after that lowering pass.
int emit_program(Pipeline& p, const Topology& topo, const std::string& stop_after);

// Prints a lowering error: located (file:line:col, source line, caret) when
// a plan directive caused it, else "nns: error: ..."; returns kExitRuntime.
int report_lowering_error(Pipeline& p, const backend::LoweringError& e);

// Lowering options with the sub-ops elaborated by `interp` (its
// instantiate_op), the derived communication and topo's plan replicas.
backend::LowerOptions lower_options(sema::Interpreter& interp, const backend::CommPlan& comm, const Topology& topo);

// The capacity check's options from the check options (--device-memory,
// --precision) and the train block's optimizer (`spec` may be null).
backend::MemoryCheckOptions memory_options(const sema::check::CheckOptions& c, const sema::TrainSpec* spec);

// The capacity check of p.plan (after its communication is derived): plan
// replica 0's programs lowered with their kernel bodies, each rank's peak
// replayed (backend/lowering/memory_check.h). Throws backend::LoweringError.
// `structure`: every rank's structure lowering (program_check.h,
// verification_lowering) when the caller has it; lowered here otherwise.
// Only one representative per rank class (backend/lowering/rank_classes.h)
// is lowered with its kernel bodies and replayed.
backend::MemoryCheck check_plan_memory(Pipeline& p, const Topology& topo, const backend::MemoryCheckOptions& mo,
                                       const backend::LoweredPlan* structure = nullptr);

// The plan lowered to per-rank programs, sub-ops elaborated on their slices
// by the interpreter (the only place lowering meets it); only_rank < 0:
// every rank. Throws backend::LoweringError.
backend::LoweredPlan lower_with_bodies(sema::Interpreter& interp, const sema::Graph& g, const sema::Plan& plan, const backend::CommPlan& comm,
                                       const sema::TrainSpec& spec, const Topology& topo, int only_rank, const std::string& stop_after = "");

// Program verification of the plan's lowered per-rank programs
// (backend/lowering/program_check.h) for topo.replicas replicas and the
// train block's micro-batches; prints the verdict line to `report`.
// Returns kExitOk, kExitRuntime when wrong (diagnoses on stderr), or
// kExitSeedNotApplicable when the seeded bug has nothing to corrupt.
// `structure`: the programs already lowered for verification (moved
// from; `lower_ms` what that took), else lowered here. Its diagnoses go to
// `errors` (check_stage collects them while the capacity check runs).
int verify_lowered(const sema::Graph& g, const sema::Plan& plan, const backend::CommPlan& comm, const Topology& topo,
                   const std::string& seed_bug, const sema::TrainSpec* spec, std::ostream& report,
                   backend::LoweredPlan* structure = nullptr, double lower_ms = 0, std::ostream& errors = std::cerr);

}  // namespace nns::driver
