#include "backend/runtime/comm/mesh_collectives.h"

#include <gloo/allreduce.h>

#include <algorithm>
#include <cstring>

#include "backend/runtime/comm/deadline.h"
#include "backend/runtime/comm/socket_mesh.h"

namespace nns::backend {
namespace {

using Ms = std::chrono::milliseconds;

// Up to this many bytes sent per member ((n-1) copies of the buffer) an
// allreduce sends every member the whole buffer: one round, and on loopback
// 2x or more faster than the two rounds of the cut path (bench_collectives
// --latency --bytes B on the 2-core VM, 2 ranks: 125 vs 293 us at 256 KiB
// against Gloo's ring). The same bound keeps broadcasts on the mesh.
constexpr size_t kDirectMaxSentBytes = size_t(256) << 10;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// How Gloo's ring (gloo/allreduce.cc) cuts a buffer: `count` segments of
// seg_elems floats, a multiple of n and at least 2n, each at most
// kMaxSegmentSize bytes; member m finishes segments [m*P, (m+1)*P), P =
// per_member. The last segments may be short or empty.
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

// The elements member p finishes in the ring, [lo, hi).
struct Range {
  size_t lo = 0, hi = 0;
  size_t size() const { return hi - lo; }
};

Range finished_by(int p, const RingSegments& s, size_t count) {
  const size_t block = s.per_member * s.seg_elems;
  return {std::min(count, size_t(p) * block), std::min(count, size_t(p + 1) * block)};
}

// dst[i] += src[i]; the same fp32 addition as gloo::sum (a + b is
// commutative in IEEE arithmetic, so the operand order does not matter).
void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

bool direct_pays(size_t count, int n) { return count * sizeof(float) * size_t(n - 1) <= kDirectMaxSentBytes; }

// Every member sends its whole buffer to every other and sums all copies.
void allreduce_direct(SocketMesh& mesh, float* buf, size_t count, std::vector<float>& scratch, Ms timeout) {
  const int n = mesh.size();
  if (scratch.size() < size_t(n) * count) scratch.resize(size_t(n) * count);
  std::memcpy(scratch.data() + size_t(mesh.index()) * count, buf, count * sizeof(float));
  mesh.all_gather(buf, scratch.data(), count * sizeof(float), timeout);
  sum_in_ring_order(scratch.data(), count, buf, 0, count, count, n);
}

// Round 1: member p gets every member's values of the range it finishes in
// the ring and sums them in the ring's order. Round 2: each sends its sum
// to all. Ranges of zero length send nothing (both ends know the sizes).
void allreduce_cut(SocketMesh& mesh, float* buf, size_t count, std::vector<float>& scratch, Ms timeout) {
  const Deadline deadline(timeout);
  const int n = mesh.size(), m = mesh.index();
  const RingSegments seg = ring_segments(count, n);
  std::vector<Range> range(n);
  for (int p = 0; p < n; ++p) range[p] = finished_by(p, seg, count);
  const Range mine = range[m];
  if (scratch.size() < size_t(n) * mine.size()) scratch.resize(size_t(n) * mine.size());
  std::vector<SocketMesh::Out> to(n);
  std::vector<SocketMesh::In> from(n);
  for (int p = 0; p < n; ++p) {
    to[p] = {buf + range[p].lo, range[p].size() * sizeof(float), range[p].size() > 0};
    from[p] = {scratch.data() + size_t(p) * mine.size(), mine.size() * sizeof(float), mine.size() > 0};
  }
  std::memcpy(scratch.data() + size_t(m) * mine.size(), buf + mine.lo, mine.size() * sizeof(float));
  mesh.exchange(to, from, deadline.left());
  sum_in_ring_order(scratch.data(), mine.size(), buf + mine.lo, mine.lo, mine.hi, count, n);
  for (int p = 0; p < n; ++p) {
    to[p] = {buf + mine.lo, mine.size() * sizeof(float), mine.size() > 0};
    from[p] = {buf + range[p].lo, range[p].size() * sizeof(float), range[p].size() > 0};
  }
  mesh.exchange(to, from, deadline.left());
}

}  // namespace

// In the ring's reduce-scatter member r sends segment (r+1)*P + i (P
// segments per member) to member r-1, which adds its own values and passes
// it on at step i+P. So segment g starts at member r0 = g/P - 1 and its sum
// is x[r0-(n-1)] + (.. + (x[r0-1] + x[r0])), indices mod n; the member that
// adds last, r0 + 1 = g/P, finishes it.
void sum_in_ring_order(const float* copies, size_t stride, float* out, size_t lo, size_t hi, size_t count, int n) {
  const RingSegments seg = ring_segments(count, n);
  for (size_t g = lo / seg.seg_elems; g < seg.count; ++g) {
    const size_t a = std::max(lo, g * seg.seg_elems), b = std::min({hi, count, (g + 1) * seg.seg_elems});
    if (a >= b) break;
    const int r0 = static_cast<int>((g / seg.per_member + n - 1) % n);
    std::memcpy(out + (a - lo), copies + size_t(r0) * stride + (a - lo), (b - a) * sizeof(float));
    for (int k = 1; k < n; ++k) add_into(out + (a - lo), copies + size_t((r0 - k + n) % n) * stride + (a - lo), b - a);
  }
}

void mesh_allreduce(SocketMesh& mesh, float* buf, size_t count, std::vector<float>& scratch, Ms timeout) {
  if (direct_pays(count, mesh.size())) {
    allreduce_direct(mesh, buf, count, scratch, timeout);
  } else {
    allreduce_cut(mesh, buf, count, scratch, timeout);
  }
}

void mesh_allgather(SocketMesh& mesh, const float* in, float* out, size_t chunk, Ms timeout) {
  std::memcpy(out + size_t(mesh.index()) * chunk, in, chunk * sizeof(float));
  mesh.all_gather(in, out, chunk * sizeof(float), timeout);
}

void mesh_all_to_all(SocketMesh& mesh, const float* in, float* out, size_t chunk, Ms timeout) {
  const int n = mesh.size(), m = mesh.index();
  const size_t bytes = chunk * sizeof(float);
  std::vector<SocketMesh::Out> to(n);
  std::vector<SocketMesh::In> from(n);
  for (int p = 0; p < n; ++p) {
    to[p] = {in + size_t(p) * chunk, bytes, true};
    from[p] = {out + size_t(p) * chunk, bytes, true};
  }
  std::memcpy(out + size_t(m) * chunk, in + size_t(m) * chunk, bytes);
  mesh.exchange(to, from, timeout);
}

bool mesh_broadcast_pays(size_t count, int n) { return direct_pays(count, n); }

void mesh_broadcast(SocketMesh& mesh, float* buf, size_t count, int root, Ms timeout) {
  const int n = mesh.size();
  const size_t bytes = count * sizeof(float);
  std::vector<SocketMesh::Out> to(n);
  std::vector<SocketMesh::In> from(n);
  if (mesh.index() == root) {
    for (int p = 0; p < n; ++p) to[p] = {buf, bytes, true};
  } else {
    from[root] = {buf, bytes, true};
  }
  mesh.exchange(to, from, timeout);
}

}  // namespace nns::backend
