#include "backend/runtime/attention_cudnn_plan.h"

#include <climits>

namespace nns::backend {

namespace {

CudnnSdpaPlan declined(std::string why) {
  CudnnSdpaPlan p;
  p.reason = std::move(why);
  return p;
}

// Row-major [B, H, S, D] strides of a tensor whose heads lie `head_stride`
// apart inside a batch entry of `batch_stride` elements.
CudnnTensorLayout layout(int64_t b, int64_t h, int64_t s, int64_t d, int64_t batch_stride, int64_t head_stride) {
  CudnnTensorLayout l;
  l.dims = {b, h, s, d};
  l.strides = {batch_stride, head_stride, d, 1};
  return l;
}

}  // namespace

CudnnSdpaPlan plan_cudnn_sdpa(const AttentionDims& d, bool causal, int64_t period) {
  if (d.batch <= 0 || d.s <= 0 || d.t <= 0 || d.e <= 0 || d.f <= 0) return declined("an empty attention");
  if (d.e != d.f)
    return declined("q/k head dim " + std::to_string(d.e) + " differs from v's " + std::to_string(d.f) +
                    " (not taken until a GPU has checked cuDNN on it)");
  if (d.e % 8 != 0) return declined("head dim " + std::to_string(d.e) + " is not a multiple of 8");
  if (d.e > kCudnnSdpaMaxHeadDim)
    return declined("head dim " + std::to_string(d.e) + " is over " + std::to_string(kCudnnSdpaMaxHeadDim));
  // Grouped-query attention: s / period query heads over one K/V head.
  int64_t heads = 1, rows = d.s;
  if (period > 0 && period < d.s) {
    if (d.s % period != 0)
      return declined("period " + std::to_string(period) + " does not divide the " + std::to_string(d.s) +
                      " stacked query rows");
    heads = d.s / period, rows = period;
  }
  // cuDNN's fused kernels index with 32-bit integers per tensor.
  const int64_t biggest = d.batch * d.s * d.e > d.batch * d.t * d.e ? d.batch * d.s * d.e : d.batch * d.t * d.e;
  if (biggest > INT32_MAX || d.batch * heads * rows > INT32_MAX) return declined("a tensor of over 2^31 elements");
  CudnnSdpaPlan p;
  p.accepted = true;
  p.b = d.batch, p.h_q = heads, p.h_k = 1, p.s_q = rows, p.s_kv = d.t, p.d_qk = d.e, p.d_v = d.f;
  p.causal = causal;
  p.q = layout(p.b, heads, rows, d.e, d.s * d.e, rows * d.e);
  p.k = layout(p.b, 1, d.t, d.e, d.t * d.e, d.t * d.e);  // the bf16 copy of kt, written [t, e]
  p.v = layout(p.b, 1, d.t, d.f, d.t * d.f, d.t * d.f);
  p.o = layout(p.b, heads, rows, d.f, d.s * d.f, rows * d.f);
  p.stats = layout(p.b, heads, rows, 1, heads * rows, rows);
  return p;
}

CudnnSdpaPlan plan_cudnn_sdpa_bias(const sema::Shape& q, const AttentionDims& d, bool causal, int64_t period,
                                   const sema::Shape& bias) {
  CudnnSdpaPlan p = plan_cudnn_sdpa(d, causal, period);
  if (!p.accepted) return p;
  if (p.h_q != 1) return declined("grouped-query rows with a bias");
  const size_t lead = q.size() - 2, skip = lead - (bias.size() - 2);
  auto bias_dim = [&](size_t i) { return i < skip ? int64_t{1} : bias[i - skip]; };
  // H: the dims from the first the bias shares to the end; B: those before.
  size_t first_shared = lead;
  for (size_t i = 0; i < lead && first_shared == lead; ++i)
    if (q[i] > 1 && bias_dim(i) == q[i]) first_shared = i;
  int64_t b = 1, h = 1;
  for (size_t i = 0; i < lead; ++i) {
    if (i < first_shared) {
      b *= q[i];
    } else if (bias_dim(i) != q[i]) {
      return declined("a bias broadcast along a dim behind one it shares ([B, 1, S, T], not [1, H, S, T])");
    } else {
      h *= q[i];
    }
  }
  p.b = b, p.h_q = p.h_k = h;
  p.q = layout(b, h, d.s, d.e, h * d.s * d.e, d.s * d.e);
  p.k = layout(b, h, d.t, d.e, h * d.t * d.e, d.t * d.e);
  p.v = layout(b, h, d.t, d.f, h * d.t * d.f, d.t * d.f);
  p.o = layout(b, h, d.s, d.f, h * d.s * d.f, d.s * d.f);
  p.stats = layout(b, h, d.s, 1, h * d.s, d.s);
  p.bias = true;
  p.bias_layout = layout(1, h, d.s, d.t, h * d.s * d.t, d.s * d.t);
  return p;
}

}  // namespace nns::backend
