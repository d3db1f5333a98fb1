// Gemm in the host emulation: cuBLASLt's column-major semantics as a plain
// loop (double accumulation), so that plan()'s mapping from row-major
// operands is what the tests check.
#include "backend/runtime/cuda/gemm.h"

#include "backend/runtime/cpu/half_bits.h"

namespace nns::backend::NNS_DEV {

struct Gemm::Impl {};

Gemm::Gemm(Stream stream) : impl_(std::make_unique<Impl>()), stream_(stream) {}
Gemm::~Gemm() = default;

namespace {
// Element i of an operand of type `input`.
double element(const void* base, int64_t i, ProductInput input) {
  if (input == ProductInput::BF16) return cpu::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  if (input == ProductInput::F16) return cpu::fp16_to_float(static_cast<const uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}
}  // namespace

void Gemm::run_column_major(const ColMajorProduct& p) {
  for (int64_t t = 0; t < p.batch; ++t) {
    const int64_t a_off = t * p.stride_a, b_off = t * p.stride_b;
    float* d = p.d + t * p.stride_d;
    for (int64_t j = 0; j < p.cols; ++j)
      for (int64_t i = 0; i < p.rows; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < p.inner; ++l) {
          double av = element(p.a, a_off + (p.trans_a ? l + i * p.ld_a : i + l * p.ld_a), p.input);
          double bv = element(p.b, b_off + (p.trans_b ? j + l * p.ld_b : l + j * p.ld_b), p.input);
          acc += av * bv;
        }
        float& out = d[i + j * p.ld_d];
        double v = double(p.alpha) * acc + (p.beta != 0.f ? double(p.beta) * out : 0.0);
        if (p.bias) v += p.bias[i];
        out = static_cast<float>(v);
      }
  }
}

}  // namespace nns::backend::NNS_DEV
