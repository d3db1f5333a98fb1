// The device-side 16-bit roundings (backend/runtime/cuda/numeric.h, the
// kernels' own code compiled for the host here) against the CPU backend's
// bf16_bits / fp16_bits, bit for bit: every half read back, specials, and
// a million seeded floats across the exponent range.
#define NNS_DEV cuda_emu
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/cuda/numeric.h"

namespace nns::backend::test {

namespace dev = nns::backend::cuda_emu;

TEST_CASE("device numeric: bf16 and fp16 roundings equal the CPU's bit for bit", "[cuda][numeric]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t half = static_cast<uint16_t>(h);
    float want = cpu::fp16_to_float(half), got = dev::fp16_bits_float(half);
    uint32_t wb, gb;
    std::memcpy(&wb, &want, 4);
    std::memcpy(&gb, &got, 4);
    INFO("half 0x" << std::hex << h);
    REQUIRE(gb == wb);
  }
  std::vector<float> xs = {0.f, -0.f, 1.f, 65504.f, 65519.f, 65520.f, -65520.f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max()};
  std::mt19937 rng(2026);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    uint32_t b = bits(rng);
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  size_t fp16_mismatch = 0, bf16_mismatch = 0;
  for (float x : xs) {
    fp16_mismatch += dev::to_fp16_bits(x) != cpu::fp16_bits(x);
    bf16_mismatch += dev::to_bf16_bits(x) != cpu::bf16_bits(x);
  }
  CHECK(fp16_mismatch == 0);
  CHECK(bf16_mismatch == 0);
}

}  // namespace nns::backend::test
