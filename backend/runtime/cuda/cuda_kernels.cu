#include "backend/runtime/cuda/cuda_kernels.h"

#include <cmath>

namespace nns::backend::cuda::kernels {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

// Grid-stride loops: any n with a bounded grid.
__global__ void fill_kernel(float* y, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) y[i] = value;
}

// One thread per element of the box: its index split into coordinates
// (innermost first) gives both offsets.
__global__ void copy_box_kernel(void* dst, const void* src, BoxDims box, int64_t count, bool add, float scale) {
  const bool raw = !add && scale == 1.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t rest = i, so = box.src_offset, doff = box.dst_offset;
    for (int k = box.rank - 1; k >= 0; --k) {
      int64_t j = rest % box.length[k];
      rest /= box.length[k];
      so += j * box.src_stride[k];
      doff += j * box.dst_stride[k];
    }
    if (raw) {
      static_cast<uint32_t*>(dst)[doff] = static_cast<const uint32_t*>(src)[so];
    } else {
      float v = __fmul_rn(scale, static_cast<const float*>(src)[so]);
      float* d = static_cast<float*>(dst) + doff;
      *d = add ? __fadd_rn(*d, v) : v;
    }
  }
}

__global__ void add_into_kernel(float* y, const float* x, int64_t n, bool first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    y[i] = first ? x[i] : y[i] + x[i];
}

__global__ void scale_kernel(float* y, const float* x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    y[i] = alpha * x[i];
}

__global__ void axpy_kernel(float* y, const float* x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    y[i] += alpha * x[i];
}

__global__ void column_sums_kernel(const float* dy, float* dbias, int64_t rows, int64_t cols) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(blockDim.x) * gridDim.x) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r) acc += double(dy[r * cols + c]);
    dbias[c] = float(acc);
  }
}

__global__ void sum_of_squares_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double shared[kThreads];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    acc += double(x[i]) * x[i];
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void sgd_kernel(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
                           float weight_decay) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    double g = double(grad[i]) + double(weight_decay) * param[i];
    if (momentum_buf) {
      double buf = double(momentum) * momentum_buf[i] + g;
      momentum_buf[i] = float(buf);
      g = buf;
    }
    param[i] = float(param[i] - double(lr) * g);
  }
}

// One pass over every element: the fused AdamW update (decoupled weight
// decay, bias-corrected moments), as cpu::ref::adamw_step computes it.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, double bc1, double bc2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    double g = grad[i];
    double p = double(param[i]) * (1 - double(lr) * weight_decay);
    double mi = double(beta1) * m[i] + (1 - double(beta1)) * g;
    double vi = double(beta2) * v[i] + (1 - double(beta2)) * g * g;
    m[i] = float(mi);
    v[i] = float(vi);
    param[i] = float(p - double(lr) * (mi / bc1) / (sqrt(vi / bc2) + eps));
  }
}

}  // namespace

void fill(float* y, int64_t n, float value, cudaStream_t stream) {
  if (n > 0) fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, n, value);
}

void copy_box(void* dst, const void* src, const BoxDims& box, int64_t count, bool add, float scale, cudaStream_t stream) {
  if (count > 0) copy_box_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, src, box, count, add, scale);
}

void add_n(float* y, const float* const* xs, int count, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  for (int k = 0; k < count; ++k) add_into_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, xs[k], n, k == 0);
}

void scale(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream) {
  if (n > 0) scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n, alpha);
}

void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream) {
  if (n > 0) axpy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n, alpha);
}

void column_sums(const float* dy, float* dbias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols > 0) column_sums_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(dy, dbias, rows, cols);
}

int sum_of_squares_blocks(int64_t n) { return blocks_for(n) < 1024 ? blocks_for(n) : 1024; }

void sum_of_squares(const float* x, int64_t n, double* partial, cudaStream_t stream) {
  sum_of_squares_kernel<<<sum_of_squares_blocks(n), kThreads, 0, stream>>>(x, n, partial);
}

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
              float weight_decay, cudaStream_t stream) {
  if (n > 0) sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, momentum_buf, n, lr, momentum, weight_decay);
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int64_t step, cudaStream_t stream) {
  if (n <= 0) return;
  double bc1 = 1 - std::pow(double(beta1), double(step));
  double bc2 = 1 - std::pow(double(beta2), double(step));
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

}  // namespace nns::backend::cuda::kernels
