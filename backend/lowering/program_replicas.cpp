// Plan replicas held apart by program verification (program_order.h,
// compare_replicas): replicas 1.. lowered one at a time and compared with
// replica 0.
#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/parallel.h"
#include "backend/lowering/program_order.h"
#include "backend/lowering/rank_classes.h"
#include "semantics/check_deadline.h"

namespace nns::backend::detail {

bool compare_replicas(const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& sp, LowerOptions ro,
                      const LoweredPlan& lp, SeededBug bug, std::vector<std::unique_ptr<LoweredPlan>>& kept,
                      ProgramCheck& out) {
  const int k = lp.devices;
  ro.first_ranks = 0;
  ro.comm = lp.comm.get();  // what replica 0 was lowered from (a seeded derivation included)
  ro.share_comm = false;    // the replicas' plans (`kept`) may outlive lp
  const bool scale = bug == SeededBug::ReplicaScale || bug == SeededBug::GradientScale1Pct;
  if (renames_replicas(ro)) {
    // Replicas 1.. run replica 0's programs renamed by construction
    // (replica_rename.cpp): nothing to lower or compare. A seeded replica
    // scale goes into replica 1's program of device 0, renamed here and
    // then verified on its own.
    out.replica_programs = (lp.replicas - 1) * k;
    if (!scale) return true;
    ro.ranks = {k};
    auto lr = std::make_unique<LoweredPlan>();
    try {
      *lr = lower_plan(g, plan, sp, ro);
    } catch (const LoweringError& e) {
      out.errors.push_back(std::string("lowering: ") + e.what());
      return false;
    }
    if (!lr->programs.empty() && seed_replica_scale(g, lr->programs[0], lp.replicas, bug, out.applied)) {
      --out.replica_programs;
      out.notes.push_back("rank " + std::to_string(k) + " (replica 1) does not run replica 0's program of device 0 " +
                          "renamed (the seeded replica scale): verified on its own");
      kept.push_back(std::move(lr));
    }
    return true;
  }
  int differing = 0;
  for (int r = 1; r < lp.replicas; ++r) {
    sema::CheckDeadline::poll();
    ro.ranks.clear();
    for (int d = 0; d < k; ++d) ro.ranks.push_back(r * k + d);
    auto lr = std::make_unique<LoweredPlan>();
    try {
      *lr = lower_plan(g, plan, sp, ro);
    } catch (const LoweringError& e) {
      out.errors.push_back(std::string("lowering: ") + e.what());
      return false;
    }
    if (r == 1 && scale && !lr->programs.empty()) seed_replica_scale(g, lr->programs[0], lp.replicas, bug, out.applied);
    // Each program compared with replica 0's on all cores; the verdicts
    // then read in device order.
    std::vector<std::string> whys(lr->programs.size());
    parallel_for(lr->programs.size(), [&](size_t d) {
      whys[d] = replica_difference(lp.programs[d], lp.groups, lr->programs[d], lr->groups, k);
    });
    std::vector<RankProgram> differ;
    for (size_t d = 0; d < lr->programs.size(); ++d) {
      const std::string& why = whys[d];
      if (why.empty()) {
        ++out.replica_programs;
        continue;
      }
      if (++differing <= 3)
        out.notes.push_back("rank " + std::to_string(lr->programs[d].rank) + " (replica " + std::to_string(r) +
                            ") does not run replica 0's program of device " + std::to_string(d) + " renamed (" + why +
                            "): verified on its own");
      differ.push_back(std::move(lr->programs[d]));
    }
    if (differ.empty()) continue;
    lr->programs = std::move(differ);
    kept.push_back(std::move(lr));
  }
  if (differing > 3)
    out.notes.push_back(std::to_string(differing) +
                        " programs of replicas 1.. differ from replica 0's, each verified on its own");
  return true;
}

}  // namespace nns::backend::detail
