// bf16 autocast of the matrix products (Backend precision bf16, train
// setting precision = "bf16"): the rounding itself against hand values, the
// fast kernels on both of their paths (oneDNN's bf16 matmul where this CPU
// has one; fp32 products of bf16-rounded operands, forced by
// cpu::fast::force_bf16_path, on every CPU) against the reference (the fp32
// reference on rounded copies of the operands, double sums), and that the
// bf16 results really differ from fp32 by bf16's rounding.
//
// Tolerance 1e-4, the fp32 table's: both sides multiply the same rounded
// operands exactly (8-bit significands: every product fits a float), so
// they differ only by the order of fp32 (fast) vs double (ref) sums.
#include "autocast_linear.h"
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

constexpr double kGemmTol = 1e-4;

// The fast bf16 paths this CPU can run: the emulated one always, the
// native one where oneDNN creates a bf16 matmul. Restores detection after.
struct Bf16Paths {
  std::vector<int> modes;  // for cpu::fast::force_bf16_path
  Bf16Paths() {
    cpu::fast::force_bf16_path(0);
    if (!cpu::fast::bf16_emulated()) modes.push_back(0);
    modes.push_back(1);
  }
  ~Bf16Paths() { cpu::fast::force_bf16_path(-1); }
  static const char* name(int mode) { return mode == 0 ? "native" : "emulated"; }
};

}  // namespace

TEST_CASE("round_to_bf16: nearest, ties to even, specials kept", "[backend][bf16]") {
  CHECK(cpu::round_to_bf16(1.0f) == 1.0f);
  CHECK(cpu::round_to_bf16(-2.5f) == -2.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
  CHECK(cpu::round_to_bf16(1.0f + 0x1p-8f) == 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  CHECK(cpu::round_to_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  // Just above the halfway point rounds up.
  CHECK(cpu::round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CHECK(cpu::round_to_bf16(0.1f) == cpu::f32_from_bits(0x3dcd0000u));  // 0.1f = 0x3dcccccd
  CHECK(std::isinf(cpu::round_to_bf16(INFINITY)));
  CHECK(std::isnan(cpu::round_to_bf16(NAN)));
  CHECK(std::isinf(cpu::round_to_bf16(3.4e38f)));  // past bf16's largest finite value: overflows
  CHECK(cpu::round_to_bf16(0.0f) == 0.0f);
}

TEST_CASE("conformance bf16: matmul / bmm, fast vs reference", "[backend][bf16][conformance]") {
  struct Case {
    int64_t batch, b_batch, m, k, n;
    bool ta, tb;
  };
  std::vector<Case> cases = {{1, 1, 1, 1, 1, false, false}, {1, 1, 7, 13, 5, false, false},
                             {2, 2, 64, 128, 48, false, false}, {1, 1, 33, 1000, 17, false, true},
                             {4, 1, 5, 7, 3, false, false}};
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({3, 3, 16, 33, 9, ta, tb});
      cases.push_back({4, 1, 5, 7, 3, ta, tb});
    }
  uint32_t seed = 900;
  Bf16Paths paths;
  for (const Case& c : cases) {
    Buf a = random_buf(c.batch * c.m * c.k, ++seed), b = random_buf(c.b_batch * c.k * c.n, ++seed);
    Buf dc = random_buf(c.batch * c.m * c.n, ++seed);
    std::ostringstream s;
    s << "b" << c.batch << "/" << c.b_batch << " m" << c.m << " k" << c.k << " n" << c.n << (c.ta ? " aT" : "") << (c.tb ? " bT" : "");
    const std::string name = s.str();
    Buf c_ref(dc.size()), c_fast(dc.size()), c_f32(dc.size());
    cpu::ref::matmul_bf16(a.data(), b.data(), c_ref.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
    Buf da_ref(a.size()), db_ref(b.size()), da_fast(a.size()), db_fast(b.size());
    cpu::ref::matmul_backward_bf16(a.data(), b.data(), dc.data(), da_ref.data(), db_ref.data(), c.batch, c.b_batch, c.m, c.k,
                                   c.n, c.ta, c.tb);
    for (int mode : paths.modes) {
      cpu::fast::force_bf16_path(mode);
      const std::string label = name + " " + Bf16Paths::name(mode);
      cpu::fast::matmul_bf16(a.data(), b.data(), c_fast.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
      expect_close("matmul_bf16", label, "c", c_fast, c_ref, kGemmTol);
      cpu::fast::matmul_backward_bf16(a.data(), b.data(), dc.data(), da_fast.data(), db_fast.data(), c.batch, c.b_batch, c.m,
                                      c.k, c.n, c.ta, c.tb);
      expect_close("matmul_backward_bf16", label, "da", da_fast, da_ref, kGemmTol);
      expect_close("matmul_backward_bf16", label, "db", db_fast, db_ref, kGemmTol);
    }
    if (c.k >= 13) {
      // Operands of 24 significant bits cut to 8: the product moves by about
      // 2^-9 of its size, far past fp32's reordering differences.
      cpu::ref::matmul(a.data(), b.data(), c_f32.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
      ErrorStats e = error_stats(c_ref.data(), c_f32.data(), static_cast<int64_t>(c_f32.size()));
      INFO("matmul_bf16 vs fp32 " << name << ": " << e.err);
      CHECK(e.err > 1e-4);
      CHECK(e.err < 2e-2);
    }
  }
}

TEST_CASE("conformance bf16: linear nodes through the backend's precision", "[backend][bf16][conformance]") {
  Bf16Paths paths;
  for (int mode : paths.modes) {
    INFO("bf16 path: " << Bf16Paths::name(mode));
    cpu::fast::force_bf16_path(mode);
    check_linear_autocast(Precision::BF16, "bf16", {cpu::ref::linear_bf16, cpu::ref::linear_backward_bf16},
                          {cpu::fast::linear_bf16, cpu::fast::linear_backward_bf16}, 950, kGemmTol);
  }
}

// The emulated path is an fp32 gemm on rounded operands: equal, bit for bit,
// to the fp32 fast matmul of the rounded copies (nothing else happens). The
// native path multiplies the same exact products but sums them in its own
// order (AVX-512 BF16 pairs or AMX tiles), so the two paths are close, not
// bitwise equal; the test prints how far apart they are on this CPU.
TEST_CASE("bf16 paths: emulated is the fp32 product of rounded operands; native agrees to rounding", "[backend][bf16]") {
  const int64_t m = 64, k = 256, n = 48;
  Buf a = random_buf(m * k, 990), b = random_buf(k * n, 991);
  Buf ar(a.size()), br(b.size());
  for (size_t i = 0; i < a.size(); ++i) ar[i] = cpu::round_to_bf16(a[i]);
  for (size_t i = 0; i < b.size(); ++i) br[i] = cpu::round_to_bf16(b[i]);
  Buf want(m * n), emulated(m * n), native(m * n);
  cpu::fast::matmul(ar.data(), br.data(), want.data(), 1, 1, m, k, n, false, false, 0.f);
  Bf16Paths paths;
  cpu::fast::force_bf16_path(1);
  cpu::fast::matmul_bf16(a.data(), b.data(), emulated.data(), 1, 1, m, k, n, false, false, 0.f);
  CHECK(emulated == want);
  if (paths.modes.front() != 0) {
    WARN("no native bf16 matmul on this CPU: only the emulated path is tested");
    return;
  }
  cpu::fast::force_bf16_path(0);
  cpu::fast::matmul_bf16(a.data(), b.data(), native.data(), 1, 1, m, k, n, false, false, 0.f);
  ErrorStats e = error_stats(native.data(), emulated.data(), m * n);
  int64_t differ = 0;
  for (int64_t i = 0; i < m * n; ++i) differ += native[size_t(i)] != emulated[size_t(i)];
  WARN("bf16 native vs emulated on this CPU: " << differ << " of " << m * n << " outputs differ, largest relative error "
                                               << e.err);
  CHECK(e.err < kGemmTol);
}

}  // namespace nns::backend::test
