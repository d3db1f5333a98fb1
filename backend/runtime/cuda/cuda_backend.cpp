#include "backend/runtime/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <vector>

#include "backend/runtime/cuda/caching_allocator.h"
#include "backend/runtime/cuda/cuda_check.h"
#include "backend/runtime/cuda/cuda_kernels.h"
#include "backend/runtime/node_call.h"

namespace nns::backend {

using cuda::check;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return n;
}

namespace {

int64_t prod(const sema::Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// cuBLASLt is column-major; nns's buffers are row-major. A row-major C[m, n]
// = op(A) op(B) is the column-major C^T[n, m] = op(B)^T op(A)^T, so the
// operands swap places and each keeps its stored layout.
class Gemm {
 public:
  explicit Gemm(cudaStream_t stream) : stream_(stream) {
    check(cublasLtCreate(&handle_), "cublasLtCreate");
    check(cudaMalloc(&workspace_, kWorkspace), "cudaMalloc (cuBLASLt workspace)");
  }
  ~Gemm() {
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
  }

  // c[i] = op(a[i]) op(b[i or 0]) (+ bias[n] broadcast over rows) + beta c[i];
  // op(a) [m, k] (a stored [k, m] when trans_a), op(b) [k, n] (b stored
  // [n, k] when trans_b); a_batch or b_batch may be 1 (shared).
  void run(const float* a, const float* b, float* c, int64_t a_batch, int64_t b_batch, int64_t m, int64_t k, int64_t n,
           bool trans_a, bool trans_b, float beta, const float* bias = nullptr) {
    int64_t batch = std::max(a_batch, b_batch);
    if (batch == 0 || m == 0 || n == 0) return;
    if (k == 0) {
      if (beta == 0.0f) check(cudaMemsetAsync(c, 0, sizeof(float) * batch * m * n, stream_), "cudaMemsetAsync");
      else cuda::kernels::scale(c, c, batch * m * n, beta, stream_);
      if (bias) throw RuntimeError("CUDA gemm: a bias with an empty contraction is not supported");
      return;
    }
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    // cuBLASLt's A is our b, its B our a (see the class comment).
    cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "TRANSA");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "TRANSB");
    if (bias) {
      // The bias runs along the rows of the column-major C^T: n of them.
      cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
      check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "BIAS_POINTER");
    }
    // Stored column-major shapes: b is [n, k] (ld n) untransposed or [k, n]
    // (ld k) when trans_b; a is [k, m] (ld k) or [m, k] (ld m); c is [n, m].
    layout(la, trans_b ? k : n, trans_b ? n : k, b_batch == 1 && batch > 1 ? 0 : k * n, batch);
    layout(lb, trans_a ? m : k, trans_a ? k : m, a_batch == 1 && batch > 1 ? 0 : m * k, batch);
    layout(lc, n, m, m * n, batch);
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    size_t ws = kWorkspace;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "MAX_WORKSPACE");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, desc, la, lb, lc, lc, pref, 1, &result, &found), "AlgoGetHeuristic");
    if (found == 0) throw RuntimeError("cuBLASLt has no algorithm for this matmul");
    const float alpha = 1.0f;
    check(cublasLtMatmul(handle_, desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &result.algo, workspace_, kWorkspace,
                         stream_),
          "cublasLtMatmul");
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
  }

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  static void layout(cublasLtMatrixLayout_t& l, int64_t rows, int64_t cols, int64_t stride, int64_t batch) {
    check(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows),
          "cublasLtMatrixLayoutCreate");
    int32_t count = static_cast<int32_t>(batch);
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), "BATCH_COUNT");
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "STRIDED_BATCH_OFFSET");
  }
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  cudaStream_t stream_;
};

// A node (node_call.h) and the stream and matmul state that run it.
struct Call : NodeCall {
  Gemm& gemm;
  cudaStream_t stream;
};

void matmul_fwd(const Call& c) {
  const sema::Shape& a = c.in[0].shape;
  const sema::Shape& b = c.in[1].shape;
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back(), batch = prod(a, 0, a.size() - 2);
  c.gemm.run(c.in[0].f32(), c.in[1].f32(), c.out[0].f32(), batch, batch, m, k, n, false, false, 0.f);
}

void matmul_bwd(const Call& c) {
  const sema::Shape& a = c.x(0).shape;
  const sema::Shape& b = c.x(1).shape;
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back(), batch = prod(a, 0, a.size() - 2);
  // dA = dC B^T, dB = A^T dC.
  if (float* da = c.dx(0)) c.gemm.run(c.dy(0).f32(), c.x(1).f32(), da, batch, batch, m, n, k, false, true, 0.f);
  if (float* db = c.dx(1)) c.gemm.run(c.x(0).f32(), c.dy(0).f32(), db, batch, batch, k, m, n, true, false, 0.f);
}

void linear_fwd(const Call& c) {
  int64_t k = c.in[0].shape.back(), n = c.in[1].shape[0], rows = c.in[0].numel() / k;
  const float* bias = c.in.size() > 2 ? c.in[2].f32() : nullptr;
  c.gemm.run(c.in[0].f32(), c.in[1].f32(), c.out[0].f32(), 1, 1, rows, k, n, false, true, 0.f, bias);
}

void linear_bwd(const Call& c) {
  int64_t k = c.x(0).shape.back(), n = c.x(1).shape[0], rows = c.x(0).numel() / k;
  if (float* dx = c.dx(0)) c.gemm.run(c.dy(0).f32(), c.x(1).f32(), dx, 1, 1, rows, n, k, false, false, 0.f);
  if (float* dw = c.dx(1)) c.gemm.run(c.dy(0).f32(), c.x(0).f32(), dw, 1, 1, n, rows, k, true, false, 0.f);
  if (c.fwd_inputs() > 2)
    if (float* dbias = c.dx(2)) cuda::kernels::column_sums(c.dy(0).f32(), dbias, rows, n, c.stream);
}

void fill_fwd(const Call& c) {
  cuda::kernels::fill(c.out[0].f32(), c.out[0].numel(), static_cast<float>(c.attr_float("value", 0)), c.stream);
}

void add_n_fwd(const Call& c) {
  std::vector<const float*> xs;
  for (const TensorView& t : c.in) xs.push_back(t.f32());
  cuda::kernels::add_n(c.out[0].f32(), xs.data(), static_cast<int>(xs.size()), c.out[0].numel(), c.stream);
}

using Fn = void (*)(const Call&);
const std::unordered_map<std::string, Fn>& table() {
  static const std::unordered_map<std::string, Fn> t = {
      {"matmul", matmul_fwd}, {"matmul_backward", matmul_bwd}, {"bmm", matmul_fwd}, {"bmm_backward", matmul_bwd},
      {"linear", linear_fwd}, {"linear_backward", linear_bwd}, {"linear_bias", linear_fwd},
      {"linear_bias_backward", linear_bwd}, {"fill", fill_fwd}, {"add_n", add_n_fwd},
  };
  return t;
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    gemm_ = std::make_unique<Gemm>(stream_);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    gemm_.reset();
    alloc_.empty_cache();
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }

  void* allocate(size_t bytes) override {
    void* p = alloc_.allocate(bytes);
    check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");  // the interface promises zeroed memory
    track_alloc(static_cast<int64_t>(bytes));
    return p;
  }
  void release(void* p, size_t bytes) override {
    alloc_.release(p, bytes);
    track_free(static_cast<int64_t>(bytes));
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    if (bytes == 0) return;
    // The host buffer may be reused as soon as this returns: wait for the copy.
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (to device)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  bool has_kernel(const std::string& kind) const override { return table().count(kind) > 0; }
  void run_node(const sema::Graph&, const sema::OpNode& n, const std::vector<TensorView>& in,
                const std::vector<TensorView>& out) override {
    auto it = table().find(n.kind);
    if (it == table().end()) throw RuntimeError("the CUDA backend has no kernel for '" + n.kind + "' yet (node " + n.name + ")");
    if (precision() != Precision::F32) throw RuntimeError("the CUDA backend runs fp32 only so far");
    it->second(Call{{n, in, out}, *gemm_, stream_});
    check(cudaGetLastError(), ("kernel launch for " + n.kind).c_str());
  }

  double sum_of_squares(const std::vector<TensorView>& grads) override {
    double total = 0;
    for (const TensorView& t : grads) {
      int64_t n = t.numel();
      if (n == 0) continue;
      int blocks = cuda::kernels::sum_of_squares_blocks(n);
      double* partial = static_cast<double*>(alloc_.allocate(sizeof(double) * blocks));
      cuda::kernels::sum_of_squares(t.f32(), n, partial, stream_);
      std::vector<double> host(static_cast<size_t>(blocks));
      check(cudaMemcpyAsync(host.data(), partial, sizeof(double) * blocks, cudaMemcpyDeviceToHost, stream_), "partials");
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      alloc_.release(partial, sizeof(double) * blocks);
      for (double p : host) total += p;  // in block order: the same sum every run
    }
    return total;
  }
  void scale(const TensorView& t, float alpha) override {
    if (alpha == 0.f) {  // zero-fill, as the interface promises (an inf must not become 0 * inf = NaN)
      check(cudaMemsetAsync(t.data, 0, static_cast<size_t>(t.numel()) * sizeof(float), stream_), "cudaMemsetAsync");
      return;
    }
    cuda::kernels::scale(t.f32(), t.f32(), t.numel(), alpha, stream_);
  }
  void axpy(const TensorView& y, const TensorView& x, float alpha) override {
    cuda::kernels::axpy(y.f32(), x.f32(), y.numel(), alpha, stream_);
  }
  void sgd_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float momentum,
                  float weight_decay) override {
    float* buf = state.buffers.empty() ? nullptr : state.buffers[0].f32();
    cuda::kernels::sgd_step(param.f32(), grad.f32(), buf, param.numel(), lr, momentum, weight_decay, stream_);
  }
  void adamw_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step) override {
    cuda::kernels::adamw_step(param.f32(), grad.f32(), state.buffers[0].f32(), state.buffers[1].f32(), param.numel(), lr,
                              beta1, beta2, eps, weight_decay, step, stream_);
  }
  void set_threads(int) override {}  // host threads do not matter to the device

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cuda::CachingAllocator alloc_;
  std::unique_ptr<Gemm> gemm_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, std::string& why_not) {
  int n = cuda_device_count();
  if (n == 0) {
    why_not = "no CUDA device is visible";
    return nullptr;
  }
  if (device < 0 || device >= n) {
    why_not = "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " visible)";
    return nullptr;
  }
  try {
    return std::make_unique<CudaBackend>(device);
  } catch (const RuntimeError& e) {
    why_not = e.what();
    return nullptr;
  }
}

}  // namespace nns::backend
