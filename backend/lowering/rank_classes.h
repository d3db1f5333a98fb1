// Rank classes for the capacity check (memory_check.h): ranks whose lowered
// programs are the same up to the renaming of ranks compute the same memory
// peak, so only one representative per class needs its kernel bodies
// elaborated and replayed. On a data-parallel or coshard plan over 1024
// devices that is a handful of programs instead of 1024 (the bodies lowering
// of every rank made `nns check` of Swin coshard at 1024 devices run out of
// 24 GB).
//
// The claim is checked, not assumed: each rank's program, as the structure
// lowering made it (communication_only with kernel_buffers, what program
// verification reads), is reduced to a signature of everything the memory
// replay (memory_replay.h) reads or that decides a kernel's elaboration, and
// ranks are put in one class only when their signatures are equal element
// by element (a hash only buckets them). What the signature holds:
//   - every buffer: role, tensor, micro-batch, box lengths (not its place),
//     value and copy counts;
//   - every instruction: kind, buffer and kernel operands (program-local
//     indices), index, micro-batch, scale, count, edge and step (not the
//     group, peer or tag: those name ranks); whether a slice-in or
//     slice-grad reads in place (slice_in_place) and whether a collect-out
//     takes the whole buffer (collect_out_whole);
//   - every kernel's elaboration key: its top-level op, the lengths and
//     value parts of its operand slices, the split chain that divides its
//     arguments (split identifier and count per level), recompute and loss
//     share; the elaborated body is a function of these (the op's position
//     in the full tensor only sets attrs such as dropout's element offset);
//   - parameter slots and gradient buckets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "semantics/plan.h"

namespace nns::backend {

// The signature of one program (see above).
std::vector<int64_t> memory_signature(const sema::Plan& plan, const RankProgram& prog);

// Whether memory_signature(plan, a) == memory_signature(plan, b), found
// without building either (what memory_classes compares programs by).
bool same_memory_signature(const sema::Plan& plan, const RankProgram& a, const RankProgram& b);

// Whether global rank `rank` lies in plan replica `replica` (`devices` per
// replica). The renaming between replicas moves such ranks, and groups
// whose members all lie in one replica; every other rank stays as it is.
// Verification compares by this rule (replica_difference) and lowering
// renames by it (replica_rename.cpp).
inline bool in_replica(int rank, int replica, int devices) {
  return rank >= replica * devices && rank < (replica + 1) * devices;
}

// Plan replicas (program verification, program_check.h): with k devices,
// rank r*k + d of replica r should run replica 0's program of device d with
// the ranks renamed: a rank of replica 0 is the same device's rank of
// replica r, and a group or peer outside one replica (the replica average
// over every replica's device d, the loss allreduce over the world) is the
// same absolute ranks. Returns "" when `prog` (its lowering's group table
// `groups`) is `base` (replica 0's, table `base_groups`) up to that
// renaming, field by field: buffers (pieces included), kernels' slices,
// instructions (every field; groups and peers renamed), tasks, collective
// geometry, buckets, parameter slots and tag count. Otherwise says what
// differs first ("instruction 812 (replica-average): scale 1 vs 0.5").
std::string replica_difference(const RankProgram& base, const std::vector<std::vector<int>>& base_groups,
                               const RankProgram& prog, const std::vector<std::vector<int>>& groups, int devices);

// For each of the first `count` programs of `lp` (by index; all when
// negative), the index of its class's representative: the first program
// with an equal signature. Every program is compared with program 0 field
// by field (same_memory_signature) in one pass, on all cores (parallel.h);
// the others are hashed and compared with the first program of their hash.
// No signature is held. `hash_mask` (a test hook) keeps only
// those bits of the hash: 0 makes every program collide, which must not
// change the classes.
std::vector<int> memory_classes(const sema::Plan& plan, const LoweredPlan& lp, int count = -1,
                                size_t hash_mask = ~size_t{0});

}  // namespace nns::backend
