// CUDA and cuBLASLt status checks: a failing call becomes a RuntimeError
// naming the call and the library's message (the driver exits 70).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/runtime/backend.h"

namespace nns::backend::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string("cuBLASLt: ") + what + ": status " + std::to_string(static_cast<int>(s)));
}

}  // namespace nns::backend::cuda
