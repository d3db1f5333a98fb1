// nns_cuda_tests: the conformance tables on the GPU. Without a visible CUDA
// device it prints why and exits 77, which ctest reports as skipped (never
// passed). Run it with scripts/gpu_check.sh where a GPU is.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "backend/runtime/cuda/cuda_backend.h"
#include "node_conformance.h"
#include "pending_kernels.h"

namespace nns::backend::test {

namespace {
Backend& gpu() {
  static std::unique_ptr<Backend> b = [] {
    std::string why;
    std::unique_ptr<Backend> made = make_cuda_backend(0, why);
    if (!made) FAIL("no CUDA backend: " << why);
    return made;
  }();
  return *b;
}
}  // namespace

std::vector<Backend*> tested_backends() { return {&gpu()}; }

bool kernel_pending(const Backend&, const std::string& kind) { return cuda_kind_pending(kind); }

Backend* order_twin(const Backend&) { return nullptr; }

}  // namespace nns::backend::test

int main(int argc, char** argv) {
  if (nns::backend::cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; the CUDA conformance table needs a GPU\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
