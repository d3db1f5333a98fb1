// Bit-level float helpers usable in kernel bodies and on the host: the
// same rounding to bfloat16 as the CPU backend's bf16_bits
// (backend/runtime/cpu/kernels.h): nearest, ties to even, NaN kept quiet.
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

}  // namespace nns::backend::NNS_DEV
