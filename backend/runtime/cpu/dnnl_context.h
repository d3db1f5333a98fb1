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

#include "backend/runtime/cpu/half_bits.h"

namespace nns::backend::cpu::dnnl_ctx {

// Tags that keep cache keys of different primitive kinds apart.
enum class PrimKind : int64_t {
  matmul = 1, linear, conv_fwd, conv_bwd_data, conv_bwd_weights, softmax_fwd, softmax_bwd,
  logsoftmax_fwd, logsoftmax_bwd, lnorm_fwd, lnorm_bwd, eltwise_fwd, eltwise_bwd,
  pool_max_fwd, pool_avg_fwd, pool_max_fwd_train, pool_max_bwd, pool_avg_bwd,
};

dnnl::engine& engine();
dnnl::stream& stream();

// A primitive with the layouts of its tensor arguments: the caller's plain
// one and the one the primitive was created for. With format_tag::any
// oneDNN picks blocked layouts (several times faster for convolutions); the
// plan then reorders between the two around each execution.
struct Plan {
  struct Arg {
    int id = 0;                      // DNNL_ARG_*
    dnnl::memory::desc user, inner;  // the caller's layout, the primitive's
    bool output = false;
    bool reordered = false;          // user != inner
    dnnl::primitive reorder;         // user -> inner (inputs) or inner -> user (outputs)
  };
  dnnl::primitive prim;
  std::vector<Arg> args;  // empty for primitives run with execute()
};

// The plan cached under (kind, key..., current thread count), created by
// `make` on a miss. The cache holds at most a few hundred plans per thread
// and is cleared wholesale when full: a training step reuses a small fixed
// set of shapes, so an LRU would buy nothing.
const Plan& cached_plan(PrimKind kind, const std::vector<int64_t>& key,
                        const std::function<Plan()>& make);

// cached_plan for a primitive that runs on the caller's layouts directly.
const dnnl::primitive& cached(PrimKind kind, const std::vector<int64_t>& key,
                              const std::function<dnnl::primitive()>& make);

// A plan for `prim` (made from `pd`) whose arguments the caller holds in the
// layouts `user` (argument id -> plain descriptor); `outputs` lists the ids
// the primitive writes.
Plan make_plan(const dnnl::primitive& prim, const dnnl::primitive_desc& pd,
               const std::unordered_map<int, dnnl::memory::desc>& user,
               const std::vector<int>& outputs);

// Runs a plan on caller buffers (argument id -> pointer in the user layout):
// inputs are reordered into per-thread scratch, the primitive runs, outputs
// are reordered back.
void execute_plan(const Plan& plan, const std::unordered_map<int, const float*>& ptrs);

// A oneDNN memory over a caller's buffer (no copy).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const float* p) {
  return dnnl::memory(md, engine(), const_cast<float*>(p));
}

// The bit pattern of a float that a primitive bakes in (eps, beta), for keys.
inline int64_t float_bits(float f) { return f32_bits(f); }

// Plain row-major descriptor of fp32 `dims`.
dnnl::memory::desc plain_md(const dnnl::memory::dims& dims);

// Run a primitive on the thread's stream and wait.
void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args);

// Per-thread scratch of n floats in one of kScratchSlots independent slots
// (reused between calls, so no allocation in steady state). Slots 0-5 are
// for kernels, 6 and up for execute_plan.
constexpr int kScratchSlots = 12;
float* scratch(int slot, size_t n);

}  // namespace nns::backend::cpu::dnnl_ctx
