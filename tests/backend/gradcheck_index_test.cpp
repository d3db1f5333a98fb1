// Finite-difference gradient checks of the REFERENCE backward kernels of
// cumsum, topk, gather and scatter_add (same method and tolerance as
// gradcheck_nn_test.cpp). topk's inputs are kept farther apart than the
// step h, so a difference never reorders them (its kink is where two
// values cross). Indices have no gradient.
#include <cmath>

#include "backend_test_util.h"

namespace nns::backend::test {

TEST_CASE("gradcheck: cumsum", "[backend][gradcheck]") {
  const int64_t geo[][3] = {{1, 9, 1}, {2, 4, 3}};
  uint32_t seed = 7000;
  for (const auto& d : geo) {
    int64_t n = d[0] * d[1] * d[2];
    Buf x = random_buf(n, ++seed), w = random_buf(n, ++seed), y = zeros(n), dx = zeros(n);
    auto loss = [&]() {
      cpu::ref::cumsum(x.data(), y.data(), d[0], d[1], d[2]);
      return weighted_sum(y, w);
    };
    cpu::ref::cumsum_backward(w.data(), dx.data(), d[0], d[1], d[2]);
    grad_check("cumsum", dims_str({d[0], d[1], d[2]}), "x", x, dx, loss);
  }
}

TEST_CASE("gradcheck: topk", "[backend][gradcheck]") {
  const int64_t outer = 2, len = 7, inner = 3, k = 3;
  int64_t n = outer * len * inner, nk = outer * k * inner;
  // A permutation of well-separated values: 0.1 apart, h = 4e-3.
  Buf x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = float(((i * 17) % n) - n / 2) * 0.1f;
  Buf w = random_buf(nk, 7100), values = zeros(nk), dx = zeros(n);
  std::vector<int32_t> idx(static_cast<size_t>(nk));
  auto loss = [&]() {
    cpu::ref::topk(x.data(), values.data(), idx.data(), outer, len, inner, k);
    return weighted_sum(values, w);
  };
  loss();
  cpu::ref::topk_backward(idx.data(), w.data(), dx.data(), outer, len, inner, k);
  grad_check("topk", "[2, 7, 3] k=3", "x", x, dx, loss);
}

TEST_CASE("gradcheck: gather / scatter_add", "[backend][gradcheck]") {
  const int64_t outer = 2, len = 5, inner = 3, m = 7;  // m > len: some positions read twice
  int64_t nx = outer * len * inner, ni = outer * m * inner;
  std::vector<int32_t> index(static_cast<size_t>(ni));
  for (int64_t i = 0; i < ni; ++i) index[i] = int32_t((i * 7 + 3) % len);
  Buf x = random_buf(nx, 7200), src = random_buf(ni, 7201);
  Buf wg = random_buf(ni, 7202), y = zeros(ni), dx = zeros(nx);
  auto gather_loss = [&]() {
    cpu::ref::gather(x.data(), index.data(), y.data(), outer, len, inner, m);
    return weighted_sum(y, wg);
  };
  cpu::ref::gather_backward(index.data(), wg.data(), dx.data(), outer, len, inner, m);
  grad_check("gather", "[2, 5, 3] m=7", "x", x, dx, gather_loss);

  Buf ws = random_buf(nx, 7203), z = zeros(nx), sdx = zeros(nx), dsrc = zeros(ni);
  auto scatter_loss = [&]() {
    cpu::ref::scatter_add(x.data(), index.data(), src.data(), z.data(), outer, len, inner, m);
    return weighted_sum(z, ws);
  };
  cpu::ref::scatter_add_backward(index.data(), ws.data(), sdx.data(), dsrc.data(), outer, len, inner, m);
  grad_check("scatter_add", "[2, 5, 3] m=7", "x", x, sdx, scatter_loss);
  grad_check("scatter_add", "[2, 5, 3] m=7", "src", src, dsrc, scatter_loss);
}

}  // namespace nns::backend::test
