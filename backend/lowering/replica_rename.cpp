// Plan replicas by renaming (lower_plan.h, renames_replicas): rank
// r * k + d of replica r runs device d's program of replica 0 with the
// ranks renamed, made so here rather than lowered again.
//
// Why that is the program lowering would give: lowering reads the replica
// of a rank in exactly two places, the global rank of a device of its own
// replica (grank: the members of its collectives' groups and its send/recv
// peers) and the distributed optimizer's shard (which turns renaming off).
// The groups across replicas (a parameter's replica average over device d
// of every replica, the loss reduction over the world) are the same
// absolute ranks in every replica's program. So the renaming is: a group
// whose members all lie in replica 0 moves to replica r, a group across
// replicas stays, a peer in replica 0 moves. Those are the rules program
// verification renames by (rank_classes.h: in_replica, the one predicate
// both read, and replica_difference), and the tests compare
// renamed programs with the ones lowering each rank gives
// (lower_plan_test.cpp).
//
// What it buys: `nns check` of GPT 145.6B on 1,536 ranks (24 replicas of
// 64) lowered and compared 1,472 programs of replicas 1..23; the runtime's
// rank lowers one program either way.
#include <algorithm>
#include <unordered_map>

#include "backend/lowering/lower_internal.h"
#include "backend/lowering/rank_classes.h"

namespace nns::backend::detail {

std::vector<int> replica0_ranks(const std::vector<int>& wanted, int devices) {
  std::vector<int> out;
  std::vector<char> seen(static_cast<size_t>(devices), 0);
  for (int r : wanted) {
    const int d = r % devices;
    if (seen[static_cast<size_t>(d)]) continue;
    seen[static_cast<size_t>(d)] = 1;
    out.push_back(d);
  }
  return out;
}

namespace {

// Renames replica 0's program `p` (rank d) to replica `replica`.
void rename(RankProgram& p, int replica, int devices, GroupTable& groups, std::unordered_map<int, int>& group_memo) {
  const int shift = replica * devices;
  p.rank += shift;
  p.replica = replica;
  for (PInstr& in : p.instrs) {
    if (in.peer >= 0 && in_replica(in.peer, 0, devices)) in.peer += shift;
    if (in.group < 0) continue;
    auto [it, fresh] = group_memo.emplace(in.group, in.group);
    if (fresh) {
      std::vector<int> members;
      {
        std::lock_guard<std::mutex> lock(groups.mu);
        members = groups.groups[static_cast<size_t>(in.group)];
      }
      const bool inside = std::all_of(members.begin(), members.end(), [&](int m) { return in_replica(m, 0, devices); });
      if (inside) {
        for (int& m : members) m += shift;
        it->second = groups.intern(members);
      }
    }
    in.group = it->second;
  }
}

}  // namespace

void rename_replicas(LoweredPlan& lp, GroupTable& groups, const std::vector<int>& wanted) {
  const int devices = lp.devices;
  // lp.programs holds replica0_ranks(wanted) in order: index by device.
  std::vector<int> at(static_cast<size_t>(devices), -1);
  for (size_t i = 0; i < lp.programs.size(); ++i) at[static_cast<size_t>(lp.programs[i].device)] = static_cast<int>(i);
  std::vector<int> uses(static_cast<size_t>(devices), 0);
  for (int r : wanted) ++uses[static_cast<size_t>(r % devices)];
  std::vector<RankProgram> base = std::move(lp.programs);
  lp.programs.clear();
  lp.programs.reserve(wanted.size());
  std::vector<std::unordered_map<int, int>> memo(static_cast<size_t>(lp.replicas));  // per replica: group id -> renamed
  for (int r : wanted) {
    const int d = r % devices, replica = r / devices;
    RankProgram& b = base[static_cast<size_t>(at[static_cast<size_t>(d)])];
    // The last rank that needs it takes it; the others a copy.
    if (--uses[static_cast<size_t>(d)] == 0)
      lp.programs.push_back(std::move(b));
    else
      lp.programs.push_back(b);
    if (replica > 0) rename(lp.programs.back(), replica, devices, groups, memo[static_cast<size_t>(replica)]);
  }
}

}  // namespace nns::backend::detail
