// nns_cuda_tests: the conformance tables on the GPU. Without a visible CUDA
// device it prints why and exits 77, which ctest reports as skipped (never
// passed). Every table runs twice on the GPU: as nns runs it (cuDNN's
// convolutions and pooling where it takes the shape) and with cuDNN off
// (NNS_CUDNN=0: the own kernels). The GPU kit (scripts/gpu_kit.sh) runs it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/runtime/cuda/cuda_backend.h"
#include "cudnn_twin.h"
#include "node_conformance.h"
#include "pending_kernels.h"

namespace nns::backend::test {

namespace {
std::unique_ptr<Backend> make_gpu(bool cudnn) {
  // The Dnn of a backend reads NNS_CUDNN once, when the backend is made.
  const char* saved = std::getenv("NNS_CUDNN");
  std::string keep = saved ? saved : "";
  setenv("NNS_CUDNN", cudnn ? "1" : "0", 1);
  std::string why;
  std::unique_ptr<Backend> made = make_cuda_backend(0, why);
  if (saved)
    setenv("NNS_CUDNN", keep.c_str(), 1);
  else
    unsetenv("NNS_CUDNN");
  if (!made) FAIL("no CUDA backend: " << why);
  return made;
}
// The backend as nns runs it (cuDNN where it takes the shape)...
Backend& gpu() {
  static std::unique_ptr<Backend> b = make_gpu(true);
  return *b;
}
// ...and with cuDNN off: the own kernels cuDNN replaces are checked
// against the same reference, on the same device.
Backend& gpu_own_kernels() {
  static std::unique_ptr<Backend> b = make_gpu(false);
  return *b;
}
}  // namespace

std::vector<Backend*> tested_backends() { return {&gpu(), &gpu_own_kernels()}; }

bool kernel_pending(const Backend&, const std::string& kind) { return cuda_kind_pending(kind); }

Backend* order_twin(const Backend&) { return nullptr; }

Backend* cudnn_off_twin(const Backend& b) { return &b == &gpu() ? &gpu_own_kernels() : nullptr; }

std::vector<Backend*> attention_backends() { return tested_backends(); }

}  // namespace nns::backend::test

int main(int argc, char** argv) {
  if (nns::backend::cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; the CUDA conformance table needs a GPU\n");
    return 77;
  }
  std::printf("CUDA libraries: %s\n", nns::backend::cuda_libraries().c_str());
  return Catch::Session().run(argc, argv);
}
