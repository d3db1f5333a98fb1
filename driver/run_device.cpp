#include "driver/run_device.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "backend/runtime/cuda/cuda_backend.h"

namespace nns::driver {

bool built_with_cuda() {
#if NNS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#if NNS_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int visible_cuda_devices() {
#if NNS_HAVE_CUDA
  pid_t pid = fork();
  if (pid < 0) throw backend::RuntimeError("fork failed while counting CUDA devices");
  if (pid == 0) _exit(std::min(backend::cuda_device_count(), 255));
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;  // a probe that crashed found no usable device
  return WEXITSTATUS(status);
#else
  return 0;
#endif
}

bool cuda_code_device(const std::string& device) { return device == "cuda" || device == "cuda-emulation"; }

bool resolve_run_device(const std::string& given, std::string& device, std::string& err, bool& usage) {
  usage = false;
  if (given.empty()) {
    device = visible_cuda_devices() > 0 ? "cuda" : "cpu";
    return true;
  }
  if (given != "cpu" && given != "cuda" && given != "cuda-emulation") {
    usage = true;
    err = "--device for run is cpu, cuda or cuda-emulation (got '" + given + "')";
    return false;
  }
  if (given == "cuda" && !built_with_cuda()) {
    err = "--device cuda: this nns was built without CUDA (the toolkit was not found at configure time; NNS_CUDA)";
    return false;
  }
  if (given == "cuda" && visible_cuda_devices() == 0) {
    err = "--device cuda: no CUDA device is visible";
    return false;
  }
  device = given;
  return true;
}

std::unique_ptr<backend::Backend> make_run_backend(const std::string& device, bool reference, int local_rank) {
  if (device == "cuda-emulation") return backend::make_cuda_emulation_backend(false);
  if (device != "cuda") return backend::make_cpu_backend(reference);
#if NNS_HAVE_CUDA
  int n = backend::cuda_device_count();
  if (n == 0) throw backend::RuntimeError("--device cuda: no CUDA device is visible");
  std::string why;
  std::unique_ptr<backend::Backend> be = backend::make_cuda_backend(local_rank % n, why);
  if (!be) throw backend::RuntimeError("--device cuda: " + why);
  return be;
#else
  (void)reference;
  (void)local_rank;
  throw backend::RuntimeError("--device cuda: this nns was built without CUDA");
#endif
}

}  // namespace nns::driver
