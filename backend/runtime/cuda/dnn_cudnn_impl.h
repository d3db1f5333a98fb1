// Dnn::Impl on cuDNN (dnn_cudnn.cpp: convolution and pooling;
// dnn_sdpa.cpp: fused attention): the handle and the per-shape caches.
#pragma once

#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/runtime/cuda/dnn.h"

namespace nns::backend::NNS_DEV {

using ShapeKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

// A measured algorithm, or none (cuDNN has no deterministic FMA algorithm
// for the shape within the workspace limit: the own kernel runs).
struct Choice {
  bool usable = false;
  int algo = 0;
  size_t workspace = 0;
};

// A built attention graph and its plan, or why cuDNN would not build one
// (dnn_sdpa.cpp).
struct SdpaGraph;

struct Dnn::Impl {
  cudnnHandle_t handle = nullptr;
  std::string off_reason;  // why the handle is null
  std::map<ShapeKey, Choice> chosen;
  std::mutex mutex;  // the caches; one backend's calls come from one thread, but be safe
  // Fused attention graphs per shape and direction (dnn_sdpa.cpp), and the
  // reason of the last attention call that declined.
  std::map<ShapeKey, std::shared_ptr<SdpaGraph>> attention;
  std::string attention_declined;

  // The cached choice for `key`, measured by `measure` the first time.
  template <class Measure>
  Choice choice(const ShapeKey& key, Measure measure) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = chosen.find(key);
      if (it != chosen.end()) return it->second;
    }
    Choice c = measure();
    std::lock_guard<std::mutex> lock(mutex);
    chosen[key] = c;
    return c;
  }
};

}  // namespace nns::backend::NNS_DEV
