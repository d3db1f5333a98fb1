// The CPU backend: memory from a size-keyed pool, and every graph node kind
// (forward and backward) run by the kernel wrapper its family file registers
// (ops_*.cpp, see call.h), on the fast or the reference kernel library.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <variant>
#include <vector>

#include "backend/runtime/backend.h"
#include "backend/runtime/cpu/call.h"
#include "backend/runtime/cpu/kernels.h"

namespace nns::backend {
namespace {

using sema::OpNode;
using cpu_ops::Call;

const cpu_ops::KernelTable& table() {
  static const cpu_ops::KernelTable t = [] {
    cpu_ops::KernelTable k;
    cpu_ops::register_core_kernels(k);
    cpu_ops::register_elementwise_kernels(k);
    cpu_ops::register_nn_kernels(k);
    cpu_ops::register_attention_kernels(k);
    cpu_ops::register_reduce_kernels(k);
    cpu_ops::register_index_kernels(k);
    cpu_ops::register_layout_kernels(k);
    cpu_ops::register_conv_kernels(k);
    return k;
  }();
  return t;
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(bool reference) : reference_(reference) {}
  std::string name() const override { return reference_ ? "cpu-reference" : "cpu"; }

  // Freed blocks are kept by size and reused: a training step frees and
  // allocates the same sizes every step, and fresh pages cost page faults.
  void* allocate(size_t bytes) override {
    void* p = allocate_uninit(bytes);
    std::memset(p, 0, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    return p;
  }
  void* allocate_uninit(size_t bytes) override {
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = nullptr;
    auto it = pool_.find(rounded);
    if (it != pool_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      p = std::aligned_alloc(64, rounded);
      if (!p) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
    track_alloc(static_cast<int64_t>(bytes));
    return p;
  }
  void release(void* p, size_t bytes) override {
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    pool_[rounded].push_back(p);
    track_free(static_cast<int64_t>(bytes));
  }
  ~CpuBackend() override {
    for (auto& [size, blocks] : pool_)
      for (void* p : blocks) std::free(p);
  }
  bool host_memory() const override { return true; }
  void copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale) override {
    host_copy_box(dst, src, box, add, scale);
  }
  void fill(void* dst, int64_t count, float value) override {
    float* d = static_cast<float*>(dst);
    std::fill(d, d + count, value);
  }
  // An empty buffer may have no block (null): memcpy of null is undefined
  // even for 0 bytes (UBSan caught a 0-byte member of a flat allreduce).
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  bool has_kernel(const std::string& kind) const override { return table().count(kind) > 0; }
  // The fp32 linear reads x and w (forward inputs 0 and 1, also of its
  // backward) with a row stride (fast: oneDNN strides; ref: indexing), and
  // its backward reads dy so (the input after x, w, the bias and y).
  bool reads_row_strided(const OpNode& n, size_t input) const override {
    if (precision() != Precision::F32) return false;
    if (n.kind == "linear" || n.kind == "linear_bias") return input <= 1;
    if (n.kind == "linear_backward") return input <= 1 || input == 3;
    if (n.kind == "linear_bias_backward") return input <= 1 || input == 4;
    return false;
  }
  // It writes y with a row stride, and accumulates into it without a bias
  // (the bias would be added twice to the partial sums); its backward adds
  // dx (output 0 when x's gradient is wanted) to a packed view.
  bool writes_in_place(const OpNode& n, size_t output, bool accumulate) const override {
    if (precision() != Precision::F32 || output != 0) return false;
    if (n.kind == "linear_backward" || n.kind == "linear_bias_backward") {
      auto mask = n.attrs.find("grad_mask");
      const auto* m = mask == n.attrs.end() ? nullptr : std::get_if<std::vector<int64_t>>(&mask->second);
      return accumulate && m && !m->empty() && (*m)[0] != 0;
    }
    return n.kind == "linear" || (n.kind == "linear_bias" && !accumulate);
  }
  void run_node(const sema::Graph&, const OpNode& n, const std::vector<TensorView>& in, const std::vector<TensorView>& out) override {
    auto it = table().find(n.kind);
    if (it == table().end()) throw RuntimeError("the CPU backend has no kernel for '" + n.kind + "' (node " + n.name + ")");
    it->second(Call{{n, in, out}, reference_, step(), precision()});
  }

  double sum_of_squares(const std::vector<TensorView>& grads) override {
    std::vector<const float*> ptrs;
    std::vector<int64_t> sizes;
    for (const TensorView& t : grads) { ptrs.push_back(t.f32()); sizes.push_back(t.numel()); }
    return cpu::ref::sum_of_squares(ptrs.data(), sizes.data(), static_cast<int>(ptrs.size()));
  }
  void scale(const TensorView& t, float alpha) override {
    if (alpha == 0.f) {  // zero-fill (backend.h): an inf left by a skipped fp16 step must not become NaN
      std::memset(t.data, 0, static_cast<size_t>(t.numel()) * sizeof(float));
      return;
    }
    cpu::fast::scale(t.f32(), t.f32(), t.numel(), alpha);
  }
  void axpy(const TensorView& y, const TensorView& x, float alpha) override {
    cpu::fast::axpy(y.f32(), x.f32(), y.numel(), alpha);
  }
  void sgd_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float momentum,
                  float weight_decay) override {
    float* buf = state.buffers.empty() ? nullptr : state.buffers[0].f32();
    if (reference_) cpu::ref::sgd_step(param.f32(), grad.f32(), buf, param.numel(), lr, momentum, weight_decay);
    else cpu::fast::sgd_step(param.f32(), grad.f32(), buf, param.numel(), lr, momentum, weight_decay);
  }
  void adamw_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t step) override {
    if (reference_)
      cpu::ref::adamw_step(param.f32(), grad.f32(), state.buffers[0].f32(), state.buffers[1].f32(), param.numel(), lr, beta1, beta2, eps,
                           weight_decay, step);
    else
      cpu::fast::adamw_step(param.f32(), grad.f32(), state.buffers[0].f32(), state.buffers[1].f32(), param.numel(), lr, beta1, beta2,
                            eps, weight_decay, step);
  }
  void set_threads(int n) override { cpu::set_threads(n); }

 protected:
  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(host, src, bytes);
  }

 private:
  bool reference_;
  std::unordered_map<size_t, std::vector<void*>> pool_;
};

}  // namespace

bool parse_precision(const std::string& text, Precision& out) {
  if (text == "fp32") out = Precision::F32;
  else if (text == "bf16") out = Precision::BF16;
  else if (text == "fp16") out = Precision::F16;
  else return false;
  return true;
}

std::unique_ptr<Backend> make_cpu_backend(bool reference) { return std::make_unique<CpuBackend>(reference); }

}  // namespace nns::backend
