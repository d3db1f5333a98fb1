// Pooling kernels, oneDNN (cpu::fast) against the reference loops
// (cpu::ref), on ResNet-50's stem pooling (kernel 3, stride 2, padding 1)
// over x [N, 64, 112, 112]. The max backward of the fast kernels includes
// re-running the forward for oneDNN's workspace (fast_pool.cpp says why).
//   OMP_NUM_THREADS=1 build/bench/bench_pool [N]   (default N = 8)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

using namespace nns::backend::cpu;

namespace {
// Mean milliseconds of 5 calls after one warm-up call.
template <class F>
double ms(F f) {
  f();
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count() / 5;
}
}  // namespace

int main(int argc, char** argv) {
  Pool2dDims d;
  d.n = argc > 1 ? std::atoll(argv[1]) : 8;
  d.c = 64, d.h = 112, d.w = 112, d.k = 3, d.stride = 2, d.pad = 1;
  size_t nx = size_t(d.n * d.c * d.h * d.w), ny = size_t(d.n * d.c * d.out_h() * d.out_w());
  std::vector<float> x(nx), y(ny), dy(ny), dx(nx);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(gen);
  for (float& v : dy) v = u(gen);
  std::printf("x [%lld, 64, 112, 112], kernel 3, stride 2, padding 1: ms per call (oneDNN / reference)\n", static_cast<long long>(d.n));
  std::printf("max_pool2d forward   %7.2f / %7.2f\n", ms([&] { fast::max_pool2d(x.data(), y.data(), d); }),
              ms([&] { ref::max_pool2d(x.data(), y.data(), d); }));
  std::printf("max_pool2d backward  %7.2f / %7.2f\n", ms([&] { fast::max_pool2d_backward(x.data(), dy.data(), dx.data(), d); }),
              ms([&] { ref::max_pool2d_backward(x.data(), dy.data(), dx.data(), d); }));
  std::printf("avg_pool2d forward   %7.2f / %7.2f\n", ms([&] { fast::avg_pool2d(x.data(), y.data(), d); }),
              ms([&] { ref::avg_pool2d(x.data(), y.data(), d); }));
  std::printf("avg_pool2d backward  %7.2f / %7.2f\n", ms([&] { fast::avg_pool2d_backward(dy.data(), dx.data(), d); }),
              ms([&] { ref::avg_pool2d_backward(dy.data(), dx.data(), d); }));
}
