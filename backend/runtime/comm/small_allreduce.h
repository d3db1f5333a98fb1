// The latency path of Communicator::allreduce for small buffers.
//
// Gloo's ring allreduce passes a buffer around the ring twice: 2(n-1)
// dependent transfers, each a round trip through both processes' Gloo
// event-loop threads. For a loss or a norm (a few bytes) that latency is
// the whole cost. On this path every member sends its whole buffer to every
// other member at once over the group's SocketMesh (socket_mesh.h) and adds
// the n copies itself.
//
// The sums are formed in the order Gloo's ring forms them, element by
// element, so the result is bit-identical to gloo::allreduce with
// Algorithm::RING (and the same on every member): which path a size takes
// never changes a number.
#pragma once

#include <cstddef>

namespace nns::backend {

// Whether an allreduce of `count` floats over `n` members takes the direct
// path: each member sends (n-1) * count floats instead of the ring's
// 2(n-1)/n * count, which pays on loopback up to a size (see the .cpp).
bool direct_allreduce_pays(size_t count, int n);

// out[0..count) := the sum of copies[p*count ..) over p < n, each element
// summed in the order of Gloo's ring allreduce (gloo/allreduce.cc, the
// revision Debian ships).
void sum_in_ring_order(const float* copies, float* out, size_t count, int n);

}  // namespace nns::backend
