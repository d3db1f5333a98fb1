#include "backend/runtime/cuda/device_backend.h"

#include <algorithm>
#include <vector>

#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"

namespace nns::backend::NNS_DEV {

namespace {

const KernelTable& table() {
  static const KernelTable t = [] {
    KernelTable k;
    register_core_kernels(k);
    register_elementwise_kernels(k);
    register_reduce_kernels(k);
    register_layout_kernels(k);
    register_nn_kernels(k);
    register_conv_kernels(k);
    register_attention_kernels(k);
    register_index_kernels(k);
    return k;
  }();
  return t;
}

class DeviceBackend : public Backend {
 public:
  DeviceBackend(Stream stream, std::string name, bool native, bool attention_model)
      : stream_(stream),
        name_(std::move(name)),
        native_(native),
        gemm_(std::make_unique<Gemm>(stream)),
        dnn_(std::make_unique<Dnn>(stream, attention_model)) {}
  ~DeviceBackend() override {
    synchronize(stream_);
    gemm_.reset();
    dnn_.reset();
    alloc_.empty_cache();
    destroy_stream(stream_);
  }
  // A GPU backend without cuDNN says so: the conformance test runs one of
  // each, and a run with NNS_CUDNN=0 shows it in its messages.
  std::string name() const override { return native_ && !dnn_->active() ? name_ + " (no cuDNN)" : name_; }

  void* allocate(size_t bytes) override {
    void* p = alloc_.allocate(bytes);
    memset_async(p, 0, bytes, stream_);  // the interface promises zeroed memory
    track_alloc(static_cast<int64_t>(bytes));
    return p;
  }
  // For buffers their first writer covers whole (node outputs: every kernel
  // writes all of its outputs, tests/backend/node_conformance.h).
  void* allocate_uninit(size_t bytes) override {
    void* p = alloc_.allocate(bytes);
    track_alloc(static_cast<int64_t>(bytes));
    return p;
  }
  void release(void* p, size_t bytes) override {
    alloc_.release(p, bytes);
    track_free(static_cast<int64_t>(bytes));
  }
  bool host_memory() const override { return false; }
  void* native_stream() const override { return native_ ? stream_ : nullptr; }
  void copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale) override {
    const size_t rank = box.length.size();
    if (rank > static_cast<size_t>(kernels::kMaxBoxRank))
      throw RuntimeError("the CUDA backend copies boxes of at most " + std::to_string(kernels::kMaxBoxRank) + " dimensions");
    kernels::BoxDims dims;
    dims.rank = static_cast<int>(rank);
    int64_t count = 1, sstride = 1, dstride = 1;
    for (size_t k = rank; k-- > 0;) {
      dims.length[k] = box.length[k];
      dims.src_stride[k] = sstride;
      dims.dst_stride[k] = dstride;
      dims.src_offset += box.src_at[k] * sstride;
      dims.dst_offset += box.dst_at[k] * dstride;
      sstride *= box.src_dims[k];
      dstride *= box.dst_dims[k];
      count *= box.length[k];
    }
    dims.src_bf16 = box.src_bf16;
    kernels::copy_box(dst, src, dims, count, add, scale, stream_);
  }
  void fill(void* dst, int64_t count, float value) override { kernels::fill(static_cast<float*>(dst), count, value, stream_); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) copy_device_async(dst, src, bytes, stream_);
  }

  bool bf16_storage() const override { return true; }
  bool has_kernel(const std::string& kind) const override { return table().count(kind) > 0; }
  void run_node(const sema::Graph&, const sema::OpNode& n, const std::vector<TensorView>& in,
                const std::vector<TensorView>& out) override {
    auto it = table().find(n.kind);
    if (it == table().end()) throw RuntimeError("the CUDA backend has no kernel for '" + n.kind + "' yet (node " + n.name + ")");
    const ProductInput products = precision() == Precision::BF16  ? ProductInput::BF16
                                  : precision() == Precision::F16 ? ProductInput::F16
                                                                  : ProductInput::F32;
    Scratch scratch(alloc_);
    auto is_bf16 = [](const TensorView& v) { return v.dtype == sema::DType::BF16; };
    if (std::none_of(in.begin(), in.end(), is_bf16) && std::none_of(out.begin(), out.end(), is_bf16)) {
      it->second(Call{{n, in, out}, *gemm_, *dnn_, stream_, scratch, products, step()});
      return check_launch(n.kind.c_str());
    }
    // bf16 storage (Backend::bf16_storage): the kernels stay f32. A bf16
    // input is widened into f32 scratch (exact); an f32 result meant for a
    // bf16 tensor is computed into scratch and rounded to nearest even into
    // it, the rounding of the products' bf16 operands (cpu/half_bits.h).
    std::vector<TensorView> in32 = in, out32 = out;
    for (TensorView& v : in32)
      if (is_bf16(v)) {
        float* wide = scratch.get<float>(v.numel());
        kernels::from_bf16(static_cast<const uint16_t*>(v.data), wide, v.numel(), stream_);
        v = TensorView{wide, sema::DType::F32, v.shape};
      }
    for (TensorView& v : out32)
      if (is_bf16(v)) v = TensorView{scratch.get<float>(v.numel()), sema::DType::F32, v.shape};
    it->second(Call{{n, in32, out32}, *gemm_, *dnn_, stream_, scratch, products, step(), &in});
    check_launch(n.kind.c_str());
    for (size_t i = 0; i < out.size(); ++i)
      if (is_bf16(out[i]))
        kernels::to_bf16(out32[i].f32(), static_cast<uint16_t*>(out[i].data), out[i].numel(), stream_);
  }

  double sum_of_squares(const std::vector<TensorView>& grads) override {
    // Every tensor's partial sums into one buffer, read back once: one host
    // round trip per call, not one per gradient. The lane scratch is reused
    // by each tensor in turn (the stream orders them).
    int64_t parts = 0, lanes = 0;
    for (const TensorView& t : grads)
      if (t.numel() > 0) {
        parts += kernels::sum_of_squares_partials(t.numel());
        lanes = std::max(lanes, kernels::sum_of_squares_lanes(t.numel()));
      }
    if (parts == 0) return 0;
    Scratch scratch(alloc_);
    double* lane_sums = scratch.get<double>(lanes);
    double* partials = scratch.get<double>(parts);
    int64_t at = 0;
    for (const TensorView& t : grads)
      if (t.numel() > 0) {
        kernels::sum_of_squares(t.f32(), t.numel(), lane_sums, partials + at, stream_);
        at += kernels::sum_of_squares_partials(t.numel());
      }
    std::vector<double> host(static_cast<size_t>(parts));
    // Through Backend::copy_to_host, counted: the gradient norm's partials are a host round trip.
    copy_to_host(host.data(), partials, sizeof(double) * host.size());
    double total = 0;
    for (double p : host) total += p;  // in order: the same sum every run
    return total;
  }
  void scale(const TensorView& t, float alpha) override {
    if (alpha == 0.f) {  // zero-fill, as backend.h promises (an inf must not become 0 * inf = NaN)
      NNS_DEV::memset_async(t.data, 0, static_cast<size_t>(t.numel()) * sizeof(float), stream_);
      return;
    }
    kernels::scale(t.f32(), t.f32(), t.numel(), alpha, stream_);
  }
  void axpy(const TensorView& y, const TensorView& x, float alpha) override {
    kernels::axpy(y.f32(), x.f32(), y.numel(), alpha, stream_);
  }
  void sgd_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float momentum,
                  float weight_decay) override {
    float* buf = state.buffers.empty() ? nullptr : state.buffers[0].f32();
    kernels::sgd_step(param.f32(), grad.f32(), buf, param.numel(), lr, momentum, weight_decay, stream_);
  }
  void adamw_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step) override {
    kernels::adamw_step(param.f32(), grad.f32(), state.buffers[0].f32(), state.buffers[1].f32(), param.numel(), lr, beta1,
                        beta2, eps, weight_decay, step, stream_);
  }
  void set_threads(int) override {}  // host threads do not matter to the device

 protected:
  void upload(void* dst, const void* host, size_t bytes) override { copy_to_device(dst, host, bytes, stream_); }
  void download(void* host, const void* src, size_t bytes) override { NNS_DEV::copy_to_host(host, src, bytes, stream_); }

 private:
  Stream stream_;
  std::string name_;
  bool native_;  // stream_ is a real cudaStream_t (not the emulation's)
  CachingAllocator alloc_;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<Dnn> dnn_;
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(Stream stream, std::string name, bool native_stream,
                                             bool attention_model) {
  return std::make_unique<DeviceBackend>(stream, std::move(name), native_stream, attention_model);
}

}  // namespace nns::backend::NNS_DEV
