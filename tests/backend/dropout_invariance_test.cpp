// Dropout's counter-based stream: known answers of Philox-4x32-10, masks
// that do not depend on how the tensor is partitioned or on threads, and
// the mask's statistics. Also: the fast kernels give the same answers under
// any set_threads and when called from several threads at once.
#include <cstring>
#include <thread>

#include "backend/runtime/cpu/philox.h"
#include "backend_test_util.h"

namespace nns::backend::test {

namespace {

// Dropout of the full tensor of ones: the mask times 1/(1-p).
Buf full_mask(int64_t n, float p, uint64_t seed, uint64_t base, bool fast) {
  Buf ones(static_cast<size_t>(n), 1.0f), y = zeros(n);
  (fast ? cpu::fast::dropout : cpu::ref::dropout)(ones.data(), y.data(), n, p, seed, base);
  return y;
}

bool same_bits(const Buf& a, const Buf& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("dropout: Philox-4x32-10 known answers", "[backend][dropout]") {
  // Random123's kat_vectors for philox4x32_10.
  struct Kat {
    cpu::Philox4 ctr;
    uint32_t k0, k1;
    cpu::Philox4 expect;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    cpu::Philox4 got = cpu::philox4x32_10_block(k.ctr, k.k0, k.k1);
    for (int l = 0; l < 4; ++l) CHECK(got.v[l] == k.expect.v[l]);
  }
  // The dropout stream is lane (i % 4) of counter i / 4 under key = seed.
  cpu::Philox4 block = cpu::philox4x32_10(5, 0x1234567890abcdefULL);
  for (int l = 0; l < 4; ++l)
    CHECK(cpu::dropout_uniform(0x1234567890abcdefULL, 20 + uint64_t(l)) ==
          cpu::uniform_from_bits(block.v[l]));
}

TEST_CASE("dropout: a slice computed at its offset equals the full mask", "[backend][dropout]") {
  const int64_t n = 10007;
  const float p = 0.5f;
  for (bool fast : {false, true})
    for (uint64_t base : {uint64_t{0}, uint64_t{1} << 33}) {  // base: the full tensor is itself a slice
      Buf full = full_mask(n, p, 42, base, fast);
      // Cut points that split counters (not multiples of 4) and a length-1 piece.
      const int64_t cuts[] = {0, 1, 2, 7, 1000, 1001, 4093, 9999, n};
      Buf pieces = zeros(n), ones(static_cast<size_t>(n), 1.0f);
      for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
        int64_t lo = cuts[c], len = cuts[c + 1] - cuts[c];
        (fast ? cpu::fast::dropout : cpu::ref::dropout)(ones.data() + lo, pieces.data() + lo, len, p,
                                                        42, base + uint64_t(lo));
      }
      INFO((fast ? "fast" : "ref") << " base " << base);
      CHECK(same_bits(pieces, full));
    }
}

TEST_CASE("dropout: a column slice of a 2-D tensor, row by row", "[backend][dropout]") {
  // Splitting [rows, cols] along dim 1 gives non-contiguous pieces: each row
  // of the piece is one contiguous run at global offset r * cols + c0.
  const int64_t rows = 6, cols = 37, c0 = 11, c1 = 30;
  Buf full = full_mask(rows * cols, 0.3f, 9, 0, true);
  Buf ones(static_cast<size_t>(cols), 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    Buf piece = zeros(c1 - c0);
    cpu::fast::dropout(ones.data(), piece.data(), c1 - c0, 0.3f, 9, uint64_t(r * cols + c0));
    Buf expect(full.begin() + r * cols + c0, full.begin() + r * cols + c1);
    CHECK(same_bits(piece, expect));
  }
}

TEST_CASE("dropout: thread count and concurrent partitions do not change the mask",
          "[backend][dropout]") {
  const int64_t n = 50000;
  Buf x = random_buf(n, 7), full = zeros(n);
  cpu::fast::dropout(x.data(), full.data(), n, 0.25f, 123, 0);
  // Four threads, each its own chunk, at once.
  for (int threads : {2, 3, 4}) {
    Buf parts = zeros(n);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
      pool.emplace_back([&, lo, hi] {
        cpu::fast::dropout(x.data() + lo, parts.data() + lo, hi - lo, 0.25f, 123, uint64_t(lo));
      });
    }
    for (std::thread& t : pool) t.join();
    INFO(threads << " threads");
    CHECK(same_bits(parts, full));
  }
  // The kernel's own thread setting is irrelevant to it as well.
  int saved = cpu::get_threads();
  for (int threads : {1, 2}) {
    cpu::set_threads(threads);
    CHECK(cpu::get_threads() == threads);
    Buf y = zeros(n);
    cpu::fast::dropout(x.data(), y.data(), n, 0.25f, 123, 0);
    CHECK(same_bits(y, full));
  }
  cpu::set_threads(saved);
}

TEST_CASE("dropout: mask statistics and scaling", "[backend][dropout]") {
  const int64_t n = 200000;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    Buf y = full_mask(n, p, 2024, 0, true);
    int64_t kept = 0, badly_scaled = 0;
    for (float v : y) {
      if (v == 0.0f) continue;
      ++kept;
      if (v != 1.0f / (1.0f - p)) ++badly_scaled;  // kept values are scaled exactly
    }
    CHECK(badly_scaled == 0);
    double expect = double(n) * (1 - p), sigma = std::sqrt(double(n) * p * (1 - p));
    INFO("p " << p << " kept " << kept << " expected " << expect);
    CHECK(std::fabs(double(kept) - expect) < 5 * sigma);
  }
  // A different seed gives a different mask; the same seed the same one.
  CHECK_FALSE(same_bits(full_mask(1000, 0.5f, 1, 0, true), full_mask(1000, 0.5f, 2, 0, true)));
  CHECK(same_bits(full_mask(1000, 0.5f, 1, 0, true), full_mask(1000, 0.5f, 1, 0, true)));
}

TEST_CASE("fast kernels: any thread setting, and several calling threads", "[backend][threads]") {
  const int64_t m = 96, k = 80, n = 64;
  Buf a = random_buf(m * k, 11), b = random_buf(k * n, 12), want = zeros(m * n);
  cpu::ref::matmul(a.data(), b.data(), want.data(), 1, 1, m, k, n, false, false, 0.0f);
  int saved = cpu::get_threads();
  for (int threads : {1, 2}) {
    cpu::set_threads(threads);
    Buf got = zeros(m * n);
    cpu::fast::matmul(a.data(), b.data(), got.data(), 1, 1, m, k, n, false, false, 0.0f);
    expect_close("matmul", "set_threads(" + std::to_string(threads) + ")", "c", got, want, 1e-4);
  }
  cpu::set_threads(saved);
  // oneDNN engines, streams and caches are per thread: concurrent calls are safe.
  std::vector<Buf> results(3, zeros(m * n));
  std::vector<std::thread> pool;
  for (int t = 0; t < 3; ++t)
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        cpu::fast::matmul(a.data(), b.data(), results[size_t(t)].data(), 1, 1, m, k, n, false,
                          false, 0.0f);
    });
  for (std::thread& t : pool) t.join();
  for (int t = 0; t < 3; ++t)
    expect_close("matmul", "thread " + std::to_string(t) + " of 3", "c", results[size_t(t)], want, 1e-4);
}

}  // namespace nns::backend::test
