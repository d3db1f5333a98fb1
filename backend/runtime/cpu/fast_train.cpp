// Fast mse, dropout and optimizer steps: fused single passes in plain C++
// (each is one sweep over memory; oneDNN 2.6 has no fused equivalent and a
// chain of its primitives would sweep more often). cross_entropy is in
// fast_nn.cpp, on oneDNN's softmax.
#include <cmath>

#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/cpu/philox.h"

namespace nns::backend::cpu::fast {

float mse(const float* pred, const float* target, int64_t n) {
  double total = 0;
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      float d = pred[i + j] - target[i + j];
      part[j] += d * d;
    }
    if ((i & 4095) == 0) {  // flush the float partials now and then: keeps precision
      for (int j = 0; j < 8; ++j) total += part[j];
      for (int j = 0; j < 8; ++j) part[j] = 0;
    }
  }
  for (; i < n; ++i) total += double(pred[i] - target[i]) * double(pred[i] - target[i]);
  for (int j = 0; j < 8; ++j) total += part[j];
  return n > 0 ? float(total / double(n)) : 0.0f;
}

void mse_backward(const float* pred, const float* target, float dloss, float* dpred,
                  float* dtarget, int64_t n) {
  float g = 2.0f * dloss / float(n);
  if (dpred)
    for (int64_t i = 0; i < n; ++i) dpred[i] = g * (pred[i] - target[i]);
  if (dtarget)
    for (int64_t i = 0; i < n; ++i) dtarget[i] = -g * (pred[i] - target[i]);
}

void dropout(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  if (p <= 0.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    return;
  }
  if (p >= 1.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.0f;
    return;
  }
  float keep_scale = 1.0f / (1.0f - p);
  int64_t i = 0;
  // y = x * (keep ? scale : 0): a multiply by a selected constant, which the
  // compiler vectorises (a select between x * scale and 0 it does not).
  auto one = [&](int64_t e) {
    y[e] = x[e] * (dropout_uniform(seed, offset + uint64_t(e)) >= p ? keep_scale : 0.0f);
  };
  // Head: elements before the first counter boundary (offset + i) % 4 == 0.
  for (; i < n && ((offset + uint64_t(i)) & 3) != 0; ++i) one(i);
  // Body: the random bits of 32 elements (8 Philox blocks), then one
  // vectorised pass applying them.
  for (; i + 32 <= n; i += 32) {
    uint32_t bits[32];
    uint64_t counter = (offset + uint64_t(i)) >> 2;
    for (int j = 0; j < 8; ++j) {
      Philox4 r = philox4x32_10(counter + uint64_t(j), seed);
      for (int l = 0; l < 4; ++l) bits[4 * j + l] = r.v[l];
    }
    const float* xi = x + i;
    float* yi = y + i;
    for (int e = 0; e < 32; ++e)
      yi[e] = xi[e] * (uniform_from_bits(bits[e]) >= p ? keep_scale : 0.0f);
  }
  for (; i < n; ++i) one(i);
}

void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t offset) {
  dropout(dy, dx, n, p, seed, offset);
}

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
              float momentum, float weight_decay) {
  if (momentum_buf) {
    for (int64_t i = 0; i < n; ++i) {
      float buf = momentum * momentum_buf[i] + (grad[i] + weight_decay * param[i]);
      momentum_buf[i] = buf;
      param[i] -= lr * buf;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) param[i] -= lr * (grad[i] + weight_decay * param[i]);
  }
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  // The bias corrections fold into two per-call constants.
  double bc1 = 1 - std::pow(double(beta1), double(step));
  double bc2 = 1 - std::pow(double(beta2), double(step));
  float step_size = float(double(lr) / bc1);
  float inv_sqrt_bc2 = float(1 / std::sqrt(bc2));
  float decay = 1.0f - lr * weight_decay;
  float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    float mi = beta1 * m[i] + one_minus_b1 * g;
    float vi = beta2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

double sum_of_squares(const float* const* bufs, const int64_t* sizes, int count) {
  double total = 0;
  for (int b = 0; b < count; ++b) {
    const float* x = bufs[b];
    int64_t n = sizes[b];
    // Float partials over 4096-element chunks (vectorisable), double across chunks.
    for (int64_t start = 0; start < n; start += 4096) {
      int64_t end = start + 4096 < n ? start + 4096 : n;
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = start;
      for (; i + 8 <= end; i += 8)
        for (int j = 0; j < 8; ++j) part[j] += x[i + j] * x[i + j];
      for (; i < end; ++i) total += double(x[i]) * x[i];
      for (int j = 0; j < 8; ++j) total += part[j];
    }
  }
  return total;
}

float global_l2_norm(const float* const* bufs, const int64_t* sizes, int count) {
  return float(std::sqrt(sum_of_squares(bufs, sizes, count)));
}

}  // namespace nns::backend::cpu::fast
