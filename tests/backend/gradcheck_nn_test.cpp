// Finite-difference gradient checks of the REFERENCE backward kernels
// (linear algebra, normalisation, activations, losses, dropout): for
// L = sum(forward(inputs) * w) with fixed random w, the backward called with
// dy = w must match central differences of L in every input element.
//
// Tolerance 2e-3 (error measure: backend_test_util.h, fd as the reference),
// step h = 4e-3: the kernels take and return floats, so L (summed in
// double) carries rounding noise of about 2^-24 * sqrt(numel) * |out| that
// the difference quotient divides by 2h; the O(h^2) truncation error of
// smooth ops is ~1e-5 (a/b at b = 0.5 is the worst here). The quotient's
// denominator is the difference of the stored floats x+h and x-h, in
// double. Observed errors are 1e-7..2e-4 (cross_entropy, whose float loss
// is the noisiest); a wrong gradient is off by O(1).
#include "backend_test_util.h"

namespace nns::backend::test {

TEST_CASE("gradcheck: matmul / linear", "[backend][gradcheck]") {
  uint32_t seed = 2000;
  for (int64_t b_batch : {2, 1})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        int64_t batch = 2, m = 3, k = 4, n = 5;
        Buf a = random_buf(batch * m * k, ++seed), b = random_buf(b_batch * k * n, ++seed);
        Buf w = random_buf(batch * m * n, ++seed), c = zeros(batch * m * n);
        auto loss = [&]() {
          cpu::ref::matmul(a.data(), b.data(), c.data(), batch, b_batch, m, k, n, ta, tb, 0.0f);
          return weighted_sum(c, w);
        };
        Buf da = zeros(int64_t(a.size())), db = zeros(int64_t(b.size()));
        cpu::ref::matmul_backward(a.data(), b.data(), w.data(), da.data(), db.data(), batch, b_batch,
                                  m, k, n, ta, tb);
        std::string shape = "b2/" + std::to_string(b_batch) + (ta ? " aT" : "") + (tb ? " bT" : "");
        grad_check("matmul", shape, "a", a, da, loss);
        grad_check("matmul", shape, "b", b, db, loss);
      }
  int64_t rows = 4, k = 3, n = 5;
  Buf x = random_buf(rows * k, ++seed), wt = random_buf(n * k, ++seed), bias = random_buf(n, ++seed);
  Buf w = random_buf(rows * n, ++seed), y = zeros(rows * n);
  auto loss = [&]() {
    cpu::ref::linear(x.data(), wt.data(), bias.data(), y.data(), rows, k, n);
    return weighted_sum(y, w);
  };
  Buf dx = zeros(rows * k), dw = zeros(n * k), db = zeros(n);
  cpu::ref::linear_backward(x.data(), wt.data(), w.data(), dx.data(), dw.data(), db.data(), rows, k, n);
  grad_check("linear", "rows4 k3 n5", "x", x, dx, loss);
  grad_check("linear", "rows4 k3 n5", "w", wt, dw, loss);
  grad_check("linear", "rows4 k3 n5", "bias", bias, db, loss);
}

TEST_CASE("gradcheck: conv2d", "[backend][gradcheck]") {
  uint32_t seed = 2100;
  for (int variant = 0; variant < 2; ++variant) {
    cpu::Conv2dDims d;
    d.n = 2, d.c = 2, d.h = 5, d.w = 6, d.o = 3, d.kh = 3, d.kw = 2;
    d.stride_h = variant ? 2 : 1, d.stride_w = variant ? 2 : 1;
    d.pad_h = 1, d.pad_w = variant;
    int64_t ny = d.n * d.o * d.out_h() * d.out_w();
    Buf x = random_buf(d.n * d.c * d.h * d.w, ++seed), wt = random_buf(d.o * d.c * d.kh * d.kw, ++seed);
    Buf bias = random_buf(d.o, ++seed), w = random_buf(ny, ++seed), y = zeros(ny);
    auto loss = [&]() {
      cpu::ref::conv2d(x.data(), wt.data(), bias.data(), y.data(), d);
      return weighted_sum(y, w);
    };
    Buf dx = zeros(int64_t(x.size())), dw = zeros(int64_t(wt.size())), db = zeros(d.o);
    cpu::ref::conv2d_backward_data(w.data(), wt.data(), dx.data(), d);
    cpu::ref::conv2d_backward_weights(x.data(), w.data(), dw.data(), db.data(), d);
    std::string shape = variant ? "x[2,2,5,6] w[3,2,3,2] s2 p11" : "x[2,2,5,6] w[3,2,3,2] s1 p10";
    grad_check("conv2d", shape, "x", x, dx, loss);
    grad_check("conv2d", shape, "w", wt, dw, loss);
    grad_check("conv2d", shape, "bias", bias, db, loss);
  }
}

TEST_CASE("gradcheck: softmax / log_softmax / layer_norm", "[backend][gradcheck]") {
  uint32_t seed = 2200;
  int64_t rows = 3, cols = 5, n = rows * cols;
  Buf x = random_buf(n, ++seed, -2, 2), w = random_buf(n, ++seed), y = zeros(n), dx = zeros(n);
  auto sm_loss = [&]() {
    cpu::ref::softmax(x.data(), y.data(), rows, cols);
    return weighted_sum(y, w);
  };
  sm_loss();
  cpu::ref::softmax_backward(y.data(), w.data(), dx.data(), rows, cols);
  grad_check("softmax", "[3,5]", "x", x, dx, sm_loss);
  auto lsm_loss = [&]() {
    cpu::ref::log_softmax(x.data(), y.data(), rows, cols);
    return weighted_sum(y, w);
  };
  lsm_loss();
  cpu::ref::log_softmax_backward(y.data(), w.data(), dx.data(), rows, cols);
  grad_check("log_softmax", "[3,5]", "x", x, dx, lsm_loss);

  cols = 6, n = rows * cols;
  const float eps = 1e-5f;
  Buf lx = random_buf(n, ++seed, -2, 2), gamma = random_buf(cols, ++seed, 0.5f, 1.5f);
  Buf beta = random_buf(cols, ++seed), lw = random_buf(n, ++seed), ly = zeros(n);
  Buf mean = zeros(rows), rstd = zeros(rows);
  auto ln_loss = [&]() {
    cpu::ref::layer_norm(lx.data(), gamma.data(), beta.data(), ly.data(), mean.data(), rstd.data(),
                         rows, cols, eps);
    return weighted_sum(ly, lw);
  };
  ln_loss();
  Buf ldx = zeros(n), dgamma = zeros(cols), dbeta = zeros(cols);
  cpu::ref::layer_norm_backward(lx.data(), gamma.data(), mean.data(), rstd.data(), lw.data(),
                                ldx.data(), dgamma.data(), dbeta.data(), rows, cols, eps);
  grad_check("layer_norm", "[3,6]", "x", lx, ldx, ln_loss);
  grad_check("layer_norm", "[3,6]", "gamma", gamma, dgamma, ln_loss);
  grad_check("layer_norm", "[3,6]", "beta", beta, dbeta, ln_loss);
}

TEST_CASE("gradcheck: activations", "[backend][gradcheck]") {
  const std::pair<cpu::Activation, const char*> acts[] = {
      {cpu::Activation::relu, "relu"},         {cpu::Activation::gelu_tanh, "gelu_tanh"},
      {cpu::Activation::gelu_erf, "gelu_erf"}, {cpu::Activation::sigmoid, "sigmoid"},
      {cpu::Activation::tanh, "tanh"}};
  int64_t n = 16;
  // |x| >= 0.1 > h keeps relu's differences off the kink.
  Buf x = random_away_from_zero(n, 2300, 0.1f, 3.0f), w = random_buf(n, 2301), y = zeros(n);
  for (const auto& [act, name] : acts) {
    cpu::Activation a = act;
    auto loss = [&]() {
      cpu::ref::activation(a, x.data(), y.data(), n);
      return weighted_sum(y, w);
    };
    Buf dx = zeros(n);
    cpu::ref::activation_backward(a, x.data(), w.data(), dx.data(), n);
    grad_check(name, "n16", "x", x, dx, loss);
  }
}

TEST_CASE("gradcheck: losses and dropout", "[backend][gradcheck]") {
  uint32_t seed = 2400;
  int64_t rows = 4, classes = 6;
  Buf logits = random_buf(rows * classes, ++seed, -2, 2);
  std::vector<int32_t> targets = {0, 5, 2, 2};
  const float dloss = 0.8f;
  auto ce_loss = [&]() {
    return double(dloss) * cpu::ref::cross_entropy(logits.data(), targets.data(), rows, classes);
  };
  Buf dlogits = zeros(rows * classes);
  cpu::ref::cross_entropy_backward(logits.data(), targets.data(), dloss, dlogits.data(), rows, classes);
  grad_check("cross_entropy", "[4,6]", "logits", logits, dlogits, ce_loss);

  int64_t n = 10;
  Buf pred = random_buf(n, ++seed), target = random_buf(n, ++seed);
  auto mse_loss = [&]() { return double(dloss) * cpu::ref::mse(pred.data(), target.data(), n); };
  Buf dpred = zeros(n), dtarget = zeros(n);
  cpu::ref::mse_backward(pred.data(), target.data(), dloss, dpred.data(), dtarget.data(), n);
  grad_check("mse", "n10", "pred", pred, dpred, mse_loss);
  grad_check("mse", "n10", "target", target, dtarget, mse_loss);

  n = 40;
  Buf x = random_buf(n, ++seed), w = random_buf(n, ++seed), y = zeros(n), dx = zeros(n);
  auto drop_loss = [&]() {
    cpu::ref::dropout(x.data(), y.data(), n, 0.3f, 77, 5);
    return weighted_sum(y, w);
  };
  cpu::ref::dropout_backward(w.data(), dx.data(), n, 0.3f, 77, 5);
  grad_check("dropout", "n40 p0.3", "x", x, dx, drop_loss);
}

}  // namespace nns::backend::test
