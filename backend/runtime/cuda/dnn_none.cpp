// Dnn without cuDNN: the host emulation, and a GPU build where CMake found
// no cuDNN. Every call declines, so the kernel wrappers run our own
// kernels (dnn.h).
#include "backend/runtime/cuda/dnn.h"

namespace nns::backend::NNS_DEV {

struct Dnn::Impl {};

Dnn::Dnn(Stream) {}
Dnn::~Dnn() = default;

bool Dnn::conv_forward(const ConvGeometry&, const float*, const float*, const float*, float*, Scratch&) {
  return false;
}
bool Dnn::conv_backward_data(const ConvGeometry&, const float*, const float*, float*, Scratch&) { return false; }
bool Dnn::conv_backward_filter(const ConvGeometry&, const float*, const float*, float*, Scratch&) { return false; }
bool Dnn::pool_forward(const PoolGeometry&, bool, const float*, float*) { return false; }
bool Dnn::pool_backward(const PoolGeometry&, bool, const float*, const float*, float*, Scratch&) { return false; }

bool Dnn::sdpa_forward(const CudnnSdpaPlan&, float, const uint16_t*, const uint16_t*, const uint16_t*, uint16_t*,
                       float*, Scratch&) {
  return false;
}
bool Dnn::sdpa_backward(const CudnnSdpaPlan&, float, const uint16_t*, const uint16_t*, const uint16_t*, const uint16_t*,
                        const uint16_t*, const float*, uint16_t*, uint16_t*, uint16_t*, Scratch&) {
  return false;
}
std::string Dnn::attention_declined() const { return describe(); }
size_t Dnn::cached_attention_graphs() const { return 0; }

std::string dnn_library_version() {
#if defined(NNS_DNN_EMULATION)
  return "no cuDNN (emulation)";
#else
  return "no cuDNN (not found at configure time)";
#endif
}

std::string Dnn::describe() const {
#if defined(NNS_DNN_EMULATION)
  return "no cuDNN in the emulation: own kernels";
#else
  return "built without cuDNN: own kernels";
#endif
}
size_t Dnn::cached_algorithms() const { return 0; }
bool Dnn::active() const { return false; }

}  // namespace nns::backend::NNS_DEV
