// `nns run --device cpu|cuda|cuda-emulation`: which backend the ranks train
// on. The default is cuda where this nns was built with the CUDA backend and
// a GPU is visible, else cpu. cuda-emulation is the CUDA backend's code with
// every kernel run on the host (backend/runtime/cuda/device.h): slow, for
// testing the device path (device memory, host staging of collectives, the
// kernels) end to end where no GPU is.
#pragma once

#include <memory>
#include <string>

#include "backend/runtime/backend.h"

namespace nns::driver {

// How many CUDA devices this process could use, found without initialising
// CUDA here: a child process counts them (a process that initialised CUDA
// cannot hand it to the rank processes it forks). 0 in a build without CUDA.
int visible_cuda_devices();
bool built_with_cuda();
bool built_with_nccl();  // the NCCL collectives (nns_nccl) are linked in

// Whether `device` runs the CUDA backend's code (cuda, or its emulation).
bool cuda_code_device(const std::string& device);

// The --device value of run, resolved: "cpu", "cuda" or "cuda-emulation". False with a
// one-line message (`usage` true: a usage error, exit 64; false: the
// machine cannot do it, exit 70) when the value is neither, or cuda cannot
// run here.
bool resolve_run_device(const std::string& given, std::string& device, std::string& err, bool& usage);

// A rank's backend: the CPU's (reference kernels with `reference`), or the
// CUDA device local_rank % (visible devices), so that the ranks on one host
// share its GPUs round robin.
std::unique_ptr<backend::Backend> make_run_backend(const std::string& device, bool reference, int local_rank);

}  // namespace nns::driver
