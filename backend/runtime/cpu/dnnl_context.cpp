// oneDNN engine, stream, primitive cache and scratch, all thread-local: a
// oneDNN stream must not be shared between threads that run concurrently,
// and keeping the cache per thread needs no lock.
#include "backend/runtime/cpu/dnnl_context.h"

#include <algorithm>
#include <map>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::dnnl_ctx {

namespace {

constexpr size_t kMaxCachedPrimitives = 512;
constexpr int kFirstPlanSlot = 6;

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::vector<int64_t>, Plan> cache;
  std::vector<float> scratch[kScratchSlots];
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

}  // namespace

dnnl::engine& engine() { return state().engine; }
dnnl::stream& stream() { return state().stream; }

const Plan& cached_plan(PrimKind kind, const std::vector<int64_t>& key,
                        const std::function<Plan()>& make) {
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

const dnnl::primitive& cached(PrimKind kind, const std::vector<int64_t>& key,
                              const std::function<dnnl::primitive()>& make) {
  return cached_plan(kind, key, [&] { return Plan{make(), {}}; }).prim;
}

Plan make_plan(const dnnl::primitive& prim, const dnnl::primitive_desc& pd,
               const std::unordered_map<int, dnnl::memory::desc>& user,
               const std::vector<int>& outputs) {
  Plan plan{prim, {}};
  for (const auto& [id, user_md] : user) {
    Plan::Arg arg;
    arg.id = id;
    arg.user = user_md;
    arg.inner = pd.query_md(dnnl::query::exec_arg_md, id);
    arg.output = std::find(outputs.begin(), outputs.end(), id) != outputs.end();
    arg.reordered = arg.inner != user_md;
    if (arg.reordered) {
      // Built from descriptors alone; buffers are bound at execution.
      auto rpd = arg.output ? dnnl::reorder::primitive_desc(engine(), arg.inner, engine(), user_md)
                            : dnnl::reorder::primitive_desc(engine(), user_md, engine(), arg.inner);
      arg.reorder = dnnl::reorder(rpd);
    }
    plan.args.push_back(std::move(arg));
  }
  return plan;
}

void execute_plan(const Plan& plan, const std::unordered_map<int, const float*>& ptrs) {
  std::unordered_map<int, dnnl::memory> args;
  std::vector<std::pair<const Plan::Arg*, dnnl::memory>> outputs;  // (arg, its scratch)
  int slot = kFirstPlanSlot;
  for (const Plan::Arg& a : plan.args) {
    auto it = ptrs.find(a.id);
    if (it == ptrs.end()) continue;
    dnnl::memory user = wrap(a.user, it->second);
    if (!a.reordered) {
      args.emplace(a.id, user);
      continue;
    }
    float* buf = scratch(slot++, a.inner.get_size() / sizeof(float));
    dnnl::memory inner(a.inner, engine(), buf);
    if (a.output)
      outputs.emplace_back(&a, inner);
    else
      a.reorder.execute(stream(), {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, inner}});
    args.emplace(a.id, inner);
  }
  plan.prim.execute(stream(), args);
  for (const auto& [a, inner] : outputs)
    a->reorder.execute(stream(), {{DNNL_ARG_FROM, inner}, {DNNL_ARG_TO, wrap(a->user, ptrs.at(a->id))}});
  stream().wait();
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
