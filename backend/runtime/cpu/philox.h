// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11): a counter-based generator, i.e. a keyed bijection of a 128-bit
// counter. Dropout draws element i of a tensor from counter i / 4, lane
// i % 4, so a mask is a pure function of (seed, global index) — the same for
// any partition of the tensor and any thread count. Philox-4x32-10 is also
// what cuRAND and PyTorch use on GPUs, so a CUDA kernel can reproduce these
// masks bit for bit: the CUDA backend's dropout (backend/runtime/cuda/
// kernels_nn.cu) includes this header and calls these same functions in its
// kernels, which is why they are host-and-device (NNS_PHILOX_HD) and use
// nothing but integer arithmetic.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NNS_PHILOX_HD __host__ __device__
#else
#define NNS_PHILOX_HD
#endif

namespace nns::backend::cpu {

struct Philox4 {
  uint32_t v[4];
};

// Ten rounds on a full 128-bit counter and 64-bit key (k0, k1); the
// known-answer vectors of the Random123 distribution apply to this form.
inline NNS_PHILOX_HD Philox4 philox4x32_10_block(Philox4 ctr, uint32_t k0, uint32_t k1) {
  uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;  // Weyl key schedule
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// The dropout stream's block: counter = (counter lo, counter hi, 0, 0),
// key = (seed lo, seed hi).
inline NNS_PHILOX_HD Philox4 philox4x32_10(uint64_t counter, uint64_t seed) {
  Philox4 ctr{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0}};
  return philox4x32_10_block(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The top 24 bits as a float in [0, 1): exact in fp32, so ref and fast
// compare identical values against p.
inline NNS_PHILOX_HD float uniform_from_bits(uint32_t bits) {
  // Through int32 (the value fits): SSE2 converts signed ints in vectors only.
  return static_cast<float>(static_cast<int32_t>(bits >> 8)) * (1.0f / 16777216.0f);
}

// Dropout's uniform for element `element_index` of the stream keyed by
// `seed`: counter element_index / 4, lane element_index % 4.
inline NNS_PHILOX_HD float philox_uniform(uint64_t seed, uint64_t element_index) {
  Philox4 r = philox4x32_10(element_index >> 2, seed);
  return uniform_from_bits(r.v[element_index & 3]);
}

}  // namespace nns::backend::cpu
