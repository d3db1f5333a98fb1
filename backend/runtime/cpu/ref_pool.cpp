// Reference 2-d pooling: the textbook loops over every output element and
// its window, written for clarity; the fast kernels (fast_pool.cpp) are
// checked against these.
#include <cstddef>
#include <limits>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::ref {

namespace {

// Calls f(input index, output index) for every real (unpadded) input
// element of every output's window, windows scanned in row-major order.
template <class F>
void for_each_window(const Pool2dDims& d, F f) {
  int64_t oh = d.out_h(), ow = d.out_w();
  for (int64_t p = 0; p < d.n * d.c; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t out = (p * oh + i) * ow + j;
        for (int64_t u = 0; u < d.k; ++u)
          for (int64_t v = 0; v < d.k; ++v) {
            int64_t r = i * d.stride - d.pad + u, s = j * d.stride - d.pad + v;
            if (r < 0 || r >= d.h || s < 0 || s >= d.w) continue;
            f((p * d.h + r) * d.w + s, out);
          }
      }
}

int64_t out_numel(const Pool2dDims& d) { return d.n * d.c * d.out_h() * d.out_w(); }

}  // namespace

void max_pool2d(const float* x, float* y, const Pool2dDims& d) {
  for (int64_t o = 0; o < out_numel(d); ++o) y[o] = -std::numeric_limits<float>::infinity();
  for_each_window(d, [&](int64_t in, int64_t out) {
    if (x[in] > y[out] || x[in] != x[in]) y[out] = x[in];  // NaN propagates
  });
}

void max_pool2d_backward(const float* x, const float* dy, float* dx, const Pool2dDims& d) {
  for (int64_t i = 0; i < d.n * d.c * d.h * d.w; ++i) dx[i] = 0.f;
  // The first maximum of each window: the window is scanned again and the
  // first element reaching the window's max takes the gradient.
  std::vector<float> best(static_cast<size_t>(out_numel(d)), -std::numeric_limits<float>::infinity());
  std::vector<int64_t> arg(best.size(), -1);
  for_each_window(d, [&](int64_t in, int64_t out) {
    if (arg[out] < 0 || x[in] > best[out]) {
      best[out] = x[in];
      arg[out] = in;
    }
  });
  for (std::size_t o = 0; o < arg.size(); ++o)
    if (arg[o] >= 0) dx[arg[o]] += dy[o];
}

void avg_pool2d(const float* x, float* y, const Pool2dDims& d) {
  for (int64_t o = 0; o < out_numel(d); ++o) y[o] = 0.f;
  for_each_window(d, [&](int64_t in, int64_t out) { y[out] += x[in]; });
  float inv = 1.f / static_cast<float>(d.k * d.k);
  for (int64_t o = 0; o < out_numel(d); ++o) y[o] *= inv;
}

void avg_pool2d_backward(const float* dy, float* dx, const Pool2dDims& d) {
  for (int64_t i = 0; i < d.n * d.c * d.h * d.w; ++i) dx[i] = 0.f;
  float inv = 1.f / static_cast<float>(d.k * d.k);
  for_each_window(d, [&](int64_t in, int64_t out) { dx[in] += dy[out] * inv; });
}

}  // namespace nns::backend::cpu::ref
