// Conformance table, normalisation / activations / losses / training ops:
// fast vs ref, forward and backward.
//
// Tolerances (error measure: backend_test_util.h):
// - softmax, log_softmax, activations 1e-5: oneDNN evaluates exp, tanh and
//   erf with its own polynomial approximations (a few ulp), ref in double
//   through libm; nothing is summed over more than 1000 terms.
// - layer_norm 1e-4: oneDNN computes the statistics in float and the
//   backward goes through the rstd -> variance round trip; dgamma/dbeta sum
//   over up to 64 rows.
// - losses 1e-5: float exp against double, one scalar result;
//   cross_entropy runs on oneDNN's softmax / log_softmax (see above).
// - optimizer steps 1e-5: float against double arithmetic on one update.
// - dropout 0: both namespaces draw the same Philox bits and apply the same
//   float multiply, so they must agree bit for bit.
#include "backend_test_util.h"

namespace nns::backend::test {

TEST_CASE("conformance: softmax / log_softmax", "[backend][conformance]") {
  struct Case {
    int64_t rows, cols;
    float range;  // logits in [-range, range): 30 tests the max subtraction
  };
  std::vector<Case> cases = {{1, 1, 1}, {3, 7, 1}, {17, 129, 3}, {64, 1000, 5}, {4, 33, 30}};
  uint32_t seed = 400;
  for (const Case& c : cases) {
    int64_t n = c.rows * c.cols;
    Buf x = random_buf(n, ++seed, -c.range, c.range), dy = random_buf(n, ++seed);
    std::string name = "rows" + std::to_string(c.rows) + " cols" + std::to_string(c.cols) +
                       " range" + std::to_string(int(c.range));
    Buf y_ref = zeros(n), y_fast = zeros(n), dx_ref = zeros(n), dx_fast = zeros(n);
    cpu::ref::softmax(x.data(), y_ref.data(), c.rows, c.cols);
    cpu::fast::softmax(x.data(), y_fast.data(), c.rows, c.cols);
    expect_close("softmax", name, "y", y_fast, y_ref, 1e-5);
    cpu::ref::softmax_backward(y_ref.data(), dy.data(), dx_ref.data(), c.rows, c.cols);
    cpu::fast::softmax_backward(y_ref.data(), dy.data(), dx_fast.data(), c.rows, c.cols);
    expect_close("softmax_backward", name, "dx", dx_fast, dx_ref, 1e-5);

    cpu::ref::log_softmax(x.data(), y_ref.data(), c.rows, c.cols);
    cpu::fast::log_softmax(x.data(), y_fast.data(), c.rows, c.cols);
    // Log-probabilities live on a scale of 1 nat: oneDNN's log(1) is 1.4e-6, not 0.
    expect_close("log_softmax", name, "y", y_fast, y_ref, 1e-5, /*scale_floor=*/1.0);
    cpu::ref::log_softmax_backward(y_ref.data(), dy.data(), dx_ref.data(), c.rows, c.cols);
    cpu::fast::log_softmax_backward(y_ref.data(), dy.data(), dx_fast.data(), c.rows, c.cols);
    expect_close("log_softmax_backward", name, "dx", dx_fast, dx_ref, 1e-5);
  }
}

TEST_CASE("conformance: layer_norm", "[backend][conformance]") {
  struct Case {
    int64_t rows, cols;
    bool affine;
    float shift;  // a large common offset tests a one-pass variance
  };
  std::vector<Case> cases = {{1, 1, true, 0},    {4, 7, true, 0},   {33, 256, true, 0},
                             {33, 256, false, 0}, {8, 96, true, 5}, {64, 1024, true, 0}};
  uint32_t seed = 500;
  const float eps = 1e-5f;
  for (const Case& c : cases) {
    int64_t n = c.rows * c.cols;
    Buf x = random_buf(n, ++seed, -1 + c.shift, 1 + c.shift), dy = random_buf(n, ++seed);
    Buf gamma = random_buf(c.cols, ++seed, 0.5f, 1.5f), beta = random_buf(c.cols, ++seed);
    const float* g = c.affine ? gamma.data() : nullptr;
    const float* b = c.affine ? beta.data() : nullptr;
    std::string name = "rows" + std::to_string(c.rows) + " cols" + std::to_string(c.cols) +
                       (c.affine ? " affine" : "") + (c.shift != 0 ? " shifted" : "");
    Buf y_ref = zeros(n), y_fast = zeros(n);
    Buf mean_ref = zeros(c.rows), rstd_ref = zeros(c.rows), mean_fast = zeros(c.rows),
        rstd_fast = zeros(c.rows);
    cpu::ref::layer_norm(x.data(), g, b, y_ref.data(), mean_ref.data(), rstd_ref.data(), c.rows,
                         c.cols, eps);
    cpu::fast::layer_norm(x.data(), g, b, y_fast.data(), mean_fast.data(), rstd_fast.data(), c.rows,
                          c.cols, eps);
    expect_close("layer_norm", name, "y", y_fast, y_ref, 1e-4);
    expect_close("layer_norm", name, "mean", mean_fast, mean_ref, 1e-5);
    expect_close("layer_norm", name, "rstd", rstd_fast, rstd_ref, 1e-4);
    // Inference form (no statistics) gives the same y.
    Buf y_inf = zeros(n);
    cpu::fast::layer_norm(x.data(), g, b, y_inf.data(), nullptr, nullptr, c.rows, c.cols, eps);
    expect_close("layer_norm(no stats)", name, "y", y_inf, y_ref, 1e-4);

    Buf dx_ref = zeros(n), dx_fast = zeros(n), dg_ref = zeros(c.cols), dg_fast = zeros(c.cols),
        db_ref = zeros(c.cols), db_fast = zeros(c.cols);
    cpu::ref::layer_norm_backward(x.data(), g, mean_ref.data(), rstd_ref.data(), dy.data(),
                                  dx_ref.data(), dg_ref.data(), db_ref.data(), c.rows, c.cols, eps);
    cpu::fast::layer_norm_backward(x.data(), g, mean_ref.data(), rstd_ref.data(), dy.data(),
                                   dx_fast.data(), dg_fast.data(), db_fast.data(), c.rows, c.cols,
                                   eps);
    expect_close("layer_norm_backward", name, "dx", dx_fast, dx_ref, 1e-4);
    expect_close("layer_norm_backward", name, "dgamma", dg_fast, dg_ref, 1e-4);
    expect_close("layer_norm_backward", name, "dbeta", db_fast, db_ref, 1e-4);
  }
}

TEST_CASE("conformance: activations", "[backend][conformance]") {
  const std::pair<cpu::Activation, const char*> acts[] = {
      {cpu::Activation::relu, "relu"},         {cpu::Activation::gelu_tanh, "gelu_tanh"},
      {cpu::Activation::gelu_erf, "gelu_erf"}, {cpu::Activation::sigmoid, "sigmoid"},
      {cpu::Activation::tanh, "tanh"}};
  uint32_t seed = 600;
  for (int64_t n : {1, 7, 1000, 4099}) {
    // Away from relu's kink, where the two sides of the derivative disagree.
    Buf x = random_away_from_zero(n, ++seed, 0.01f, 5.0f), dy = random_buf(n, ++seed);
    for (const auto& [act, name] : acts) {
      Buf y_ref = zeros(n), y_fast = zeros(n), dx_ref = zeros(n), dx_fast = zeros(n);
      cpu::ref::activation(act, x.data(), y_ref.data(), n);
      cpu::fast::activation(act, x.data(), y_fast.data(), n);
      std::string shape = "n" + std::to_string(n);
      expect_close(std::string(name), shape, "y", y_fast, y_ref, 1e-5);
      cpu::ref::activation_backward(act, x.data(), dy.data(), dx_ref.data(), n);
      cpu::fast::activation_backward(act, x.data(), dy.data(), dx_fast.data(), n);
      expect_close(std::string(name) + "_backward", shape, "dx", dx_fast, dx_ref, 1e-5);
    }
  }
}

TEST_CASE("conformance: cross_entropy / mse", "[backend][conformance]") {
  uint32_t seed = 700;
  for (auto [rows, classes] : {std::pair<int64_t, int64_t>{1, 1}, {4, 5}, {16, 1000}, {3, 50257}}) {
    Buf logits = random_buf(rows * classes, ++seed, -4, 4);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    std::mt19937 gen(++seed);
    for (int32_t& t : targets) t = int32_t(gen() % uint32_t(classes));
    std::string name = "rows" + std::to_string(rows) + " classes" + std::to_string(classes);
    float l_ref = cpu::ref::cross_entropy(logits.data(), targets.data(), rows, classes);
    float l_fast = cpu::fast::cross_entropy(logits.data(), targets.data(), rows, classes);
    // A loss in nats (scale floor 1): oneDNN's log-softmax of one class is 1.4e-6, not 0.
    expect_close_scalar("cross_entropy", name, "loss", l_fast, l_ref, 1e-5, 1.0);
    Buf d_ref = zeros(rows * classes), d_fast = zeros(rows * classes);
    cpu::ref::cross_entropy_backward(logits.data(), targets.data(), 0.7f, d_ref.data(), rows,
                                     classes);
    cpu::fast::cross_entropy_backward(logits.data(), targets.data(), 0.7f, d_fast.data(), rows,
                                      classes);
    expect_close("cross_entropy_backward", name, "dlogits", d_fast, d_ref, 1e-5);
  }
  for (int64_t n : {1, 7, 1000, 10001}) {
    Buf p = random_buf(n, ++seed), t = random_buf(n, ++seed);
    std::string name = "n" + std::to_string(n);
    expect_close_scalar("mse", name, "loss", cpu::fast::mse(p.data(), t.data(), n),
                        cpu::ref::mse(p.data(), t.data(), n), 1e-5);
    Buf dp_ref = zeros(n), dt_ref = zeros(n), dp_fast = zeros(n), dt_fast = zeros(n);
    cpu::ref::mse_backward(p.data(), t.data(), 1.5f, dp_ref.data(), dt_ref.data(), n);
    cpu::fast::mse_backward(p.data(), t.data(), 1.5f, dp_fast.data(), dt_fast.data(), n);
    expect_close("mse_backward", name, "dpred", dp_fast, dp_ref, 1e-5);
    expect_close("mse_backward", name, "dtarget", dt_fast, dt_ref, 1e-5);
  }
}

TEST_CASE("conformance: dropout", "[backend][conformance]") {
  uint32_t seed = 800;
  for (float p : {0.0f, 0.1f, 0.5f, 1.0f})
    for (int64_t n : {1, 13, 1000})
      for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 40}) {
        Buf x = random_buf(n, ++seed);
        Buf y_ref = zeros(n), y_fast = zeros(n), dx_ref = zeros(n), dx_fast = zeros(n);
        std::ostringstream name;
        name << "p" << p << " n" << n << " off" << offset;
        cpu::ref::dropout(x.data(), y_ref.data(), n, p, 1234, offset);
        cpu::fast::dropout(x.data(), y_fast.data(), n, p, 1234, offset);
        expect_close("dropout", name.str(), "y", y_fast, y_ref, 0);
        cpu::ref::dropout_backward(x.data(), dx_ref.data(), n, p, 1234, offset);
        cpu::fast::dropout_backward(x.data(), dx_fast.data(), n, p, 1234, offset);
        expect_close("dropout_backward", name.str(), "dx", dx_fast, dx_ref, 0);
      }
}

TEST_CASE("conformance: optimizer steps and global norm", "[backend][conformance]") {
  uint32_t seed = 900;
  for (int64_t n : {1, 17, 1000}) {
    Buf param = random_buf(n, ++seed), buf0 = zeros(n);
    for (float momentum : {0.0f, 0.9f}) {
      Buf p_ref = param, p_fast = param, m_ref = buf0, m_fast = buf0;
      for (int step = 0; step < 3; ++step) {
        Buf g = random_buf(n, ++seed);
        float* mr = momentum != 0 ? m_ref.data() : nullptr;
        float* mf = momentum != 0 ? m_fast.data() : nullptr;
        cpu::ref::sgd_step(p_ref.data(), g.data(), mr, n, 0.1f, momentum, 0.01f);
        cpu::fast::sgd_step(p_fast.data(), g.data(), mf, n, 0.1f, momentum, 0.01f);
      }
      std::string name = "n" + std::to_string(n) + " momentum" + (momentum != 0 ? "0.9" : "0");
      expect_close("sgd_step x3", name, "param", p_fast, p_ref, 1e-5);
      expect_close("sgd_step x3", name, "buf", m_fast, m_ref, 1e-5);
    }
    Buf p_ref = param, p_fast = param, m_ref = buf0, m_fast = buf0, v_ref = buf0, v_fast = buf0;
    for (int64_t step = 1; step <= 5; ++step) {
      Buf g = random_buf(n, ++seed);
      cpu::ref::adamw_step(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, 1e-2f, 0.9f,
                           0.999f, 1e-8f, 0.1f, step);
      cpu::fast::adamw_step(p_fast.data(), g.data(), m_fast.data(), v_fast.data(), n, 1e-2f, 0.9f,
                            0.999f, 1e-8f, 0.1f, step);
    }
    std::string name = "n" + std::to_string(n);
    expect_close("adamw_step x5", name, "param", p_fast, p_ref, 1e-5);
    expect_close("adamw_step x5", name, "m", m_fast, m_ref, 1e-5);
    expect_close("adamw_step x5", name, "v", v_fast, v_ref, 1e-5);
  }
  Buf a = random_buf(1, ++seed), b = random_buf(1000, ++seed), c = random_buf(4097, ++seed);
  const float* bufs[] = {a.data(), b.data(), c.data()};
  const int64_t sizes[] = {1, 1000, 4097};
  double ss_ref = cpu::ref::sum_of_squares(bufs, sizes, 3);
  double ss_fast = cpu::fast::sum_of_squares(bufs, sizes, 3);
  expect_close_scalar("sum_of_squares", "[1],[1000],[4097]", "value", float(ss_fast), float(ss_ref),
                      1e-6);
  expect_close_scalar("global_l2_norm", "[1],[1000],[4097]", "value",
                      cpu::fast::global_l2_norm(bufs, sizes, 3),
                      cpu::ref::global_l2_norm(bufs, sizes, 3), 1e-6);
}

}  // namespace nns::backend::test
