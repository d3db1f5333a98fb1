// for_each(n, stream, body): runs body(i) for every i in [0, n) on the
// device, in any order and concurrently. On the GPU it is one grid-stride
// kernel launch; in the host emulation, a loop (forwards or backwards,
// device.h). Bodies are NNS_KERNEL lambdas capturing by value: pointers,
// sizes, scalars. A body writes only the elements its index owns.
#pragma once

#include "backend/runtime/cuda/device.h"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace nns::backend::NNS_DEV {

#if defined(__CUDACC__)
constexpr int kThreadsPerBlock = 256;

template <class Body>
__global__ void for_each_kernel(int64_t n, Body body) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) body(i);
}

template <class Body>
void for_each(int64_t n, Stream s, Body body) {
  if (n <= 0) return;
  int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > 65535 * 8) blocks = 65535 * 8;  // the grid-stride loop covers the rest
  for_each_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, static_cast<cudaStream_t>(s)>>>(n, body);
  check_launch("for_each");
}
#else
template <class Body>
void for_each(int64_t n, Stream s, Body body) {
  if (emulation_reversed(s)) {
    for (int64_t i = n; i-- > 0;) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}
#endif

}  // namespace nns::backend::NNS_DEV
