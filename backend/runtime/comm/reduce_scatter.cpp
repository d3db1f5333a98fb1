#include "backend/runtime/comm/reduce_scatter.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <functional>
#include <memory>

#include "backend/runtime/comm/deadline.h"

namespace nns::backend {
namespace {

using Ms = std::chrono::milliseconds;
using gloo::transport::UnboundBuffer;

// Slot prefix of our reduce-scatter; Gloo's collectives use 0x01..0x08 and
// the Communicator's point-to-point 0x20.
constexpr uint8_t kReduceScatterSlotPrefix = 0x21;

// Transfers go in segments of this many floats, so that adding segment k
// overlaps receiving segment k+1 (Gloo's ring allreduce uses 1 MiB too).
// Segments between one pair on one slot arrive in the order posted, so the
// k-th receive completion on a buffer is segment k.
constexpr size_t kSegment = size_t(1) << 18;

// dst[i] += src[i]. Unrolled by hand: GCC's -O2 vectorizes straight-line
// code (SLP) but not this loop.
void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    dst[i + 0] += src[i + 0];
    dst[i + 1] += src[i + 1];
    dst[i + 2] += src[i + 2];
    dst[i + 3] += src[i + 3];
    dst[i + 4] += src[i + 4];
    dst[i + 5] += src[i + 5];
    dst[i + 6] += src[i + 6];
    dst[i + 7] += src[i + 7];
  }
  for (; i < n; ++i) dst[i] += src[i];
}

// dst[i] = a[i] + b[i], unrolled for the same reason.
void sum_into(float* __restrict dst, const float* __restrict a, const float* __restrict b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    dst[i + 0] = a[i + 0] + b[i + 0];
    dst[i + 1] = a[i + 1] + b[i + 1];
    dst[i + 2] = a[i + 2] + b[i + 2];
    dst[i + 3] = a[i + 3] + b[i + 3];
    dst[i + 4] = a[i + 4] + b[i + 4];
    dst[i + 5] = a[i + 5] + b[i + 5];
    dst[i + 6] = a[i + 6] + b[i + 6];
    dst[i + 7] = a[i + 7] + b[i + 7];
  }
  for (; i < n; ++i) dst[i] = a[i] + b[i];
}

// Calls fn(offset, length) for the segments of [0, n) floats.
void for_segments(size_t n, const std::function<void(size_t, size_t)>& fn) {
  for (size_t off = 0; off < n; off += kSegment) fn(off, std::min(kSegment, n - off));
}

// Posts the receive of n floats into ub at float offset `at`; returns the
// number of segments (completions to wait for).
size_t post_recv(UnboundBuffer& ub, int peer, uint64_t slot, size_t at, size_t n) {
  size_t count = 0;
  for_segments(n, [&](size_t off, size_t len) {
    ub.recv(peer, slot, (at + off) * sizeof(float), len * sizeof(float));
    ++count;
  });
  return count;
}

size_t post_send(UnboundBuffer& ub, int peer, uint64_t slot, size_t at, size_t n) {
  size_t count = 0;
  for_segments(n, [&](size_t off, size_t len) {
    ub.send(peer, slot, (at + off) * sizeof(float), len * sizeof(float));
    ++count;
  });
  return count;
}

// Recursive halving for a power-of-two group. The member keeps a range of
// blocks containing its own, initially all n. With d = n/2, n/4, .., 1 it
// exchanges with member m^d: sends its partial sums of the half of the
// range it gives up, receives the partner's partials of the half it keeps
// and adds them. After log2(n) steps the range is block m.
//
// The first step receives straight into `acc` (n/2 blocks) and adds the
// input, later steps receive into `rbuf` (n/4 blocks) and add into acc.
// A region of acc that was sent is never written again, so sends need no
// wait until the end.
void halving(gloo::Context& ctx, const float* in, float* out, size_t chunk, std::vector<float>& scratch,
             const Deadline& deadline, uint64_t slot) {
  const int n = ctx.size, m = ctx.rank;
  const size_t acc_len = size_t(n / 2) * chunk, rbuf_len = size_t(n / 4) * chunk;
  if (scratch.size() < acc_len + rbuf_len) scratch.resize(acc_len + rbuf_len);
  float* acc = scratch.data();
  float* rbuf = acc + acc_len;
  auto in_ub = ctx.createUnboundBuffer(const_cast<float*>(in), size_t(n) * chunk * sizeof(float));
  auto acc_ub = ctx.createUnboundBuffer(acc, acc_len * sizeof(float));
  auto rbuf_ub = rbuf_len ? ctx.createUnboundBuffer(rbuf, rbuf_len * sizeof(float)) : nullptr;
  size_t in_sends = 0, acc_sends = 0;

  int lo = 0;    // first block of the range this member still reduces
  int base = 0;  // the block acc[0] holds
  for (int d = n / 2; d >= 1; d /= 2) {
    const bool first = d == n / 2, last = d == 1;
    const int partner = m ^ d;
    const int keep = (m & d) ? lo + d : lo, give = (m & d) ? lo : lo + d;
    const size_t len = size_t(d) * chunk;
    UnboundBuffer& rub = first ? *acc_ub : *rbuf_ub;
    size_t segs = post_recv(rub, partner, slot, 0, len);
    if (first) {
      in_sends += post_send(*in_ub, partner, slot, size_t(give) * chunk, len);
    } else {
      acc_sends += post_send(*acc_ub, partner, slot, size_t(give - base) * chunk, len);
    }
    const float* mine = first ? in + size_t(keep) * chunk : rbuf;
    float* dst = first ? acc : acc + size_t(keep - base) * chunk;
    size_t off = 0;
    for (size_t k = 0; k < segs; ++k) {
      size_t l = std::min(kSegment, len - off);
      rub.waitRecv(deadline.left());
      if (last) {
        sum_into(out + off, dst + off, mine + off, l);
      } else {
        add_into(dst + off, mine + off, l);
      }
      off += l;
    }
    if (first) base = keep;
    lo = keep;
  }
  // Return only when our sends are out: the caller may reuse the input.
  for (size_t k = 0; k < in_sends; ++k) in_ub->waitSend(deadline.left());
  for (size_t k = 0; k < acc_sends; ++k) acc_ub->waitSend(deadline.left());
}

// Ring for other sizes. At step s (0..n-2) member m sends its partial of
// block (m-1-s) to the next member and receives the previous member's
// partial of block (m-2-s), adding its own input; after step n-2 that
// block is m, complete.
//
// Three scratch blocks rotate: step s receives into buf[s%3] and sends
// buf[(s-1)%3] (what step s-1 summed); meanwhile the receive of step s+1
// is already posted into buf[(s+1)%3], once step s-1's sends from it are
// out. Gloo's send waits for the receiver to announce its receive, so
// posting a step ahead saves a round trip per step.
void ring(gloo::Context& ctx, const float* in, float* out, size_t chunk, std::vector<float>& scratch,
          const Deadline& deadline, uint64_t slot) {
  const int n = ctx.size, m = ctx.rank;
  const int next = (m + 1) % n, prev = (m + n - 1) % n;
  const int nbuf = std::min(3, n - 1);
  if (scratch.size() < nbuf * chunk) scratch.resize(nbuf * chunk);
  std::vector<float*> buf;
  std::vector<std::unique_ptr<UnboundBuffer>> buf_ub;
  for (int i = 0; i < nbuf; ++i) {
    buf.push_back(scratch.data() + i * chunk);
    buf_ub.push_back(ctx.createUnboundBuffer(buf.back(), chunk * sizeof(float)));
  }
  auto in_ub = ctx.createUnboundBuffer(const_cast<float*>(in), size_t(n) * chunk * sizeof(float));
  auto block = [&](int b) { return static_cast<size_t>(((b % n) + n) % n) * chunk; };
  struct Sent {
    UnboundBuffer* ub;
    size_t count;
  };
  std::vector<Sent> unsent;  // oldest first
  auto wait_oldest_sends = [&] {
    for (size_t k = 0; k < unsent.front().count; ++k) unsent.front().ub->waitSend(deadline.left());
    unsent.erase(unsent.begin());
  };

  size_t segs = post_recv(*buf_ub[0], prev, slot, 0, chunk);
  for (int s = 0; s + 1 < n; ++s) {
    if (s + 2 < n) {
      if (s >= 1) wait_oldest_sends();  // buf[(s+1)%3] was step s-1's send
      post_recv(*buf_ub[(s + 1) % nbuf], prev, slot, 0, chunk);
    }
    UnboundBuffer* send_ub = s == 0 ? in_ub.get() : buf_ub[(s - 1) % nbuf].get();
    unsent.push_back({send_ub, post_send(*send_ub, next, slot, s == 0 ? block(m - 1) : 0, chunk)});
    const float* mine = in + block(m - 2 - s);
    float* acc = buf[s % nbuf];
    size_t off = 0;
    for (size_t k = 0; k < segs; ++k) {
      size_t l = std::min(kSegment, chunk - off);
      buf_ub[s % nbuf]->waitRecv(deadline.left());
      if (s + 2 == n) {
        sum_into(out + off, acc + off, mine + off, l);
      } else {
        add_into(acc + off, mine + off, l);
      }
      off += l;
    }
  }
  while (!unsent.empty()) wait_oldest_sends();
}

}  // namespace

void reduce_scatter_f32(gloo::Context& ctx, const float* in, float* out, size_t chunk, std::vector<float>& scratch,
                        Ms timeout, uint32_t tag) {
  const Deadline deadline(timeout);
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const int n = ctx.size;
  if ((n & (n - 1)) == 0) {
    halving(ctx, in, out, chunk, scratch, deadline, slot);
  } else {
    ring(ctx, in, out, chunk, scratch, deadline, slot);
  }
}

}  // namespace nns::backend
