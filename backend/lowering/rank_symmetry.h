// Rank symmetry: devices whose programs are one program moved along the
// plan's own regularity, made by moving instead of lowering each again.
//
// A DAP plan (AlphaFold2) gives device d the d-th block of every split
// tensor, a coshard plan over 256 tensor-parallel groups of 4 (Swin) gives
// group g the g-th block of the batch: shifting every device by a period k
// (d -> d + k mod D) maps the plan onto itself, each tensor's blocks moving
// along their axes by a fixed permutation. The lowering of a device then
// differs from that of the device k before it only by that move: its boxes,
// its partial-sum and copy labels, its peers and groups, its sub-ops. This
// file finds the smallest such period, from the plan's leaves and the
// layouts of the derived communication, and moves a program along it.
//
// Why what it gives can be trusted: lower_plan makes only a representative
// of each orbit (the devices 0 .. k-1) by lowering; program verification
// then checks every rank's moved program (collectives matched across
// ranks; buffers on the representative, which the move cannot change:
// program_check.h) as it checks lowered ones, and the rank processes of
// `nns run` move their program the same way (elaborating their own kernels:
// lower_plan.cpp), so that what verification read is what runs. A box,
// label or group the move cannot map makes that device lowered instead. The
// tests compare moved programs with lowered ones on the shipped plans
// (lower_plan_test.cpp, `[symmetry]`); LowerOptions::every_device lowers
// each device.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/lowering/lower_plan.h"

namespace nns::backend::detail {

struct PlanAnalysis;
struct GroupTable;

class RankSymmetry {
 public:
  ~RankSymmetry();
  // The smallest period k (a divisor of `devices`, below it) under which
  // the plan analysed by `A` maps onto itself; null when there is none.
  static std::unique_ptr<RankSymmetry> find(const PlanAnalysis& A, int devices);
  // find, once per analysis (the check lowers twice from one analysis).
  static std::shared_ptr<const RankSymmetry> of(const PlanAnalysis& A, int devices);
  int period() const;
  double find_ms() const { return find_ms_; }  // how long `of` took to find it
  // Device `to`'s program made from `from`, the program of a device of the
  // same orbit (replica 0): its boxes, labels, sub-ops, peers and groups
  // moved. False when something cannot be moved (`out` is then unusable).
  // Kernel bodies are not moved: the caller elaborates them (position
  // attrs such as dropout offsets depend on the slice).
  bool move(const RankProgram& from, int to, GroupTable& groups, RankProgram& out) const;

  // Skeletons (LowerOptions::moved_skeletons, what `nns check` verifies),
  // made from what a representative's program gives them all: its
  // communication and update instructions with their places, and per m in
  // [0, devices / period) whether every box and label of its kernels and
  // buffers moves by m periods (what `move` checks piece by piece, decided
  // once per distinct interval of each axis).
  struct SkeletonBase {
    std::vector<PInstr> comm;
    std::vector<uint32_t> at;
    std::vector<char> pieces;
    bool leaves = false;  // its kernels line up with its leaves (then on every device of its orbit)
  };
  SkeletonBase skeleton_base(const RankProgram& from) const;
  // Device `to`'s skeleton: the communication and update instructions of
  // its moved program (RankProgram::instr_at: their places in it), true
  // exactly when `move` would succeed. Its buffers, kernels, parameters
  // and buckets are `from`'s, moved: the caller sets
  // RankProgram::moved_from and readers take them from there.
  bool move_skeleton(const RankProgram& from, const SkeletonBase& base, int to, GroupTable& groups,
                     RankProgram& out) const;

  struct Maps;

 private:
  // Moves `instrs` (copies of `from`'s, in order) to device `to`, m
  // periods on: peers and groups, and each collective's block boxes into
  // `geoms` (null: only checked to move). False when one cannot move.
  bool move_comm(const RankProgram& from, int to, int64_t m, GroupTable& groups, std::vector<PInstr>& instrs,
                 std::vector<CollectiveGeom>* geoms) const;
  // The image leaf of each of `from`'s kernels on `to` (empty: they do not line up).
  std::vector<int> moved_leaves(const RankProgram& from, int to) const;

  RankSymmetry(const PlanAnalysis& A, int devices, int period, std::unique_ptr<Maps> maps);
  const PlanAnalysis& A_;
  int devices_ = 1, period_ = 0;
  double find_ms_ = 0;
  std::unique_ptr<Maps> maps_;
  std::vector<const std::vector<int>*> leaves_at_;  // [op * devices + device]: the op's leaves there
};

// Whether lower_plan looks for a symmetry: not with
// LowerOptions::every_device or NNS_RANK_SYMMETRY=0, nor when it stops after
// a pass (--emit=program:PASS shows each device's lowering).
bool symmetry_wanted(const LowerOptions& opts);
// The representative (device mod period) of each device of `wanted`, in
// order of first need: the devices lower_plan lowers.
std::vector<int> orbit_representatives(const RankSymmetry& sym, const std::vector<int>& wanted);
// Whether a kernel made for a device is the moved kernel: same sub-op,
// slices, loss share, strided reads, recompute and B/W split.
bool same_kernel_structure(const SubOpKernel& a, const SubOpKernel& b);
// lp.programs, holding the representatives' programs (in the order
// orbit_representatives gives), made `wanted`'s: each device's moved from
// its representative (on all cores), `add_bodies` (unless empty) giving a
// moved program its kernel bodies, or false; a device that cannot be moved,
// or whose bodies do not fit, is lowered by `lower`. `skeletons` (without
// bodies, every representative wanted): a moved device gets its skeleton
// (RankSymmetry::move_skeleton) instead of its whole program.
void expand_orbits(LoweredPlan& lp, const RankSymmetry& sym, const std::vector<int>& wanted, GroupTable& groups,
                   const std::function<bool(int, RankProgram&)>& add_bodies,
                   const std::function<RankProgram(int)>& lower, bool skeletons = false);

}  // namespace nns::backend::detail
