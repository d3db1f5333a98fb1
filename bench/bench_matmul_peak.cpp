// Benchmark (not a test): oneDNN's own fp32 matmul throughput on this
// machine — the peak the training step's GFLOP/s is compared against.
//   build/bench/bench_matmul_peak [THREADS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  if (threads > 0) nns::backend::cpu::set_threads(threads);
  std::printf("oneDNN fp32 matmul, %d thread(s)\n", nns::backend::cpu::get_threads());
  for (int64_t n : {256, 512, 1024, 2048}) {
    std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(static_cast<size_t>(n * n), 0.25f), c(static_cast<size_t>(n * n));
    nns::backend::cpu::fast::matmul(a.data(), b.data(), c.data(), 1, 1, n, n, n, false, false, 0.f);  // warm-up, primitive creation
    int reps = n <= 512 ? 50 : (n <= 1024 ? 10 : 3);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) nns::backend::cpu::fast::matmul(a.data(), b.data(), c.data(), 1, 1, n, n, n, false, false, 0.f);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("  %4lld x %4lld x %4lld: %8.2f ms  %7.1f GFLOP/s\n", (long long)n, (long long)n, (long long)n, s * 1e3, 2.0 * n * n * n / s / 1e9);
  }
  return 0;
}
