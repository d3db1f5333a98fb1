#include "backend/runtime/cuda/caching_allocator.h"

#include <string>

#include "backend/runtime/backend.h"

namespace nns::backend::NNS_DEV {

size_t CachingAllocator::rounded(size_t bytes) {
  const size_t small = 512, large = size_t(2) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes < (size_t(1) << 20)) return (bytes + small - 1) / small * small;
  return (bytes + large - 1) / large * large;
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t size = rounded(bytes);
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= size;
    return p;
  }
  void* p = device_malloc(size);
  if (!p && cached_ > 0) {
    // Out of memory with blocks of other sizes cached: give them back, retry.
    empty_cache();
    p = device_malloc(size);
  }
  if (!p)
    throw RuntimeError("out of device memory: " + std::to_string(size) + " bytes requested, " + std::to_string(reserved_) +
                       " reserved");
  reserved_ += size;
  return p;
}

void CachingAllocator::release(void* p, size_t bytes) {
  if (!p) return;
  size_t size = rounded(bytes);
  free_[size].push_back(p);
  cached_ += size;
}

void CachingAllocator::empty_cache() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      device_free(p);
      reserved_ -= size;
    }
    blocks.clear();
  }
  cached_ = 0;
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

}  // namespace nns::backend::NNS_DEV
