// The boundary between a lowered Program and the hardware: memory, kernel
// dispatch per graph node, optimizer updates and (for the parallel runtime)
// collectives. The CPU backend (oneDNN + plain C++) implements it here; a
// CUDA backend (cuBLAS/cuDNN/NCCL) implements the same interface beside it,
// without any change to semantics/.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "semantics/graph.h"

namespace nns::backend {

// A tensor as a kernel sees it: device memory, dtype and shape.
struct TensorView {
  void* data = nullptr;
  sema::DType dtype = sema::DType::F32;
  sema::Shape shape;
  // Elements from one row (the last dimension) to the next, when the
  // tensor is a row-strided view of a larger buffer (a kernel input read
  // in place, or an output written in place: columns of a rank's piece);
  // 0: packed. Only operands a backend says it takes so
  // (Backend::reads_row_strided, Backend::writes_in_place) are strided.
  int64_t row_stride = 0;
  // An output only: the kernel adds its result to what the view holds
  // (a partial sum collected in place) instead of overwriting it.
  bool accumulate = false;
  int64_t numel() const { return sema::numel(shape); }
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
};

// A failure inside the runtime (bad file, kernel precondition): the driver
// reports it and exits 70.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A box of 4-byte elements moved between two row-major buffers (the plan
// executor's pieces): `length` elements per dimension; the source buffer's
// extents are src_dims and the box starts at src_at in it, likewise for the
// destination. Rank 0 is one element. src_bf16: the source holds bf16
// (2-byte) elements, widened exactly into the f32 destination; only a
// backend with bf16_storage() takes it (a kernel's bf16 activation
// collected into an f32 buffer).
struct BoxCopy {
  std::vector<int64_t> length, src_dims, src_at, dst_dims, dst_at;
  bool src_bf16 = false;
};

// The box copy on host memory: dst box (+)= scale * src box; with !add and
// scale == 1 a raw 4-byte copy (i32 bit patterns survive). The CPU
// backend's copy_box, and the host-side assembly of checkpoints and
// --verify's full tensors.
void host_copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale);

struct OptimizerState {
  std::vector<TensorView> buffers;  // SGD: momentum; AdamW: m, v
};

// The compute precision of the matrix products (linear, matmul, bmm): fp32,
// or bf16 / fp16 autocast, the train setting precision = "bf16" / "fp16":
// operands rounded to bfloat16 / IEEE binary16, products accumulated and
// returned in fp32. Weights (the master copy), gradients, optimizer state
// and every other op stay fp32. fp16's narrow range is why its training
// scales the loss (loss_scale.h); the backend only rounds.
enum class Precision { F32, BF16, F16 };
// "fp32" / "bf16" / "fp16"; false for anything else.
bool parse_precision(const std::string& text, Precision& out);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory. allocate() returns zeroed memory; the backend tracks current and
  // peak bytes for the progress line.
  virtual void* allocate(size_t bytes) = 0;
  // Memory whose content is undefined, for a caller that writes all of it
  // before anything reads it (the plan executor's copies and lazily zeroed
  // buffers). By default it is allocate()'s zeroed memory.
  virtual void* allocate_uninit(size_t bytes) { return allocate(bytes); }
  virtual void release(void* p, size_t bytes) = 0;
  // Whether allocate()'s memory is host memory the host may read and write
  // (the CPU backend): the plan executor then hands it to the Communicator
  // as it is, instead of staging it through host copies.
  virtual bool host_memory() const = 0;
  // Transfers between host and backend memory, counted (host_traffic(): the
  // bytes each way since the backend was made, so that `nns run --stats`
  // shows a step that goes back to the host). Every backend counts the
  // same, the CPU backend's memcpy included.
  void copy_from_host(void* dst, const void* host, size_t bytes) {
    traffic_.to_device += static_cast<int64_t>(bytes);
    upload(dst, host, bytes);
  }
  void copy_to_host(void* host, const void* src, size_t bytes) {
    traffic_.to_host += static_cast<int64_t>(bytes);
    download(host, src, bytes);
  }
  struct HostTraffic {
    int64_t to_device = 0, to_host = 0;
  };
  HostTraffic host_traffic() const { return traffic_; }

  // Data movement within backend memory (the plan executor's buffers: a
  // piece sliced, concatenated, chunked, zeroed or copied). Pointers come
  // from allocate(), or point inside such a block; no caller dereferences
  // them. Elements are 4 bytes (f32, or i32 bit patterns).
  // dst box (+)= scale * src box (BoxCopy above); !add with scale == 1 is a
  // raw copy, so i32 data survives it.
  virtual void copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale) = 0;
  // dst[0..count) = value (f32).
  virtual void fill(void* dst, int64_t count, float value) = 0;
  // bytes from src to dst; the ranges do not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;

  // Ordering against work on another stream of the same device (the NCCL
  // collectives of comm/nccl_collectives.h, on a stream of their own): the
  // stream this backend queues all its work on, in order (a cudaStream_t on
  // the CUDA backend), for that code to record events on and make wait for
  // its own. Null where every call's work is done when it returns (the CPU
  // backend, the CUDA emulation): there is nothing to order against then.
  virtual void* native_stream() const { return nullptr; }

  int64_t current_bytes() const { return current_; }
  int64_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = current_; }

  // bf16 activation storage (precision = "bf16"): whether run_node takes
  // views of dtype BF16 over f32 tensors (2-byte storage: inputs widened
  // exactly, f32 results rounded to nearest even into them, the kernels
  // themselves f32) and copy_box a BoxCopy::src_bf16 source. The plan
  // executor and the Trainer store activations in bf16 only where this is
  // true (the CUDA backend); the CPU backend keeps every tensor in f32.
  virtual bool bf16_storage() const { return false; }

  // Whether run_node has a kernel for nodes of this kind ("linear",
  // "linear_backward", "fill"...): lets tests check that every registry row
  // (semantics/op_registry.h) can run, forward and backward.
  virtual bool has_kernel(const std::string& kind) const = 0;
  // Whether run_node reads input `input` of node `n` as a row-strided view
  // (TensorView::row_stride); the plan executor packs any other strided
  // input into a copy first. The CPU backend's fp32 linear does.
  virtual bool reads_row_strided(const sema::OpNode& n, size_t input) const {
    (void)n;
    (void)input;
    return false;
  }
  // Whether run_node writes output `output` of node `n` through a row-strided
  // view of a rank buffer's columns (TensorView::row_stride) and, with
  // `accumulate`, adds to it (TensorView::accumulate); a forward n's backward
  // then never reads that output (the executor leaves the output's block
  // unwritten). Others get a block and a copy. The CPU backend's fp32 linear
  // does (adding only without a bias), and its backward's dx (added, packed).
  virtual bool writes_in_place(const sema::OpNode& n, size_t output, bool accumulate) const {
    (void)n;
    (void)output;
    (void)accumulate;
    return false;
  }
  // Runs one node of the training graph (forward, backward, fill, add_n).
  virtual void run_node(const sema::Graph& g, const sema::OpNode& n, const std::vector<TensorView>& in,
                        const std::vector<TensorView>& out) = 0;

  // Optimizer arithmetic on device buffers.
  virtual double sum_of_squares(const std::vector<TensorView>& grads) = 0;
  // t *= alpha; alpha 0 zero-fills t, so that an inf or NaN in it (the
  // gradients of a skipped fp16 step) does not survive as 0 * inf = NaN.
  virtual void scale(const TensorView& t, float alpha) = 0;
  virtual void axpy(const TensorView& y, const TensorView& x, float alpha) = 0;  // y += alpha x
  virtual void sgd_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr,
                          float momentum, float weight_decay) = 0;
  virtual void adamw_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int64_t step) = 0;

  // Random streams (dropout) depend on the step, never on thread or rank layout.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  virtual void set_threads(int n) = 0;
  void set_precision(Precision p) { precision_ = p; }
  Precision precision() const { return precision_; }

 protected:
  // What copy_from_host / copy_to_host do, after counting.
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  void track_alloc(int64_t bytes) {
    current_ += bytes;
    if (current_ > peak_) peak_ = current_;
  }
  void track_free(int64_t bytes) { current_ -= bytes; }

 private:
  int64_t current_ = 0, peak_ = 0, step_ = 0;
  HostTraffic traffic_;
  Precision precision_ = Precision::F32;
};

// reference = true runs the plain reference kernels (the conformance oracle).
std::unique_ptr<Backend> make_cpu_backend(bool reference = false);

}  // namespace nns::backend
