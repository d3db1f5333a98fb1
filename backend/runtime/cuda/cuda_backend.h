// The CUDA Backend (issue 11): the same interface as the CPU backend
// (backend/runtime/backend.h), one device per process; and its host
// emulation, the same code with every kernel run as a loop on the host
// (device.h), which is how it is tested without a GPU.
//
// What it runs today: memory through a caching allocator on one compute
// stream, host copies, the matrix products on cuBLASLt (matmul, bmm,
// linear, linear_bias, forward and backward; fp32 inputs with
// CUBLAS_COMPUTE_32F, so no TF32 rounding; the bias as a cuBLASLt
// epilogue), convolution and pooling on cuDNN where it takes the shape
// (dnn.h), and kernels of our own for every other registry row and the
// optimizer arithmetic (sum of squares, scale, axpy, SGD, a fused AdamW).
// A node kind without a kernel is refused by has_kernel() and by
// run_node() with a RuntimeError that names it. No GPU has run this code
// yet: the GPU kit (scripts/gpu_kit.sh) runs the conformance test first
// where one is.
#pragma once

#include <memory>
#include <string>

#include "backend/runtime/backend.h"

namespace nns::backend {

// CUDA devices visible to this process (0 without a driver or device, and
// in a build without CUDA).
int cuda_device_count();

// The CUDA libraries this process loaded, with their versions, e.g.
// "cudart 13000, cuBLASLt 130100, cuDNN 9.19.0 (built against 9.19.0)";
// asks no device. "" in a build without CUDA.
std::string cuda_libraries();

// A backend on `device`, or null with `why_not` set (no device, a driver
// error, a build without CUDA).
std::unique_ptr<Backend> make_cuda_backend(int device, std::string& why_not);

// The CUDA backend's code emulated on the host: kernels' index spaces run
// forwards, or backwards when `reversed` (a kernel whose result depends on
// the order is racy on a GPU). For tests; always built. With
// `attention_model`, sdpa under bf16 storage takes the cuDNN path of the
// kernel wrapper with a host model of the fused kernel in cuDNN's place
// (dnn_none.cpp): the emulation then tests that path's side of the seam.
std::unique_ptr<Backend> make_cuda_emulation_backend(bool reversed, bool attention_model = false);

}  // namespace nns::backend
