// Conformance table, normalisation / activations / losses / training ops:
// forward and backward nodes through Backend::run_node on the reference and
// the tested backends (node_conformance.h); optimizer steps through the
// Backend's update methods. Checked on the CPU kernels directly (cpu::fast
// vs cpu::ref), because no graph node reaches them: layer_norm's mean/rstd
// outputs and its non-affine form, the tanh form of GELU (the graph's gelu
// is the exact erf form), and the gradient norm (the CPU backend computes
// sum_of_squares with the reference kernel in both modes).
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
#include "node_conformance.h"

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
    for (const char* kind : {"softmax", "log_softmax"}) {
      bool log = std::string(kind) == "log_softmax";
      NodeCase fwd{kind, {}, {f32({c.rows, c.cols}, x)}, {f32_zeros({c.rows, c.cols})}};
      // Log-probabilities live on a scale of 1 nat: oneDNN's log(1) is 1.4e-6, not 0.
      std::vector<HostTensor> y = expect_node(kind, name, fwd, {"y"}, 1e-5, /*scale_floor=*/log ? 1.0 : 0.0);
      NodeCase bwd = backward_case(fwd, y, {f32({c.rows, c.cols}, dy)}, {1});
      expect_node(bwd.kind, name, bwd, {"dx"}, 1e-5);
    }
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
    if (c.affine) {
      // The graph's layer_norm: x, weight, bias; the backward recomputes the statistics.
      NodeCase fwd{"layer_norm", {{"eps", double(eps)}}, {f32({c.rows, c.cols}, x), f32({c.cols}, gamma), f32({c.cols}, beta)},
                   {f32_zeros({c.rows, c.cols})}};
      std::vector<HostTensor> y = expect_node("layer_norm", name, fwd, {"y"}, 1e-4);
      NodeCase bwd = backward_case(fwd, y, {f32({c.rows, c.cols}, dy)}, {1, 1, 1});
      expect_node(bwd.kind, name, bwd, {"dx", "dgamma", "dbeta"}, 1e-4);
    }
    // Kernel level: the statistics outputs, and the non-affine form.
    Buf y_ref = zeros(n), y_fast = zeros(n);
    Buf mean_ref = zeros(c.rows), rstd_ref = zeros(c.rows), mean_fast = zeros(c.rows),
        rstd_fast = zeros(c.rows);
    cpu::ref::layer_norm(x.data(), g, b, y_ref.data(), mean_ref.data(), rstd_ref.data(), c.rows,
                         c.cols, eps);
    cpu::fast::layer_norm(x.data(), g, b, y_fast.data(), mean_fast.data(), rstd_fast.data(), c.rows,
                          c.cols, eps);
    expect_close("layer_norm(stats)", name, "y", y_fast, y_ref, 1e-4);
    expect_close("layer_norm(stats)", name, "mean", mean_fast, mean_ref, 1e-5);
    expect_close("layer_norm(stats)", name, "rstd", rstd_fast, rstd_ref, 1e-4);
    if (c.affine) continue;
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
      std::string shape = "n" + std::to_string(n);
      // The graph has both forms: gelu (erf, exact) and gelu_tanh (GPT-2).
      const char* kind = act == cpu::Activation::gelu_erf    ? "gelu"
                         : act == cpu::Activation::gelu_tanh ? "gelu_tanh"
                                                             : name;
      if (kind) {
        NodeCase fwd{kind, {}, {f32({n}, x)}, {f32_zeros({n})}};
        std::vector<HostTensor> y = expect_node(name, shape, fwd, {"y"}, 1e-5);
        NodeCase bwd = backward_case(fwd, y, {f32({n}, dy)}, {1});
        expect_node(std::string(name) + "_backward", shape, bwd, {"dx"}, 1e-5);
        continue;
      }
      Buf y_ref = zeros(n), y_fast = zeros(n), dx_ref = zeros(n), dx_fast = zeros(n);
      cpu::ref::activation(act, x.data(), y_ref.data(), n);
      cpu::fast::activation(act, x.data(), y_fast.data(), n);
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
    NodeCase fwd{"cross_entropy", {}, {f32({rows, classes}, logits), i32({rows}, targets)}, {f32_zeros({1})}};
    // A loss in nats (scale floor 1): oneDNN's log-softmax of one class is 1.4e-6, not 0.
    std::vector<HostTensor> loss = expect_node("cross_entropy", name, fwd, {"loss"}, 1e-5, 1.0);
    NodeCase bwd = backward_case(fwd, loss, {f32({1}, {0.7f})}, {1, 0});
    expect_node(bwd.kind, name, bwd, {"dlogits"}, 1e-5);
  }
  for (int64_t n : {1, 7, 1000, 10001}) {
    Buf p = random_buf(n, ++seed), t = random_buf(n, ++seed);
    std::string name = "n" + std::to_string(n);
    NodeCase fwd{"mse", {}, {f32({n}, p), f32({n}, t)}, {f32_zeros({1})}};
    std::vector<HostTensor> loss = expect_node("mse", name, fwd, {"loss"}, 1e-5);
    NodeCase bwd = backward_case(fwd, loss, {f32({1}, {1.5f})}, {1, 1});
    expect_node(bwd.kind, name, bwd, {"dpred", "dtarget"}, 1e-5);
  }
}

TEST_CASE("conformance: dropout", "[backend][conformance]") {
  uint32_t seed = 800;
  for (float p : {0.0f, 0.1f, 0.5f, 1.0f})
    for (int64_t n : {1, 13, 1000})
      for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 40}) {
        Buf x = random_buf(n, ++seed);
        std::ostringstream name;
        name << "p" << p << " n" << n << " off" << offset;
        // The mask is a function of (seed, step, element_offset + index).
        NodeCase fwd{"dropout", {{"p", double(p)}, {"seed", int64_t{1234}}, {"element_offset", static_cast<int64_t>(offset)}},
                     {f32({n}, x)}, {f32_zeros({n})}};
        std::vector<HostTensor> y = expect_node("dropout", name.str(), fwd, {"y"}, 0);
        NodeCase bwd = backward_case(fwd, y, {f32({n}, x)}, {1});
        expect_node(bwd.kind, name.str(), bwd, {"dx"}, 0);
      }
}

TEST_CASE("conformance: optimizer steps and global norm", "[backend][conformance]") {
  uint32_t seed = 900;
  // Through the Backend's update methods: device buffers for the parameter,
  // the gradient and the optimizer state, on the reference and each tested backend.
  struct Device {
    Backend& b;
    std::vector<std::pair<void*, size_t>> held;
    TensorView put(const Buf& host) {
      size_t bytes = host.size() * sizeof(float);
      TensorView v{b.allocate(bytes), sema::DType::F32, {static_cast<int64_t>(host.size())}};
      if (bytes) b.copy_from_host(v.data, host.data(), bytes);
      held.push_back({v.data, bytes});
      return v;
    }
    Buf get(const TensorView& v) {
      Buf host(static_cast<size_t>(v.numel()));
      if (!host.empty()) b.copy_to_host(host.data(), v.data, host.size() * sizeof(float));
      return host;
    }
    ~Device() {
      for (auto& [p, bytes] : held) b.release(p, bytes);
    }
  };
  std::vector<Backend*> backends{&reference_backend()};
  for (Backend* b : tested_backends()) backends.push_back(b);
  for (int64_t n : {1, 17, 1000}) {
    Buf param = random_buf(n, ++seed), buf0 = zeros(n);
    for (float momentum : {0.0f, 0.9f}) {
      std::vector<Buf> grads;
      for (int step = 0; step < 3; ++step) grads.push_back(random_buf(n, ++seed));
      std::vector<Buf> p_out, m_out;
      for (Backend* b : backends) {
        Device d{*b, {}};
        TensorView p = d.put(param);
        OptimizerState st;
        if (momentum != 0) st.buffers.push_back(d.put(buf0));
        for (const Buf& g : grads) b->sgd_update(p, d.put(g), st, 0.1f, momentum, 0.01f);
        p_out.push_back(d.get(p));
        m_out.push_back(momentum != 0 ? d.get(st.buffers[0]) : buf0);
      }
      std::string name = "n" + std::to_string(n) + " momentum" + (momentum != 0 ? "0.9" : "0");
      for (size_t k = 1; k < backends.size(); ++k) {
        expect_close("sgd_update x3", name, "param", p_out[k], p_out[0], 1e-5);
        expect_close("sgd_update x3", name, "buf", m_out[k], m_out[0], 1e-5);
      }
    }
    std::vector<Buf> grads;
    for (int64_t step = 1; step <= 5; ++step) grads.push_back(random_buf(n, ++seed));
    std::vector<Buf> p_out, m_out, v_out;
    for (Backend* b : backends) {
      Device d{*b, {}};
      TensorView p = d.put(param);
      OptimizerState st;
      st.buffers = {d.put(buf0), d.put(buf0)};
      for (int64_t step = 1; step <= 5; ++step)
        b->adamw_update(p, d.put(grads[size_t(step - 1)]), st, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, step);
      p_out.push_back(d.get(p));
      m_out.push_back(d.get(st.buffers[0]));
      v_out.push_back(d.get(st.buffers[1]));
    }
    std::string name = "n" + std::to_string(n);
    for (size_t k = 1; k < backends.size(); ++k) {
      expect_close("adamw_update x5", name, "param", p_out[k], p_out[0], 1e-5);
      expect_close("adamw_update x5", name, "m", m_out[k], m_out[0], 1e-5);
      expect_close("adamw_update x5", name, "v", v_out[k], v_out[0], 1e-5);
    }
  }
  // Kernel level: the CPU backend's sum_of_squares runs the reference kernel
  // in both modes, and global_l2_norm has no Backend method.
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
