// oneDNN engine, stream, primitive cache and scratch, all thread-local: a
// oneDNN stream must not be shared between threads that run concurrently,
// and keeping the cache per thread needs no lock.
#include "backend/cpu/dnnl_context.h"

#include <map>

#include "backend/cpu/kernels.h"

namespace nns::backend::cpu::dnnl_ctx {

namespace {

constexpr size_t kMaxCachedPrimitives = 512;
constexpr int kScratchSlots = 6;

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::vector<int64_t>, dnnl::primitive> cache;
  std::vector<float> scratch[kScratchSlots];
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

}  // namespace

dnnl::engine& engine() { return state().engine; }
dnnl::stream& stream() { return state().stream; }

const dnnl::primitive& cached(PrimKind kind, const std::vector<int64_t>& key,
                              const std::function<dnnl::primitive()>& make) {
  ThreadState& s = state();
  std::vector<int64_t> full;
  full.reserve(key.size() + 2);
  full.push_back(static_cast<int64_t>(kind));
  // oneDNN sizes its work partition and scratchpad for the thread count at
  // creation, so a primitive is only reused under the same count.
  full.push_back(get_threads());
  full.insert(full.end(), key.begin(), key.end());
  auto it = s.cache.find(full);
  if (it != s.cache.end()) return it->second;
  if (s.cache.size() >= kMaxCachedPrimitives) s.cache.clear();
  return s.cache.emplace(std::move(full), make()).first->second;
}

dnnl::memory::desc plain_md(const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args) {
  prim.execute(stream(), args);
  stream().wait();
}

float* scratch(int slot, size_t n) {
  std::vector<float>& buf = state().scratch[slot];
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace nns::backend::cpu::dnnl_ctx
