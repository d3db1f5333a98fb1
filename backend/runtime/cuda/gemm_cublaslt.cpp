// Gemm on cuBLASLt (library nns_cuda only): fp32, bf16 or fp16 inputs, fp32
// outputs, CUBLAS_COMPUTE_32F (no TF32 rounding of fp32 inputs; 16-bit
// inputs use the tensor cores), the bias as an epilogue. The library is
// opened by the first Gemm (cublaslt_loader.h).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/runtime/backend.h"
#include "backend/runtime/cuda/cublaslt_loader.h"
#include "backend/runtime/cuda/gemm.h"

namespace nns::backend::NNS_DEV {

namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string("cuBLASLt: ") + what + ": status " + std::to_string(static_cast<int>(s)));
}

constexpr size_t kWorkspace = size_t(32) << 20;

}  // namespace

struct Gemm::Impl {
  const CublasLt& lt = cublaslt_or_throw();
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

Gemm::Gemm(Stream stream) : impl_(std::make_unique<Impl>()), stream_(stream) {
  check(impl_->lt.create(&impl_->handle), "cublasLtCreate");
  impl_->workspace = device_malloc(kWorkspace);
  if (!impl_->workspace) throw RuntimeError("out of device memory for the cuBLASLt workspace");
}

Gemm::~Gemm() {
  device_free(impl_->workspace);
  impl_->lt.destroy(impl_->handle);
}

void Gemm::run_column_major(const ColMajorProduct& p) {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  const CublasLt& lt = impl_->lt;
  auto layout = [&lt](cublasLtMatrixLayout_t& l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ldim,
                      int64_t stride, int64_t batch) {
    check(lt.layout_create(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ldim),
          "cublasLtMatrixLayoutCreate");
    int32_t count = static_cast<int32_t>(batch);
    check(lt.layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), "BATCH_COUNT");
    check(lt.layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "STRIDED_BATCH_OFFSET");
  };
  check(lt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(lt.desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "TRANSA");
  check(lt.desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "TRANSB");
  if (p.bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check(lt.desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
    check(lt.desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias), "BIAS_POINTER");
  }
  // Stored shapes: A is rows x inner, or inner x rows when transposed; B likewise.
  const cudaDataType_t in_type =
      p.input == ProductInput::BF16 ? CUDA_R_16BF : p.input == ProductInput::F16 ? CUDA_R_16F : CUDA_R_32F;
  layout(la, in_type, p.trans_a ? p.inner : p.rows, p.trans_a ? p.rows : p.inner, p.ld_a, p.stride_a, p.batch);
  layout(lb, in_type, p.trans_b ? p.cols : p.inner, p.trans_b ? p.inner : p.cols, p.ld_b, p.stride_b, p.batch);
  layout(ld, CUDA_R_32F, p.rows, p.cols, p.ld_d, p.stride_d, p.batch);
  check(lt.preference_create(&pref), "cublasLtMatmulPreferenceCreate");
  size_t ws = kWorkspace;
  check(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "MAX_WORKSPACE");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(lt.algo_get_heuristic(impl_->handle, desc, la, lb, ld, ld, pref, 1, &result, &found), "AlgoGetHeuristic");
  if (found == 0) throw RuntimeError("cuBLASLt has no algorithm for this matmul");
  check(lt.matmul(impl_->handle, desc, &p.alpha, p.a, la, p.b, lb, &p.beta, p.d, ld, p.d, ld, &result.algo,
                  impl_->workspace, kWorkspace, static_cast<cudaStream_t>(stream_)),
        "cublasLtMatmul");
  lt.preference_destroy(pref);
  lt.layout_destroy(ld);
  lt.layout_destroy(lb);
  lt.layout_destroy(la);
  lt.desc_destroy(desc);
}

}  // namespace nns::backend::NNS_DEV
