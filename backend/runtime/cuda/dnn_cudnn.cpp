// Dnn on cuDNN 9 (library nns_cuda, when CMake found cuDNN): convolution
// and pooling through cuDNN's descriptor API. That API is marked deprecated
// in cuDNN 9 in favour of the graph API, but it is the documented, complete
// path for these ops there, so its warnings are silenced for this file only.
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/runtime/backend.h"
#include "backend/runtime/comm/env_vars.h"
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/dnn.h"
#include "backend/runtime/cuda/dnn_cudnn_impl.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace nns::backend::NNS_DEV {

namespace {

// The most workspace one convolution may use: the measurement and the run
// take it from the caching allocator.
constexpr size_t kMaxWorkspace = size_t(256) << 20;

bool declined(cudnnStatus_t s) { return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED; }

// Any status but success and "not supported" is a fault, not a decline.
void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw RuntimeError(std::string("cuDNN: ") + what + ": " + cudnnGetErrorString(s) + " (status " +
                       std::to_string(static_cast<int>(s)) + ")");
}

bool fits_int(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v < 0 || v > INT_MAX) return false;
  return true;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w) {
    check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, int(n), int(c), int(h), int(w)),
          "cudnnSetTensor4dDescriptor");
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(int64_t o, int64_t c, int64_t kh, int64_t kw) {
    check(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor");
    check(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, int(o), int(c), int(kh), int(kw)),
          "cudnnSetFilter4dDescriptor");
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

// The descriptors of one convolution: x, w, y (dx, dw, dy share them).
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  cudnnConvolutionDescriptor_t conv = nullptr;
  explicit ConvDescs(const ConvGeometry& g) : x(g.n, g.c, g.h, g.w), y(g.n, g.o, g.oh, g.ow), w(g.o, g.c, g.kh, g.kw) {
    check(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetConvolution2dDescriptor(conv, int(g.pad), int(g.pad), int(g.stride), int(g.stride), 1, 1,
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    // FMA: fp32 operands are not rounded to TF32 (the node's fp32 contract).
    check(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  }
  ~ConvDescs() { cudnnDestroyConvolutionDescriptor(conv); }
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
};

struct PoolDescs {
  TensorDesc x, y;
  cudnnPoolingDescriptor_t pool = nullptr;
  PoolDescs(const PoolGeometry& g, bool max) : x(g.n, g.c, g.h, g.w), y(g.n, g.c, g.oh, g.ow) {
    check(cudnnCreatePoolingDescriptor(&pool), "cudnnCreatePoolingDescriptor");
    // Average: divide by k*k, padding included, as the node's contract says.
    // Max: the deterministic variant, so a backward repeats bit for bit.
    const cudnnPoolingMode_t mode = max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    check(cudnnSetPooling2dDescriptor(pool, mode, CUDNN_PROPAGATE_NAN, int(g.k), int(g.k), int(g.pad), int(g.pad),
                                      int(g.stride), int(g.stride)),
          "cudnnSetPooling2dDescriptor");
  }
  ~PoolDescs() { cudnnDestroyPoolingDescriptor(pool); }
  PoolDescs(const PoolDescs&) = delete;
  PoolDescs& operator=(const PoolDescs&) = delete;
};

enum class Direction { Forward, BackwardData, BackwardFilter };

ShapeKey key_of(Direction dir, const ConvGeometry& g) {
  return {static_cast<int>(dir), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad};
}

// The fastest of `results` (cuDNN sorts them by time) that succeeded, is
// deterministic, computes in FMA and fits the workspace limit.
template <class Perf>
Choice pick(const Perf* results, int count) {
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[i];
    if (r.status == CUDNN_STATUS_SUCCESS && r.determinism == CUDNN_DETERMINISTIC && r.mathType == CUDNN_FMA_MATH &&
        r.memory <= kMaxWorkspace)
      return Choice{true, static_cast<int>(r.algo), r.memory};
  }
  return Choice{};
}

bool cudnn_wanted() { return nns_env_int("NNS_CUDNN", 1) != 0; }

}  // namespace

Dnn::Dnn(Stream stream, bool) : impl_(std::make_unique<Impl>()) {
  if (!cudnn_wanted()) {
    impl_->off_reason = "cuDNN switched off (NNS_CUDNN=0): own kernels";
    return;
  }
  cudnnStatus_t s = cudnnCreate(&impl_->handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    // A missing sub-library or an unsupported device: the own kernels run,
    // and describe() says why.
    impl_->handle = nullptr;
    impl_->off_reason = std::string("cuDNN unavailable (cudnnCreate: ") + cudnnGetErrorString(s) + "): own kernels";
    return;
  }
  check(cudnnSetStream(impl_->handle, static_cast<cudaStream_t>(stream)), "cudnnSetStream");
}

Dnn::~Dnn() {
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

std::string dnn_library_version() {
  auto version = [](size_t x) {
    return std::to_string(x / 10000) + "." + std::to_string(x / 100 % 100) + "." + std::to_string(x % 100);
  };
  return "cuDNN " + version(cudnnGetVersion()) + " (built against " + version(CUDNN_VERSION) + ")";
}

bool Dnn::active() const { return impl_->handle != nullptr; }

std::string Dnn::describe() const { return impl_->handle ? dnn_library_version() : impl_->off_reason; }

size_t Dnn::cached_algorithms() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->chosen.size();
}

bool Dnn::conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y,
                       Scratch& scratch) {
  if (!impl_->handle || !fits_int({g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad, g.oh, g.ow})) return false;
  ConvDescs d(g);
  Choice c = impl_->choice(key_of(Direction::Forward, g), [&] {
    cudnnConvolutionFwdAlgoPerf_t results[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    void* ws = scratch.get<char>(static_cast<int64_t>(kMaxWorkspace));
    cudnnStatus_t s =
        cudnnFindConvolutionForwardAlgorithmEx(impl_->handle, d.x.d, x, d.w.d, w, d.conv, d.y.d, y,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, results, ws, kMaxWorkspace);
    if (declined(s)) return Choice{};
    check(s, "cudnnFindConvolutionForwardAlgorithmEx");
    return pick(results, count);
  });
  if (!c.usable) return false;
  const float one = 1.f, zero = 0.f;
  void* ws = c.workspace ? scratch.get<char>(static_cast<int64_t>(c.workspace)) : nullptr;
  check(cudnnConvolutionForward(impl_->handle, &one, d.x.d, x, d.w.d, w, d.conv,
                                static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws, c.workspace, &zero, d.y.d, y),
        "cudnnConvolutionForward");
  if (bias) {
    TensorDesc b(1, g.o, 1, 1);
    check(cudnnAddTensor(impl_->handle, &one, b.d, bias, &one, d.y.d, y), "cudnnAddTensor (conv bias)");
  }
  return true;
}

bool Dnn::conv_backward_data(const ConvGeometry& g, const float* dy, const float* w, float* dx, Scratch& scratch) {
  if (!impl_->handle || !fits_int({g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad, g.oh, g.ow})) return false;
  ConvDescs d(g);
  Choice c = impl_->choice(key_of(Direction::BackwardData, g), [&] {
    cudnnConvolutionBwdDataAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    void* ws = scratch.get<char>(static_cast<int64_t>(kMaxWorkspace));
    cudnnStatus_t s = cudnnFindConvolutionBackwardDataAlgorithmEx(impl_->handle, d.w.d, w, d.y.d, dy, d.conv, d.x.d, dx,
                                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                                                                  results, ws, kMaxWorkspace);
    if (declined(s)) return Choice{};
    check(s, "cudnnFindConvolutionBackwardDataAlgorithmEx");
    return pick(results, count);
  });
  if (!c.usable) return false;
  const float one = 1.f, zero = 0.f;
  void* ws = c.workspace ? scratch.get<char>(static_cast<int64_t>(c.workspace)) : nullptr;
  check(cudnnConvolutionBackwardData(impl_->handle, &one, d.w.d, w, d.y.d, dy, d.conv,
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws, c.workspace, &zero, d.x.d,
                                     dx),
        "cudnnConvolutionBackwardData");
  return true;
}

bool Dnn::conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy, float* dw, Scratch& scratch) {
  if (!impl_->handle || !fits_int({g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad, g.oh, g.ow})) return false;
  ConvDescs d(g);
  Choice c = impl_->choice(key_of(Direction::BackwardFilter, g), [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    void* ws = scratch.get<char>(static_cast<int64_t>(kMaxWorkspace));
    cudnnStatus_t s = cudnnFindConvolutionBackwardFilterAlgorithmEx(impl_->handle, d.x.d, x, d.y.d, dy, d.conv, d.w.d,
                                                                    dw, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                                                                    results, ws, kMaxWorkspace);
    if (declined(s)) return Choice{};
    check(s, "cudnnFindConvolutionBackwardFilterAlgorithmEx");
    return pick(results, count);
  });
  if (!c.usable) return false;
  const float one = 1.f, zero = 0.f;
  void* ws = c.workspace ? scratch.get<char>(static_cast<int64_t>(c.workspace)) : nullptr;
  check(cudnnConvolutionBackwardFilter(impl_->handle, &one, d.x.d, x, d.y.d, dy, d.conv,
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws, c.workspace, &zero,
                                       d.w.d, dw),
        "cudnnConvolutionBackwardFilter");
  return true;
}

bool Dnn::pool_forward(const PoolGeometry& g, bool max, const float* x, float* y) {
  // cuDNN wants padding smaller than the window (so every window holds a
  // real element); the own kernel covers the rest.
  if (!impl_->handle || g.pad >= g.k || !fits_int({g.n, g.c, g.h, g.w, g.k, g.stride, g.pad, g.oh, g.ow})) return false;
  PoolDescs d(g, max);
  const float one = 1.f, zero = 0.f;
  cudnnStatus_t s = cudnnPoolingForward(impl_->handle, d.pool, &one, d.x.d, x, &zero, d.y.d, y);
  if (declined(s)) return false;
  check(s, "cudnnPoolingForward");
  return true;
}

bool Dnn::pool_backward(const PoolGeometry& g, bool max, const float* x, const float* dy, float* dx, Scratch& scratch) {
  if (!impl_->handle || g.pad >= g.k || !fits_int({g.n, g.c, g.h, g.w, g.k, g.stride, g.pad, g.oh, g.ow})) return false;
  PoolDescs d(g, max);
  const float one = 1.f, zero = 0.f;
  float* y = scratch.get<float>(g.n * g.c * g.oh * g.ow);
  cudnnStatus_t s = cudnnPoolingForward(impl_->handle, d.pool, &one, d.x.d, x, &zero, d.y.d, y);
  if (declined(s)) return false;
  check(s, "cudnnPoolingForward (for its backward)");
  check(cudnnPoolingBackward(impl_->handle, d.pool, &one, d.y.d, y, d.y.d, dy, d.x.d, x, &zero, d.x.d, dx),
        "cudnnPoolingBackward");
  return true;
}

}  // namespace nns::backend::NNS_DEV
