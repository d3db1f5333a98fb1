#include "backend/lowering/lower_plan.h"
#include "semantics/check_deadline.h"
#include <atomic>
#include <exception>

#include <algorithm>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "backend/lowering/kernel_cache.h"
#include "backend/lowering/lower_internal.h"
#include "backend/lowering/parallel.h"
#include "backend/lowering/rank_symmetry.h"

namespace nns::backend {

using detail::fail;
using detail::GroupTable;
using detail::lower_rank;
using detail::PlanAnalysis;

// The analysis lowering derives before any rank (lower_internal.h): built
// here, or taken from the caller's cache when it was built over the same
// graph, plan and CommPlan object (LowerOptions::analysis_cache).
struct AnalysisCache {
  std::mutex mu;
  const sema::Graph* g = nullptr;
  const sema::Plan* plan = nullptr;
  const CommPlan* comm = nullptr;
  const CommEdge* edges = nullptr;
  size_t edge_count = 0;
  std::shared_ptr<const PlanAnalysis> analysis;
};

std::shared_ptr<AnalysisCache> make_analysis_cache() { return std::make_shared<AnalysisCache>(); }

namespace {

std::shared_ptr<const PlanAnalysis> analysis_of(const sema::Graph& g, const sema::Plan& plan, const CommPlan& copy,
                                                const LowerOptions& opts) {
  AnalysisCache* c = opts.comm ? opts.analysis_cache.get() : nullptr;
  if (!c) {
    auto a = std::make_shared<PlanAnalysis>(g, plan, copy);
    a->run();
    return a;
  }
  // Over the caller's CommPlan, which the cache's owner keeps alive and
  // unchanged; the edge indices it gives are those of the copy too.
  std::lock_guard<std::mutex> lock(c->mu);
  const CommPlan& comm = *opts.comm;
  if (!c->analysis || c->g != &g || c->plan != &plan || c->comm != &comm || c->edges != comm.edges.data() ||
      c->edge_count != comm.edges.size()) {
    auto a = std::make_shared<PlanAnalysis>(g, plan, comm);
    a->run();
    c->g = &g;
    c->plan = &plan;
    c->comm = &comm;
    c->edges = comm.edges.data();
    c->edge_count = comm.edges.size();
    c->analysis = a;
  }
  return c->analysis;
}

// The edges the programs run: an edge that shares another's transfer
// (CommEdge::shared_with) runs none of its own.
std::vector<int> edges_run(const PlanAnalysis& analysis) {
  std::set<int> used;
  for (const PlanAnalysis::Op& op : analysis.ops) {
    for (const CommEdge* e : op.in_edge)
      if (e && e->shared_with < 0) used.insert(static_cast<int>(e - analysis.cp.edges.data()));
    if (op.backward)
      for (const CommEdge* e : op.grad_edge)
        if (e && e->shared_with < 0) used.insert(static_cast<int>(e - analysis.cp.edges.data()));
  }
  return std::vector<int>(used.begin(), used.end());
}

// The ranks LowerOptions asks for, in order.
std::vector<int> ranks_wanted(int ranks, const LowerOptions& opts) {
  std::vector<int> todo;
  if (!opts.ranks.empty()) {
    for (int r : opts.ranks)
      if (r >= 0 && r < ranks) todo.push_back(r);
    return todo;
  }
  for (int r = 0; r < ranks; ++r)
    if ((opts.only_rank < 0 || r == opts.only_rank) && (opts.first_ranks <= 0 || r < opts.first_ranks))
      todo.push_back(r);
  return todo;
}

}  // namespace

LoweredPlan lower_plan(const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& spec, const LowerOptions& opts) {
  LoweredPlan out;
  out.plan = plan.name;
  out.devices = static_cast<int>(plan.ngpus);
  out.replicas = opts.replicas;
  out.micro_batches = static_cast<int>(spec.micro_batches);
  // The language refuses more (sema::kMaxMicroBatches); a spec built in
  // code (the planner's) is refused here, not truncated into PInstr::mb.
  if (spec.micro_batches > sema::kMaxMicroBatches)
    fail(std::to_string(spec.micro_batches) + " micro-batches: at most " + std::to_string(sema::kMaxMicroBatches) +
         " per step are supported");
  if (spec.data.kind == "safetensors") fail("plans train on synthetic data only for now (the train block names a file)");
  if (opts.comm && opts.share_comm)
    out.comm = std::shared_ptr<const CommPlan>(std::shared_ptr<const CommPlan>(), opts.comm);  // not owned
  else
    out.comm = std::make_shared<const CommPlan>(opts.comm ? *opts.comm : derive_communication(g, plan));
  const std::shared_ptr<const PlanAnalysis> shared = analysis_of(g, plan, *out.comm, opts);
  const PlanAnalysis& analysis = *shared;
  out.notes = analysis.zero1_notes;
  out.edges = edges_run(analysis);
  GroupTable groups{{}, out.groups, {}, {}, -1};
  std::vector<int> todo = ranks_wanted(out.ranks(), opts);
  // Plan replicas run replica 0's programs renamed (replica_rename.cpp):
  // only ranks of replica 0 are lowered.
  const bool rename = renames_replicas(opts);
  const std::vector<int> wanted = todo;
  if (rename) todo = detail::replica0_ranks(wanted, out.devices);
  // Devices of one orbit of the plan's symmetry run one program moved
  // (rank_symmetry.h): only a representative of each orbit is lowered.
  std::shared_ptr<const detail::RankSymmetry> sym;
  const std::vector<int> devices_wanted = todo;
  // (Device 0 represents its orbit under any period: a rank process of
  // rank 0 has nothing to move, nor looks for what it could move.)
  const bool look = detail::symmetry_wanted(opts) &&
                    std::any_of(todo.begin(), todo.end(), [](int r) { return r > 0; }) &&
                    std::all_of(todo.begin(), todo.end(), [&](int r) { return r < out.devices; });
  // The symmetry is looked for on a thread of its own while this one
  // lowers device 0, when it is the first device wanted: it is then the
  // first representative, whatever the period (orbit_representatives), and
  // the first rank without one. (AlphaFold2 dap on 32 devices: 0.2 s each.)
  std::future<std::shared_ptr<const detail::RankSymmetry>> looking;
  if (look)
    looking = std::async(std::launch::async,
                         [&analysis, devices = out.devices] { return detail::RankSymmetry::of(analysis, devices); });
  const detail::WalkPlan walk = detail::plan_walk(analysis, spec, opts, groups, out.devices);
  // Each distinct kernel elaborated once, on this one thread (kernel_cache.h).
  std::unique_ptr<detail::KernelCache> cache;
  if (detail::kernel_cache_wanted(opts)) cache = std::make_unique<detail::KernelCache>();
  std::optional<RankProgram> device0;
  if (look && devices_wanted.front() == 0)
    device0 = lower_rank(analysis, spec, opts, groups, out.devices, 0, &walk, cache.get());
  if (look) sym = looking.get();
  if (sym) todo = detail::orbit_representatives(*sym, devices_wanted);
  if (device0 && todo.front() != 0) throw std::logic_error("lower_plan: device 0 is not the first representative");
  out.programs.resize(todo.size());
  const size_t first_todo = device0 ? 1 : 0;  // todo[0], device 0, already lowered
  if (device0) out.programs[0] = std::move(*device0);
  // Ranks are independent given the shared analysis: lowered on all cores
  // when there are many. The interpreter that elaborates kernels is not
  // thread-safe: with an elaborator, every rank's kernels pass runs here
  // first, on this thread, and the other passes on all cores. Group ids
  // then depend on the interleaving; every rank still names one group by
  // one id.
  // Few ranks lower faster on one thread than threads start.
  const bool parallel = todo.size() >= 16 && check_threads(todo.size()) > 1;
  // A rank's build with its kernels made (the kernels pass, on this
  // thread); `stopped` when LowerOptions::stop_after names that pass.
  auto with_kernels = [&](int rank, bool& stopped) {
    auto R = std::make_unique<detail::RankBuild>(analysis, spec, opts, groups, out.devices, rank);
    R->walk = &walk;
    R->kernel_cache = cache.get();
    stopped = !detail::run_lowering_passes(*R, 0, 1);
    return R;
  };
  std::vector<std::unique_ptr<detail::RankBuild>> kernels_made;
  bool stopped_after_kernels = false;
  if (parallel && opts.elaborate) {
    kernels_made.resize(todo.size());
    for (size_t i = first_todo; i < todo.size(); ++i) {
      sema::CheckDeadline::poll();
      kernels_made[i] = with_kernels(todo[i], stopped_after_kernels);
    }
  }
  // The first rank (in order) whose lowering fails throws here, as a
  // serial loop would (parallel_for rethrows the lowest item's error); a
  // LoweringError keeps its location.
  auto lower_one = [&](size_t i) {
    if (i < first_todo) return;
    sema::CheckDeadline::poll();
    if (!kernels_made.empty()) {
      detail::RankBuild& R = *kernels_made[i];
      if (!stopped_after_kernels) detail::run_lowering_passes(R, 1, detail::lowering_passes().size());
      out.programs[i] = std::move(R.P);
      kernels_made[i].reset();
      return;
    }
    // Only the serial loop elaborates here (in parallel, kernels_made has them).
    out.programs[i] =
        lower_rank(analysis, spec, opts, groups, out.devices, todo[i], &walk, parallel ? nullptr : cache.get());
  };
  // The other devices of each orbit: moved; with bodies, each elaborates
  // its own kernels (on this thread), which must be the moved ones.
  auto expand = [&](const std::vector<int>& devices) {
    std::function<bool(int, RankProgram&)> add_bodies;
    if (opts.elaborate)
      add_bodies = [&](int d, RankProgram& p) {
        bool stopped = false;  // (symmetry_wanted: never, without stop_after)
        std::unique_ptr<detail::RankBuild> R = with_kernels(d, stopped);
        if (R->P.kernels.size() != p.kernels.size()) return false;
        for (size_t k = 0; k < p.kernels.size(); ++k)
          if (!detail::same_kernel_structure(R->P.kernels[k], p.kernels[k])) return false;
        p.kernels = std::move(R->P.kernels);
        p.local = std::move(R->P.local);
        return true;
      };
    detail::expand_orbits(
        out, *sym, devices, groups, add_bodies,
        [&](int d) { return lower_rank(analysis, spec, opts, groups, out.devices, d, &walk, cache.get()); },
        opts.moved_skeletons && opts.replicas == 1);
  };
  // Moved out: `out` is captured, so a plain return would copy every
  // program (it doubled the check's memory at 1024 ranks).
  auto finish = [&]() -> LoweredPlan {
    if (sym) expand(devices_wanted);
    if (rename) detail::rename_replicas(out, groups, wanted);
    return std::move(out);
  };
  if (!parallel) {
    for (size_t i = 0; i < todo.size(); ++i) lower_one(i);
    return finish();
  }
  parallel_for(todo.size(), [&](size_t i) {
    try {
      lower_one(i);
    } catch (const sema::CheckTimeout&) {
      throw;
    } catch (const LoweringError&) {
      throw;
    } catch (const std::exception& e) {
      throw LoweringError(e.what());
    }
  });
  return finish();
}

bool renames_replicas(const LowerOptions& opts) {
  return opts.replicas > 1 && !opts.distributed_optimizer && !opts.every_replica;
}

}  // namespace nns::backend
