// DeviceBuffer: one block of a Backend's memory, owned (released when it
// goes), moved but never copied. The plan executor keeps its buffers,
// kernel-local tensors and optimizer state in them; the pointer is the
// backend's and only the backend reads through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/runtime/backend.h"

namespace nns::backend {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `bytes` of zeroed memory (none for 0 bytes: an empty tensor).
  DeviceBuffer(Backend& be, size_t bytes) : be_(&be), bytes_(bytes) {
    if (bytes_ > 0) p_ = be.allocate(bytes_);
  }
  // `bytes` whose content is undefined: the caller writes all of it first.
  struct Uninit {};
  DeviceBuffer(Backend& be, size_t bytes, Uninit) : be_(&be), bytes_(bytes) {
    if (bytes_ > 0) p_ = be.allocate_uninit(bytes_);
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_;
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() {
    if (p_) be_->release(p_, bytes_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return p_; }
  // Element `i` (4-byte elements). Device addresses are linear (CUDA's are),
  // so this is pointer arithmetic only: nothing here reads through it.
  void* element(int64_t i) const { return static_cast<char*>(p_) + i * 4; }
  size_t bytes() const { return bytes_; }
  int64_t numel() const { return static_cast<int64_t>(bytes_ / 4); }  // 4-byte elements (f32 or i32)
  bool empty() const { return bytes_ == 0; }
  TensorView view(sema::DType dtype, const sema::Shape& shape) const { return TensorView{p_, dtype, shape}; }

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace nns::backend
