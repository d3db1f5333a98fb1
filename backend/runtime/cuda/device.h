// The device seam of the CUDA backend. Everything of backend/runtime/cuda
// except device_api_cuda.cpp and gemm_cublaslt.cpp is written against this
// header and compiled twice:
//   - for the GPU (library nns_cuda, namespace nns::backend::cuda): the
//     kernel files (*.cu) by nvcc, the device API on the CUDA runtime,
//     matrix products on cuBLASLt;
//   - as a host emulation (library nns_cuda_emu, namespace
//     nns::backend::cuda_emu): the same kernel files by the C++ compiler,
//     each kernel's index space run as a loop on the host, memory from
//     malloc, and the column-major product cuBLASLt would compute done by a
//     plain loop.
// The emulation is how the kernels' arithmetic, indexing and the backend's
// dispatch are tested on machines without a GPU (tests/cuda): what it cannot
// show is the launch itself (grids, streams, the CUDA libraries). NNS_DEV
// names the namespace; the build sets it per library.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef NNS_DEV
#error "NNS_DEV (the namespace: cuda or cuda_emu) is set by backend/runtime/cuda/CMakeLists.txt"
#endif

#if defined(__CUDACC__)
#define NNS_HD __host__ __device__
// A kernel body: a lambda over one index of the launch's index space.
#define NNS_KERNEL [=] __device__
#else
#define NNS_HD
#define NNS_KERNEL [=]
#endif

namespace nns::backend::NNS_DEV {

// A stream of device work, opaque here (cudaStream_t on the GPU).
using Stream = void*;

int device_count();  // 0 without a driver or device (the emulation: 1)
void set_device(int device);
Stream create_stream();
void destroy_stream(Stream s);
void synchronize(Stream s);

// Raw device memory (the caching allocator sits on top).
void* device_malloc(size_t bytes);  // null when the device is out of memory
void device_free(void* p);

// Stream-ordered fills and device-to-device copies; host copies return when
// the host buffer may be reused (they synchronise the stream).
void memset_async(void* p, int byte, size_t bytes, Stream s);
void copy_device_async(void* dst, const void* src, size_t bytes, Stream s);
void copy_to_device(void* dst, const void* host, size_t bytes, Stream s);
void copy_to_host(void* host, const void* src, size_t bytes, Stream s);

// After a launch: turns a launch error into a RuntimeError naming `what`.
void check_launch(const char* what);

#if !defined(__CUDACC__)
// Emulation only: whether the stream runs each index space backwards. A
// kernel body must write only what its own index owns; running the indices
// in both orders and comparing bitwise is how tests catch one that reads
// another index's output (on a GPU those run concurrently).
bool emulation_reversed(Stream s);
#endif

}  // namespace nns::backend::NNS_DEV
