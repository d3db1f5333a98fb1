// --verify's derived bound (backend/runtime/verify_bound.h) and how the
// verifier holds each gradient to its own bound; the weight drift.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

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
    CHECK(c.ratio_bound == Approx(bounds.gradient.at("w")));
    CHECK(c.ratio > 100);
    CHECK(v.worst_ratio().ratio == c.ratio);
  }
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
