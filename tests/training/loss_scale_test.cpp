// fp16 dynamic loss scaling (backend/runtime/loss_scale.h): the policy on its
// own, and a single-device Trainer whose seeded loss gradient overflows
// fp16 on purpose, so that steps are skipped (weights untouched, AdamW's
// step count not advanced), the scale backs off, and grows again after the
// interval. The plan executor's side (every rank deciding the same) runs in
// tests/plan/mixed_precision.sh under --verify.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <unistd.h>

#include "backend/runtime/loss_scale.h"
#include "backend/runtime/trainer.h"
#include "semantics/autograd.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

TEST_CASE("LossScaler: back off on inf/NaN, grow after the interval", "[loss_scale]") {
  sema::LossScaleSpec spec;
  spec.init = 8;
  spec.interval = 3;
  backend::LossScaler s(spec, true);
  CHECK(s.scale() == 8.f);
  CHECK_FALSE(s.finish_step(std::numeric_limits<double>::infinity()));
  CHECK(s.scale() == 4.f);
  CHECK(s.skipped() == 1);
  CHECK_FALSE(s.finish_step(std::numeric_limits<double>::quiet_NaN()));
  CHECK(s.scale() == 2.f);
  CHECK(s.finish_step(1.0));
  CHECK(s.finish_step(1.0));
  CHECK(s.scale() == 2.f);  // two good steps of three
  CHECK(s.finish_step(1.0));
  CHECK(s.scale() == 4.f);  // the third: grown
  CHECK(s.finish_step(1.0));
  CHECK_FALSE(s.finish_step(std::numeric_limits<double>::infinity()));  // an overflow restarts the count
  CHECK(s.finish_step(1.0));
  CHECK(s.finish_step(1.0));
  CHECK(s.scale() == 2.f);
  CHECK(s.skipped() == 3);
  // A checkpoint's state round-trips.
  std::map<std::string, std::string> meta;
  backend::add_loss_scale_metadata(s, meta);
  backend::LossScaler t(spec, true);
  backend::read_loss_scale_metadata(meta, "ckpt", t);
  CHECK(t.scale() == 2.f);
  CHECK(t.skipped() == 3);
  CHECK(t.finish_step(1.0));
  CHECK(t.scale() == 4.f);  // it had two good steps already
}

TEST_CASE("LossScaler: off (fp32, bf16) scales by 1 and never skips", "[loss_scale]") {
  backend::LossScaler s(sema::LossScaleSpec{}, false);
  CHECK(s.scale() == 1.f);
  CHECK(s.finish_step(std::numeric_limits<double>::infinity()));
  CHECK(s.skipped() == 0);
  std::map<std::string, std::string> meta;
  backend::add_loss_scale_metadata(s, meta);
  CHECK(meta.empty());
}

TEST_CASE("LossScaler: PyTorch GradScaler's defaults", "[loss_scale]") {
  sema::LossScaleSpec d;
  CHECK(d.init == 65536.0);
  CHECK(d.growth == 2.0);
  CHECK(d.backoff == 0.5);
  CHECK(d.interval == 2000);
}

namespace {

// loss = sum of the linear layer's outputs: the loss gradient reaching the
// layer's backward is exactly the scale in every element, so whether fp16
// overflows is known in advance: 2^17 and 2^16 round to inf (past 65504),
// 2^15 does not.
const char* kOverflow =
    "import \"nn\"\n"
    "model M() {\n"
    "  l = Linear(4, 3)\n"
    "  fn forward(x) { return l(x) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [8, 4] = randn(1.0)\n"
    "  loss = sum(sum(model(x)))\n"
    "  optimizer = adamw(lr = 0.01, weight_decay = 0.0)\n"
    "  precision = \"fp16\"\n"
    "  loss_scale = dynamic_loss_scale(init = 131072.0, interval = 2)\n"
    "  steps = 6\n"
    "}\n";

// One elaborated program and its training graph.
struct Model : test::TrainingModel {
  explicit Model(const std::string& text) : TrainingModel("loss_scale_test", text) {}
};

}  // namespace

TEST_CASE("fp16 Trainer: an overflowing step is skipped, the scale backs off and grows back", "[loss_scale]") {
  Model m(kOverflow);
  REQUIRE(m.spec.precision == "fp16");
  REQUIRE(m.spec.loss_scale.interval == 2);
  auto be = backend::make_cpu_backend(false);
  be->set_precision(backend::Precision::F16);
  backend::Trainer t(m.interp->graph(), m.info, m.spec, *be, backend::TrainOptions{});
  const backend::TensorMap w0 = t.parameters();

  // Steps 1 and 2: the seed 2^17, then 2^16, is inf in fp16: skipped, nothing moves.
  backend::StepStats s1 = t.step();
  CHECK(s1.loss_scale == 131072.0);
  CHECK(s1.skipped);
  CHECK_FALSE(std::isfinite(s1.grad_norm));
  CHECK(t.parameters() == w0);
  backend::StepStats s2 = t.step();
  CHECK(s2.loss_scale == 65536.0);
  CHECK(s2.skipped);
  CHECK(s2.skipped_total == 2);
  CHECK(t.parameters() == w0);

  // Step 3 at 2^15: finite, applied. AdamW's first update moves each weight
  // by lr * g / (|g| + eps), about lr: its step count is 1, not 3 (with 3,
  // the bias corrections would make it 0.64 lr).
  backend::StepStats s3 = t.step();
  CHECK(s3.loss_scale == 32768.0);
  CHECK_FALSE(s3.skipped);
  CHECK(std::isfinite(s3.grad_norm));
  const backend::TensorMap w3 = t.parameters();
  const std::vector<float>& before = w0.at("l.weight");
  const std::vector<float>& after = w3.at("l.weight");
  for (size_t i = 0; i < before.size(); ++i) CHECK(std::fabs(after[i] - before[i]) == Approx(0.01).epsilon(1e-3));
  // The gradient the update saw is unscaled: dloss/dW[o][i] = sum of x[:, i]
  // (every output's gradient is 1), whatever the scale was.
  const backend::TensorMap g3 = t.last_gradients();
  double gmax = 0;
  for (float v : g3.at("l.weight")) gmax = std::max(gmax, static_cast<double>(std::fabs(v)));
  CHECK(gmax > 0.5);   // sums of 8 standard normals
  CHECK(gmax < 50.0);  // not 32768 times that

  // Step 4: the second good step of the interval: applied, and the scale
  // doubles for step 5, where 2^16 overflows again.
  backend::StepStats s4 = t.step();
  CHECK(s4.loss_scale == 32768.0);
  CHECK_FALSE(s4.skipped);
  backend::StepStats s5 = t.step();
  CHECK(s5.loss_scale == 65536.0);
  CHECK(s5.skipped);
  CHECK(s5.skipped_total == 3);
  backend::StepStats s6 = t.step();
  CHECK(s6.loss_scale == 32768.0);
  CHECK_FALSE(s6.skipped);
}

TEST_CASE("fp16 Trainer: compute_gradients reports unscaled gradients", "[loss_scale]") {
  // A scale that does not overflow (2^15): the gradients of the sum are the
  // column sums of x, whatever the scale, as in fp32 up to fp16 rounding.
  Model m(kOverflow);
  m.spec.loss_scale.init = 32768;
  auto be16 = backend::make_cpu_backend(false), be32 = backend::make_cpu_backend(false);
  be16->set_precision(backend::Precision::F16);
  sema::TrainSpec spec32 = m.spec;
  spec32.precision = "fp32";
  backend::Trainer t16(m.interp->graph(), m.info, m.spec, *be16, backend::TrainOptions{});
  backend::Trainer t32(m.interp->graph(), m.info, spec32, *be32, backend::TrainOptions{});
  t16.compute_gradients();
  t32.compute_gradients();
  const std::vector<float> g16 = t16.last_gradients().at("l.weight"), g32 = t32.last_gradients().at("l.weight");
  REQUIRE(g16.size() == g32.size());
  for (size_t i = 0; i < g16.size(); ++i) CHECK(g16[i] == Approx(g32[i]).epsilon(2e-3).margin(1e-3));
}

namespace {
std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  return text;
}
}  // namespace

TEST_CASE("--verify compares the skip decisions of fp16 loss scaling", "[loss_scale][verify]") {
  Model m(kOverflow);
  auto run_be = backend::make_cpu_backend(false), ref_be = backend::make_cpu_backend(false);
  run_be->set_precision(backend::Precision::F16);
  ref_be->set_precision(backend::Precision::F16);
  auto loop = [&](const sema::TrainSpec& ref_spec, std::string& text) {
    backend::Trainer run(m.interp->graph(), m.info, m.spec, *run_be, backend::TrainOptions{});
    backend::Trainer ref(m.interp->graph(), m.info, ref_spec, *ref_be, backend::TrainOptions{});
    std::FILE* out = std::tmpfile();
    REQUIRE(out);
    backend::LoopOptions o;
    o.steps = 4;
    o.verify = true;
    o.reference = &ref;
    o.reference_micro_batches = 1;
    o.verify_bound = 1e-2;
    o.out = out;
    backend::LoopResult r = backend::run_train_loop(run, o);
    text = read_all(out);
    std::fclose(out);
    return r;
  };
  // The same policy on both sides: the same steps skipped, and a skipped
  // step (inf/NaN gradients on both sides) compares its weights only.
  std::string text;
  CHECK(loop(m.spec, text) == backend::LoopResult::Ok);
  CHECK(text.find("update skipped") != std::string::npos);
  CHECK(text.find("decided differently") == std::string::npos);
  // A reference that starts at a scale that does not overflow applies the
  // first step the run skips: the comparison fails and says why.
  sema::TrainSpec other = m.spec;
  other.loss_scale.init = 32768;
  CHECK(loop(other, text) == backend::LoopResult::VerifyFailed);
  CHECK(text.find("the run skipped this step's update and one device did not (loss scaling decided differently)") != std::string::npos);
}
