// A stream-ordered caching allocator for one device: blocks are rounded to
// 512 bytes (below 1 MiB) or 2 MiB, and a released block goes back to a
// free list of its size for the next allocation of that size. Every use is
// ordered on the backend's single compute stream, so a block released there
// may be reused by the next kernel on the same stream without waiting: the
// stream serialises the old reader before the new writer. device_malloc (cudaMalloc,
// which synchronises the device) is paid once per size; empty_cache() returns
// the cached blocks to the driver.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

class CachingAllocator {
 public:
  CachingAllocator() = default;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator();

  // The rounded size a request of `bytes` takes.
  static size_t rounded(size_t bytes);
  void* allocate(size_t bytes);
  void release(void* p, size_t bytes);
  void empty_cache();
  size_t cached_bytes() const { return cached_; }
  size_t reserved_bytes() const { return reserved_; }  // in blocks, used or cached

 private:
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0, reserved_ = 0;
};

}  // namespace nns::backend::NNS_DEV
