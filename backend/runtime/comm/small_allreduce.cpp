#include "backend/runtime/comm/small_allreduce.h"

#include <gloo/allreduce.h>

#include <algorithm>
#include <cstring>

namespace nns::backend {
namespace {

// Up to this many bytes sent per member ((n-1) copies of the buffer) the
// direct path beats Gloo's ring on loopback by 2x or more (bench_collectives
// --latency --bytes B on the 2-core VM: 2 ranks 125 vs 293 us at 256 KiB,
// about even at 1 MiB; 4 ranks 241 us vs 5 ms at 64 KiB). Beyond it the
// n-fold traffic starts to cost more than the ring's 2(n-1) steps.
constexpr size_t kDirectMaxSentBytes = size_t(256) << 10;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// How Gloo's ring (gloo/allreduce.cc) cuts a buffer: S segments of
// seg_elems floats, S a multiple of n and at least 2n, segments of at
// most kMaxSegmentSize bytes. The last segments may be short or empty.
struct RingSegments {
  size_t count = 0, per_member = 0, seg_elems = 0;
};

RingSegments ring_segments(size_t count, int n) {
  const size_t bytes = count * sizeof(float);
  const size_t max_seg = gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize;
  RingSegments s;
  s.count = round_up(std::max((bytes + max_seg - 1) / max_seg, size_t(2 * n)), size_t(n));
  s.per_member = s.count / n;
  s.seg_elems = round_up((bytes + s.count - 1) / s.count, sizeof(float)) / sizeof(float);
  return s;
}

// dst[i] += src[i]; the same fp32 addition as gloo::sum (a + b is
// commutative in IEEE arithmetic, so the operand order does not matter).
void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

bool direct_allreduce_pays(size_t count, int n) {
  return n > 1 && count * sizeof(float) * size_t(n - 1) <= kDirectMaxSentBytes;
}

// out := the sum of the n copies, each element summed as Gloo's ring sums
// it. In the ring's reduce-scatter member r sends segment (r+1)*P + i (P
// segments per member) to member r-1, which adds its own values and passes
// it on at step i+P. So segment g starts at member r0 = g/P - 1 and its sum
// is x[r0-(n-1)] + (.. + (x[r0-1] + x[r0])), indices mod n.
void sum_in_ring_order(const float* copies, float* out, size_t count, int n) {
  const RingSegments seg = ring_segments(count, n);
  for (size_t g = 0; g < seg.count; ++g) {
    const size_t lo = g * seg.seg_elems;
    if (lo >= count) break;
    const size_t len = std::min(seg.seg_elems, count - lo);
    const int r0 = static_cast<int>((g / seg.per_member + n - 1) % n);
    std::memcpy(out + lo, copies + size_t(r0) * count + lo, len * sizeof(float));
    for (int k = 1; k < n; ++k) add_into(out + lo, copies + size_t((r0 - k + n) % n) * count + lo, len);
  }
}

}  // namespace nns::backend
