// bf16 autocast of the matrix products (Backend precision bf16, train
// setting precision = "bf16"): the rounding itself against hand values, the
// fast kernels (oneDNN bf16 matmul on AVX-512 BF16) against the reference
// (the fp32 reference on rounded copies of the operands, double sums), and
// that the bf16 results really differ from fp32 by bf16's rounding.
//
// Tolerance 1e-4, the fp32 table's: both sides multiply the same rounded
// operands exactly (8-bit significands: every product fits a float), so
// they differ only by the order of fp32 (fast) vs double (ref) sums.
#include "autocast_linear.h"
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

constexpr double kGemmTol = 1e-4;

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
  for (const Case& c : cases) {
    Buf a = random_buf(c.batch * c.m * c.k, ++seed), b = random_buf(c.b_batch * c.k * c.n, ++seed);
    Buf dc = random_buf(c.batch * c.m * c.n, ++seed);
    std::ostringstream s;
    s << "b" << c.batch << "/" << c.b_batch << " m" << c.m << " k" << c.k << " n" << c.n << (c.ta ? " aT" : "") << (c.tb ? " bT" : "");
    const std::string name = s.str();
    Buf c_ref(dc.size()), c_fast(dc.size()), c_f32(dc.size());
    cpu::ref::matmul_bf16(a.data(), b.data(), c_ref.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
    cpu::fast::matmul_bf16(a.data(), b.data(), c_fast.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
    expect_close("matmul_bf16", name, "c", c_fast, c_ref, kGemmTol);
    Buf da_ref(a.size()), db_ref(b.size()), da_fast(a.size()), db_fast(b.size());
    cpu::ref::matmul_backward_bf16(a.data(), b.data(), dc.data(), da_ref.data(), db_ref.data(), c.batch, c.b_batch, c.m, c.k,
                                   c.n, c.ta, c.tb);
    cpu::fast::matmul_backward_bf16(a.data(), b.data(), dc.data(), da_fast.data(), db_fast.data(), c.batch, c.b_batch, c.m,
                                    c.k, c.n, c.ta, c.tb);
    expect_close("matmul_backward_bf16", name, "da", da_fast, da_ref, kGemmTol);
    expect_close("matmul_backward_bf16", name, "db", db_fast, db_ref, kGemmTol);
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
  check_linear_autocast(Precision::BF16, "bf16", {cpu::ref::linear_bf16, cpu::ref::linear_backward_bf16},
                        {cpu::fast::linear_bf16, cpu::fast::linear_backward_bf16}, 950, kGemmTol);
}

}  // namespace nns::backend::test
