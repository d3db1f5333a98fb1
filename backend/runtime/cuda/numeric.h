// Bit-level float helpers usable in kernel bodies and on the host: the
// same roundings as the CPU backend's bf16_bits and fp16_bits
// (backend/runtime/cpu/kernels.h, where their rules are spelled out):
// nearest, ties to even, NaN kept quiet; fp16 overflows to inf from 65520
// and underflows gradually.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

NNS_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

NNS_HD inline float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

NNS_HD inline uint16_t to_bf16_bits(float x) {
  uint32_t bits = float_bits(x);
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x40u : rounded);
}

NNS_HD inline float bf16_bits_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

NNS_HD inline uint16_t to_fp16_bits(float x) {
  const uint32_t bits = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r - (112u << 23)) >> 13));
  }
  // Subnormal: |x| 2^24 rounded to an integer. The product is exact (a
  // power-of-two scale), so a fused multiply-add rounds the same.
  const float units = (bits_float(a) * 0x1p24f + 0x1p23f) - 0x1p23f;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
}

NNS_HD inline float fp16_bits_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return bits_float(float_bits(static_cast<float>(m) * 0x1p-24f) | sign);
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace nns::backend::NNS_DEV
