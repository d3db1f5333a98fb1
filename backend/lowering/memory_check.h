// The capacity check of a plan (`nns check --plan P --device-memory CAP`,
// and before `nns run --plan`): each rank's peak is the replay of its
// lowered program (memory_replay.h), the very figure the executor measures
// on CPU ranks and `nns simulate` prints, so the bound reported is the peak,
// not an estimate of it. There is no second description of what a rank
// allocates: lowering says it, the replay adds it up.
//
// An overflow is one located diagnostic: the error names the device (and
// rank), its peak, the capacity and by how much the peak exceeds it, at the
// first (in source order) of the directives whose sub-ops hold what is live
// at the peak — their `assign` / `replicate` locations (SubOp::assign_loc);
// a note at each other such directive says how much it places, and, under a
// schedule, one at the schedule says how many micro-batches are in flight.
// Each live byte is attributed to a sub-op of the rank: a kernel's local
// tensors to its sub-op; a buffer (and a parameter's optimizer state) to
// the first kernel on the rank that makes its tensor, else the first that
// reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/lowering/memory_replay.h"
#include "frontend/diagnostics.h"
#include "semantics/plan.h"

namespace nns::backend {

struct MemoryCheckOptions {
  int64_t capacity = -1;       // bytes per device; < 0: the peaks are reported, not checked
  std::string capacity_label;  // how the capacity was given ("80 GiB", "80 GiB (h100)"); empty: the bytes
  int bytes_per_element = 4;   // 2 under --precision fp16/bf16 (the CPU executor keeps every dtype in 4 bytes)
  int optimizer_slots = 2;     // sema::optimizer_slots of the train block's optimizer
  // The CUDA backend's bf16 activation storage (bf16_storage.h): 4-byte
  // buffers, bf16 kernel activations (memory_replay.h).
  bool bf16_storage = false;
};

struct RankMemory {
  int rank = 0, device = 0;
  MemoryPeak peak;
};

struct MemoryCheck {
  std::vector<RankMemory> ranks;  // one per lowered program, in program order
  int worst = -1;                 // index into ranks of the largest peak
  int programs = 0;               // programs replayed (one per rank class with check_memory_classes)
  // Where the capacity check's time went (driver::check_plan_memory): the
  // rank classes, the representatives lowered with their kernel bodies,
  // their replay. 0 when not measured.
  double classes_ms = 0, bodies_ms = 0, replay_ms = 0;
  bool fits = true;
  std::optional<front::Diagnostic> overflow;  // when the worst peak exceeds the capacity
};

// The peak of every program in `lp` (lowered with kernel bodies: a program
// lowered for structure only lacks the kernels' tensors), checked against
// the capacity.
MemoryCheck check_memory(const sema::Graph& g, const sema::Plan& plan, const LoweredPlan& lp, const MemoryCheckOptions& opts);

// The same over rank classes (rank_classes.h): `bodies` holds one program
// per class (lowered with kernel bodies), and each rank named in `members`,
// in rank order, gets the peak of its class's program. The worst rank is
// the first with the largest peak, as check_memory chooses it.
struct ClassMember {
  int rank = 0, device = 0;
  int program = 0;  // index into bodies.programs
};
MemoryCheck check_memory_classes(const sema::Graph& g, const sema::Plan& plan, const LoweredPlan& bodies,
                                 const std::vector<ClassMember>& members, const MemoryCheckOptions& opts);

// The report line of a check (no newline): the largest peak and its parts,
// and the capacity it was checked against:
//   memory: peak 4.25 MiB (4452868 bytes) on device 0 (rank 0: weights ..., gradients ...,
//   optimizer ..., activations ...) of 80 GiB (h100)
std::string memory_line(const MemoryCheck& m, const MemoryCheckOptions& opts);

}  // namespace nns::backend
