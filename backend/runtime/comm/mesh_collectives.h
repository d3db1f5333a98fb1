// Collectives over a group's SocketMesh (socket_mesh.h): allreduce,
// allgather, all-to-all and broadcast in one or two rounds of messages that
// are all in flight at once, where Gloo's ring and tree algorithms take n-1
// or more dependent steps, each a round trip through both processes' Gloo
// event-loop threads (bench_collectives: an 8-byte allreduce 16 us on 2
// ranks instead of ~100 us; a 1 MiB allgather 0.2 ms instead of 3.3 ms).
//
// Allreduce sums are formed in the order Gloo's ring allreduce forms them
// (gloo/allreduce.cc of the revision Debian ships), element by element, so
// results are bit-identical to gloo::allreduce with Algorithm::RING, the
// same on every member, and independent of which of the two rounds-based
// paths a size takes. The other collectives move bytes only.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace nns::backend {

class SocketMesh;

// buf[0..count) := the sum over the members of their buf. Small buffers
// (up to 256 KiB sent per member) go to every member, which sums all
// copies; larger ones are cut as the ring cuts them: each member receives
// every member's values of the range the ring has it finish, sums them,
// and sends the sum to all (2(n-1)/n of the buffer sent, as the ring).
// `scratch` is grown as needed and may be reused across calls.
void mesh_allreduce(SocketMesh& mesh, float* buf, size_t count, std::vector<float>& scratch, std::chrono::milliseconds timeout);

// out[p*chunk ..) := member p's in[0..chunk).
void mesh_allgather(SocketMesh& mesh, const float* in, float* out, size_t chunk, std::chrono::milliseconds timeout);

// out[p*chunk ..) := member p's in[m*chunk ..), m this member's index.
void mesh_all_to_all(SocketMesh& mesh, const float* in, float* out, size_t chunk, std::chrono::milliseconds timeout);

// Whether a broadcast of `count` floats goes over the mesh: the root sends
// n-1 copies at once, which beats Gloo's binomial tree while small.
bool mesh_broadcast_pays(size_t count, int n);
// buf := the root member's buf (root: a member index).
void mesh_broadcast(SocketMesh& mesh, float* buf, size_t count, int root, std::chrono::milliseconds timeout);

// out[e - lo] for e in [lo, hi) := the sum over p < n of copies[p*stride +
// e - lo], each element summed in the order of Gloo's ring allreduce of a
// buffer of `count` floats. Exposed for tests.
void sum_in_ring_order(const float* copies, size_t stride, float* out, size_t lo, size_t hi, size_t count, int n);

}  // namespace nns::backend
