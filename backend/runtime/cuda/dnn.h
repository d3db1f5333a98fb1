// cuDNN behind the CUDA backend's device seam (device.h): convolution
// forward and both backwards, pooling forward and backward, and fused
// scaled-dot-product attention forward and backward (dnn_sdpa.cpp). Each call
// returns false when it does not run the work — the emulation (no cuDNN),
// a GPU build without cuDNN, cuDNN switched off (NNS_CUDNN=0), or a shape
// cuDNN declines — and the kernel wrapper then runs our own kernel
// (kernels_conv.cu), which is also what the conformance tables compare
// cuDNN against on a GPU.
//
// Numerics: fp32 data, fp32 compute, CUDNN_FMA_MATH (no TF32 rounding of
// fp32 operands, as the matrix products use CUBLAS_COMPUTE_32F), and only
// algorithms cuDNN reports deterministic, so a run repeats bit for bit and
// a resumed run equals an unbroken one. The algorithm of each convolution
// shape is measured once (cudnnFind*AlgorithmEx on the call's own buffers)
// and cached per shape and direction.
//
// Attention is the exception to fp32: cuDNN's fused attention reads bf16.
// The kernel wrapper (kernels_attention.cu) calls it only when q, kt, v (and
// dy) are stored in bf16 (bf16 storage), so handing them to cuDNN in bf16
// rounds nothing; statistics and products accumulate in fp32, and the bf16
// results are widened back to fp32. Its graphs are cached per shape.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/runtime/attention_cudnn_plan.h"
#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

class Scratch;

// NCHW input [n, c, h, w], weight [o, c, kh, kw], output [n, o, oh, ow]; one
// stride and one padding for both axes (the conv2d node's contract).
struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t stride = 1, pad = 0;
  int64_t oh = 0, ow = 0;
};

// [n, c, h, w] planes pooled by a k x k window; padding counts in the
// average (the pool nodes' contract: divide by k*k).
struct PoolGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 1, stride = 1, pad = 0;
  int64_t oh = 0, ow = 0;
};

// "cuDNN 9.19.0 (built against 9.19.0)" for the library this process
// loaded, or "no cuDNN (...)".
std::string dnn_library_version();

class Dnn {
 public:
  // `attention_model`: only in the host emulation (dnn_none.cpp), where it
  // makes the attention calls run a host model of cuDNN's fused kernel on
  // the plan's layouts, so that the emulation tests the kernel wrapper's
  // side of the cuDNN path; the cuDNN build ignores it.
  explicit Dnn(Stream stream, bool attention_model = false);
  ~Dnn();
  Dnn(const Dnn&) = delete;
  Dnn& operator=(const Dnn&) = delete;

  // y = conv(x, w) (+ bias[o] on every output plane when bias is given).
  bool conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y,
                    Scratch& scratch);
  // dx = the gradient of conv(x, w) with respect to x, given dy (overwrites dx).
  bool conv_backward_data(const ConvGeometry& g, const float* dy, const float* w, float* dx, Scratch& scratch);
  // dw = the gradient with respect to w, given x and dy (overwrites dw).
  bool conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy, float* dw, Scratch& scratch);
  bool pool_forward(const PoolGeometry& g, bool max, const float* x, float* y);
  // Needs the forward's output: recomputed into scratch (the node keeps only x).
  bool pool_backward(const PoolGeometry& g, bool max, const float* x, const float* dy, float* dx, Scratch& scratch);

  // Fused attention on bf16 operands in the layouts of `p`
  // (attention_cudnn_plan.h): q, the [t, e] copy of kt, v; o [.., s, f] and
  // the softmax statistics (fp32, p.stats_elems(): what the backward reads).
  // With p.bias, `bias` is sdpa_bias's bias in p.bias_layout (bf16).
  bool sdpa_forward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                    uint16_t* o, float* stats, Scratch& scratch, const uint16_t* bias = nullptr);
  // dq, dk ([t, e]), dv from the forward's o and stats and the output
  // gradient d_o (o's layout). Deterministic engines only. With p.bias,
  // also dbias (p.bias_layout, bf16) from `bias`.
  bool sdpa_backward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                     const uint16_t* o, const uint16_t* d_o, const float* stats, uint16_t* dq, uint16_t* dk,
                     uint16_t* dv, Scratch& scratch, const uint16_t* bias = nullptr, uint16_t* dbias = nullptr);
  // Why the last attention call declined ("" when none has).
  std::string attention_declined() const;
  // Attention shapes and directions whose graph has been built or refused.
  size_t cached_attention_graphs() const;

  // Whether calls may run on cuDNN (false: every call declines).
  bool active() const;
  // "cuDNN 9.19.0 (built against 9.19.0)", or why cuDNN is not used.
  std::string describe() const;
  // Convolution shapes whose algorithm has been measured (tests and traces).
  size_t cached_algorithms() const;

  // The cuDNN handle and the caches (dnn_cudnn_impl.h; empty without
  // cuDNN). Named here so that the cuDNN files' helpers can take it.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nns::backend::NNS_DEV
