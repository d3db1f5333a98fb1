// make_cuda_emulation_backend (library nns_cuda_emu), and the GPU entry
// points for a build without CUDA (NNS_HAVE_CUDA unset): no device.
#include "backend/runtime/cuda/cuda_backend.h"
#include "backend/runtime/cuda/device_backend.h"

namespace nns::backend {

namespace cuda_emu {
Stream create_emulated_stream(bool reversed);  // device_api_emu.cpp
}

std::unique_ptr<Backend> make_cuda_emulation_backend(bool reversed, bool attention_model) {
  std::string name = reversed ? "cuda-emulation (reversed)" : "cuda-emulation";
  if (attention_model) name += " (attention model)";
  return cuda_emu::make_device_backend(cuda_emu::create_emulated_stream(reversed), name, false, attention_model);
}

#if !defined(NNS_HAVE_CUDA)
int cuda_device_count() { return 0; }
std::string cuda_libraries() { return ""; }
std::unique_ptr<Backend> make_cuda_backend(int, std::string& why_not) {
  why_not = "this nns was built without CUDA (NNS_CUDA=OFF or no toolkit found)";
  return nullptr;
}
#endif

}  // namespace nns::backend
