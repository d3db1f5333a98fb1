// --verify's derived bound (backend/runtime/verify_bound.h) and how the
// verifier holds each gradient to its own bound; the weight drift.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/runtime/gradient_magnitude.h"
#include "backend/runtime/train_loop.h"
#include "backend/runtime/trainer.h"
#include "backend/runtime/verify_bound.h"
#include "semantics/autograd.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

// One linear layer without bias on 8 rows of 4 features, an MSE loss.
const char* kLinear =
    "model M() {\n"
    "  param w: [3, 4] = normal(0.5)\n"
    "  fn forward(x) { return linear(x, w) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [8, 4] = randn(1.0)\n"
    "  input y: [8, 3] = randn(1.0)\n"
    "  loss = mse(model(x), y)\n"
    "  optimizer = adamw(lr = 0.01)\n"
    "  steps = 2\n"
    "}\n";

struct Model : test::TrainingModel {
  explicit Model(const std::string& text) : TrainingModel("verify_bound_test", text) {}
};

std::string read_back(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  return text;
}

}  // namespace

TEST_CASE("gamma_n: n u / (1 - n u), infinite once n u reaches 1", "[verify]") {
  const double u = backend::DerivedBounds::kUnitRoundoff;
  CHECK(backend::gamma_n(0) == 0.0);
  CHECK(backend::gamma_n(1) == Approx(u / (1 - u)));
  CHECK(backend::gamma_n(1000) == Approx(1000 * u / (1 - 1000 * u)));
  CHECK(std::isinf(backend::gamma_n(int64_t{1} << 24)));
}

TEST_CASE("derive_bounds: the chain of reductions feeding a gradient, and what a plan adds", "[verify]") {
  Model m(kLinear);
  backend::BoundShape one;
  backend::DerivedBounds b = backend::derive_bounds(m.interp->graph(), m.info, one);
  REQUIRE(b.gradient.count("w"));
  CHECK(b.unanalysed_nodes == 0);
  // w's gradient sums x * dy over the 8 rows; dy comes from the loss,
  // which reads the forward product (4 terms): the chain is at least 8 + 4
  // long, and on one device both sides share it.
  CHECK(b.length.at("w") >= 12);
  CHECK(b.gradient.at("w") == Approx(2 * backend::gamma_n(b.length.at("w"))));
  CHECK(b.loss > 0);
  // A plan over 4 devices may add up to 3 partial sums to every reduction,
  // replicas and micro-batches add their accumulation: the bound grows, but
  // stays of the order of the one-device one (no plan can be held to less).
  backend::BoundShape plan = one;
  plan.plan_devices = 4;
  backend::DerivedBounds bp = backend::derive_bounds(m.interp->graph(), m.info, plan);
  CHECK(bp.gradient.at("w") > b.gradient.at("w"));
  CHECK(bp.length.at("w") >= b.length.at("w") + 3);
  backend::BoundShape acc = one;
  acc.replicas = 2;
  acc.micro_batches = 3;
  backend::DerivedBounds ba = backend::derive_bounds(m.interp->graph(), m.info, acc);
  CHECK(ba.gradient.at("w") > b.gradient.at("w"));
  // Clipping adds the norm's error: the largest bound, the sum of squares'.
  backend::BoundShape clip = one;
  clip.clip = true;
  CHECK(backend::derive_bounds(m.interp->graph(), m.info, clip).gradient.at("w") > 2 * b.gradient.at("w"));
  // A 1% error is far outside it: the bound is a few thousandths of that.
  CHECK(bp.gradient.at("w") < 1e-4);
}

TEST_CASE("StepVerifier with derived bounds: each gradient against its own, the verdict in the summary", "[verify]") {
  Model m(kLinear);
  auto be = backend::make_cpu_backend(true), ref_be = backend::make_cpu_backend(true);
  be->set_threads(1);
  ref_be->set_threads(1);
  backend::BoundShape shape;
  backend::DerivedBounds bounds = backend::derive_bounds(m.interp->graph(), m.info, shape);
  {
    // The same computation on both sides: error 0, PASS, the bound printed.
    backend::Trainer run(m.interp->graph(), m.info, m.spec, *be, {});
    backend::Trainer ref(m.interp->graph(), m.info, m.spec, *ref_be, {});
    std::FILE* out = std::tmpfile();
    REQUIRE(out);
    backend::LoopOptions o;
    o.steps = m.spec.steps;
    o.verify = true;
    o.reference = &ref;
    o.reference_micro_batches = 1;
    o.verify_bounds = &bounds;
    o.out = out;
    CHECK(backend::run_train_loop(run, o) == backend::LoopResult::Ok);
    std::string text = read_back(out);
    std::fclose(out);
    CHECK(text.find("largest error/bound 0 (") != std::string::npos);
    CHECK(text.find(": PASS (fp32 derived bounds: largest error/bound 0, ") != std::string::npos);
  }
  {
    // Gradients 1% off: the ratio is far above 1, naming w, error and bound.
    backend::Trainer run(m.interp->graph(), m.info, m.spec, *be, {});
    backend::Trainer ref(m.interp->graph(), m.info, m.spec, *ref_be, {});
    backend::StepVerifier v(ref, 1e-6, &bounds);
    double loss = run.step().loss;
    backend::TensorMap g = run.last_gradients();
    for (float& x : g.at("w")) x *= 1.01f;
    backend::StepComparison c = v.compare(loss, g, run.parameters());
    CHECK(c.ratio_name == "w");
    CHECK(c.ratio_error == Approx(0.01).epsilon(1e-3));
    // The bound is the derived one times the condition of w's sum in this step.
    CHECK(c.ratio_condition >= 1);
    CHECK(c.ratio_bound == Approx(bounds.gradient.at("w") * c.ratio_condition));
    CHECK(c.ratio > 100);
    CHECK(v.worst_ratio().ratio == c.ratio);
  }
}

TEST_CASE("conditioned_bounds: each chain term times its sum's condition, then the clip term", "[verify]") {
  backend::DerivedBounds b;
  b.chain = {{"a", 1e-4}, {"b", 2e-4}};
  b.gradient = b.chain;
  CHECK(backend::conditioned_bounds(b, {}) == b.gradient);
  auto k = backend::conditioned_bounds(b, {{"a", 10.0}, {"b", 0.5}});  // below 1 counts as 1
  CHECK(k.at("a") == Approx(1e-3));
  CHECK(k.at("b") == Approx(2e-4));
  b.clip = true;
  b.clip_extra = 1e-6;
  k = backend::conditioned_bounds(b, {{"a", 10.0}});
  CHECK(k.at("a") == Approx(1e-3 + 1e-3 + 1e-6));  // the norm's error: the largest conditioned term
  CHECK(k.at("b") == Approx(2e-4 + 1e-3 + 1e-6));
  // With the gradients' norms, the global norm's error weighs each tensor
  // by its norm: a tensor whose sum cancels to almost nothing (kappa 1e6)
  // adds next to nothing to it.
  k = backend::conditioned_bounds(b, {{"a", 1e6}}, {{"a", 1e-9}, {"b", 1.0}});
  CHECK(k.at("a") == Approx(100 + std::hypot(100 * 1e-9, 2e-4) + 1e-6));
  CHECK(k.at("b") == Approx(2e-4 + std::hypot(100 * 1e-9, 2e-4) + 1e-6));
}

// A bias added to 8 rows of 4, a linear layer and an MSE loss: b's
// gradient is the sum over the rows of dh = dp w, dp = c (p - y), terms of
// both signs; w's the sum over the rows of dp_r^T h_r.
const char* kBias =
    "model M() {\n"
    "  param b: [4] = normal(0.5)\n"
    "  param w: [3, 4] = normal(0.5)\n"
    "  fn forward(x) { return linear(x + b, w) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [8, 4] = randn(1.0)\n"
    "  input y: [8, 3] = randn(1.0)\n"
    "  loss = mse(model(x), y)\n"
    "  optimizer = sgd(lr = 0.01)\n"
    "  steps = 1\n"
    "}\n";

TEST_CASE("GradientMagnitudes: the condition sum |c_j| / |sum c_j| of each parameter gradient's sum", "[verify]") {
  using R = backend::GradientMagnitudes::Role;
  CHECK(backend::GradientMagnitudes::role_of("linear_backward") == R::Reduce);
  CHECK(backend::GradientMagnitudes::role_of("add_backward") == R::Reduce);
  CHECK(backend::GradientMagnitudes::role_of("reshape_backward") == R::Pass);
  CHECK(backend::GradientMagnitudes::role_of("add_n") == R::Pass);
  CHECK(backend::GradientMagnitudes::role_of("relu_backward") == R::None);
  CHECK(backend::GradientMagnitudes::role_of("softmax_backward") == R::None);

  Model m(kBias);
  auto be = backend::make_cpu_backend(true);
  be->set_threads(1);
  backend::Trainer t(m.interp->graph(), m.info, m.spec, *be, {});
  CHECK(t.gradient_conditions().empty());  // off until asked for
  t.track_gradient_magnitudes();
  const backend::TensorMap w0 = t.parameters();
  t.step();
  const backend::TensorMap g = t.last_gradients();
  const std::map<std::string, double> kappa = t.gradient_conditions();
  REQUIRE(kappa.count("b"));
  REQUIRE(kappa.count("w"));
  // Recompute both from the step's inputs in double: h = x + b, p = h w^T,
  // dp = c (p - y); b's gradient is sum_r (dp_r w), w's sum_r dp_r^T h_r.
  const sema::Graph& gr = m.interp->graph();
  std::vector<int> in = gr.inputs();
  t.keep_tensors(in);
  std::vector<float> x = t.tensor_values(in[0]), y = t.tensor_values(in[1]);
  const std::vector<float>&b = w0.at("b"), &w = w0.at("w");
  std::vector<double> gb(4, 0), sb(4, 0), gw(12, 0), sw(12, 0);
  for (int r = 0; r < 8; ++r) {
    double h[4], dp[3];
    for (int j = 0; j < 4; ++j) h[j] = static_cast<double>(x[r * 4 + j]) + b[j];
    for (int i = 0; i < 3; ++i) {
      double p = 0;
      for (int j = 0; j < 4; ++j) p += h[j] * w[i * 4 + j];
      dp[i] = p - y[r * 3 + i];  // the loss's constant factor cancels in the ratio
    }
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int i = 0; i < 3; ++i) {
        s += dp[i] * w[i * 4 + j];
        gw[i * 4 + j] += dp[i] * h[j];
        sw[i * 4 + j] += std::fabs(dp[i] * h[j]);
      }
      gb[j] += s;
      sb[j] += std::fabs(s);  // the add's terms: dh_rj as computed (its own sum over i is upstream)
    }
  }
  auto ratio = [](const std::vector<double>& s, const std::vector<double>& gg) {
    double a = 0, c = 0;
    for (size_t i = 0; i < s.size(); ++i) a += s[i] * s[i], c += gg[i] * gg[i];
    return std::sqrt(a / c);
  };
  CHECK(kappa.at("w") == Approx(ratio(sw, gw)).epsilon(1e-4));
  CHECK(kappa.at("b") == Approx(ratio(sb, gb)).epsilon(1e-4));
  CHECK(kappa.at("b") > 1.05);  // random signs: a visible cancellation
  CHECK(g.at("b").size() == 4);
}

TEST_CASE("run_train_loop fails a run whose update alone is wrong", "[verify]") {
  Model m(kLinear);
  auto be = backend::make_cpu_backend(true), ref_be = backend::make_cpu_backend(true);
  be->set_threads(1);
  ref_be->set_threads(1);
  backend::Trainer ref(m.interp->graph(), m.info, m.spec, *ref_be, {});
  // The run updates with a learning rate 10% too large: gradients agree, the update does not.
  sema::TrainSpec wrong = m.spec;
  wrong.optimizer.lr *= 1.1;
  backend::Trainer run(m.interp->graph(), m.info, wrong, *be, {});
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  backend::LoopOptions o;
  o.steps = m.spec.steps;
  o.verify = true;
  o.reference = &ref;
  o.reference_micro_batches = 1;
  o.out = out;
  CHECK(backend::run_train_loop(run, o) == backend::LoopResult::VerifyFailed);
  std::string text = read_back(out);
  std::fclose(out);
  CHECK(text.find("over losses and gradients, ") != std::string::npos);
  CHECK(text.find(": FAIL (") != std::string::npos);
}

TEST_CASE("weight_drift: normwise over all weights, and the tensor farthest off", "[verify]") {
  backend::TensorMap free_running = {{"a", {3, 4}}, {"b", {1, 0}}};
  backend::TensorMap run = {{"a", {3, 4}}, {"b", {1.5f, 0}}};
  backend::WeightDrift d = backend::weight_drift(run, free_running);
  CHECK(d.worst_name == "b");
  CHECK(d.worst == Approx(0.5));
  CHECK(d.overall == Approx(0.5 / std::sqrt(26.0)));
  CHECK(backend::weight_drift(free_running, free_running).overall == 0.0);
}
