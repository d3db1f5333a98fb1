// Matrix products for the CUDA backend. Gemm::run takes nns's row-major
// operands; plan() turns them into the column-major product cuBLASLt
// computes (ColMajorProduct), which run_column_major() executes: cuBLASLt
// on the GPU (gemm_cublaslt.cpp), a plain loop with cuBLASLt's semantics in
// the emulation (gemm_emulated.cpp), so that the row-major mapping is
// tested without a GPU.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

// D[batch] = alpha op(A) op(B) + beta D (+ bias[i] on row i), column-major:
// op(A) is rows x inner, op(B) inner x cols, D rows x cols with leading
// dimension ld_d; A is stored rows x inner (ld_a) or, when trans_a, inner x
// rows; B likewise. A batch stride of 0 shares that operand across the batch.
// The element type of A and B (D and the bias are always fp32, and the
// products accumulate in fp32): bf16 and fp16 are stored as 16-bit patterns.
enum class ProductInput { F32, BF16, F16 };

struct ColMajorProduct {
  int64_t rows = 0, cols = 0, inner = 0, batch = 1;
  ProductInput input = ProductInput::F32;
  const void* a = nullptr;
  int64_t ld_a = 0, stride_a = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ld_b = 0, stride_b = 0;
  bool trans_b = false;
  float* d = nullptr;
  int64_t ld_d = 0, stride_d = 0;
  float alpha = 1.f, beta = 0.f;
  const float* bias = nullptr;  // length rows (cuBLASLt's BIAS epilogue)
};

// c[i] = op(a[i]) op(b[i or 0]) (+ bias[n] broadcast over rows) + beta c[i],
// row-major: op(a) [m, k] (a stored [k, m] when trans_a), op(b) [k, n] (b
// stored [n, k] when trans_b); a_batch or b_batch may be 1 (shared).
// Under autocast (input BF16 or F16) a and b are fp32 and are rounded to
// 16-bit copies first (as the CPU backend's matmul_bf16 / _fp16 round them).
struct RowMajorProduct {
  ProductInput input = ProductInput::F32;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  int64_t a_batch = 1, b_batch = 1, m = 0, k = 0, n = 0;
  bool trans_a = false, trans_b = false;
  float beta = 0.f;
  const float* bias = nullptr;
};

// The column-major product equal to `p`. Row-major C[m, n] is column-major
// C^T[n, m] = op(B)^T op(A)^T, so the operands swap places and each keeps
// its stored layout.
ColMajorProduct plan(const RowMajorProduct& p);

class Scratch;

class Gemm {
 public:
  explicit Gemm(Stream stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // `scratch` holds the 16-bit copies of the operands until the product is enqueued.
  void run(const RowMajorProduct& p, Scratch& scratch);
  void run_column_major(const ColMajorProduct& p);

 private:
  struct Impl;  // cuBLASLt handle and workspace (nothing in the emulation)
  std::unique_ptr<Impl> impl_;
  Stream stream_;
};

}  // namespace nns::backend::NNS_DEV
