// fp16 autocast of the matrix products (Backend precision F16, train setting
// precision = "fp16"): IEEE binary16 rounding against hand-worked values
// (the largest half, overflow to inf, subnormals, ties to even), the fast
// kernels (oneDNN's fp32 matmul on fp16-rounded copies: this CPU's oneDNN
// has no f16 matmul) against the reference (the fp32 reference on rounded
// copies, double sums), and that fp16 results differ from fp32 by fp16's
// rounding (less than bf16's).
//
// Tolerance 1e-4, the fp32 table's: both sides multiply the same rounded
// operands exactly (11-bit significands: every product fits a float), so
// they differ only by the order of fp32 (fast) vs double (ref) sums.
#include "autocast_linear.h"
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

constexpr double kGemmTol = 1e-4;

}  // namespace

TEST_CASE("fp16_bits: nearest, ties to even, overflow to inf, subnormals", "[backend][fp16]") {
  using cpu::fp16_bits;
  // Normal numbers.
  CHECK(fp16_bits(1.0f) == 0x3c00);
  CHECK(fp16_bits(-2.0f) == 0xc000);
  CHECK(fp16_bits(0.1f) == 0x2e66);        // 0.0999755859375, the nearest half
  CHECK(fp16_bits(1.0f / 3) == 0x3555);    // 0.333251953125
  // Ties to even: 1 + 2^-11 is halfway between 1 (mantissa 0) and 1 + 2^-10
  // (mantissa 1): 1. 1 + 3 * 2^-11 is halfway between mantissas 1 and 2: 2.
  CHECK(fp16_bits(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(fp16_bits(1.0f + 3 * 0x1p-11f) == 0x3c02);
  CHECK(fp16_bits(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);  // just above halfway: up
  // The largest finite half and the edge of overflow: 65504 = 0x7bff; the
  // halfway point to 2^16 is 65520, which ties to the even neighbour 2^16 = inf.
  CHECK(fp16_bits(65504.0f) == 0x7bff);
  CHECK(fp16_bits(65519.0f) == 0x7bff);
  CHECK(fp16_bits(65520.0f) == 0x7c00);
  CHECK(fp16_bits(1e5f) == 0x7c00);
  CHECK(fp16_bits(-1e5f) == 0xfc00);
  CHECK(fp16_bits(3.4e38f) == 0x7c00);
  CHECK(fp16_bits(INFINITY) == 0x7c00);
  // Subnormals: multiples of 2^-24 below 2^-14.
  CHECK(fp16_bits(0x1p-24f) == 0x0001);               // the smallest
  CHECK(fp16_bits(0x1p-25f) == 0x0000);               // halfway to 0: even is 0
  CHECK(fp16_bits(0x1p-25f + 0x1p-40f) == 0x0001);    // above halfway
  CHECK(fp16_bits(3 * 0x1p-25f) == 0x0002);           // halfway between 1 and 2 units: 2
  CHECK(fp16_bits(1023 * 0x1p-24f) == 0x03ff);        // the largest subnormal
  CHECK(fp16_bits(1023.5f * 0x1p-24f) == 0x0400);     // halfway to 2^-14: even is 2^-14, the smallest normal
  CHECK(fp16_bits(0x1p-14f) == 0x0400);
  CHECK(fp16_bits(-0x1p-24f) == 0x8001);
  CHECK(fp16_bits(1e-10f) == 0x0000);                 // underflows to zero
  CHECK(fp16_bits(-0.0f) == 0x8000);
  CHECK(fp16_bits(cpu::f32_from_bits(0x00000001u)) == 0x0000);  // a float subnormal
  // NaN stays NaN.
  uint16_t nan = fp16_bits(NAN);
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
}

TEST_CASE("round_to_fp16: the float value of the nearest half", "[backend][fp16]") {
  using cpu::round_to_fp16;
  CHECK(cpu::fp16_to_float(0x7bff) == 65504.0f);
  CHECK(cpu::fp16_to_float(0x0001) == 0x1p-24f);
  CHECK(cpu::fp16_to_float(0x03ff) == 1023 * 0x1p-24f);
  CHECK(cpu::fp16_to_float(0x3555) == 0.333251953125f);
  CHECK(cpu::fp16_to_float(0xfc00) == -INFINITY);
  CHECK(std::isnan(cpu::fp16_to_float(0x7e00)));
  CHECK(round_to_fp16(65504.0f) == 65504.0f);
  CHECK(round_to_fp16(65519.0f) == 65504.0f);
  CHECK(std::isinf(round_to_fp16(65520.0f)));
  CHECK(round_to_fp16(0.1f) == 0.0999755859375f);
  CHECK(round_to_fp16(3e-8f) == 0x1p-24f);  // 3e-8 = 0.503 units of 2^-24: rounds up to one
  CHECK(round_to_fp16(2e-8f) == 0.0f);      // 0.34 units: zero
  CHECK(std::isnan(round_to_fp16(NAN)));
  // Every half survives the round trip, and rounding is idempotent.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    float f = cpu::fp16_to_float(static_cast<uint16_t>(h));
    if (cpu::fp16_bits(f) != h) FAIL("half 0x" << std::hex << h << " does not round-trip");
  }
}

TEST_CASE("conformance fp16: the fast kernels round operands exactly as round_to_fp16", "[backend][fp16][conformance]") {
  // c = a I: every output is one operand of a, rounded (x * 1 and + 0 are
  // exact), so the fast path's rounding (F16C where the CPU has it) must
  // give round_to_fp16's value bit for bit. The operands sweep the normal
  // range, ties, the subnormals and the edge below overflow (an operand
  // that overflows would make inf * 0 = NaN in the other columns; the
  // overflow test below covers it).
  std::vector<float> vals;
  for (uint32_t bits = 0x00000000u; bits < 0x477ff000u; bits += 4093) vals.push_back(cpu::f32_from_bits(bits));  // 0 .. just below 65520
  for (uint32_t h = 0; h < 0x7c00; h += 7) {  // every 7th half, and the ties above and below it
    float f = cpu::fp16_to_float(static_cast<uint16_t>(h)), next = cpu::fp16_to_float(static_cast<uint16_t>(h + 1));
    vals.push_back(f);
    if (h + 1 < 0x7c00) vals.push_back(f + (next - f) / 2);
  }
  vals.push_back(65519.0f);
  const int64_t k = 16, rows = (static_cast<int64_t>(vals.size()) + k - 1) / k;
  Buf a(static_cast<size_t>(rows * k), 0.f), eye(static_cast<size_t>(k * k), 0.f), c(static_cast<size_t>(rows * k));
  for (size_t i = 0; i < vals.size(); ++i) a[i] = (i % 2 ? -1.f : 1.f) * vals[i];
  for (int64_t i = 0; i < k; ++i) eye[static_cast<size_t>(i * k + i)] = 1.f;
  cpu::fast::matmul_fp16(a.data(), eye.data(), c.data(), 1, 1, rows, k, k, false, false, 0.f);
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    float want = cpu::round_to_fp16(a[i]);
    if (std::memcmp(&want, &c[i], sizeof want) != 0 && !(want == 0.f && c[i] == 0.f)) {
      if (differ < 5) WARN("operand " << a[i] << ": fast " << c[i] << ", round_to_fp16 " << want);
      ++differ;
    }
  }
  INFO(a.size() << " operands");
  CHECK(differ == 0);
}

TEST_CASE("conformance fp16: matmul / bmm, fast vs reference", "[backend][fp16][conformance]") {
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
  uint32_t seed = 1900;
  for (const Case& c : cases) {
    Buf a = random_buf(c.batch * c.m * c.k, ++seed), b = random_buf(c.b_batch * c.k * c.n, ++seed);
    Buf dc = random_buf(c.batch * c.m * c.n, ++seed);
    std::ostringstream s;
    s << "b" << c.batch << "/" << c.b_batch << " m" << c.m << " k" << c.k << " n" << c.n << (c.ta ? " aT" : "") << (c.tb ? " bT" : "");
    const std::string name = s.str();
    Buf c_ref(dc.size()), c_fast(dc.size()), c_f32(dc.size()), c_bf16(dc.size());
    cpu::ref::matmul_fp16(a.data(), b.data(), c_ref.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
    cpu::fast::matmul_fp16(a.data(), b.data(), c_fast.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
    expect_close("matmul_fp16", name, "c", c_fast, c_ref, kGemmTol);
    Buf da_ref(a.size()), db_ref(b.size()), da_fast(a.size()), db_fast(b.size());
    cpu::ref::matmul_backward_fp16(a.data(), b.data(), dc.data(), da_ref.data(), db_ref.data(), c.batch, c.b_batch, c.m, c.k,
                                   c.n, c.ta, c.tb);
    cpu::fast::matmul_backward_fp16(a.data(), b.data(), dc.data(), da_fast.data(), db_fast.data(), c.batch, c.b_batch, c.m,
                                    c.k, c.n, c.ta, c.tb);
    expect_close("matmul_backward_fp16", name, "da", da_fast, da_ref, kGemmTol);
    expect_close("matmul_backward_fp16", name, "db", db_fast, db_ref, kGemmTol);
    if (c.k >= 13) {
      // Operands cut from 24 to 11 significant bits: the product moves by
      // about 2^-12 of its size, past fp32's reordering differences, and
      // well below bf16's 8 bits.
      cpu::ref::matmul(a.data(), b.data(), c_f32.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
      cpu::ref::matmul_bf16(a.data(), b.data(), c_bf16.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb, 0.f);
      ErrorStats e = error_stats(c_ref.data(), c_f32.data(), static_cast<int64_t>(c_f32.size()));
      ErrorStats eb = error_stats(c_bf16.data(), c_f32.data(), static_cast<int64_t>(c_f32.size()));
      INFO("matmul_fp16 vs fp32 " << name << ": " << e.err << " (bf16: " << eb.err << ")");
      CHECK(e.err > 1e-6);
      CHECK(e.err < 3e-3);
      CHECK(e.err < eb.err / 4);
    }
  }
}

TEST_CASE("conformance fp16: an operand past 65504 overflows to inf, as a half does", "[backend][fp16][conformance]") {
  // c = a b with a = [70000, 1], b = [1, 1]^T: 70000 is inf in fp16.
  Buf a = {70000.f, 1.f}, b = {1.f, 1.f}, c_ref(1), c_fast(1), c_f32(1);
  cpu::ref::matmul_fp16(a.data(), b.data(), c_ref.data(), 1, 1, 1, 2, 1, false, false, 0.f);
  cpu::fast::matmul_fp16(a.data(), b.data(), c_fast.data(), 1, 1, 1, 2, 1, false, false, 0.f);
  cpu::ref::matmul_bf16(a.data(), b.data(), c_f32.data(), 1, 1, 1, 2, 1, false, false, 0.f);
  CHECK(std::isinf(c_ref[0]));
  CHECK(std::isinf(c_fast[0]));
  CHECK(std::isfinite(c_f32[0]));  // bf16 keeps fp32's range
  // A scaled loss gradient past the range in a linear backward: dx and dw are inf/NaN.
  Buf x = {1.f, 2.f}, w = {0.5f, 0.25f}, dy = {65536.f}, dx(2), dw(2);
  cpu::fast::linear_backward_fp16(x.data(), w.data(), dy.data(), dx.data(), dw.data(), nullptr, 1, 2, 1);
  CHECK(std::isinf(dx[0]));
  CHECK(std::isinf(dw[0]));
  dy = {32768.f};
  cpu::fast::linear_backward_fp16(x.data(), w.data(), dy.data(), dx.data(), dw.data(), nullptr, 1, 2, 1);
  CHECK(dx[0] == 16384.f);
  CHECK(dw[1] == 65536.f);  // the fp32 result may exceed 65504: only the operands are halves
}

TEST_CASE("conformance fp16: linear nodes through the backend's precision", "[backend][fp16][conformance]") {
  check_linear_autocast(Precision::F16, "fp16", {cpu::ref::linear_fp16, cpu::ref::linear_backward_fp16},
                        {cpu::fast::linear_fp16, cpu::fast::linear_backward_fp16}, 1950, kGemmTol);
}

}  // namespace nns::backend::test
