#include "backend/lowering/lower_plan.h"
#include "semantics/check_deadline.h"
#include <atomic>
#include <exception>

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <thread>

#include "backend/lowering/lower_internal.h"

namespace nns::backend {

using detail::fail;
using detail::GroupTable;
using detail::lower_rank;
using detail::PlanAnalysis;


LoweredPlan lower_plan(const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& spec, const LowerOptions& opts) {
  LoweredPlan out;
  out.plan = plan.name;
  out.devices = static_cast<int>(plan.ngpus);
  out.replicas = opts.replicas;
  out.micro_batches = static_cast<int>(spec.micro_batches);
  // PInstr::mb is 16-bit: a 1,000-micro-batch program holds millions of
  // instructions.
  if (spec.micro_batches > std::numeric_limits<int16_t>::max())
    fail(std::to_string(spec.micro_batches) + " micro-batches: at most 32,767 per step are supported");
  if (spec.data.kind == "safetensors") fail("plans train on synthetic data only for now (the train block names a file)");
  out.comm = opts.comm ? *opts.comm : derive_communication(g, plan);
  PlanAnalysis analysis(g, plan, out.comm);
  analysis.run();
  out.notes = analysis.zero1_notes;
  // The edges the programs run: an edge that shares another's transfer
  // (CommEdge::shared_with) runs none of its own.
  std::set<int> used;
  for (const PlanAnalysis::Op& op : analysis.ops) {
    for (const CommEdge* e : op.in_edge)
      if (e && e->shared_with < 0) used.insert(static_cast<int>(e - out.comm.edges.data()));
    if (op.backward)
      for (const CommEdge* e : op.grad_edge)
        if (e && e->shared_with < 0) used.insert(static_cast<int>(e - out.comm.edges.data()));
  }
  out.edges.assign(used.begin(), used.end());
  GroupTable groups{{}, out.groups, {}, {}, -1};
  int ranks = out.ranks();
  std::vector<int> todo;
  for (int r = 0; r < ranks; ++r)
    if ((opts.only_rank < 0 || r == opts.only_rank) && (opts.first_ranks <= 0 || r < opts.first_ranks)) todo.push_back(r);
  if (!opts.ranks.empty()) {
    todo.clear();
    for (int r : opts.ranks)
      if (r >= 0 && r < ranks) todo.push_back(r);
  }
  out.programs.resize(todo.size());
  const detail::WalkPlan walk = detail::plan_walk(analysis, spec, opts, groups, out.devices);
  // Ranks are independent given the shared analysis: lowered on all cores
  // when there are many. The interpreter that elaborates kernels is not
  // thread-safe: with an elaborator, every rank's kernels pass runs here
  // first, on this thread, and the other passes on all cores. Group ids
  // then depend on the interleaving; every rank still names one group by
  // one id.
  unsigned threads = todo.size() < 16 ? 1 : std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<detail::RankBuild>> kernels_made;
  bool stopped_after_kernels = false;  // LowerOptions::stop_after names the kernels pass
  if (threads > 1 && opts.elaborate) {
    kernels_made.resize(todo.size());
    for (size_t i = 0; i < todo.size(); ++i) {
      sema::CheckDeadline::poll();
      kernels_made[i] = std::make_unique<detail::RankBuild>(analysis, spec, opts, groups, out.devices, todo[i]);
      kernels_made[i]->walk = &walk;
      stopped_after_kernels = !detail::run_lowering_passes(*kernels_made[i], 0, 1);
    }
  }
  std::vector<std::exception_ptr> errors(threads);  // rethrown as they are (a LoweringError keeps its location)
  std::atomic<bool> timed_out{false};
  auto work = [&](unsigned t) {
    try {
      for (size_t i = t; i < todo.size() && !timed_out; i += threads) {
        sema::CheckDeadline::poll();
        if (!kernels_made.empty()) {
          detail::RankBuild& R = *kernels_made[i];
          if (!stopped_after_kernels) detail::run_lowering_passes(R, 1, detail::lowering_passes().size());
          out.programs[i] = std::move(R.P);
          kernels_made[i].reset();
          continue;
        }
        out.programs[i] = lower_rank(analysis, spec, opts, groups, out.devices, todo[i], &walk);
      }
    } catch (const sema::CheckTimeout&) {
      timed_out = true;
    } catch (const LoweringError&) {
      errors[t] = std::current_exception();
    } catch (const std::exception& e) {
      errors[t] = std::make_exception_ptr(LoweringError(e.what()));
    }
  };
  if (threads == 1) {
    for (size_t i = 0; i < todo.size(); ++i) {
      sema::CheckDeadline::poll();
      out.programs[i] = lower_rank(analysis, spec, opts, groups, out.devices, todo[i], &walk);
    }
    return out;
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (std::thread& th : pool) th.join();
  if (timed_out) sema::CheckDeadline::poll_now();  // rethrown on this thread
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace nns::backend
