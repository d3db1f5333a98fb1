// The CUDA Backend (issue 11): the same interface as the CPU backend
// (backend/runtime/backend.h), one device per process.
//
// What it runs today: memory through a caching allocator on one compute
// stream, host copies, the matrix products on cuBLASLt (matmul, bmm,
// linear, linear_bias, forward and backward; fp32 inputs with
// CUBLAS_COMPUTE_32F, so no TF32 rounding; the bias as a cuBLASLt
// epilogue), fill and add_n, and the optimizer arithmetic (sum of squares,
// scale, axpy, SGD, a fused AdamW) as kernels of our own. Every other node
// kind is refused by has_kernel() and by run_node() with a RuntimeError
// that names it: the registry's elementwise, normalisation, attention
// (cuDNN), embedding and loss kernels are not written yet, nor bf16 inputs,
// NCCL or the driver's --device cuda. No GPU has run this code yet: the
// conformance test (tests/cuda) is the first thing to run where one is.
#pragma once

#include <memory>
#include <string>

#include "backend/runtime/backend.h"

namespace nns::backend {

// CUDA devices visible to this process (0 without a driver or device).
int cuda_device_count();

// A backend on `device`, or null with `why_not` set (no device, a driver
// error).
std::unique_ptr<Backend> make_cuda_backend(int device, std::string& why_not);

}  // namespace nns::backend
