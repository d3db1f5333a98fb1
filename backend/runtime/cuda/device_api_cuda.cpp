// device.h on the CUDA runtime (library nns_cuda only).
#include <cuda_runtime.h>

#include <string>

#include "backend/runtime/backend.h"
#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return n;
}

void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

Stream create_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

void destroy_stream(Stream s) { cudaStreamDestroy(stream_of(s)); }
void synchronize(Stream s) { check(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize"); }

void* device_malloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check(e, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  return p;
}

void device_free(void* p) { cudaFree(p); }

void memset_async(void* p, int byte, size_t bytes, Stream s) {
  if (bytes) check(cudaMemsetAsync(p, byte, bytes, stream_of(s)), "cudaMemsetAsync");
}

void copy_device_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(s)), "cudaMemcpyAsync (device)");
}

void copy_to_device(void* dst, const void* host, size_t bytes, Stream s) {
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_of(s)), "cudaMemcpyAsync (to device)");
  synchronize(s);  // the host buffer may be reused as soon as this returns
}

void copy_to_host(void* host, const void* src, size_t bytes, Stream s) {
  if (!bytes) return;
  check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_of(s)), "cudaMemcpyAsync (to host)");
  synchronize(s);
}

void check_launch(const char* what) { check(cudaGetLastError(), (std::string("kernel launch: ") + what).c_str()); }

}  // namespace nns::backend::NNS_DEV
