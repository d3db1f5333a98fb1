// lower_plan's side of rank symmetry (rank_symmetry.h): whether to look for
// one, the orbits' representatives, and the other devices of each orbit
// made from them: moved on all cores, their kernel bodies their own, and
// lowered where a move does not apply.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

#include "backend/lowering/lower_internal.h"
#include "backend/lowering/parallel.h"
#include "backend/lowering/rank_symmetry.h"

namespace nns::backend::detail {

bool symmetry_wanted(const LowerOptions& opts) {
  if (opts.every_device || !opts.stop_after.empty()) return false;
  const char* env = std::getenv("NNS_RANK_SYMMETRY");
  return !(env && std::strcmp(env, "0") == 0);
}

std::vector<int> orbit_representatives(const RankSymmetry& sym, const std::vector<int>& wanted) {
  std::vector<int> out;
  for (int d : wanted) {
    const int r = d % sym.period();
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

bool same_kernel_structure(const SubOpKernel& a, const SubOpKernel& b) {
  return a.subop == b.subop && a.node == b.node && same_pieces(a.in_slices, b.in_slices) &&
         same_pieces(a.out_slices, b.out_slices) && a.scale == b.scale &&
         a.row_strided_inputs == b.row_strided_inputs && a.recompute == b.recompute &&
         a.regather_inputs == b.regather_inputs && a.wgrad_nodes.empty() == b.wgrad_nodes.empty();
}

void expand_orbits(LoweredPlan& lp, const RankSymmetry& sym, const std::vector<int>& wanted, GroupTable& groups,
                   const std::function<bool(int, RankProgram&)>& add_bodies,
                   const std::function<RankProgram(int)>& lower, bool skeletons) {
  // lp.programs holds orbit_representatives(wanted), in that order.
  std::map<int, size_t> rep_at;
  for (size_t i = 0; i < lp.programs.size(); ++i) rep_at[lp.programs[i].device] = i;
  std::vector<RankProgram> base = std::move(lp.programs);
  lp.programs.assign(wanted.size(), RankProgram());
  std::vector<char> made(wanted.size(), 0);  // per wanted device: moved (with its bodies)
  std::vector<size_t> to_move, reps;
  std::map<int, int> rep_place;  // representative device -> its place in lp.programs
  for (size_t i = 0; i < wanted.size(); ++i) {
    (rep_at.count(wanted[i]) ? reps : to_move).push_back(i);
    if (rep_at.count(wanted[i])) rep_place[wanted[i]] = static_cast<int>(i);
  }
  // A skeleton names its representative's program, which must be wanted too.
  skeletons = skeletons && !add_bodies && rep_place.size() == base.size();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RankSymmetry::SkeletonBase> skeleton_bases(skeletons ? base.size() : 0);
  parallel_for(skeleton_bases.size(), [&](size_t r) { skeleton_bases[r] = sym.skeleton_base(base[r]); });
  parallel_for(to_move.size(), [&](size_t j) {
    const size_t i = to_move[j];
    const int d = wanted[i];
    const size_t r = rep_at.at(d % sym.period());
    if (skeletons) {
      made[i] = sym.move_skeleton(base[r], skeleton_bases[r], d, groups, lp.programs[i]) ? 1 : 0;
      lp.programs[i].moved_from = rep_place.at(base[r].device);
    } else {
      made[i] = sym.move(base[r], d, groups, lp.programs[i]) ? 1 : 0;
    }
  });
  // Each device is wanted once: its representative's program is its own.
  for (size_t i : reps) lp.programs[i] = std::move(base[rep_at.at(wanted[i])]);
  // Kernel bodies, on this thread (the interpreter elaborates them); then
  // what could not be moved is lowered.
  for (size_t i : to_move)
    if (made[i] && add_bodies && !add_bodies(wanted[i], lp.programs[i])) made[i] = 0;
  lp.symmetry_period = sym.period();
  lp.symmetry_ms = sym.find_ms();
  lp.moved_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i : to_move)
    if (made[i]) {
      ++lp.moved;
      lp.skeletons += skeletons ? 1 : 0;
    } else {
      lp.programs[i] = lower(wanted[i]);
    }
}

}  // namespace nns::backend::detail
