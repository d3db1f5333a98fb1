// nns plan FILE --gpus N --device D [--config C] [--nodes K] [--plan CONSTRAINTS]
//               [--out OUT.nns] [--top K] [--vp V] [--no-check]
// The plan search (backend/planner/search.h): reads the model's forward
// graph, searches, prints the best plan, its runners-up and the best
// Megatron-style plan, writes FILE + a config + the plan block to OUT.nns
// and proves it there with the checker (the same stages as `nns check`).
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/program_check.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/profiles.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/search.h"
#include "backend/planner/sim_classes.h"
#include "backend/planner/simulator.h"
#include "backend/runtime/comm/env_vars.h"
#include "driver/commands.h"
#include "driver/pipeline.h"
#include "driver/search_progress.h"

namespace nns::driver {

namespace {

std::string gib(double bytes) { return sema::format_bytes(static_cast<int64_t>(bytes)); }

void print_candidate(const char* label, const planner::Candidate& c) {
  std::printf("  %-10s %-58s step %10.3f ms  %9.2f samples/s  memory %s  bubble %.1f%%\n", label, c.describe().c_str(),
              c.step_time * 1e3, c.throughput(), gib(c.memory).c_str(), c.bubble * 100);
}

std::string space_text(double l) {
  if (!std::isfinite(l)) return "0";
  char b[64];
  std::snprintf(b, sizeof b, "10^%.1f", l);
  return b;
}

// What cmd_plan read from its options, and what the search found.
struct PlanRun {
  explicit PlanRun(const Args& args) : a(args) {}
  const Args& a;
  long long n = 0;
  planner::DeviceProfile prof;
  int64_t cap = 0;
  std::string cap_label;
  PipelineOptions o;
  Pipeline p;
  planner::SearchModel model;
  planner::SearchOptions so;
  planner::SearchResult r;
  std::string plan_name, base_cfg, cfg, out;
  size_t written = 0;  // the candidate written (a runner-up when the checker refused the best)
};

// The baselines the best is measured against: one device always; data
// parallelism and Megatron-style TP where they apply, else why not.
void print_baselines(const planner::SearchResult& r, double cap) {
  auto row = [&](const char* label, const char* name, const planner::Baseline& b) {
    if (!b.applies) {
      std::printf("  %-10s skipped: %s\n", label, b.why_not.c_str());
      return;
    }
    print_candidate(label, b.best);
    if (!b.best.fits)
      std::printf("             (no %s plan fits %s per device: the one above needs the least memory)\n", name,
                  gib(cap).c_str());
  };
  row("1 device", "one-device", r.one_device);
  row("data par.", "data-parallel", r.data_parallel);
  row("megatron", "Megatron-style", r.megatron);
}

// What the best plan is worth, said plainly: against one device first (a
// plan no faster than one device is no parallel speedup, whatever else it
// beats), then against each baseline that applies.
void print_verdict(const PlanRun& run) {
  const planner::SearchResult& r = run.r;
  const planner::Candidate& best = r.best[0];
  const planner::Baseline& one = r.one_device;
  if (run.n == 1) return;  // the best is the one-device plan: nothing to compare
  if (one.applies && one.best.fits && best.throughput() <= one.best.throughput() * (1 + 1e-9)) {
    std::printf("no plan beats one device on %lld x %s: the best reaches %.3fx one device's throughput%s\n", run.n,
                run.prof.name.c_str(), best.throughput() / one.best.throughput(),
                best.replicated()
                    ? "; it splits no op (every op replicated in its TP group): replication, not parallelism"
                    : "");
    return;
  }
  std::string line = "best vs ";
  char buf[160];
  bool first = true;
  auto vs = [&](const char* name, const planner::Baseline& b) {
    if (!b.applies) return;
    std::snprintf(buf, sizeof buf, "%s%s: %.3fx throughput%s", first ? "" : "; vs ", name,
                  best.throughput() / b.best.throughput(), b.best.fits ? "" : " (it does not fit)");
    line += buf;
    first = false;
  };
  vs("one device", one);
  vs("data parallel", r.data_parallel);
  vs("Megatron-style", r.megatron);
  std::printf("%s\n", line.c_str());
  if (best.replicated())
    std::printf("(the best splits no op: its TP groups of %d repeat one another's work)\n", best.tp);
}

void print_search(const PlanRun& run) {
  const planner::SearchResult& r = run.r;
  const Args& a = run.a;
  const double cap = static_cast<double>(run.cap);
  std::printf("model %s (config %s): %zu ops in %zu units (%d distinct), %s parameters, global batch %lld\n",
              run.o.path.c_str(), run.p.interp->config_name().c_str(), run.model.ops.size(), run.model.units.size(),
              run.model.signatures, sema::format_bytes(run.model.param_bytes).c_str(),
              static_cast<long long>(run.so.global_batch));
  std::printf("search on %lld x %s (%d per node, %s each): %lld candidates costed, %lld unit solves, %.1f ms\n", run.n,
              run.prof.name.c_str(), run.prof.devices_per_node, gib(cap).c_str(), static_cast<long long>(r.evaluated),
              static_cast<long long>(r.unit_solves), r.search_ms);
  std::printf("space: %s plans", space_text(r.log10_space).c_str());
  if (!a.plan.empty())
    std::printf("; under the constraint tables of plan %s: %s (pruned by 10^%.1f)", a.plan.c_str(),
                space_text(r.log10_space_constrained).c_str(), r.log10_space - r.log10_space_constrained);
  std::printf("\n");
  print_baselines(r, cap);
  if (r.best.empty()) return;
  for (size_t i = 0; i < r.best.size(); ++i) print_candidate(i == 0 ? "best" : "runner-up", r.best[i]);
  print_verdict(run);
}

// Names the output file's plan and config so that they do not collide
// with the model's own, and where it goes (a temporary file without --out).
void name_outputs(PlanRun& run) {
  run.plan_name = "searched";
  for (int k = 2; true; ++k) {
    bool taken = false;
    for (const auto& pi : run.p.interp->plans()) taken = taken || pi.name == run.plan_name;
    if (!taken) break;
    run.plan_name = "searched" + std::to_string(k);
  }
  run.base_cfg = run.p.interp->config_name();
  run.cfg = run.base_cfg + "_plan";
  std::vector<std::string> names = run.p.interp->config_names();
  for (int k = 2; std::find(names.begin(), names.end(), run.cfg) != names.end(); ++k)
    run.cfg = run.base_cfg + "_plan" + std::to_string(k);
  const std::string& path = run.o.path;
  std::string out_dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  run.out = run.a.output.empty() ? out_dir + "/.nns_plan_" + std::to_string(getpid()) + ".nns" : run.a.output;
}

// The devices candidate c's written plan covers, its replicas, and
// whether its zero1 is the distributed optimizer over them.
Topology plan_topology(const PlanRun& run, const planner::Candidate& c) {
  const int64_t k = c.plan_devices();
  return Topology{run.n, k, run.n / k, c.replicas && c.zero1, {}};
}

// The command that runs (`verb` run, check) or simulates the written plan
// of candidate c as the search costed it.
std::string plan_command(const PlanRun& run, const planner::Candidate& c, const std::string& verb) {
  std::string s = "nns " + verb + " " + run.out + " --config " + run.cfg + " --plan " + run.plan_name + " --gpus " +
                  std::to_string(run.n);
  if (c.replicas) s += " --plan-gpus " + std::to_string(c.plan_devices());
  if (verb == "simulate") s += " --device " + run.a.device;
  if (verb != "run" && run.so.bytes_per_element < 4) s += " --precision " + run.so.dtype;
  if (c.replicas && c.zero1) s += " --distributed-optimizer";
  return s;
}

// What is appended to the model for candidate c: a config with its
// micro-batches, the prediction, the commands that reproduce it and the
// plan block. With plan replicas the config's batch is one replica's
// micro-batch (each replica reads its own samples).
std::string output_text(const PlanRun& run, const planner::Candidate& c) {
  std::ostringstream extra;
  extra << "\n# ---- written by nns plan " << run.o.path << " --gpus " << run.n << " --device " << run.prof.name
        << " ----\n";
  extra << "config " << run.cfg << " extends " << run.base_cfg
        << " {\n  batch = " << c.micro_batch * (c.replicas ? 1 : c.dp) << "\n  micro_batches = " << c.micro_batches
        << "\n}\n\n";
  char pred[256];
  std::snprintf(pred, sizeof pred, "# Predicted on %lld x %s: step %.3f ms, %.2f samples/s, %s per device.\n", run.n,
                run.prof.name.c_str(), c.step_time * 1e3, c.throughput(), gib(c.memory).c_str());
  extra << pred << "# Simulated by: " << plan_command(run, c, "simulate") << "\n";
  std::string why;
  if (c.dp > 1 && !c.replicas && !planner::dp_as_replicas(run.model, run.so, c.dp, &why))
    extra << "# Its data parallelism is inside the plan, not plan replicas: " << why << ".\n";
  if (!run.a.nodes.empty())
    extra << "# (the search placed the devices on " << run.a.nodes
          << " nodes; nns simulate takes the profile's devices per node)\n";
  extra << planner::plan_text(run.model, c, run.plan_name);
  return extra.str();
}

// The capacity check lowers one plan replica's ranks, structure only, and
// one program per class of equal programs with its kernel bodies
// (check_plan_memory): GPT-3 175B fp16 on 1024 as replicas of 64 ranks
// (96 micro-batches) 20 s and 2.6 GB, of 128 ranks (192) 28 s and 4.7 GB,
// all 1024 ranks in one plan over 4 min. Past this many ranks in a
// replica (NNS_PLAN_FULL_REPLAY_RANKS overrides it, for tests), the
// classes are found as nns simulate finds them, on a few micro-batches
// (replay_classes).
int64_t full_replay_ranks() {
  const char* v = std::getenv("NNS_PLAN_FULL_REPLAY_RANKS");
  long long n = 0;
  return v && parse_int(v, n) && n >= 0 ? n : 128;
}

// The capacity check past full_replay_ranks(): the replica's ranks lowered
// structure-only for kClassMicroBatches micro-batches give the classes of
// equal programs (their memory signatures included: sim_classes.h), and
// only the ranks nns simulate replays (lower_replayed_ranks' choice) are
// lowered with kernel bodies, for every micro-batch, and replayed; each
// stands for its class. Where those are more than kClassReplayRanks (data parallelism inside a plan of 256 ranks
// replays every rank: GPT-3 175B fp16 pp 8 x tp 4 x dp 8, 192 micro-batches, 9.5 minutes and 16 GB), nothing:
// `replayed` says how many it would have taken.
constexpr int64_t kClassReplayRanks = 128;
std::optional<backend::MemoryCheck> replay_classes(Pipeline& cp, const Topology& topo, const PlanRun& run,
                                                   const backend::MemoryCheckOptions& mo, size_t& replayed) {
  const int bpe = run.so.bytes_per_element;
  const std::string dtype = bpe < 4 ? run.so.dtype : "";
  planner::SimClasses classes;
  {
    sema::TrainSpec few = cp.spec;
    few.micro_batches = std::min<int64_t>(few.micro_batches, planner::kClassMicroBatches);
    backend::LowerOptions so = backend::verification_lowering(static_cast<int>(topo.replicas), &cp.comm);
    so.distributed_optimizer = topo.distributed_optimizer;
    so.first_ranks = static_cast<int>(topo.devices);
    const sema::Plan few_plan = planner::first_micro_batches(cp.plan, static_cast<int>(few.micro_batches));
    const backend::LoweredPlan structure = backend::lower_plan(cp.graph(), few_plan, few, so);
    classes = planner::simulation_classes(cp.plan, structure, planner::profile_cost(run.prof, structure, bpe, dtype));
  }
  replayed = classes.replayed.size();
  if (static_cast<int64_t>(replayed) > kClassReplayRanks) return std::nullopt;
  backend::LowerOptions lo = lower_options(*cp.interp, cp.comm, topo);
  lo.ranks = classes.replayed;
  const backend::LoweredPlan lp = backend::lower_plan(cp.graph(), cp.plan, cp.spec, lo);
  std::vector<backend::ClassMember> members;
  for (size_t i = 0; i < lp.programs.size(); ++i)
    members.push_back({lp.programs[i].rank, lp.programs[i].device, static_cast<int>(i)});
  return backend::check_memory_classes(cp.graph(), cp.plan, lp, members, mo);
}

// Proves the written plan: the Z3 check and (up to kReplayedRanks ranks)
// the capacity check, as nns check OUT --config CFG --plan NAME --gpus N
// --device-memory CAP runs them. Returns the exit code.
int check_written(const PlanRun& run, const planner::Candidate& c) {
  PipelineOptions co;
  co.path = run.out;
  co.config = run.cfg;
  co.plan = run.plan_name;
  co.topo = plan_topology(run, c);
  co.check.device_memory = run.cap;
  co.check.bytes_per_element = run.so.bytes_per_element < 4 ? run.so.bytes_per_element : 0;
  co.check.memory_label = run.cap_label;
  co.check.total_timeout_ms = 0;
  // The plan stage (evaluation, order = "auto"), then the Z3 checker and
  // the capacity check as `nns check` runs them; program verification
  // and the run are left to `nns check` / `nns run` (lowering 1024 ranks'
  // programs for it here would cost minutes and gigabytes).
  co.last = Stage::Plan;
  co.eval_budget = run.o.eval_budget;
  Pipeline cp;
  std::printf("checking %s (plan %s, config %s):\n", c.describe().c_str(), run.plan_name.c_str(), run.cfg.c_str());
  std::fflush(stdout);
  int rc = run_pipeline(co, cp);
  if (rc != kExitOk) return rc;
  sema::check::CheckOptions opts = co.check;
  const sema::TrainSpec& t = *cp.interp->train();
  opts.micro_batches = t.micro_batches;
  opts.sources = &cp.sources;
  sema::check::CheckResult cr = sema::check::check_plan(cp.graph(), cp.plan, opts);
  for (const front::Diagnostic& d : cr.diagnostics) cp.diags.report(d);
  rc = sema::check::exit_code(cr.verdict);
  std::optional<backend::MemoryCheck> mem;
  backend::MemoryCheckOptions mo = memory_options(co.check, &t);
  const bool replay = co.topo.devices <= full_replay_ranks();
  size_t replayed = 0;
  if (rc == kExitOk) {
    try {
      cp.comm = backend::derive_communication(cp.graph(), cp.plan);
      if (replay) {
        mem = check_plan_memory(cp, co.topo, mo);
      } else {
        cp.spec = t;
        mem = replay_classes(cp, co.topo, run, mo, replayed);
      }
    } catch (const backend::LoweringError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
      rc = kExitRuntime;
    }
  }
  const bool overflow = mem && !mem->fits;
  if (overflow) {
    cp.diags.report(*mem->overflow);
    rc = sema::check::exit_code(sema::check::Verdict::Illegal);
  }
  std::cout << sema::check::verdict_line(cp.plan, cr, overflow) << "\n";
  if (mem) std::cout << "  " << backend::memory_line(*mem, mo) << "\n";
  if (mem && !replay)
    std::cout << "  (" << mem->programs << " ranks replayed, one per class of equal programs of the " << co.topo.devices
              << " in a plan replica)\n";
  if (!mem && !replay && rc == kExitOk)
    std::cout << "  memory: not replayed: the " << co.topo.devices << " ranks of a plan replica fall in classes whose "
              << replayed << " replayed ranks exceed " << kClassReplayRanks
              << " (the search's estimate holds the capacity); " << plan_command(run, c, "check") << " --device-memory "
              << run.cap_label << " replays them\n";
  std::cout.flush();
  cp.diags.print(std::cerr, front::want_colour());
  return rc;
}

enum class Written { Yes, Refused, CannotWrite };

// Writes the best candidate the checker accepts (the first with
// --no-check); `rc` the last refusal's exit code.
Written write_checked(PlanRun& run, int& rc) {
  std::ifstream in(run.o.path);
  std::stringstream src;
  src << in.rdbuf();
  rc = kExitOk;
  for (size_t i = 0; i < run.r.best.size(); ++i) {
    const planner::Candidate& c = run.r.best[i];
    const std::string extra = output_text(run, c);
    {
      std::ofstream f(run.out);
      f << src.str() << extra;
      if (!f) {
        std::cerr << "nns: error: cannot write " << run.out << "\n";
        return Written::CannotWrite;
      }
    }
    if (i == 0) std::printf("\n%s\n", extra.c_str());
    run.written = i;
    if (run.a.no_check) return Written::Yes;
    rc = check_written(run, c);
    if (rc == kExitOk) {
      if (i > 0)
        std::printf("\n(the best plans did not pass the checker; this is runner-up %zu)\n%s\n", i, extra.c_str());
      return Written::Yes;
    }
    std::printf("  the checker refused it (exit %d); trying the next\n", rc);
  }
  return Written::Refused;
}

// --simulate: the plan lowered to its rank programs and replayed (what nns
// simulate does), beside the search's prediction.
void simulate_written(const PlanRun& run) {
  const planner::Candidate& c = run.r.best[run.written];
  PipelineOptions so2;
  so2.path = run.out;
  so2.config = run.cfg;
  so2.plan = run.plan_name;
  so2.topo = plan_topology(run, c);
  // The check's memory line counts the precision searched (it printed the
  // fp32 figure: 80.69 GiB for a 145.6B fp16 plan the simulator peaks at 58).
  so2.check.bytes_per_element = run.so.bytes_per_element < 4 ? run.so.bytes_per_element : 0;
  so2.last = Stage::Comm;
  so2.eval_budget = run.o.eval_budget;
  so2.memory_report = false;    // check_written printed the capacity check's replay
  so2.verify_programs = false;  // as nns simulate: nns check --plan verifies them
  Pipeline sp;
  const int64_t replicas = so2.topo.replicas;
  so2.topo.replicas = 1;
  if (run_pipeline(so2, sp) != kExitOk) return;
  so2.topo.replicas = replicas;
  try {
    sp.spec = *sp.interp->train();
    // What nns simulate lowers: one rank per class of equal programs.
    const int bpe = run.so.bytes_per_element;
    const std::string dtype = bpe < 4 ? run.so.dtype : "";
    backend::LoweredPlan lp;
    lower_replayed_ranks(sp, so2.topo, run.prof, bpe, dtype, lp);
    planner::SimResult sr;
    std::string err;
    if (planner::simulate(lp, planner::profile_cost(run.prof, lp, bpe, dtype), sr, err))
      std::printf("simulated (nns simulate): step %.6f ms; predicted by the search: %.6f ms\n", sr.step_time * 1e3,
                  c.step_time * 1e3);
    else
      std::printf("simulate: %s\n", err.c_str());
  } catch (const backend::LoweringError& e) {
    std::printf("simulate: %s\n", e.what());
  }
}

// The options the search reads besides the device: the batch, optimizer,
// memory cap, precision and constraint tables.
int search_options(PlanRun& run, const sema::Plan& constraints, long long top) {
  const Args& a = run.a;
  const sema::TrainSpec spec = *run.p.interp->train();
  planner::SearchOptions& so = run.so;
  so.gpus = static_cast<int>(run.n);
  so.profile = run.prof;
  so.global_batch = run.model.graph_batch * spec.micro_batches;
  so.optimizer_slots = static_cast<int>(sema::optimizer_slots(spec.optimizer));
  so.memory_cap = static_cast<double>(run.cap);
  // --precision fp16|bf16: mixed-precision training (2-byte weights,
  // gradients and activations, fp32 optimizer state and master weights),
  // searched, costed and checked as such.
  if (a.precision == "fp16" || a.precision == "bf16") {
    so.dtype = a.precision;
    so.bytes_per_element = 2;
  } else if (!a.precision.empty() && a.precision != "fp32") {
    return usage_error("--precision must be fp32, bf16 or fp16");
  }
  so.top = static_cast<int>(top);
  so.dp_in_plan = a.dp_in_plan;
  // --vp V: only schedules of V chunks per pipeline rank (1: 1F1B; V > 1:
  // interleaved 1F1B, at pp > 1); without it 1, 2, 4 and 8 are searched.
  if (!a.vp.empty()) {
    long long vp = 0;
    if (!parse_int(a.vp, vp) || vp < 1 || vp > 64) return usage_error("--vp must be an integer from 1 to 64");
    so.fixed_vp = static_cast<int>(vp);
  }
  // --recompute MODE: only that recompute mode (none, selective: the
  // attention ops alone, block: every unit); without it all are searched.
  if (!a.recompute.empty()) {
    const char* modes[] = {"none", "selective", "block"};
    for (int i = 0; i < 3; ++i)
      if (a.recompute == modes[i]) so.fixed_recompute = i;
    if (so.fixed_recompute < 0) return usage_error("--recompute must be none, selective or block");
  }
  if (!a.plan.empty()) {
    so.constraints = &constraints.constraints;
    so.constraint_plan = &constraints;
  }
  return kExitOk;
}

}  // namespace

int cmd_plan(const Args& a) {
  if (a.positional.size() != 1) return usage_error("plan needs exactly one FILE");
  if (a.gpus.empty()) return usage_error("plan needs --gpus N");
  if (a.device.empty()) return usage_error("plan needs --device " + planner::device_choices());
  long long n = 0, nodes = 0, top = 5;
  if (!parse_int(a.gpus, n) || n < 1 || n > 65536) return usage_error("--gpus must be an integer from 1 to 65536");
  if (!a.nodes.empty() && (!parse_int(a.nodes, nodes) || nodes < 1 || n % nodes != 0))
    return usage_error("--nodes must be a positive divisor of --gpus");
  if (!a.top.empty() && (!parse_int(a.top, top) || top < 1 || top > 100))
    return usage_error("--top must be an integer from 1 to 100");
  if (!a.plan_gpus.empty() || !a.emit.empty() || a.verify || !a.trace.empty())
    return usage_error(
        "plan takes FILE, --config, --gpus, --device, --nodes, --plan, --out, --top, --vp, --recompute, --no-check, "
        "--device-memory, "
        "--dp-in-plan");
  // NNS_SETUP_NOTICE sets when the search's progress speaks: refused when
  // malformed, as check and run refuse it.
  if (std::string bad = backend::check_nns_variables(backend::process_env()); !bad.empty()) return usage_error(bad);
  PlanRun run(a);
  run.n = n;
  std::string err;
  if (!planner::load_device(a.device, run.prof, err)) {
    std::cerr << "nns: error: " << err << "\n";
    return kExitUsage;
  }
  if (nodes > 0) run.prof.devices_per_node = static_cast<int>(n / nodes);
  run.cap = static_cast<int64_t>(run.prof.memory_bytes);
  run.cap_label = run.prof.name;
  if (!a.device_memory.empty() && !planner::parse_device_memory(a.device_memory, run.cap, run.cap_label, err))
    return usage_error(err);

  // The model's forward graph.
  run.o.path = a.positional[0];
  run.o.config = a.config;
  run.o.last = Stage::Graph;
  if (!parse_eval_budget(a, run.o.eval_budget, err)) return usage_error(err);
  Pipeline& p = run.p;
  if (int rc = run_pipeline(run.o, p); rc != kExitOk) return rc;
  if (!p.interp->train()) {
    std::cerr << "nns: error: " << run.o.path << " has no train block; nothing to plan\n";
    return kExitBadInput;
  }
  sema::Plan empty = p.interp->new_plan("search", n);
  run.model = planner::build_search_model(p.graph(), empty);

  // The constraint tables of --plan CONSTRAINTS.
  sema::Plan constraints;
  if (!a.plan.empty()) {
    if (!p.interp->evaluate_plan(a.plan, n, constraints)) {
      p.diags.print(std::cerr, front::want_colour());
      return p.interp->failure() == sema::Interpreter::Failure::UnknownPlan ? kExitUsage : kExitBadInput;
    }
    if (constraints.constraints.empty()) {
      std::cerr << "nns: error: plan " << a.plan
                << " declares no constraint table (same_split, split_only, split_counts, place_on)\n";
      return kExitBadInput;
    }
  }
  if (int rc = search_options(run, constraints, top); rc != kExitOk) return rc;
  {
    SearchProgressLine progress("searching plans for " + std::to_string(run.n) + " x " + run.prof.name);
    run.so.progress = [&progress](const planner::SearchProgress& sp) { progress.update(sp); };
    run.r = planner::search_plans(run.model, run.so);
    run.so.progress = nullptr;
  }
  print_search(run);
  if (run.r.best.empty()) {
    std::printf("no plan found: %s\n", run.r.note.c_str());
    return kExitBadInput;
  }

  name_outputs(run);
  int rc = kExitOk;
  const Written w = write_checked(run, rc);
  if (w == Written::CannotWrite) return kExitBadInput;
  const bool written = w == Written::Yes;
  if (written && a.simulate) simulate_written(run);
  if (a.output.empty())
    std::remove(run.out.c_str());
  else if (written) {
    const planner::Candidate& c = run.r.best[run.written];
    std::printf("wrote %s: %s\n", run.out.c_str(), plan_command(run, c, "run").c_str());
    std::printf("  simulate it as searched: %s\n", plan_command(run, c, "simulate").c_str());
  }
  return written ? kExitOk : (rc == kExitOk ? kExitRuntime : rc);
}

}  // namespace nns::driver
