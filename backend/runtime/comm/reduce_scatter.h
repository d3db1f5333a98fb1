// Reduce-scatter of fp32 buffers over a Gloo context, used by
// Communicator::reduce_scatter. Written here rather than taken from Gloo:
// Gloo's ReduceScatterHalvingDoubling overwrites buffers whose
// asynchronous sends may still be in flight and returns before some of its
// sends are out, which gave wrong sums (3 ranks) and peers seeing closed
// connections (4 ranks) in our tests. These use Gloo's transport
// (unbound buffers) and wait for every transfer they start.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gloo {
class Context;
}

namespace nns::backend {

// out[0..chunk) := sum over the context's members of their
// in[r*chunk .. (r+1)*chunk), where r is this member's context rank. `in`
// holds size*chunk floats and is only read; `scratch` is grown as needed
// (at most (size/2 + size/4)*chunk or 3*chunk floats) and may be reused
// across calls. Every member calls it with the same chunk and tag; it
// throws (Gloo's exceptions) when a transfer fails or `timeout` passes.
//
// Power-of-two sizes use recursive halving (log2(size) exchange steps),
// other sizes a ring (size-1 steps); both send (size-1)/size of the data.
void reduce_scatter_f32(gloo::Context& ctx, const float* in, float* out, size_t chunk, std::vector<float>& scratch,
                        std::chrono::milliseconds timeout, uint32_t tag);

}  // namespace nns::backend
