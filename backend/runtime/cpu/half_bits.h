// bfloat16 and IEEE binary16 roundings, on the host and in CUDA kernels:
// the CPU backend's bf16/fp16 autocast rounds operands with these, and the
// CUDA backend's kernels (backend/runtime/cuda/kernels_basic.cu) include
// this header and call the same functions, so both round alike bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define NNS_HALF_HD __host__ __device__
#else
#define NNS_HALF_HD
#endif

namespace nns::backend::cpu {

// A float's bits, and back.
NNS_HALF_HD inline uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
NNS_HALF_HD inline float f32_from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// bfloat16 rounding (round to nearest, ties to even; a NaN stays a NaN,
// quieted): the top 16 bits of the float nearest to x whose low 16 bits are
// zero. Without branches, so a loop over it vectorises. The bf16 kernels
// (cpu/kernels.h, and the CUDA products) compute on operands rounded this way, so ref and fast agree on what
// a bf16 product is.
NNS_HALF_HD inline uint16_t bf16_bits(float x) {
  uint32_t bits = f32_bits(x);
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x40u : rounded);
}
// A bf16 pattern read back (the low 16 bits zero), and bf16_bits as a float.
NNS_HALF_HD inline float bf16_to_float(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
NNS_HALF_HD inline float round_to_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

// IEEE binary16 (fp16) rounding, for fp16 autocast (precision = "fp16"):
// round to nearest, ties to even; past the largest finite half (65504) to
// infinity (from 65520 on, the halfway point to 2^16); below 2^-14 to the
// subnormal grid of 2^-24 (gradual underflow); a NaN stays a NaN (quiet).
// fp16_bits gives the 16-bit pattern, fp16_to_float reads one back, and
// round_to_fp16 is the pair: the float nearest to x that a half can hold.
// The fp16 kernels compute on operands rounded this way.
NNS_HALF_HD inline uint16_t fp16_bits(float x) {
  const uint32_t bits = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quieted
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                         // >= 65520: inf
  if (a >= 0x38800000u) {  // >= 2^-14: a normal half; 13 mantissa bits go, ties to even
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r - (112u << 23)) >> 13));  // exponent bias 127 -> 15
  }
  // Subnormal (or zero): a multiple of 2^-24, |x| * 2^24 rounded to an
  // integer (exact scaling; rounding by adding and removing 2^23 is ties to
  // even in the default rounding mode, and 1024 becomes 2^-14, the smallest normal).
  const float mag = f32_from_bits(a);
  const float units = (mag * 0x1p24f + 0x1p23f) - 0x1p23f;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
}
NNS_HALF_HD inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  if (e == 0) {
    bits = f32_bits(static_cast<float>(m) * 0x1p-24f) | sign;  // subnormal: exact
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  return f32_from_bits(bits);
}
NNS_HALF_HD inline float round_to_fp16(float x) { return fp16_to_float(fp16_bits(x)); }

}  // namespace nns::backend::cpu
