// Benchmark (not a test): oneDNN's own matmul throughput on this machine —
// the peak the training step's GFLOP/s is compared against — in fp32 and
// under bf16 autocast (operands rounded to bf16 copies, then oneDNN's bf16
// matmul with fp32 accumulation: the conversion is included), with the
// ratio measured in the same run.
//   build/bench/bench_matmul_peak [THREADS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  if (threads > 0) nns::backend::cpu::set_threads(threads);
  std::printf("oneDNN matmul, %d thread(s): fp32 vs bf16 autocast\n", nns::backend::cpu::get_threads());
  using Kernel = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float);
  for (int64_t n : {256, 512, 1024, 2048}) {
    std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(static_cast<size_t>(n * n), 0.25f), c(static_cast<size_t>(n * n));
    int reps = n <= 512 ? 50 : (n <= 1024 ? 10 : 3);
    double secs[2];
    Kernel kernels[2] = {&nns::backend::cpu::fast::matmul, &nns::backend::cpu::fast::matmul_bf16};
    for (int k = 0; k < 2; ++k) {
      kernels[k](a.data(), b.data(), c.data(), 1, 1, n, n, n, false, false, 0.f);  // warm-up, primitive creation
      auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) kernels[k](a.data(), b.data(), c.data(), 1, 1, n, n, n, false, false, 0.f);
      secs[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    }
    double flop = 2.0 * n * n * n;
    std::printf("  %4lld^3: fp32 %8.2f ms %7.1f GFLOP/s | bf16 %8.2f ms %7.1f GFLOP/s | bf16/fp32 time %.2fx\n", (long long)n,
                secs[0] * 1e3, flop / secs[0] / 1e9, secs[1] * 1e3, flop / secs[1] / 1e9, secs[1] / secs[0]);
  }
  return 0;
}
