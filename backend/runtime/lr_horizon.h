#pragma once
// Checks a run's length against its learning-rate schedule before the first
// step: a schedule that decays to 0 and ends before the run trains the
// remaining steps at lr 0, which looks like a stalled run rather than a
// configuration mistake unless someone says so.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "semantics/train_spec.h"

namespace nns::backend {

// The steps in 1..run_steps whose learning rate is exactly 0.
int64_t zero_lr_steps(const sema::ScheduleSpec& schedule, double base_lr, int64_t run_steps);

// The warnings for a run of `run_steps` steps (empty when there is nothing
// to say): a pinned horizon (`cosine_lr(..., steps = N)`) shorter than the
// run, and more than one step at lr 0.
std::vector<std::string> lr_horizon_warnings(const sema::ScheduleSpec& schedule, double base_lr, int64_t run_steps);

// --- The horizon in checkpoints ----------------------------------------------
// An unpinned horizon is the run's step count (--steps, or the train block's
// `steps`), so a run stopped and resumed with another --steps would change
// its learning rates. Checkpoints therefore carry the horizon
// (metadata "lr_horizon") and a resumed run keeps it; only a horizon the
// train block pins (cosine_lr(steps = N)) overrides the saved one.

// Adds "lr_horizon" to a checkpoint's metadata.
void add_horizon_metadata(const sema::ScheduleSpec& schedule, std::map<std::string, std::string>& meta);
// Applies a checkpoint's saved horizon to `schedule` (unless pinned, or the
// checkpoint predates the key). Returns a note for the user when the
// resumed run's horizon differs from what its own --steps would give, else "".
std::string adopt_saved_horizon(const std::map<std::string, std::string>& meta, sema::ScheduleSpec& schedule);

}  // namespace nns::backend
