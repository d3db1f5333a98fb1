// nns simulate FILE --plan P --gpus N --device D: lowers the plan to its
// RankPrograms (the lists `nns run` executes) and replays them on a device
// profile with the planner's simulator. With plan replicas (N > --plan-gpus
// K) only replica 0's K ranks are lowered and replayed: the replicas run
// identical programs, and the simulator costs their gradient averaging over
// its group (planner/simulator.h, "Symmetry"); --all-ranks replays all N.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_replay.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/profiles.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/sim_trace.h"
#include "backend/planner/simulator.h"
#include "backend/planner/tp_overlap.h"
#include "driver/commands.h"
#include "driver/pipeline.h"

namespace nns::driver {

int lower_for_simulation(const Args& a, Pipeline& p, backend::LoweredPlan& lp) {
  PipelineOptions o;
  if (int rc = pipeline_options(a, /*check=*/true, Stage::Comm, o); rc != kExitOk) return rc;
  o.memory_report = false;  // the same replay's peak is printed below, for every rank replayed
  // Program verification (the pipeline's last stage here) checks one plan
  // replica's programs unless every rank is replayed: the replicas are the
  // same programs, and verifying 1536 ranks costs minutes and tens of GiB.
  const int64_t replicas = o.topo.replicas;
  if (!a.all_ranks) o.topo.replicas = 1;
  if (int rc = run_pipeline(o, p); rc != kExitOk) return rc;
  o.topo.replicas = replicas;
  p.spec = *p.interp->train();
  try {
    backend::LowerOptions lo;
    lo.comm = &p.comm;
    lo.replicas = static_cast<int>(o.topo.replicas);
    lo.distributed_optimizer = o.topo.distributed_optimizer;
    if (!a.all_ranks) lo.first_ranks = static_cast<int>(o.topo.devices);
    sema::Interpreter& interp = *p.interp;
    lo.elaborate = [&interp](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                             const std::map<std::string, int64_t>& divisors, sema::Graph& local) {
      return interp.instantiate_op(node, ins, outs, divisors, local);
    };
    lp = backend::lower_plan(p.graph(), p.plan, p.spec, lo);
  } catch (const backend::LoweringError& e) {
    return report_lowering_error(p, e);
  }
  return kExitOk;
}

namespace {
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
  if (int rc = lower_for_simulation(a, p, lp); rc != kExitOk) return rc;
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
  std::printf("  precision %s, gradient reduction %s; %zu of %d rank(s) replayed%s\n", dtype.empty() ? "fp32 (tensor dtypes)" : dtype.c_str(),
              so.overlap_grad_reduce ? "overlapped with compute" : "blocking", lp.programs.size(), lp.ranks(),
              lp.programs.size() < static_cast<size_t>(lp.ranks()) ? " (plan replica 0; the other replicas are identical)" : "");
  if (a.tp_comm_overlap)
    std::printf("  tensor-parallel allreduces pipelined with their GEMMs in chunks (--tp-comm-overlap)\n");
  if (sharded_over_replicas(a, lp))
    std::printf("  distributed optimizer: optimizer state sharded over %d replicas; parameter gather %s\n", lp.replicas,
                so.overlap_param_gather ? "overlapped with the next forward" : "blocking");
  std::printf("  rank  busy_ms     exposed_comm_ms  bubble_ms   peak_mem_GiB\n");
  backend::MemoryPeak top;
  int top_rank = -1;
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    backend::MemoryPeak m = backend::peak_memory(
        lp.programs[i], mem_bpe, static_cast<int>(sema::optimizer_slots(p.spec.optimizer)), bf16_storage);
    if (m.peak > top.peak) {
      top = m;
      top_rank = lp.programs[i].rank;
    }
    std::printf("  %4d  %10.6f  %15.6f  %9.6f  %12.3f\n", lp.programs[i].rank, r.ranks[i].busy * 1e3, r.ranks[i].exposed_comm * 1e3,
                r.ranks[i].bubble * 1e3, m.peak / (1024.0 * 1024.0 * 1024.0));
  }
  if (top_rank >= 0) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("  peak memory: rank %d %.3f GiB (%.0f bytes): weights, gradients and optimizer state %.3f, buffers %.3f (", top_rank, top.peak / gib, top.peak,
                top.persistent / gib, top.buffers_at_peak / gib);
    bool first = true;
    for (const auto& [role, b] : top.roles_at_peak) {
      std::printf("%s%s %.3f", first ? "" : ", ", backend::role_name(static_cast<backend::BufferDecl::Role>(role)), b / gib);
      first = false;
    }
    std::printf("), kernel tensors %.3f\n", top.kernels_at_peak / gib);
  }
  auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::printf("  wall: front end and lowering %.1f ms, replay %.1f ms, total %.1f ms\n", ms(t0, t1), ms(t1, t2), ms(t0, t3));
  if (!a.trace.empty()) std::printf("  trace: %zu event(s) written to %s\n", r.events.size(), a.trace.c_str());
  return kExitOk;
}

}  // namespace nns::driver
