// nns simulate FILE --plan P --gpus N --device D: lowers the plan to its
// RankPrograms (the lists `nns run` executes) and replays them on a device
// profile with the planner's simulator. By default one rank of each class
// of ranks running the same program is lowered and replayed
// (planner/sim_classes.h): replicas of the plan (N > --plan-gpus K) and the
// tensor-parallel ranks of a pipeline stage repeat one program, and the
// simulator takes the ranks it does not replay as on time at collectives
// (planner/simulator.h, "Symmetry"); --all-ranks replays all N.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_replay.h"
#include "backend/lowering/parallel.h"
#include "backend/lowering/program_check.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/profiles.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/sim_classes.h"
#include "backend/planner/sim_trace.h"
#include "backend/planner/simulator.h"
#include "backend/planner/tp_overlap.h"
#include "driver/commands.h"
#include "driver/pipeline.h"

namespace nns::driver {

namespace {

// The front end, the Z3 check and the derived communication (program
// verification with --verify-programs: of one plan replica's programs
// unless every rank is replayed; the replicas are the same programs, and
// verifying 1536 ranks costs minutes and tens of GiB). `o` keeps the run's
// topology.
int simulation_front(const Args& a, Pipeline& p, PipelineOptions& o) {
  if (int rc = pipeline_options(a, /*check=*/true, Stage::Comm, o); rc != kExitOk) return rc;
  o.memory_report = false;  // the same replay's peak is printed below, for every rank replayed
  o.verify_programs = a.verify_programs;
  const int64_t replicas = o.topo.replicas;
  if (!a.all_ranks) o.topo.replicas = 1;
  if (int rc = run_pipeline(o, p); rc != kExitOk) return rc;
  o.topo.replicas = replicas;
  p.spec = *p.interp->train();
  return kExitOk;
}

}  // namespace

int lower_for_simulation(const Args& a, Pipeline& p, backend::LoweredPlan& lp, const planner::DeviceProfile* prof) {
  PipelineOptions o;
  if (int rc = simulation_front(a, p, o); rc != kExitOk) return rc;
  try {
    backend::LowerOptions lo = lower_options(*p.interp, p.comm, o.topo);
    if (prof) lo.replica_bucket_bytes = planner::profile_bucket_bytes(*prof, static_cast<int>(o.topo.replicas));
    if (!a.all_ranks) lo.first_ranks = static_cast<int>(o.topo.devices);
    lp = backend::lower_plan(p.graph(), p.plan, p.spec, lo);
  } catch (const backend::LoweringError& e) {
    return report_lowering_error(p, e);
  }
  return kExitOk;
}

planner::SimClasses lower_replayed_ranks(Pipeline& p, const Topology& topo, const planner::DeviceProfile& prof, int bpe,
                                         const std::string& dtype, backend::LoweredPlan& lp, double* classes_ms) {
  auto t = std::chrono::steady_clock::now();
  sema::TrainSpec few = p.spec;
  few.micro_batches = std::min<int64_t>(few.micro_batches, planner::kClassMicroBatches);
  backend::LowerOptions so = backend::verification_lowering(static_cast<int>(topo.replicas), &p.comm);
  so.distributed_optimizer = topo.distributed_optimizer;
  so.replica_bucket_bytes = planner::profile_bucket_bytes(prof, static_cast<int>(topo.replicas));
  so.first_ranks = static_cast<int>(topo.devices);
  planner::SimClasses classes;
  {
    const sema::Plan few_plan = planner::first_micro_batches(p.plan, static_cast<int>(few.micro_batches));
    const backend::LoweredPlan structure = backend::lower_plan(p.graph(), few_plan, few, so);
    classes = planner::simulation_classes(p.plan, structure, planner::profile_cost(prof, structure, bpe, dtype));
  }
  if (classes_ms) *classes_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  backend::LowerOptions lo = lower_options(*p.interp, p.comm, topo);
  lo.replica_bucket_bytes = so.replica_bucket_bytes;
  lo.ranks = classes.replayed;
  lp = backend::lower_plan(p.graph(), p.plan, p.spec, lo);
  return classes;
}

namespace {

// Wall times of the stages before the replay (ms).
struct FrontTimes {
  double front = 0, classes = 0, lowering = 0;
};

double ms_from(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// nns simulate without --all-ranks: the front end, then
// lower_replayed_ranks.
int lower_rank_classes(const Args& a, Pipeline& p, const planner::DeviceProfile& prof, int bpe,
                       const std::string& dtype, backend::LoweredPlan& lp, planner::SimClasses& classes,
                       FrontTimes& times) {
  PipelineOptions o;
  auto t = std::chrono::steady_clock::now();
  if (int rc = simulation_front(a, p, o); rc != kExitOk) return rc;
  times.front = ms_from(t);
  try {
    t = std::chrono::steady_clock::now();
    classes = lower_replayed_ranks(p, o.topo, prof, bpe, dtype, lp, &times.classes);
    times.lowering = ms_from(t) - times.classes;
  } catch (const backend::LoweringError& e) {
    return report_lowering_error(p, e);
  }
  return kExitOk;
}

// Each replayed rank's times and memory peak (the replays run on all
// cores: each is its program's alone), and the highest peak's parts. With
// rank classes, `ranks` is how many of plan replica 0's ranks the row's
// class holds.
void print_rank_table(const backend::LoweredPlan& lp, const planner::SimResult& r, const planner::SimClasses& classes,
                      const sema::TrainSpec& spec, int mem_bpe, bool bf16_storage) {
  const size_t n = r.ranks.size();
  std::vector<backend::MemoryPeak> peaks(n);
  const int slots = static_cast<int>(sema::optimizer_slots(spec.optimizer));
  backend::parallel_for(
      n, [&](size_t i) { peaks[i] = backend::peak_memory(lp.programs[i], mem_bpe, slots, bf16_storage); });
  const bool by_class = !classes.class_of.empty();
  std::printf("  rank  busy_ms     exposed_comm_ms  bubble_ms   peak_mem_GiB%s\n", by_class ? "  ranks" : "");
  size_t top = 0;
  for (size_t i = 0; i < n; ++i) {
    const backend::RankProgram& prog = lp.programs[i];
    if (peaks[i].peak > peaks[top].peak) top = i;
    std::printf("  %4d  %10.6f  %15.6f  %9.6f  %12.3f", prog.rank, r.ranks[i].busy * 1e3, r.ranks[i].exposed_comm * 1e3,
                r.ranks[i].bubble * 1e3, peaks[i].peak / (1024.0 * 1024.0 * 1024.0));
    const size_t at = static_cast<size_t>(prog.rank);
    if (by_class && at < classes.class_of.size())
      std::printf("  %5d", classes.class_size[static_cast<size_t>(classes.class_of[at])]);
    std::printf("\n");
  }
  if (n == 0) return;
  const backend::MemoryPeak& m = peaks[top];
  const double gib = 1024.0 * 1024.0 * 1024.0;
  std::printf(
      "  peak memory: rank %d %.3f GiB (%.0f bytes): weights, gradients and optimizer state %.3f, buffers %.3f (",
      lp.programs[top].rank, m.peak / gib, m.peak, m.persistent / gib, m.buffers_at_peak / gib);
  bool first = true;
  for (const auto& [role, b] : m.roles_at_peak) {
    std::printf("%s%s %.3f", first ? "" : ", ", backend::role_name(static_cast<backend::BufferDecl::Role>(role)),
                b / gib);
    first = false;
  }
  std::printf("), kernel tensors %.3f\n", m.kernels_at_peak / gib);
}

bool sharded_over_replicas(const Args& a, const backend::LoweredPlan& lp) {
  return a.distributed_optimizer && lp.replicas > 1;
}
}  // namespace

int cmd_simulate(const Args& a) {
  auto t0 = std::chrono::steady_clock::now();
  if (a.positional.size() != 1) return usage_error("simulate needs exactly one FILE");
  if (a.plan.empty()) return usage_error("simulate needs --plan NAME");
  if (a.device.empty()) return usage_error("simulate needs --device " + planner::device_choices());
  // --precision: the dtype whose peak the kernels are costed at, and its element size.
  // bf16-storage: kernels costed in bf16, memory as the CUDA backend's bf16
  // activation storage holds it (4-byte buffers, bf16 kernel activations).
  std::string dtype;
  int bpe = 4, mem_bpe = 4;
  const bool bf16_storage = a.precision == "bf16-storage";
  if (a.precision == "fp16" || a.precision == "bf16" || bf16_storage) {
    dtype = bf16_storage ? "bf16" : a.precision;
    bpe = 2;
    mem_bpe = bf16_storage ? 4 : 2;
  } else if (a.precision == "fp32") {
    dtype = "fp32";
  } else if (!a.precision.empty()) {
    return usage_error("--precision must be fp32, bf16, fp16 or bf16-storage");
  }
  planner::DeviceProfile prof;
  std::string err;
  if (!planner::load_device(a.device, prof, err)) {
    std::cerr << "nns: error: " << err << "\n";
    return kExitUsage;
  }
  Pipeline p;
  backend::LoweredPlan lp;
  planner::SimClasses classes;
  FrontTimes front;
  if (a.all_ranks) {
    if (int rc = lower_for_simulation(a, p, lp, &prof); rc != kExitOk) return rc;
  } else if (int rc = lower_rank_classes(a, p, prof, bpe, dtype, lp, classes, front); rc != kExitOk) {
    return rc;
  }
  auto t1 = std::chrono::steady_clock::now();
  planner::SimOptions so;
  so.overlap_grad_reduce = a.overlap_grad;
  so.overlap_param_gather = a.overlap_param_gather;
  so.record = !a.trace.empty();
  planner::SimResult r;
  planner::InstrCost cost = planner::profile_cost(prof, lp, bpe, dtype);
  if (a.tp_comm_overlap) cost = planner::tp_overlap_cost(prof, lp, bpe, dtype, cost);
  if (!planner::simulate(lp, cost, r, err, so)) {
    std::cerr << "nns: internal error: " << err << "\n";
    return kExitRuntime;
  }
  auto t2 = std::chrono::steady_clock::now();
  auto node_times = [&prof, bpe, &dtype](const backend::RankProgram& prog, const backend::PInstr& in) {
    return planner::kernel_node_times(prof, prog, in, bpe, dtype);
  };
  if (!a.trace.empty() && !planner::write_sim_trace(a.trace, lp, &p.graph(), r, err, node_times)) {
    std::cerr << "nns: error: " << err << "\n";
    return kExitRuntime;
  }
  std::printf("simulated %s on %d x %s: step %.6f ms\n", a.plan.c_str(), lp.ranks(), prof.name.c_str(), r.step_time * 1e3);
  std::printf("  precision %s, gradient reduction %s; %zu of %d rank(s) replayed\n",
              dtype.empty() ? "fp32 (tensor dtypes)" : dtype.c_str(),
              so.overlap_grad_reduce ? "overlapped with compute" : "blocking", lp.programs.size(), lp.ranks());
  if (!a.all_ranks)
    std::printf(
        "  rank classes: %d of plan replica 0's %zu ranks run distinct programs; one of each class%s is replayed, "
        "the others repeat it%s (--all-ranks replays every rank)\n",
        classes.classes(), classes.class_of.size(),
        lp.programs.size() > static_cast<size_t>(classes.classes()) ? " (and the peers it receives from)" : "",
        lp.replicas > 1 ? ", as do the other plan replicas" : "");
  if (a.tp_comm_overlap)
    std::printf("  tensor-parallel allreduces pipelined with their GEMMs in chunks (--tp-comm-overlap)\n");
  if (sharded_over_replicas(a, lp))
    std::printf("  distributed optimizer: optimizer state sharded over %d replicas; parameter gather %s\n", lp.replicas,
                so.overlap_param_gather ? "overlapped with the next forward" : "blocking");
  print_rank_table(lp, r, classes, p.spec, mem_bpe, bf16_storage);
  auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (a.all_ranks)
    std::printf("  wall: front end and lowering %.1f ms, replay %.1f ms, memory and report %.1f ms, total %.1f ms\n",
                ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t0, t3));
  else
    std::printf(
        "  wall: front end %.1f ms, rank classes %.1f ms, lowering %.1f ms, replay %.1f ms, memory and report %.1f ms, total %.1f ms\n",
        front.front, front.classes, front.lowering, ms(t1, t2), ms(t2, t3), ms(t0, t3));
  if (!a.trace.empty()) std::printf("  trace: %zu event(s) written to %s\n", r.events.size(), a.trace.c_str());
  return kExitOk;
}

}  // namespace nns::driver
