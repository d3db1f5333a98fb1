// Kernels of our own for the CUDA backend (everything cuBLASLt does not
// do), enqueued on `stream`. Same contracts as the CPU kernels of
// backend/runtime/cpu/kernels.h; the arithmetic follows cpu::ref (double
// where ref accumulates in double), so results agree with the reference
// within the conformance bounds. Defined in the kernel files (*.cu), which
// both the GPU build and the host emulation compile (device.h).
#pragma once

#include <cstdint>

#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV::kernels {

void fill(float* y, int64_t n, float value, Stream stream);

// A box copy's geometry in elements (Backend::copy_box): the box's extents,
// outermost first, each buffer's strides, and the element offset of the
// box's first element in each buffer.
constexpr int kMaxBoxRank = 8;
struct BoxDims {
  int rank = 0;
  int64_t length[kMaxBoxRank] = {}, src_stride[kMaxBoxRank] = {}, dst_stride[kMaxBoxRank] = {};
  int64_t src_offset = 0, dst_offset = 0;
  bool src_bf16 = false;  // the source holds bf16 elements, widened exactly (BoxCopy::src_bf16)
};
// dst box (+)= scale * src box, `count` = the box's elements; !add with
// scale == 1 copies raw 32-bit words (i32 data survives), unless the source
// is bf16 (box.src_bf16: widened, then as for f32). The product is
// rounded before the add (no fused multiply-add), as the CPU backend
// computes it, so the two agree bit for bit.
void copy_box(void* dst, const void* src, const BoxDims& box, int64_t count, bool add, float scale, Stream stream);
// y[i] = x[i] rounded to bfloat16 (cpu/half_bits.h), as 16-bit patterns: the
// operands of a bf16 product.
void to_bf16(const float* x, uint16_t* y, int64_t n, Stream stream);
// y[i] = the bf16 pattern x[i] widened to f32 (exact): a bf16-stored
// activation read by an f32 kernel.
void from_bf16(const uint16_t* x, float* y, int64_t n, Stream stream);
// The same to IEEE binary16 (fp16 autocast).
void to_fp16(const float* x, uint16_t* y, int64_t n, Stream stream);
// y = x0 + x1 + ... (count inputs, in order)
void add_n(float* y, const float* const* xs, int count, int64_t n, Stream stream);
void scale(float* y, const float* x, int64_t n, float alpha, Stream stream);
void axpy(float* y, const float* x, int64_t n, float alpha, Stream stream);
// dbias[c] = sum over rows of dy[r, c], summed in double, in row order.
void column_sums(const float* dy, float* dbias, int64_t rows, int64_t cols, Stream stream);
// Sum of squares of x in a fixed order (the same value every run): lanes
// of a strided partition into `lanes` (sum_of_squares_lanes(n) doubles of
// scratch), then groups of lanes into `partials`
// (sum_of_squares_partials(n) doubles), which the caller adds in order on
// the host.
int64_t sum_of_squares_lanes(int64_t n);
int64_t sum_of_squares_partials(int64_t n);
void sum_of_squares(const float* x, int64_t n, double* lanes, double* partials, Stream stream);
void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
              float weight_decay, Stream stream);
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int64_t step, Stream stream);

}  // namespace nns::backend::NNS_DEV::kernels
