#include "backend/runtime/optimizer.h"

#include <algorithm>
#include <cmath>

namespace nns::backend {

double learning_rate(const sema::ScheduleSpec& s, double lr, int64_t steps, int64_t step) {
  if (s.warmup > 0 && step <= s.warmup) return lr * static_cast<double>(step) / static_cast<double>(s.warmup);
  if (s.kind == "constant") return lr;
  double total = static_cast<double>(std::max<int64_t>(1, steps - s.warmup));
  double t = std::min(1.0, static_cast<double>(step - s.warmup) / total);
  if (s.kind == "cosine") return s.min_lr + 0.5 * (lr - s.min_lr) * (1 + std::cos(3.141592653589793 * t));
  return lr + (s.min_lr - lr) * t;  // linear decay
}

float clip_factor(double clip, double grad_norm) {
  if (!(clip > 0 && grad_norm > clip)) return 1.0f;  // also for a NaN norm: the loop reports the divergence
  // The epsilon is PyTorch's (clip_grad_norm_).
  return static_cast<float>(clip / (grad_norm + 1e-6));
}

const char* optimizer_slot_name(const std::string& kind, size_t slot) {
  if (kind == "adamw") return slot == 0 ? "exp_avg" : "exp_avg_sq";
  return "momentum";
}

void apply_update(Backend& be, const sema::OptimizerSpec& o, const TensorView& param, const TensorView& grad, OptimizerState& state, float lr,
                  int64_t step) {
  if (o.kind == "adamw")
    be.adamw_update(param, grad, state, lr, static_cast<float>(o.beta1), static_cast<float>(o.beta2), static_cast<float>(o.eps),
                    static_cast<float>(o.weight_decay), step);
  else
    be.sgd_update(param, grad, state, lr, static_cast<float>(o.momentum), static_cast<float>(o.weight_decay));
}

}  // namespace nns::backend
