// max_pool2d / avg_pool2d: the conformance rows (forward and backward nodes
// through Backend::run_node, oneDNN vs the reference loops), finite
// differences of the reference backwards, and values worked out by hand.
#include <algorithm>
#include <numeric>
#include <random>

#include "node_conformance.h"

namespace nns::backend::test {

namespace {

cpu::Pool2dDims pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p) {
  cpu::Pool2dDims d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.stride = s, d.pad = p;
  return d;
}

// Distinct values 0.05 apart in random order: no window has two maxima
// within a finite-difference step of each other, so the max is
// differentiable at every point the check probes.
Buf spaced_buf(int64_t n, uint32_t seed) {
  Buf b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[i] = 0.05f * static_cast<float>(i - n / 2);
  std::shuffle(b.begin(), b.end(), std::mt19937(seed));
  return b;
}

const std::vector<cpu::Pool2dDims>& pool_cases() {
  static const std::vector<cpu::Pool2dDims> cases = {
      pool(1, 1, 4, 4, 2, 2, 0),  pool(2, 3, 7, 6, 3, 2, 1),   // ResNet's stem pooling, odd sizes
      pool(2, 4, 8, 8, 3, 1, 1),  pool(1, 2, 5, 9, 2, 1, 0),   // overlapping windows
      pool(2, 16, 9, 9, 3, 2, 1), pool(3, 5, 7, 7, 7, 1, 0),   // a global pooling window
      pool(1, 1, 6, 6, 4, 3, 2),
  };
  return cases;
}

}  // namespace

TEST_CASE("conformance: max_pool2d / avg_pool2d", "[backend][conformance]") {
  uint32_t seed = 900;
  for (const cpu::Pool2dDims& d : pool_cases())
    for (const char* kind : {"max_pool2d", "avg_pool2d"}) {
      sema::Shape xs{d.n, d.c, d.h, d.w}, ys{d.n, d.c, d.out_h(), d.out_w()};
      Buf x = spaced_buf(d.n * d.c * d.h * d.w, ++seed);
      Buf dy = random_buf(sema::numel(ys), ++seed);
      std::ostringstream s;
      s << "x" << dims_str(xs) << " k" << d.k << " s" << d.stride << " p" << d.pad;
      NodeCase fwd{kind, {{"kernel", d.k}, {"stride", d.stride}, {"padding", d.pad}}, {f32(xs, x)}, {f32_zeros(ys)}};
      std::vector<HostTensor> y = expect_node(kind, s.str(), fwd, {"y"}, 1e-6);
      NodeCase bwd = backward_case(fwd, y, {f32(ys, dy)}, {1});
      expect_node(bwd.kind, s.str(), bwd, {"dx"}, 1e-6);
    }
}

TEST_CASE("gradcheck: max_pool2d / avg_pool2d", "[backend][gradcheck]") {
  uint32_t seed = 2900;
  for (const cpu::Pool2dDims& d : pool_cases()) {
    if (d.n * d.c * d.h * d.w > 300) continue;  // finite differences cost 2 forwards per element
    int64_t ny = d.n * d.c * d.out_h() * d.out_w();
    std::string shape = "x" + dims_str({d.n, d.c, d.h, d.w}) + " k" + std::to_string(d.k) + " s" +
                        std::to_string(d.stride) + " p" + std::to_string(d.pad);
    Buf x = spaced_buf(d.n * d.c * d.h * d.w, ++seed), w = random_buf(ny, ++seed), y = zeros(ny);
    auto max_loss = [&]() {
      cpu::ref::max_pool2d(x.data(), y.data(), d);
      return weighted_sum(y, w);
    };
    Buf dx = zeros(int64_t(x.size()));
    cpu::ref::max_pool2d_backward(x.data(), w.data(), dx.data(), d);
    grad_check("max_pool2d", shape, "x", x, dx, max_loss);
    auto avg_loss = [&]() {
      cpu::ref::avg_pool2d(x.data(), y.data(), d);
      return weighted_sum(y, w);
    };
    cpu::ref::avg_pool2d_backward(w.data(), dx.data(), d);
    grad_check("avg_pool2d", shape, "x", x, dx, avg_loss);
  }
}

TEST_CASE("pooling: values by hand (padding, ties)", "[backend]") {
  // x = 1 2 / 3 4 (one 2x2 channel), kernel 2, stride 1, padding 1: a 3x3
  // output whose corner windows hold one real element each.
  cpu::Pool2dDims d = pool(1, 1, 2, 2, 2, 1, 1);
  Buf x = {1, 2, 3, 4}, y = zeros(9);
  for (bool reference : {true, false}) {
    INFO((reference ? "ref" : "fast"));
    (reference ? cpu::ref::max_pool2d : cpu::fast::max_pool2d)(x.data(), y.data(), d);
    CHECK(y == Buf{1, 2, 2, 3, 4, 4, 3, 4, 4});  // padding is -inf, never the max
    (reference ? cpu::ref::avg_pool2d : cpu::fast::avg_pool2d)(x.data(), y.data(), d);
    CHECK(y == Buf{0.25f, 0.75f, 0.5f, 1.f, 2.5f, 1.5f, 0.75f, 1.75f, 1.f});  // always / k^2
  }
  // Ties (common after a ReLU: windows of zeros): the whole gradient goes
  // to the first maximum of each window in row-major order, in oneDNN as in
  // the reference, so the two backends agree on them too.
  cpu::Pool2dDims t = pool(1, 1, 3, 3, 2, 1, 0);
  Buf same(9, 5.f), dy = {1, 2, 3, 4}, dx = zeros(9);
  for (bool reference : {true, false}) {
    INFO((reference ? "ref" : "fast"));
    (reference ? cpu::ref::max_pool2d_backward : cpu::fast::max_pool2d_backward)(same.data(), dy.data(), dx.data(), t);
    CHECK(dx == Buf{1, 2, 0, 3, 4, 0, 0, 0, 0});
  }
}

}  // namespace nns::backend::test
