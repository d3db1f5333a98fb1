// Fill, sums, scaling and the optimizer updates (kernels.h), as for_each
// bodies (launch.h): one index per element or per output.
#include <cmath>

#include "backend/runtime/cuda/kernels.h"
#include "backend/runtime/cuda/launch.h"
#include "backend/runtime/cpu/half_bits.h"

namespace nns::backend::NNS_DEV::kernels {

namespace {
// Lanes of the sum of squares and lanes per group: 64 Ki lanes keep a GPU's
// memory system busy; groups of 256 leave 256 partials for the host.
constexpr int64_t kLanes = 65536, kLanesPerGroup = 256;
int64_t lanes_for(int64_t n) { return n < kLanes ? (n > 0 ? n : 1) : kLanes; }
}  // namespace

void fill(float* y, int64_t n, float value, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = value; });
}

// One index per element of the box: split into coordinates (innermost
// first), it gives both offsets.
void copy_box(void* dst, const void* src, const BoxDims& box, int64_t count, bool add, float scale, Stream s) {
  const BoxDims b = box;
  if (!add && scale == 1.f && !b.src_bf16) {
    uint32_t* d = static_cast<uint32_t*>(dst);
    const uint32_t* x = static_cast<const uint32_t*>(src);
    for_each(count, s, NNS_KERNEL(int64_t i) {
      int64_t rest = i, so = b.src_offset, doff = b.dst_offset;
      for (int k = b.rank - 1; k >= 0; --k) {
        int64_t j = rest % b.length[k];
        rest /= b.length[k];
        so += j * b.src_stride[k];
        doff += j * b.dst_stride[k];
      }
      d[doff] = x[so];
    });
    return;
  }
  float* d = static_cast<float*>(dst);
  const float* x = static_cast<const float*>(src);
  const uint16_t* xh = static_cast<const uint16_t*>(src);  // read instead of x when b.src_bf16
  for_each(count, s, NNS_KERNEL(int64_t i) {
    int64_t rest = i, so = b.src_offset, doff = b.dst_offset;
    for (int k = b.rank - 1; k >= 0; --k) {
      int64_t j = rest % b.length[k];
      rest /= b.length[k];
      so += j * b.src_stride[k];
      doff += j * b.dst_stride[k];
    }
    const float xv = b.src_bf16 ? cpu::bf16_to_float(xh[so]) : x[so];
#if defined(__CUDA_ARCH__)
    const float v = __fmul_rn(scale, xv);  // no contraction into an FMA with the add
    d[doff] = add ? __fadd_rn(d[doff], v) : v;
#else
    const float v = scale * xv;
    d[doff] = add ? d[doff] + v : v;
#endif
  });
}

void to_bf16(const float* x, uint16_t* y, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = cpu::bf16_bits(x[i]); });
}

void from_bf16(const uint16_t* x, float* y, int64_t n, Stream s) {
  for_each(
      n, s, NNS_KERNEL(int64_t i) { y[i] = cpu::bf16_to_float(x[i]); });
}

void to_fp16(const float* x, uint16_t* y, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = cpu::fp16_bits(x[i]); });
}

void add_n(float* y, const float* const* xs, int count, int64_t n, Stream s) {
  for (int k = 0; k < count; ++k) {
    const float* x = xs[k];
    if (k == 0) for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = x[i]; });
    else for_each(n, s, NNS_KERNEL(int64_t i) { y[i] += x[i]; });
  }
}

void scale(float* y, const float* x, int64_t n, float alpha, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = alpha * x[i]; });
}

void axpy(float* y, const float* x, int64_t n, float alpha, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] += alpha * x[i]; });
}

void column_sums(const float* dy, float* dbias, int64_t rows, int64_t cols, Stream s) {
  for_each(cols, s, NNS_KERNEL(int64_t c) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r) acc += double(dy[r * cols + c]);
    dbias[c] = float(acc);
  });
}

int64_t sum_of_squares_partials(int64_t n) { return (lanes_for(n) + kLanesPerGroup - 1) / kLanesPerGroup; }
int64_t sum_of_squares_lanes(int64_t n) { return lanes_for(n); }

void sum_of_squares(const float* x, int64_t n, double* lane_sums, double* group_sums, Stream s) {
  const int64_t lanes = lanes_for(n), groups = sum_of_squares_partials(n);
  // Lane l sums x[l], x[l + lanes], ...: neighbouring lanes read neighbouring
  // elements (coalesced on a GPU).
  for_each(lanes, s, NNS_KERNEL(int64_t l) {
    double acc = 0;
    for (int64_t i = l; i < n; i += lanes) acc += double(x[i]) * x[i];
    lane_sums[l] = acc;
  });
  for_each(groups, s, NNS_KERNEL(int64_t g) {
    double acc = 0;
    int64_t end = (g + 1) * kLanesPerGroup < lanes ? (g + 1) * kLanesPerGroup : lanes;
    for (int64_t l = g * kLanesPerGroup; l < end; ++l) acc += lane_sums[l];
    group_sums[g] = acc;
  });
}

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
              float weight_decay, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) {
    double g = double(grad[i]) + double(weight_decay) * param[i];
    if (momentum_buf) {
      double buf = double(momentum) * momentum_buf[i] + g;
      momentum_buf[i] = float(buf);
      g = buf;
    }
    param[i] = float(param[i] - double(lr) * g);
  });
}

// One pass over every element: the fused AdamW update (decoupled weight
// decay, bias-corrected moments), as cpu::ref::adamw_step computes it.
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int64_t step, Stream s) {
  const double bc1 = 1 - std::pow(double(beta1), double(step));
  const double bc2 = 1 - std::pow(double(beta2), double(step));
  for_each(n, s, NNS_KERNEL(int64_t i) {
    double g = grad[i];
    double p = double(param[i]) * (1 - double(lr) * weight_decay);
    double mi = double(beta1) * m[i] + (1 - double(beta1)) * g;
    double vi = double(beta2) * v[i] + (1 - double(beta2)) * g * g;
    m[i] = float(mi);
    v[i] = float(vi);
    param[i] = float(p - double(lr) * (mi / bc1) / (sqrt(vi / bc2) + eps));
  });
}

}  // namespace nns::backend::NNS_DEV::kernels
