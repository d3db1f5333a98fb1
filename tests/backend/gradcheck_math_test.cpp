// Finite-difference gradient checks of the REFERENCE backward kernels of
// the tensor math ops: the elementwise functions, maximum / minimum, where
// and amax / amin (same method and tolerance as gradcheck_nn_test.cpp).
// Inputs keep the kinks of abs, maximum/minimum and amax/amin farther than
// the step h from the differences: one side's slope there is the other's
// only by the tie rule, which the conformance table checks on known values.
#include <cmath>

#include "backend_test_util.h"

namespace nns::backend::test {

TEST_CASE("gradcheck: elementwise math", "[backend][gradcheck]") {
  struct Case {
    cpu::Activation act;
    const char* name;
    float lo, hi;
    bool positive;
    float p = 0;
  };
  const Case cases[] = {
      {cpu::Activation::exp, "exp", 0.1f, 2.0f, false},     {cpu::Activation::log, "log", 0.2f, 4.0f, true},
      {cpu::Activation::sqrt, "sqrt", 0.2f, 4.0f, true},    {cpu::Activation::rsqrt, "rsqrt", 0.3f, 4.0f, true},
      {cpu::Activation::abs, "abs", 0.1f, 3.0f, false},     {cpu::Activation::neg, "neg", 0.1f, 3.0f, false},
      {cpu::Activation::sin, "sin", 0.1f, 6.0f, false},     {cpu::Activation::cos, "cos", 0.1f, 6.0f, false},
      {cpu::Activation::silu, "silu", 0.1f, 4.0f, false},   {cpu::Activation::pow, "pow p=2", 0.1f, 2.0f, false, 2.0f},
      {cpu::Activation::pow, "pow p=3", 0.1f, 2.0f, false, 3.0f},
      {cpu::Activation::pow, "pow p=0.5", 0.2f, 3.0f, true, 0.5f},
      {cpu::Activation::pow, "pow p=-1.5", 0.3f, 3.0f, true, -1.5f},
  };
  int64_t n = 16;
  uint32_t seed = 5000;
  for (const Case& c : cases) {
    Buf x = c.positive ? random_buf(n, ++seed, c.lo, c.hi) : random_away_from_zero(n, ++seed, c.lo, c.hi);
    Buf w = random_buf(n, ++seed), y = zeros(n), dx = zeros(n);
    auto loss = [&]() {
      cpu::ref::activation(c.act, x.data(), y.data(), n, c.p);
      return weighted_sum(y, w);
    };
    cpu::ref::activation_backward(c.act, x.data(), w.data(), dx.data(), n, c.p);
    grad_check(c.name, "n16", "x", x, dx, loss);
  }
}

TEST_CASE("gradcheck: maximum / minimum", "[backend][gradcheck]") {
  using Dims = std::vector<int64_t>;
  const std::pair<Dims, Dims> shapes[] = {{{3, 1, 4}, {2, 4}}, {{2, 3}, {2, 3}}, {{}, {2, 2}}};
  uint32_t seed = 5100;
  // Not a structured binding: C++17 lambdas (the loss below) cannot capture one.
  for (const auto& shape_pair : shapes)
    for (cpu::BinaryOp op : {cpu::BinaryOp::maximum, cpu::BinaryOp::minimum}) {
      const Dims& ad = shape_pair.first;
      const Dims& bd = shape_pair.second;
      int64_t out[cpu::kMaxRank];
      int rank = cpu::broadcast_shape(int(ad.size()), ad.data(), int(bd.size()), bd.data(), out);
      int64_t nc = numel(Dims(out, out + rank));
      // a on a grid of odd tenths, b of even ones: every pair at least 0.1 > h apart.
      Buf a = random_buf(numel(ad), ++seed, -2, 2), b = random_buf(numel(bd), ++seed, -2, 2);
      for (float& v : a) v = (2 * std::round(v * 5) + 1) / 10;
      for (float& v : b) v = 2 * std::round(v * 5) / 10;
      Buf w = random_buf(nc, ++seed), c = zeros(nc);
      auto loss = [&]() {
        cpu::ref::binary(op, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()), bd.data(), c.data());
        return weighted_sum(c, w);
      };
      Buf da = zeros(numel(ad)), db = zeros(numel(bd));
      cpu::ref::binary_backward(op, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()), bd.data(), w.data(), da.data(),
                                db.data());
      const char* name = op == cpu::BinaryOp::maximum ? "maximum" : "minimum";
      std::string shape = dims_str(ad) + " " + name + " " + dims_str(bd);
      grad_check(name, shape, "a", a, da, loss);
      grad_check(name, shape, "b", b, db, loss);
    }
}

TEST_CASE("gradcheck: where", "[backend][gradcheck]") {
  std::vector<int64_t> cd = {3, 1}, ad = {3, 4}, bd = {4};
  Buf cond = {1, 0, 1}, a = random_buf(12, 5200), b = random_buf(4, 5201), w = random_buf(12, 5202), y = zeros(12);
  auto loss = [&]() {
    cpu::ref::where(cond.data(), 2, cd.data(), a.data(), 2, ad.data(), b.data(), 1, bd.data(), y.data());
    return weighted_sum(y, w);
  };
  Buf da = zeros(12), db = zeros(4);
  cpu::ref::where_backward(cond.data(), 2, cd.data(), 2, ad.data(), 1, bd.data(), w.data(), da.data(), db.data());
  grad_check("where", "[3,1] ? [3,4] : [4]", "a", a, da, loss);
  grad_check("where", "[3,1] ? [3,4] : [4]", "b", b, db, loss);
}

TEST_CASE("gradcheck: amax / amin", "[backend][gradcheck]") {
  int64_t outer = 2, len = 5, inner = 3;
  uint32_t seed = 5300;
  for (cpu::Extreme kind : {cpu::Extreme::max, cpu::Extreme::min}) {
    // Distinct values 0.1 apart, shuffled: no tie within h.
    Buf x(size_t(outer * len * inner));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) / 10 - 1;
    Buf order = random_buf(int64_t(x.size()), ++seed);
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[size_t(std::fabs(order[i]) * float(i + 1)) % (i + 1)]);
    Buf w = random_buf(outer * inner, ++seed), y = zeros(outer * inner), dx = zeros(outer * len * inner);
    auto loss = [&]() {
      cpu::ref::reduce_extreme(kind, x.data(), y.data(), nullptr, outer, len, inner);
      return weighted_sum(y, w);
    };
    loss();
    cpu::ref::reduce_extreme_backward(x.data(), y.data(), w.data(), dx.data(), outer, len, inner);
    grad_check(kind == cpu::Extreme::max ? "amax" : "amin", "[2,5,3] dim1", "x", x, dx, loss);
  }
}

}  // namespace nns::backend::test
