// Reference losses, dropout and optimizer steps.
#include <cmath>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::ref {

float cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t classes) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = logits + r * classes;
    double mx = -INFINITY;
    for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, double(xr[j]));
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(double(xr[j]) - mx);
    total += mx + std::log(sum) - xr[targets[r]];
  }
  return rows > 0 ? float(total / double(rows)) : 0.0f;
}

void cross_entropy_backward(const float* logits, const int32_t* targets, float dloss,
                            float* dlogits, int64_t rows, int64_t classes) {
  double g = double(dloss) / double(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = logits + r * classes;
    double mx = -INFINITY;
    for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, double(xr[j]));
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(double(xr[j]) - mx);
    for (int64_t j = 0; j < classes; ++j) {
      double p = std::exp(double(xr[j]) - mx) / sum;
      dlogits[r * classes + j] = float(g * (p - (j == targets[r] ? 1.0 : 0.0)));
    }
  }
}

float mse(const float* pred, const float* target, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(pred[i]) - target[i];
    total += d * d;
  }
  return n > 0 ? float(total / double(n)) : 0.0f;
}

void mse_backward(const float* pred, const float* target, float dloss, float* dpred,
                  float* dtarget, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double g = 2.0 * dloss * (double(pred[i]) - target[i]) / double(n);
    if (dpred) dpred[i] = float(g);
    if (dtarget) dtarget[i] = float(-g);
  }
}

void dropout(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  float keep_scale = 1.0f / (1.0f - p);  // used only for 0 < p < 1
  for (int64_t i = 0; i < n; ++i) {
    if (p <= 0.0f || p >= 1.0f) {
      y[i] = p <= 0.0f ? x[i] : 0.0f;
      continue;
    }
    bool keep = dropout_uniform(seed, offset + uint64_t(i)) >= p;
    y[i] = x[i] * (keep ? keep_scale : 0.0f);  // multiply by the mask: NaN stays NaN
  }
}

void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t offset) {
  dropout(dy, dx, n, p, seed, offset);  // the same mask and scale: dropout is linear in x
}

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
              float momentum, float weight_decay) {
  for (int64_t i = 0; i < n; ++i) {
    double g = double(grad[i]) + double(weight_decay) * param[i];
    if (momentum_buf) {
      double buf = double(momentum) * momentum_buf[i] + g;
      momentum_buf[i] = float(buf);
      g = buf;
    }
    param[i] = float(param[i] - double(lr) * g);
  }
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  double bc1 = 1 - std::pow(double(beta1), double(step));
  double bc2 = 1 - std::pow(double(beta2), double(step));
  for (int64_t i = 0; i < n; ++i) {
    double g = grad[i];
    double p = double(param[i]) * (1 - double(lr) * weight_decay);
    double mi = double(beta1) * m[i] + (1 - double(beta1)) * g;
    double vi = double(beta2) * v[i] + (1 - double(beta2)) * g * g;
    m[i] = float(mi);
    v[i] = float(vi);
    param[i] = float(p - double(lr) * (mi / bc1) / (std::sqrt(vi / bc2) + eps));
  }
}

double sum_of_squares(const float* const* bufs, const int64_t* sizes, int count) {
  double total = 0;
  for (int b = 0; b < count; ++b)
    for (int64_t i = 0; i < sizes[b]; ++i) total += double(bufs[b][i]) * bufs[b][i];
  return total;
}

float global_l2_norm(const float* const* bufs, const int64_t* sizes, int count) {
  return float(std::sqrt(sum_of_squares(bufs, sizes, count)));
}

}  // namespace nns::backend::cpu::ref
