#pragma once
// Checks a run's length against its learning-rate schedule before the first
// step: a schedule that decays to 0 and ends before the run trains the
// remaining steps at lr 0, which looks like a stalled run rather than a
// configuration mistake unless someone says so.
#include <cstdint>
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

}  // namespace nns::backend
