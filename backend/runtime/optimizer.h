// The optimizer arithmetic both trainers share: the learning-rate schedule,
// global-norm clipping and the update dispatch (SGD with momentum, AdamW).
// The single-device Trainer and the plan executor must give the same numbers
// for the same step, so --verify compares parallel semantics and not two
// copies of the schedule; both call these functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/runtime/backend.h"
#include "semantics/train_spec.h"

namespace nns::backend {

// The learning rate of step `step` (1-based) of a run of `steps` steps that
// starts from `base_lr`: linear warmup over the first schedule.warmup steps,
// then constant, cosine or linear decay to schedule.min_lr at step `steps`.
double learning_rate(const sema::ScheduleSpec& schedule, double base_lr, int64_t steps, int64_t step);

// Global-norm clipping: the factor the gradients are scaled by so that their
// norm is at most `clip`. 1 when clipping is off (clip <= 0) or the norm is
// already within it; callers skip the scaling then.
float clip_factor(double clip, double grad_norm);

// The optimizer state buffers one parameter needs: sema::optimizer_slots
// (semantics/train_spec.h), found here by argument-dependent lookup. Their
// checkpoint names ("exp_avg", "exp_avg_sq", "momentum"; checkpoints store
// "optimizer.<slot>.<param>"):
using sema::optimizer_slots;
const char* optimizer_slot_name(const std::string& kind, size_t slot);

// One update of `param` (device memory) with its gradient `grad`, in place,
// by the optimizer `o` names; `state` holds optimizer_slots(o) buffers shaped
// like `param`, `step` is 1-based (AdamW's bias correction).
void apply_update(Backend& be, const sema::OptimizerSpec& o, const TensorView& param, const TensorView& grad, OptimizerState& state, float lr,
                  int64_t step);

}  // namespace nns::backend
