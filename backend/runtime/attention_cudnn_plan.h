// The host-side decisions of sdpa on cuDNN's fused attention (cuda/dnn.h),
// kept apart from cuDNN so that they are a pure function a unit test checks
// without a GPU (tests/backend/attention_cudnn_plan_test.cpp): whether a
// shape is taken, and the dims and strides of Q, K, V, O and the softmax
// statistics as cuDNN's [B, H, S, D] tensors.
//
// The sdpa node (attention_dims.h) has q [batch, s, e], kt [batch, e, t],
// v [batch, t, f], out [batch, s, f]. With `period` p > 0 and p < s the node
// is grouped-query attention whose groups' queries are stacked: score row i
// is query i mod p, so q is really [batch, s / p, p, e] — s / p query heads
// sharing one K/V head. cuDNN's GQA form says exactly that: Q with H_q =
// s / p heads of p queries, K and V with H_k = 1 head, and no copy of q is
// needed (the stacked rows are the heads, stride p * e apart).
//
// K is handed to cuDNN in the [t, e] layout (D innermost), which its fused
// kernels want; the kernel wrapper writes the bf16 copy of kt that way.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "backend/runtime/attention_dims.h"

namespace nns::backend {

struct CudnnTensorLayout {
  std::array<int64_t, 4> dims{};     // [B, H, S, D]
  std::array<int64_t, 4> strides{};  // in elements
};

struct CudnnSdpaPlan {
  bool accepted = false;
  std::string reason;  // why not, when declined (describe()/trace text)
  int64_t b = 0, h_q = 0, h_k = 0, s_q = 0, s_kv = 0, d_qk = 0, d_v = 0;
  bool causal = false;                  // top-left diagonal: query i sees keys j <= i (the CPU causal_mask)
  CudnnTensorLayout q, k, v, o, stats;  // stats: [B, H_q, S_q, 1] fp32
  bool bias = false;                    // sdpa_bias: an additive bias after the scale
  CudnnTensorLayout bias_layout;        // [1, H, S_q, S_kv] bf16 (and dBias, in the backward)
  int64_t q_elems() const { return b * h_q * s_q * d_qk; }
  int64_t k_elems() const { return b * h_k * s_kv * d_qk; }
  int64_t v_elems() const { return b * h_k * s_kv * d_v; }
  int64_t o_elems() const { return b * h_q * s_q * d_v; }
  int64_t stats_elems() const { return b * h_q * s_q; }
  int64_t bias_elems() const { return h_q * s_q * s_kv; }
};

// The largest head dimension taken. cuDNN's attention support matrix (its
// documentation, for 9.18) gives d <= 256 on Hopper in both directions but
// d <= 128 for the Ampere backward; 128 is taken everywhere until a GPU run
// has checked more, and larger heads run the own kernels.
constexpr int64_t kCudnnSdpaMaxHeadDim = 128;

// `period`: the node's attribute (0: none). Pure: no cuDNN, no device.
CudnnSdpaPlan plan_cudnn_sdpa(const AttentionDims& d, bool causal, int64_t period);

// sdpa_bias: q's leading dims split into B (those the bias is broadcast
// along, in front) and H (those it shares, behind), so that the bias is
// cuDNN's [1, H, S, T] (dBias: the scores' gradient summed over B). A bias
// that shares a dim in front of one it is broadcast along (a per-sequence
// bias shared by the heads) would be [B, 1, S, T]: declined, as are
// grouped-query rows with a bias; both run the own kernels.
CudnnSdpaPlan plan_cudnn_sdpa_bias(const sema::Shape& q, const AttentionDims& d, bool causal, int64_t period,
                                   const sema::Shape& bias);

}  // namespace nns::backend
