// Kernels of our own for the CUDA backend (everything cuBLASLt does not
// do), launched on `stream`. Same contracts as the CPU kernels of
// backend/runtime/cpu/kernels.h; the arithmetic follows cpu::ref (double
// where ref accumulates in double), so results agree with the reference
// within the conformance bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nns::backend::cuda::kernels {

void fill(float* y, int64_t n, float value, cudaStream_t stream);

// A box copy's geometry in elements (Backend::copy_box): the box's extents,
// outermost first, each buffer's strides, and the element offset of the
// box's first element in each buffer.
constexpr int kMaxBoxRank = 8;
struct BoxDims {
  int rank = 0;
  int64_t length[kMaxBoxRank] = {}, src_stride[kMaxBoxRank] = {}, dst_stride[kMaxBoxRank] = {};
  int64_t src_offset = 0, dst_offset = 0;
};
// dst box (+)= scale * src box, `count` = the box's elements; !add with
// scale == 1 copies raw 32-bit words (i32 data survives). The product is
// rounded before the add (no FMA), as the CPU backend computes it.
void copy_box(void* dst, const void* src, const BoxDims& box, int64_t count, bool add, float scale, cudaStream_t stream);
// y = x0 + x1 + ... (count inputs, in order)
void add_n(float* y, const float* const* xs, int count, int64_t n, cudaStream_t stream);
void scale(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream);
void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream);
// dbias[c] = sum over rows of dy[r, c], summed in double, in row order.
void column_sums(const float* dy, float* dbias, int64_t rows, int64_t cols, cudaStream_t stream);
// Per-block sums of squares (double) of x into partial[0..blocks), blocks =
// sum_of_squares_blocks(n); the caller adds them in order (deterministic).
int sum_of_squares_blocks(int64_t n);
void sum_of_squares(const float* x, int64_t n, double* partial, cudaStream_t stream);
void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
              float weight_decay, cudaStream_t stream);
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int64_t step, cudaStream_t stream);

}  // namespace nns::backend::cuda::kernels
