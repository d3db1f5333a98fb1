// The shared training loop (backend/runtime/train_loop.h): the --verify
// comparison as library calls, the loop over a TrainSession, and the
// optimizer arithmetic both trainers share (backend/runtime/optimizer.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <unistd.h>

#include "backend/runtime/lr_horizon.h"
#include "backend/runtime/optimizer.h"
#include "backend/runtime/train_loop.h"
#include "backend/runtime/trainer.h"
#include "semantics/autograd.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

// Everything a stream printed, read back from its temporary file.
std::string read_back(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  return text;
}

// A session with scripted losses and fixed tensors.
struct FakeSession : backend::TrainSession {
  std::vector<double> losses;
  int64_t done = 0;
  backend::StepStats step() override {
    backend::StepStats st;
    st.step = ++done;
    st.loss = losses.at(static_cast<size_t>(done - 1));
    st.seconds = 0.001;
    st.lr = 0.1;
    return st;
  }
  int64_t steps_done() const override { return done; }
  int64_t samples_per_step() const override { return 8; }
  bool counts_tokens() const override { return false; }
  int64_t peak_bytes() const override { return 2048; }
  backend::TensorMap parameters() override { return {{"w", {1, 2}}}; }
  backend::TensorMap last_gradients() override { return {{"w", {0.5f, 0.5f}}}; }
};

const char* kProgram =
    "import \"nn\"\n"
    "model M() {\n"
    "  l = Linear(4, 3)\n"
    "  fn forward(x) { return l(x) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [8, 4] = randn(1.0)\n"
    "  input y: [8, 3] = randn(1.0)\n"
    "  loss = mse(model(x), y)\n"
    "  optimizer = adamw(lr = 0.01)\n"
    "  steps = 3\n"
    "}\n";

// One elaborated program and its training graph.
struct Model : test::TrainingModel {
  explicit Model(const std::string& text) : TrainingModel("train_loop_test", text) {}
};

}  // namespace

TEST_CASE("learning_rate: warmup, then constant, cosine or linear decay", "[optimizer]") {
  sema::ScheduleSpec s;
  s.warmup = 2;
  CHECK(backend::learning_rate(s, 1.0, 10, 1) == Approx(0.5));
  CHECK(backend::learning_rate(s, 1.0, 10, 2) == Approx(1.0));
  CHECK(backend::learning_rate(s, 1.0, 10, 7) == Approx(1.0));  // constant
  s.kind = "cosine";
  s.min_lr = 0.1;
  CHECK(backend::learning_rate(s, 1.0, 10, 2) == Approx(1.0));
  CHECK(backend::learning_rate(s, 1.0, 10, 6) == Approx(0.55));  // half way: the mean of lr and min_lr
  CHECK(backend::learning_rate(s, 1.0, 10, 10) == Approx(0.1));
  CHECK(backend::learning_rate(s, 1.0, 10, 12) == Approx(0.1));  // past the end: stays at min_lr
  s.kind = "linear";
  CHECK(backend::learning_rate(s, 1.0, 10, 6) == Approx(0.55));
  CHECK(backend::learning_rate(s, 1.0, 10, 10) == Approx(0.1));
}

TEST_CASE("lr_horizon_warnings: a pinned horizon shorter than the run, more than one step at lr 0", "[optimizer]") {
  sema::ScheduleSpec s;
  s.kind = "cosine";
  s.steps = 10;
  // The horizon's last step is at min_lr 0: one such step says nothing.
  CHECK(backend::zero_lr_steps(s, 1.0, 10) == 1);
  CHECK(backend::lr_horizon_warnings(s, 1.0, 10).empty());
  // Past an unpinned horizon: only the lr-0 count.
  auto w = backend::lr_horizon_warnings(s, 1.0, 13);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("4 of this run's 13 steps") == 0);
  // Pinned: both; with a min_lr above 0, only the pinned one.
  s.pinned = true;
  CHECK(backend::lr_horizon_warnings(s, 1.0, 13).size() == 2);
  s.min_lr = 0.1;
  w = backend::lr_horizon_warnings(s, 1.0, 13);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("pinned at 10 steps, shorter than this run's 13; steps 11 to 13 train at the final rate (0.1)") !=
        std::string::npos);
  // A constant schedule has no horizon to outrun.
  s.kind = "constant";
  CHECK(backend::lr_horizon_warnings(s, 1.0, 13).empty());
}

TEST_CASE("clip_factor: 1 unless clipping is on and the norm exceeds it", "[optimizer]") {
  CHECK(backend::clip_factor(0, 5.0) == 1.0f);
  CHECK(backend::clip_factor(1.0, 0.5) == 1.0f);
  CHECK(backend::clip_factor(1.0, std::numeric_limits<double>::quiet_NaN()) == 1.0f);
  CHECK(backend::clip_factor(1.0, 4.0) == Approx(0.25).epsilon(1e-5));
  CHECK(backend::optimizer_slots(sema::OptimizerSpec{"adamw"}) == 2);
  CHECK(backend::optimizer_slots(sema::OptimizerSpec{"sgd"}) == 0);
  CHECK(std::string(backend::optimizer_slot_name("adamw", 1)) == "exp_avg_sq");
}

TEST_CASE("compare_tensors: normwise relative error, skips and missing tensors", "[verify]") {
  backend::TensorMap want{{"a", {3, 4}}, {"b", {1, 0}}};
  std::string worst;
  CHECK(backend::compare_tensors(want, want, worst) == 0.0);
  backend::TensorMap got{{"a", {3, 4}}, {"b", {1, 0.5f}}};
  CHECK(backend::compare_tensors(got, want, worst) == Approx(0.5));
  CHECK(worst == "b");
  worst.clear();
  CHECK(backend::compare_tensors(got, want, worst, 1e-30, {"b"}) == 0.0);
  CHECK(backend::compare_tensors({{"a", {3, 4}}}, want, worst) == 1e30);
  CHECK(worst == "b (missing)");
}

TEST_CASE("loss_invariant finds parameters with a rounding-level gradient", "[verify]") {
  backend::TensorMap grads{{"w", {1.0f, 1e-9f}}, {"bias", {1e-8f, 0}}};
  double gmax = 0;
  CHECK(backend::loss_invariant(grads, gmax) == std::set<std::string>{"bias"});
  CHECK(gmax == Approx(1.0));
}

TEST_CASE("run_train_loop prints progress and the summary, and stops on divergence", "[loop]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  FakeSession s;
  s.losses = {2.0, 1.5, 1.0};
  backend::LoopOptions o;
  o.steps = 3;
  o.banner = "training\n";
  o.out = out;
  o.save = [] { return std::string("checkpoint: x (step 3)"); };
  CHECK(backend::run_train_loop(s, o) == backend::LoopResult::Ok);
  std::string text = read_back(out);
  CHECK(text.rfind("training\nstep    1/3  loss 2.000000  lr 0.1", 0) == 0);
  CHECK(text.find("done: 3 steps, loss 2.000000 -> 1.000000") != std::string::npos);
  CHECK(text.find(", peak memory 2.00 KiB\ncheckpoint: x (step 3)\n") != std::string::npos);
  // Resumed at the last step: nothing runs.
  CHECK(backend::run_train_loop(s, o) == backend::LoopResult::Ok);
  CHECK(read_back(out).find("nns: the checkpoint is at step 3; nothing left to run (raise --steps)") != std::string::npos);
  std::fclose(out);

  FakeSession bad;
  bad.losses = {1.0, std::nan("")};
  backend::LoopOptions quiet;
  quiet.steps = 2;
  quiet.rank = 1;  // ranks other than 0 print nothing
  CHECK(backend::run_train_loop(bad, quiet) == backend::LoopResult::Diverged);
}

TEST_CASE("run_train_loop --verify: a Trainer against an identical reference passes with zero error", "[loop][verify]") {
  Model m(kProgram);
  auto be = backend::make_cpu_backend(true), ref_be = backend::make_cpu_backend(true);
  be->set_threads(1);
  ref_be->set_threads(1);
  backend::Trainer run(m.interp->graph(), m.info, m.spec, *be, {});
  backend::Trainer ref(m.interp->graph(), m.info, m.spec, *ref_be, {});
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  backend::LoopOptions o;
  o.steps = m.spec.steps;
  o.verify = true;
  o.reference = &ref;
  o.reference_micro_batches = 1;
  o.out = out;
  CHECK(backend::run_train_loop(run, o) == backend::LoopResult::Ok);
  std::string text = read_back(out);
  std::fclose(out);
  CHECK(text.find("  verify vs 1 device x 1 micro-batches: loss 0.00e+00, gradients 0.00e+00, update 0.00e+00\n") !=
        std::string::npos);
  CHECK(
      text.find(
          "verify: largest relative error 0.00e+00 over losses and gradients, 0.00e+00 over the update: PASS (fp32 bound 1e-05; update 1e-06)") !=
      std::string::npos);
  CHECK(ref.steps_done() == 3);

  // A reference that starts from other weights fails the comparison.
  backend::Trainer run2(m.interp->graph(), m.info, m.spec, *be, {});
  backend::TrainOptions other;
  other.seed = 7;
  backend::Trainer ref2(m.interp->graph(), m.info, m.spec, *ref_be, other);
  backend::StepVerifier v(ref2);
  double loss = run2.step().loss;
  backend::StepComparison c = v.compare(loss, run2.last_gradients(), run2.parameters());
  CHECK(c.weights > 1e-3);
  CHECK(v.worst() > 1e-5);
}

TEST_CASE("run_train_loop validates every eval_every steps and saves only a new best", "[loop][validation]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  FakeSession s;
  s.losses = {2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3};
  std::vector<double> val = {3.0, 2.0, 2.5, 1.0};  // at steps 2, 4, 6, 8: 6 is no improvement
  std::vector<int64_t> validated, saved;
  backend::LoopOptions o;
  o.steps = 8;
  o.out = out;
  o.eval_every = 2;
  o.validate = [&] {
    validated.push_back(s.done);
    return val.at(validated.size() - 1);
  };
  o.save_best = [&] {
    saved.push_back(s.done);
    return "checkpoint: best (step " + std::to_string(s.done) + ")";
  };
  // --stop-after: the run ends after step 7 of 8 (so step 8's validation never comes).
  o.stop_after = 7;
  CHECK(backend::run_train_loop(s, o) == backend::LoopResult::Ok);
  CHECK(validated == std::vector<int64_t>{2, 4, 6});
  CHECK(saved == std::vector<int64_t>{2, 4});
  std::string text = read_back(out);
  CHECK(text.find("step    2/8  loss 1.900000") != std::string::npos);
  CHECK(text.find("  validation loss 2.000000  (best; checkpoint: best (step 4))\n") != std::string::npos);
  CHECK(text.find("  validation loss 2.500000\n") != std::string::npos);
  CHECK(text.find("done: 7 steps") != std::string::npos);
  std::fclose(out);
}

TEST_CASE("StepVerifier's update check: the run's weights must be the optimizer applied to its own gradients",
          "[loop][verify]") {
  Model m(kProgram);
  auto be = backend::make_cpu_backend(true), ref_be = backend::make_cpu_backend(true);
  be->set_threads(1);
  ref_be->set_threads(1);
  backend::Trainer run(m.interp->graph(), m.info, m.spec, *be, {});
  backend::Trainer ref(m.interp->graph(), m.info, m.spec, *ref_be, {});
  backend::StepVerifier v(ref);
  // Same weights, same gradients: the update, made from the run's
  // gradients on both sides, is exact.
  double loss = run.step().loss;
  backend::TensorMap g = run.last_gradients();
  backend::StepComparison c = v.compare(loss, g, run.parameters());
  CHECK(c.gradients == 0.0);
  CHECK(c.weights == 0.0);
  // A weight the run updated wrongly (1% off in one tensor) fails the update
  // check though its gradients agree.
  loss = run.step().loss;
  g = run.last_gradients();
  backend::TensorMap w = run.parameters();
  for (float& x : w.begin()->second) x *= 1.01f;
  c = v.compare(loss, g, w);
  CHECK(c.gradients < 1e-6);
  CHECK(c.weights > 1e-3);
  CHECK(c.worst_weight == w.begin()->first);
  CHECK(v.worst_update() > 1e-3);
  CHECK(v.worst() < 1e-5);
}
