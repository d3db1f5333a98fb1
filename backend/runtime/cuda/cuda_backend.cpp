// make_cuda_backend on the GPU build (library nns_cuda).
#include "backend/runtime/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include "backend/runtime/cuda/cublaslt_loader.h"
#include "backend/runtime/cuda/device_backend.h"
#include "backend/runtime/cuda/dnn.h"

namespace nns::backend {

int cuda_device_count() { return cuda::device_count(); }

std::string cuda_libraries() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string why;
  const cuda::CublasLt* lt = cuda::cublaslt(why);  // opens it: `nns --version` says whether it can be
  return "cudart " + std::to_string(runtime) + ", cuBLASLt " +
         (lt ? std::to_string(lt->get_version()) : "not loadable: " + why) + ", " + cuda::dnn_library_version();
}

std::unique_ptr<Backend> make_cuda_backend(int device, std::string& why_not) {
  int n = cuda_device_count();
  if (n == 0) {
    why_not = "no CUDA device is visible";
    return nullptr;
  }
  if (device < 0 || device >= n) {
    why_not = "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " visible)";
    return nullptr;
  }
  try {
    cuda::set_device(device);
    return cuda::make_device_backend(cuda::create_stream(), "cuda:" + std::to_string(device), /*native_stream=*/true);
  } catch (const RuntimeError& e) {
    why_not = e.what();
    return nullptr;
  }
}

}  // namespace nns::backend
