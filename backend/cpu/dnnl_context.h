// Per-thread oneDNN state for the fast kernels: one CPU engine and stream
// per calling thread, and a small keyed cache of primitives (creating a
// oneDNN primitive costs far more than running a small one). Internal to
// backend/cpu.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace nns::backend::cpu::dnnl_ctx {

// Tags that keep cache keys of different primitive kinds apart.
enum class PrimKind : int64_t {
  matmul = 1, linear, conv_fwd, conv_bwd_data, conv_bwd_weights, softmax_fwd, softmax_bwd,
  logsoftmax_fwd, logsoftmax_bwd, lnorm_fwd, lnorm_bwd, eltwise_fwd, eltwise_bwd,
};

dnnl::engine& engine();
dnnl::stream& stream();

// The primitive cached under (kind, key..., current thread count), created
// by `make` on a miss. The cache holds at most a few hundred primitives per
// thread and is cleared wholesale when full: a training step reuses a small
// fixed set of shapes, so an LRU would buy nothing.
const dnnl::primitive& cached(PrimKind kind, const std::vector<int64_t>& key,
                              const std::function<dnnl::primitive()>& make);

// A oneDNN memory over a caller's buffer (no copy).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const float* p) {
  return dnnl::memory(md, engine(), const_cast<float*>(p));
}

// The bit pattern of a float that a primitive bakes in (eps, beta), for keys.
inline int64_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Plain row-major descriptor of fp32 `dims`.
dnnl::memory::desc plain_md(const dnnl::memory::dims& dims);

// Run a primitive on the thread's stream and wait.
void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args);

// Per-thread scratch of n floats in one of six independent slots (reused
// between calls, so no allocation in steady state).
float* scratch(int slot, size_t n);

}  // namespace nns::backend::cpu::dnnl_ctx
