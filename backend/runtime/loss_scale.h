// Dynamic loss scaling for fp16 autocast (precision = "fp16"), shared by the
// single-device Trainer and the plan executor so that --verify compares the
// same policy. fp16 keeps 5 exponent bits: small gradients underflow to zero
// unless the loss gradient is multiplied by a large scale before the
// backward; too large a scale overflows a product to inf. The policy is
// PyTorch's GradScaler's: the backward is seeded with scale(); the
// gradients are divided by it before clipping and the update; a step whose
// gradients hold an inf or NaN is skipped (no update, the optimizer's step
// count stays) and the scale backed off; after `interval` good steps in a
// row it grows.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "backend/runtime/backend.h"
#include "semantics/train_spec.h"

namespace nns::backend {

class LossScaler {
 public:
  // enabled = false (fp32, bf16): scale() is 1 and no step is ever skipped.
  LossScaler(const sema::LossScaleSpec& spec, bool enabled);

  bool enabled() const { return enabled_; }
  // The factor the loss gradient is seeded with this step.
  float scale() const { return static_cast<float>(scale_); }
  // The backward's seed, the one definition both engines use (the Trainer
  // on its loss-gradient fill, the plan executor's SeedGrad): the loss
  // gradient `n` elements at `data`, all scale().
  void seed_loss_gradient(Backend& be, void* data, int64_t n) const { be.fill(data, n, scale()); }
  // Decides the step from the squared norm of its (scaled) gradients,
  // summed over every rank, so every rank decides the same: false (skip the
  // update) when it is inf or NaN. Adjusts the scale for the next step.
  bool finish_step(double scaled_sum_of_squares);
  // Steps skipped so far. The optimizer's own step count (AdamW's bias
  // correction) is the step minus these: PyTorch does not call
  // optimizer.step() on a skipped step.
  int64_t skipped() const { return skipped_; }
  // Checkpoint state: the scale, good steps since it last changed, skipped steps.
  struct State {
    double scale = 0;
    int64_t good_steps = 0, skipped = 0;
  };
  State state() const { return {scale_, good_steps_, skipped_}; }
  void restore(const State& s);

 private:
  sema::LossScaleSpec spec_;
  bool enabled_;
  double scale_;
  int64_t good_steps_ = 0, skipped_ = 0;
};

// Checkpoints carry the scaler's state (metadata "loss_scale",
// "loss_scale_good_steps", "skipped_steps") so that a resumed run continues
// with the same scale and AdamW step count. Nothing is written when scaling
// is off; a checkpoint without them (from an fp32 or bf16 run) leaves the
// scaler at its initial state. A malformed value throws SafetensorsError
// naming `path`.
void add_loss_scale_metadata(const LossScaler& s, std::map<std::string, std::string>& meta);
void read_loss_scale_metadata(const std::map<std::string, std::string>& meta, const std::string& path, LossScaler& s);

}  // namespace nns::backend
