// nns_cuda_emu_tests: the conformance tables on the CUDA backend's host
// emulation (backend/runtime/cuda/device.h), run with every kernel's index
// space forwards and reversed; the two must agree bitwise (a kernel whose
// result depends on the order would race on a GPU).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "backend/runtime/cuda/cuda_backend.h"
#include "cudnn_twin.h"
#include "node_conformance.h"
#include "pending_kernels.h"

namespace nns::backend::test {

namespace {
Backend& forwards() {
  static std::unique_ptr<Backend> b = make_cuda_emulation_backend(false);
  return *b;
}
Backend& reversed() {
  static std::unique_ptr<Backend> b = make_cuda_emulation_backend(true);
  return *b;
}
// sdpa's cuDNN path with a host model of the fused kernel in cuDNN's place
// (the attention cases only: it is not bitwise the own kernels).
Backend& attention_model() {
  static std::unique_ptr<Backend> b = make_cuda_emulation_backend(false, true);
  return *b;
}
}  // namespace

std::vector<Backend*> tested_backends() { return {&forwards(), &reversed()}; }

bool kernel_pending(const Backend&, const std::string& kind) { return cuda_kind_pending(kind); }

Backend* order_twin(const Backend& b) { return &b == &reversed() ? &forwards() : nullptr; }

Backend* cudnn_off_twin(const Backend& b) { return &b == &attention_model() ? &forwards() : nullptr; }

std::vector<Backend*> attention_backends() { return {&forwards(), &reversed(), &attention_model()}; }

}  // namespace nns::backend::test
