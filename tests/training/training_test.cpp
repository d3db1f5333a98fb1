#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <array>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <unistd.h>

#include "backend/runtime/backend.h"
#include "backend/runtime/safetensors.h"
#include "backend/runtime/trainer.h"
#include "semantics/autograd.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

// One elaborated program with its training graph, trainer and backend.
struct Session : test::Elaboration {
  sema::TrainSpec spec;
  sema::TrainingGraphInfo info;
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<backend::Trainer> trainer;

  Session(const std::string& path, const std::string& config, bool reference, backend::TrainOptions opts = {},
          int64_t steps = 0)
      : Elaboration(config) {
    if (!load(path)) {
      diags.print(std::cerr, false);
      FAIL("elaboration failed: " << path);
    }
    spec = *interp->train();
    if (steps > 0) spec.steps = steps;
    info = sema::build_training_graph(interp->graph(), spec.optimizer.kind);
    be = backend::make_cpu_backend(reference);
    be->set_threads(1);
    trainer = std::make_unique<backend::Trainer>(interp->graph(), info, spec, *be, opts);
  }
};

std::string write_temp(const std::string& name, const std::string& text) { return test::write_temp("training_test", name, text); }

// A layer under test wrapped with an mse loss against a random target.
std::string layer_program(const std::string& model_body, const std::string& x_shape, const std::string& y_shape) {
  return "import \"nn\"\n"
         "model Under() {\n" + model_body + "\n}\n"
         "train {\n"
         "  model = Under()\n"
         "  input x: " + x_shape + " = randn(1.0)\n"
         "  input y: " + y_shape + " = randn(1.0)\n"
         "  loss = mse(model(x), y)\n"
         "  optimizer = sgd(lr = 0.1)\n"
         "}\n";
}

// Central finite differences on a sample of every parameter's elements
// against the gradient autograd + the reference kernels computed.
// `init` sets parameters first (the rest keep their initializers).
void check_gradients(const std::string& name, const std::string& program, int samples_per_param = 5, float eps = 1e-2f,
                     const std::map<std::string, std::vector<float>>& init = {}) {
  Session s(write_temp(name, program), "", /*reference=*/true);
  for (const auto& [p, v] : init) s.trainer->set_parameter(p, v);
  s.trainer->compute_gradients();
  auto grads = s.trainer->last_gradients();
  auto params = s.trainer->parameters();
  REQUIRE(!grads.empty());
  int checked = 0;
  std::set<std::string> buffers;
  for (const sema::TensorInfo& t : s.interp->graph().tensors())
    if (t.buffer) buffers.insert(t.name);
  for (auto& [pname, values] : params) {
    INFO("layer " << name << ", parameter " << pname);
    if (buffers.count(pname)) {  // model state: no gradient
      CHECK_FALSE(grads.count(pname));
      continue;
    }
    REQUIRE(grads.count(pname));
    const std::vector<float>& g = grads[pname];
    size_t n = values.size();
    for (int k = 0; k < samples_per_param && k < static_cast<int>(n); ++k) {
      size_t i = (static_cast<size_t>(k) * 7919u + 13u) % n;
      std::vector<float> plus = values, minus = values;
      plus[i] += eps;
      minus[i] -= eps;
      s.trainer->set_parameter(pname, plus);
      double lp = s.trainer->forward_loss();
      s.trainer->set_parameter(pname, minus);
      double lm = s.trainer->forward_loss();
      s.trainer->set_parameter(pname, values);
      double fd = (lp - lm) / (2.0 * eps);
      double tol = 2e-2 * std::max(std::fabs(fd), std::fabs(static_cast<double>(g[i]))) + 2e-4;
      INFO("element " << i << ": autograd " << g[i] << " vs finite difference " << fd);
      CHECK(std::fabs(fd - g[i]) <= tol);
      ++checked;
    }
  }
  CHECK(checked >= static_cast<int>(params.size() - buffers.size()));
}

}  // namespace

TEST_CASE("gradcheck: Linear", "[gradcheck]") {
  check_gradients("linear", layer_program("  l = Linear(8, 6)\n  fn forward(x) { return l(x) }", "[4, 8]", "[4, 6]"));
}

TEST_CASE("gradcheck: LayerNorm", "[gradcheck]") {
  check_gradients("layernorm",
                  layer_program("  param w: [8, 8] = normal(0.5)\n  n = LayerNorm(8)\n  fn forward(x) { return n(linear(x, w)) }", "[3, 8]",
                                "[3, 8]"));
}

TEST_CASE("gradcheck: Mlp (gelu)", "[gradcheck]") {
  check_gradients("mlp", layer_program("  m = Mlp(6, 12)\n  fn forward(x) { return m(x) }", "[5, 6]", "[5, 6]"));
}

TEST_CASE("gradcheck: causal multi-head attention", "[gradcheck]") {
  check_gradients("attention",
                  layer_program("  a = MultiHeadAttention(8, 2, true)\n  fn forward(x) { return a(x) }", "[2, 5, 8]", "[2, 5, 8]"));
}

TEST_CASE("gradcheck: TransformerBlock", "[gradcheck]") {
  check_gradients("block", layer_program("  b = TransformerBlock(8, 2)\n  fn forward(x) { return b(x) }", "[2, 4, 8]", "[2, 4, 8]"), 3);
}

TEST_CASE("gradcheck: shifted SwinBlock (roll, window partition, relative bias, mask)", "[gradcheck]") {
  check_gradients("swinblock",
                  layer_program("  b = SwinBlock(8, 4, 2, 2, 1)\n  fn forward(x) { return b(x) }", "[2, 16, 8]", "[2, 16, 8]"), 3);
}

TEST_CASE("gradcheck: shifted SwinBlock with fused attention (sdpa_bias of bias + mask)", "[gradcheck]") {
  check_gradients(
      "swinblock_fused",
      layer_program("  b = SwinBlock(8, 4, 2, 2, 1, fused_attention = true)\n  fn forward(x) { return b(x) }",
                    "[2, 16, 8]", "[2, 16, 8]"),
      3);
}

TEST_CASE("gradcheck: conv2d with bias, stride and padding", "[gradcheck]") {
  check_gradients("conv",
                  layer_program("  param w: [4, 3, 3, 3] = normal(0.3)\n  param b: [4] = normal(0.3)\n"
                                "  fn forward(x) { return conv2d_bias(x, w, b, stride = 2, padding = 1) }",
                                "[2, 3, 6, 6]", "[2, 4, 3, 3]"));
}

TEST_CASE("gradcheck: PatchMerging", "[gradcheck]") {
  check_gradients("merge", layer_program("  m = PatchMerging(4, 4)\n  fn forward(x) { return m(x) }", "[2, 16, 4]", "[2, 4, 8]"));
}

TEST_CASE("gradcheck: PatchEmbed and PatchMerging (conv2d, permute, reshape)", "[gradcheck]") {
  check_gradients("patches",
                  layer_program("  e = PatchEmbed(2, 3, 4)\n  m = PatchMerging(4, 4)\n  fn forward(x) { return m(e(x)) }",
                                "[2, 3, 8, 8]", "[2, 4, 8]"),
                  3, /*eps=*/1e-3f);  // LayerNorm over 4 small channels is strongly curved: a smaller step
}

TEST_CASE("gradcheck: RMSNorm and SwiGLU", "[gradcheck]") {
  check_gradients("rms_swiglu",
                  layer_program("  n = RMSNorm(8)\n  m = SwiGLU(8, 12)\n  fn forward(x) { return m(n(x)) }", "[3, 8]", "[3, 8]"));
}

TEST_CASE("gradcheck: grouped-query attention (rotary, causal; GQA, MQA, MHA)", "[gradcheck]") {
  for (int kv : {2, 1, 4}) {
    INFO("kv_heads " << kv);
    check_gradients("gqa" + std::to_string(kv),
                    layer_program("  a = GroupedQueryAttention(16, 4, " + std::to_string(kv) + ")\n  fn forward(x) { return a(x) }",
                                  "[2, 5, 16]", "[2, 5, 16]"),
                    3);
  }
}

TEST_CASE("gradcheck: ResNet layers (BatchNorm2d, GroupNorm, pooling)", "[gradcheck]") {
  check_gradients("batchnorm",
                  layer_program("  c = Conv2d(2, 4, 3, padding = 1)\n  n = BatchNorm2d(4)\n"
                                "  fn forward(x) { return avg_pool2d(max_pool2d(n(c(x)), kernel = 3, stride = 2, padding = 1), kernel = 2, stride = 1) }",
                                "[3, 2, 6, 6]", "[3, 4, 2, 2]"),
                  3, /*eps=*/1e-3f);
  check_gradients("groupnorm",
                  layer_program("  c = Conv2d(2, 4, 3, padding = 1)\n  n = GroupNorm(2, 4)\n  fn forward(x) { return n(c(x)) }",
                                "[2, 2, 4, 4]", "[2, 4, 4, 4]"),
                  3, /*eps=*/1e-3f);
}

// stdlib upsample_nearest: each pixel repeated factor x factor times (its
// values against a repeat built from concat, on a non-square map so that a
// swapped h/w shows), and its gradient (the sum over each pixel's copies)
// through autograd of its reshape / broadcast-mul / reshape.
TEST_CASE("upsample_nearest: values and gradcheck", "[gradcheck]") {
  std::string repeat_program =
      "import \"nn\"\n"
      "model Under() {\n"
      "  param p: [2, 3, 2, 4] = normal(1.0)\n"
      "  fn forward(x) { return upsample_nearest(p, 3) }\n"
      "}\n"
      "train {\n"
      "  model = Under()\n"
      "  input x: [1] = randn(1.0)\n"
      "  let p = model.p\n"
      "  let w3 = reshape(concat([reshape(p, [2, 3, 2, 4, 1]) for i in 0..3], dim = 4), [2, 3, 2, 12])\n"
      "  let hw3 = reshape(concat([reshape(w3, [2, 3, 2, 1, 12]) for i in 0..3], dim = 3), [2, 3, 6, 12])\n"
      "  loss = mse(model(x), hw3)\n"
      "  optimizer = sgd(lr = 0.1)\n"
      "}\n";
  Session s(write_temp("upsample_values", repeat_program), "", /*reference=*/true);
  CHECK(s.trainer->forward_loss() == 0.0);
  check_gradients("upsample",
                  layer_program("  c = Conv2d(2, 3, 3, padding = 1, has_bias = true)\n"
                                "  fn forward(x) { return c(upsample_nearest(x, 2)) * upsample_nearest(c(x), 2) }",
                                "[2, 2, 3, 2]", "[2, 3, 6, 4]"),
                  5, /*eps=*/1e-3f);
}

TEST_CASE("gradcheck: binary cross-entropy (probabilities and logits)", "[gradcheck]") {
  std::string program =
      "import \"nn\"\n"
      "model Under() {\n"
      "  param w: [6, 4] = normal(0.5)\n"
      "  fn forward(x) { return linear(x, w) }\n"
      "}\n"
      "train {\n"
      "  model = Under()\n"
      "  input x: [5, 4] = randn(1.0)\n"
      "  input t: [5, 6] = randn(1.0)\n"
      "  let z = model(x)\n"
      "  let target = sigmoid(t * 3.0)\n"
      "  loss = binary_cross_entropy(sigmoid(z), target) + binary_cross_entropy_with_logits(z, target)\n"
      "  optimizer = sgd(lr = 0.1)\n"
      "}\n";
  check_gradients("bce", program);
}

TEST_CASE("gradcheck: data-movement and reduction ops", "[gradcheck]") {
  std::string body =
      "  param w: [4, 6] = normal(0.5)\n"
      "  fn forward(x) {\n"
      "    let h = linear(x, w)\n"                                   // [3, 4]
      "    let parts = split(h, [1, 3], dim = 1)\n"
      "    let c = concat([parts[1], parts[0]], dim = 1)\n"
      "    let r = roll(c, shifts = [1], dims = [0])\n"
      "    let p = pad(r, [0, 0, 1, 1])\n"                            // [3, 6]
      "    let t = transpose(p, 0, 1)\n"                              // [6, 3]
      "    let s = sum(t * t, dim = 1, keepdim = true)\n"             // [6, 1]
      "    let u = tanh(sigmoid(sub(t, t * 0.5)))\n"                 // [6, 3]
      "    return mean(reshape(s, [2, 3]), dim = 0) + mean(u, dim = 0) * 0.1\n"
      "  }\n";
  check_gradients("dataops", layer_program(body, "[3, 6]", "[3]"));
}

TEST_CASE("gradcheck: tensor math ops through autograd", "[gradcheck]") {
  std::string body =
      "  param w: [5, 6] = normal(0.5)\n"
      "  param v: [5] = normal(0.5)\n"
      "  param table: [5, 5] = normal(0.5)\n"
      "  fn forward(x) {\n"
      "    let h = linear(x, w)\n"                                                  // [3, 5]
      "    let a = exp(h * 0.5) + log(h * h + 1.0) + sqrt(h * h + 1.0) + rsqrt(h * h + 2.0)\n"
      "    let b = sin(h) * cos(h) + silu(h) + neg(h) * 0.5 + abs(h + 3.0) + (h + 2.0) ** 3 * 0.01 + h ** 2\n"
      "    let m = maximum(h, v) + minimum(h, v * 2.0) + amax(h, dim = -1, keepdim = true) - amin(h, dim = 0)\n"
      "    let picked = embedding(argmax(h, dim = -1), table)\n"                 // [3, 5], gradient to the table only
      "    let masked = where(h > v, a, b) + where(h <= 0.0, picked, zeros_like(h)) * ones_like(h)\n"
      "    return mean(masked + m * 0.3, dim = -1)\n"
      "  }\n";
  check_gradients("tensormath", layer_program(body, "[3, 6]", "[3]"));
}

TEST_CASE("no gradient flows through comparisons, argmax or *_like; where's condition gets none", "[autograd]") {
  // w1 feeds the loss only through a comparison (where's condition), an
  // argmax and a zeros_like: no backward node reaches it, it gets no
  // gradient; w2 is differentiated as usual.
  std::string body =
      "  param w1: [6, 6] = normal(0.5)\n"
      "  param w2: [6, 6] = normal(0.5)\n"
      "  param table: [6, 6] = normal(0.5)\n"
      "  fn forward(x) {\n"
      "    let g = linear(x, w1)\n"
      "    let h = linear(x, w2)\n"
      "    return where(g > 0.0, h, h * 2.0) + embedding(argmax(g), table) + zeros_like(g) + ones_like(g) * (g != h)\n"
      "  }\n";
  Session s(write_temp("nograd", layer_program(body, "[3, 6]", "[3, 6]")), "", true);
  const sema::Graph& g = s.interp->graph();
  for (int id : s.info.backward) {
    const std::string& k = g.node(id).kind;
    INFO(k);
    for (const char* none : {"gt_backward", "ne_backward", "argmax_backward", "zeros_like_backward", "ones_like_backward", "full_backward"})
      CHECK(k != none);
    if (k == "where_backward") CHECK(std::get<std::vector<int64_t>>(g.node(id).attrs.at("grad_mask")) == std::vector<int64_t>{0, 1, 1});
  }
  std::set<std::string> trained;
  for (auto [p, grad] : s.info.param_grads) trained.insert(g.tensor(p).name);
  CHECK(trained == std::set<std::string>{"w2", "table"});
  s.trainer->compute_gradients();
  CHECK(s.trainer->last_gradients().count("w1") == 0);
}

TEST_CASE("gradcheck: cumsum, topk, gather, scatter_add and a buffer through autograd", "[gradcheck]") {
  // topk ranks h plus the input scaled far apart, so a finite-difference
  // step never reorders it; the buffer scales the result but gets no gradient.
  std::string body =
      "  param w: [5, 6] = normal(0.5)\n"
      "  param u: [5, 6] = normal(0.5)\n"
      "  buffer angles: [3, 6] = rotary(10.0)\n"
      "  fn forward(x) {\n"
      "    let h = linear(x, w)\n"                                           // [3, 5]
      "    let top = topk(h + split(x, [5, 1], dim = 1)[0] * 100.0, 2)\n"     // [3, 2] values, indices
      "    let picked = gather(h, 1, top[1])\n"                              // [3, 2]
      "    let spread = scatter_add(h * 0.5, 1, top[1], picked * top[0] * 0.1)\n"  // [3, 5]
      "    let c = cumsum(spread, dim = -1) + cumsum(h, dim = 0) * to_f32(to_i32(h * 0.0 + 2.0))\n"
      "    let r = linear(to_f32(c), transpose(u, 0, 1)) * cos(angles)\n"    // [3, 6]; to_f32 of f32 passes the gradient
      "    return mean(r, dim = -1) + mean(picked, dim = -1)\n"
      "  }\n";
  check_gradients("indexops", layer_program(body, "[3, 6]", "[3]"));
  Session s(write_temp("indexops_params", layer_program(body, "[3, 6]", "[3]")), "", true);
  std::set<std::string> trained;
  for (auto [p, grad] : s.info.param_grads) trained.insert(s.interp->graph().tensor(p).name);
  CHECK(trained == std::set<std::string>{"w", "u"});
}

namespace {
// Deterministic values of a given spread (no two equal): the MoE tests set
// their weights with these instead of the 0.02 initializers, so that the
// router's choices are far apart and the experts' outputs are not tiny.
std::vector<float> spread_values(size_t n, double scale, double phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(1.7 * static_cast<double>(i) + phase) * (1.0 + 0.01 * (i % 7)));
  return v;
}
}  // namespace

TEST_CASE("gradcheck: mixture of experts (router, top-2, capacity drops, dispatch, SwiGLU experts, combine)", "[gradcheck]") {
  // 2 groups of 6 tokens, 4 experts, top-2, capacity factor 1: C = 3 slots
  // per expert and group for 12 choices, so uneven routing drops some. The
  // router's weights are spread wide so a finite-difference step does not
  // change which experts a token picks (routing is piecewise constant).
  // The load-balancing loss is added to every output element, so its
  // gradient (through the router's probabilities) is checked too.
  std::string body =
      "  m = MoE(8, 12, 4, top_k = 2, capacity_factor = 1.0)\n"
      "  fn forward(x) {\n    let r = m.forward_aux(x)\n    return r[0] + r[1]\n  }";
  std::map<std::string, std::vector<float>> init = {{"m.router", spread_values(32, 1.5, 0.3)},
                                                    {"m.w_gate", spread_values(4 * 8 * 12, 0.4, 1.1)},
                                                    {"m.w_up", spread_values(4 * 8 * 12, 0.4, 2.3)},
                                                    {"m.w_down", spread_values(4 * 12 * 8, 0.4, 0.7)}};
  check_gradients("moe", layer_program(body, "[2, 6, 8]", "[2, 6, 8]"), 6, 1e-3f, init);
  check_gradients("moe_top1", layer_program("  m = MoE(8, 12, 4, top_k = 1, capacity_factor = 1.0)\n  fn forward(x) { return m(x) }", "[2, 6, 8]",
                                            "[2, 6, 8]"),
                  6, 1e-3f, init);  // Switch routing: one expert per token, one copy dispatched
  check_gradients("moe_dense",
                  layer_program("  m = MoE(8, 12, 4, top_k = 2, dense = true)\n  fn forward(x) {\n    let r = m.forward_aux(x)\n    return r[0] + r[1]\n  }",
                                "[2, 6, 8]", "[2, 6, 8]"),
                  6, 1e-3f, init);
}

TEST_CASE("gradcheck: embedding + cross entropy (tied weights summed)", "[gradcheck]") {
  std::string program =
      "model Lm() {\n"
      "  param wte: [11, 6] = normal(0.5)\n"
      "  fn forward(ids) { return linear(relu(embedding(ids, wte)), wte) }\n"
      "}\n"
      "train {\n"
      "  model = Lm()\n"
      "  input ids: [2, 5] i32 = tokens(11)\n"
      "  input targets: [10] i32 = tokens(11)\n"
      "  loss = cross_entropy(reshape(model(ids), [10, 11]), targets)\n"
      "  optimizer = adamw(lr = 0.01)\n"
      "}\n";
  check_gradients("embedding", program, 8);
}

TEST_CASE("the training graph links every backward node to its forward op", "[autograd]") {
  Session s(write_temp("links", layer_program("  m = Mlp(4, 8)\n  fn forward(x) { return m(x) }", "[2, 4]", "[2, 4]")), "", true);
  const sema::Graph& g = s.interp->graph();
  int backward_ops = 0;
  for (int id : s.info.backward) {
    const sema::OpNode& n = g.node(id);
    if (n.forward_of < 0) continue;
    ++backward_ops;
    CHECK(n.kind == g.node(n.forward_of).kind + "_backward");
    CHECK(g.node(n.forward_of).phase == sema::Phase::Forward);
  }
  // linear, add(bias), gelu, linear, add(bias), mse: six ops, six backward nodes.
  CHECK(backward_ops == 6);
  CHECK(s.info.optimizer.size() == 4);  // fc1.weight, fc1.bias, fc2.weight, fc2.bias
}

TEST_CASE("detach: no gradient flows through it, the rest is differentiated", "[autograd]") {
  // w1 only feeds the loss through detach: no backward node for it, no
  // gradient, no update; w2 (used on both sides) gets the gradient of its
  // direct use only, which finite differences of a program without the
  // detached path confirm.
  std::string body =
      "  param w1: [6, 6] = normal(0.5)\n"
      "  param w2: [6, 6] = normal(0.5)\n"
      "  fn forward(x) { return linear(relu(detach(linear(x, w1))) + x, w2) }\n";
  Session s(write_temp("detach", layer_program(body, "[3, 6]", "[3, 6]")), "", true);
  const sema::Graph& g = s.interp->graph();
  for (int id : s.info.backward) CHECK(g.node(id).kind != "detach_backward");
  for (int id : s.info.backward) CHECK(g.node(id).kind != "relu_backward");
  bool w1 = false, w2 = false;
  for (auto [p, grad] : s.info.param_grads) {
    w1 = w1 || g.tensor(p).name == "w1";
    w2 = w2 || g.tensor(p).name == "w2";
  }
  CHECK_FALSE(w1);
  CHECK(w2);
  s.trainer->compute_gradients();
  CHECK(s.trainer->last_gradients().count("w1") == 0);
}

namespace {
std::vector<double> train_losses(const std::string& path, const std::string& config, int64_t steps) {
  Session s(path, config, false, {}, steps);
  std::vector<double> losses;
  for (int64_t i = 0; i < steps; ++i) losses.push_back(s.trainer->step().loss);
  return losses;
}
}  // namespace

TEST_CASE("the loss falls on every example's smallest preset", "[train]") {
  struct Case { const char* file; const char* config; int64_t steps; };
  for (Case c : {Case{"examples/01_mlp.nns", "", 15}, Case{"examples/gpt.nns", "tiny", 15}, Case{"examples/swin.nns", "tiny", 12},
                 Case{"examples/llama.nns", "tiny", 15}, Case{"examples/resnet.nns", "tiny", 10}, Case{"examples/moe.nns", "tiny", 15}}) {
    std::vector<double> losses = train_losses(std::string(NNS_SOURCE_DIR) + "/" + c.file, c.config, c.steps);
    INFO(c.file << ": first loss " << losses.front() << ", last " << losses.back());
    CHECK(losses.back() < losses.front() * 0.97);
    for (double l : losses) CHECK(std::isfinite(l));
  }
}

TEST_CASE("a model with RMSNorm and a SwiGLU MLP written with the tensor math ops trains", "[train]") {
  // RMSNorm as LLaMA writes it, x * rsqrt(mean(x^2) + eps) * w, and a gated
  // MLP silu(x w1) * (x w3) w2: the loss falls, and the fast kernels follow
  // the reference ones step by step.
  std::string program =
      "model Block(d, h) {\n"
      "  param norm: [d] = ones()\n"
      "  param w1: [h, d] = normal(0.2)\n"
      "  param w3: [h, d] = normal(0.2)\n"
      "  param w2: [d, h] = normal(0.2)\n"
      "  fn rms(x) { return x * rsqrt(mean(x * x, dim = -1, keepdim = true) + 0.00001) * norm }\n"
      "  fn forward(x) {\n"
      "    let n = rms(x)\n"
      "    return x + linear(silu(linear(n, w1)) * linear(n, w3), w2)\n"
      "  }\n"
      "}\n"
      "train {\n"
      "  model = Block(16, 32)\n"
      "  input x: [8, 16] = randn(1.0)\n"
      "  input y: [8, 16] = randn(1.0)\n"
      "  loss = mse(model(x), y)\n"
      "  optimizer = adamw(lr = 0.01)\n"
      "  steps = 25\n"
      "}\n";
  std::string path = write_temp("rmsnorm", program);
  std::vector<double> fast = train_losses(path, "", 25);
  Session ref(path, "", true, {}, 25);
  INFO("first loss " << fast.front() << ", last " << fast.back());
  CHECK(fast.back() < fast.front() * 0.8);
  for (double l : fast) {
    CHECK(std::isfinite(l));
    double r = ref.trainer->step().loss;
    CHECK(std::fabs(l - r) <= 1e-4 * std::fabs(r));
  }
}

TEST_CASE("micro-batches accumulate gradients of distinct micro-batches", "[train]") {
  std::string prog = layer_program("  l = Linear(4, 3)\n  fn forward(x) { return l(x) }", "[2, 4]", "[2, 3]");
  size_t at = prog.find("optimizer");
  prog.insert(at, "micro_batches = 3\n  ");
  Session s(write_temp("micro", prog), "", true, {}, 3);
  double l1 = s.trainer->step().loss;
  double l2 = s.trainer->step().loss;
  CHECK(std::isfinite(l1));
  CHECK(l2 < l1);
}

TEST_CASE("save then resume gives bit-identical losses", "[checkpoint]") {
  std::string path = std::string(NNS_SOURCE_DIR) + "/examples/gpt.nns";
  std::string ckpt = "/tmp/nns_training_test_" + std::to_string(getpid()) + ".ckpt.safetensors";
  std::vector<double> straight = train_losses(path, "tiny", 6);
  std::vector<double> resumed;
  {
    Session a(path, "tiny", false, {}, 6);
    for (int i = 0; i < 3; ++i) resumed.push_back(a.trainer->step().loss);
    a.trainer->save_checkpoint(ckpt);
  }
  {
    backend::TrainOptions opts;
    opts.resume_path = ckpt;
    Session b(path, "tiny", false, opts, 6);
    CHECK(b.trainer->steps_done() == 3);
    for (int i = 0; i < 3; ++i) resumed.push_back(b.trainer->step().loss);
  }
  REQUIRE(resumed.size() == straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(resumed[i] == straight[i]);  // bit-identical, not approximately equal
  }
  std::remove(ckpt.c_str());
}

TEST_CASE("mismatched weight files are refused with the tensor named", "[checkpoint]") {
  std::string prog = write_temp("init", layer_program("  l = Linear(4, 3)\n  fn forward(x) { return l(x) }", "[2, 4]", "[2, 3]"));
  std::string file = "/tmp/nns_training_test_" + std::to_string(getpid()) + ".init.safetensors";
  auto write = [&](std::vector<backend::StTensor> ts) { backend::write_safetensors_atomic(file, ts); };
  auto f32 = [](const std::string& name, std::vector<int64_t> shape) {
    backend::StTensor t;
    t.name = name;
    t.dtype = "F32";
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.data.assign(static_cast<size_t>(n) * 4, 0);
    return t;
  };
  backend::TrainOptions opts;
  opts.init_path = file;
  auto expect_error = [&](const std::string& needle) {
    try {
      Session s(prog, "", true, opts);
      FAIL("expected an error mentioning " << needle);
    } catch (const backend::RuntimeError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    } catch (const backend::SafetensorsError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  write({f32("l.weight", {3, 4})});
  expect_error("missing tensor 'l.bias'");
  write({f32("l.weight", {4, 3}), f32("l.bias", {3})});
  expect_error("'l.weight' has shape [4, 3], expected [3, 4]");
  auto wrong_dtype = f32("l.bias", {3});
  wrong_dtype.dtype = "I32";
  write({f32("l.weight", {3, 4}), wrong_dtype});
  expect_error("'l.bias' is I32");
  write({f32("l.weight", {3, 4}), f32("l.bias", {3}), f32("extra", {1})});
  expect_error("'extra' is not a parameter");
  { std::ofstream(file) << "garbage"; }
  expect_error(file);
  write({f32("l.weight", {3, 4}), f32("l.bias", {3})});
  Session ok(prog, "", true, opts);  // a matching file loads
  auto params = ok.trainer->parameters();
  CHECK(params.at("l.weight") == std::vector<float>(12, 0.f));
  std::remove(file.c_str());
}

// ---- the stdlib layers compute what they say (values, not only gradients) ----

namespace {
// The program's loss with parameters set first (the rest keep their init).
double loss_with(const std::string& name, const std::string& program, const std::map<std::string, std::vector<float>>& set) {
  Session s(write_temp(name, program), "", /*reference=*/true);
  for (const auto& [p, v] : set) s.trainer->set_parameter(p, v);
  return s.trainer->forward_loss();
}
}  // namespace

TEST_CASE("grouped-query attention equals multi-head attention with each KV head repeated", "[stdlib]") {
  // A = GQA with kv KV heads (no rotary), B = MultiHeadAttention (zero
  // biases) whose key/value rows repeat each KV head for its rep query
  // heads: mse(A(x), B(x)) is zero, and clearly not without the repeat.
  for (int kv : {4, 2, 1}) {
    INFO("kv_heads " << kv);
    int dim = 16, heads = 4, hd = dim / heads, rep = heads / kv;
    std::string program =
        "import \"nn\"\n"
        "model Pair() {\n"
        "  a = GroupedQueryAttention(16, 4, " + std::to_string(kv) + ", causal = true, rotary = false)\n"
        "  b = MultiHeadAttention(16, 4, true)\n"
        "  fn forward(x) { return mse(a(x), b(x)) }\n"
        "}\n"
        "train {\n  model = Pair()\n  input x: [2, 5, 16] = randn(1.0)\n  loss = model(x)\n  optimizer = sgd(lr = 0.1)\n}\n";
    Session init(write_temp("gqa_pair", program), "", true);
    auto params = init.trainer->parameters();
    std::map<std::string, std::vector<float>> set;
    for (const char* w : {"wq", "wo"}) set[std::string("b.") + w] = params.at(std::string("a.") + w);
    for (const char* w : {"wk", "wv"}) {
      const std::vector<float>& small = params.at(std::string("a.") + w);  // [kv * hd, dim]
      std::vector<float> full;
      for (int h = 0; h < heads; ++h) {
        int g = h / rep;
        full.insert(full.end(), small.begin() + g * hd * dim, small.begin() + (g + 1) * hd * dim);
      }
      set[std::string("b.") + w] = full;
    }
    CHECK(loss_with("gqa_pair", program, set) < 1e-12);
    if (kv > 1 && kv < heads) {
      // Query head h on KV head (h + 1) % kv instead of h / rep: another model.
      for (const char* w : {"wk", "wv"}) {
        const std::vector<float>& small = params.at(std::string("a.") + w);
        std::vector<float> wrong;
        for (int h = 0; h < heads; ++h) {
          int g = (h + 1) % kv;
          wrong.insert(wrong.end(), small.begin() + g * hd * dim, small.begin() + (g + 1) * hd * dim);
        }
        set[std::string("b.") + w] = wrong;
      }
      CHECK(loss_with("gqa_pair", program, set) > 1e-8);
    }
  }
}

TEST_CASE("rotary embedding rotates pairs (i, i + hd/2) by pos * theta^(-2i/hd)", "[stdlib]") {
  // x and the expected result are parameters: the loss mse(rotary(x), y) is
  // zero exactly when the layer computes the formula below.
  int seq = 5, hd = 8, half = hd / 2;
  double theta = 100.0;
  std::string program =
      "import \"nn\"\n"
      "model R() {\n"
      "  param x: [2, 5, 8] = normal(1.0)\n"
      "  param y: [2, 5, 8] = zeros()\n"
      "  fn forward() { return mse(apply_rotary(x, rotary_tables(5, 8, 100.0)), y) }\n"
      "}\n"
      "train {\n  model = R()\n  loss = model()\n  optimizer = sgd(lr = 0.1)\n}\n";
  Session s(write_temp("rotary", program), "", true);
  std::vector<float> x = s.trainer->parameters().at("x"), y(x.size());
  for (int b = 0; b < 2; ++b)
    for (int p = 0; p < seq; ++p)
      for (int i = 0; i < half; ++i) {
        double angle = p * std::pow(theta, -2.0 * i / hd);
        size_t lo = (b * seq + p) * hd + i, hi = lo + half;
        y[lo] = static_cast<float>(x[lo] * std::cos(angle) - x[hi] * std::sin(angle));
        y[hi] = static_cast<float>(x[hi] * std::cos(angle) + x[lo] * std::sin(angle));
      }
  s.trainer->set_parameter("y", y);
  CHECK(s.trainer->forward_loss() < 1e-12);
  y[3] += 0.01f;
  s.trainer->set_parameter("y", y);
  CHECK(s.trainer->forward_loss() > 1e-7);
}

TEST_CASE("BatchNorm2d, GroupNorm, RMSNorm and binary cross-entropy values", "[stdlib]") {
  // Each normalisation of x checked against a C++ computation of it.
  std::string program =
      "import \"nn\"\n"
      "model N() {\n"
      "  param x: [3, 4, 2, 2] = normal(1.0)\n"
      "  param bn_want: [3, 4, 2, 2] = zeros()\n"
      "  param gn_want: [3, 4, 2, 2] = zeros()\n"
      "  param rms_want: [3, 4, 2, 2] = zeros()\n"
      "  bn = BatchNorm2d(4)\n"
      "  gn = GroupNorm(2, 4)\n"
      "  rms = RMSNorm(2)\n"
      "  fn forward() { return mse(bn(x), bn_want) + mse(gn(x), gn_want) + mse(rms(x), rms_want) }\n"
      "}\n"
      "train {\n  model = N()\n  loss = model()\n  optimizer = sgd(lr = 0.1)\n}\n";
  Session s(write_temp("norms", program), "", true);
  std::vector<float> x = s.trainer->parameters().at("x");
  auto at = [](int n, int c, int i) { return static_cast<size_t>((n * 4 + c) * 4 + i); };
  std::vector<float> bn(x.size()), gn(x.size()), rms(x.size());
  const double eps = 1e-5;
  for (int c = 0; c < 4; ++c) {  // per channel over n, h, w
    double m = 0, v = 0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 4; ++i) m += x[at(n, c, i)] / 12.0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 4; ++i) v += (x[at(n, c, i)] - m) * (x[at(n, c, i)] - m) / 12.0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 4; ++i) bn[at(n, c, i)] = static_cast<float>((x[at(n, c, i)] - m) / std::sqrt(v + eps));
  }
  for (int n = 0; n < 3; ++n)
    for (int g = 0; g < 2; ++g) {  // per sample and group of 2 channels
      double m = 0, v = 0;
      for (int c = 2 * g; c < 2 * g + 2; ++c)
        for (int i = 0; i < 4; ++i) m += x[at(n, c, i)] / 8.0;
      for (int c = 2 * g; c < 2 * g + 2; ++c)
        for (int i = 0; i < 4; ++i) v += (x[at(n, c, i)] - m) * (x[at(n, c, i)] - m) / 8.0;
      for (int c = 2 * g; c < 2 * g + 2; ++c)
        for (int i = 0; i < 4; ++i) gn[at(n, c, i)] = static_cast<float>((x[at(n, c, i)] - m) / std::sqrt(v + eps));
    }
  for (size_t r = 0; r < x.size() / 2; ++r) {  // over the last dim (2)
    double ms = (x[2 * r] * x[2 * r] + x[2 * r + 1] * x[2 * r + 1]) / 2.0;
    for (size_t j = 0; j < 2; ++j) rms[2 * r + j] = static_cast<float>(x[2 * r + j] / std::sqrt(ms + eps));
  }
  s.trainer->set_parameter("bn_want", bn);
  s.trainer->set_parameter("gn_want", gn);
  s.trainer->set_parameter("rms_want", rms);
  CHECK(s.trainer->forward_loss() < 1e-11);
  s.trainer->set_parameter("gn_want", bn);  // BatchNorm's statistics are not GroupNorm's
  CHECK(s.trainer->forward_loss() > 1e-4);

  // Binary cross-entropy at logits 0 is log 2 whatever the targets; with
  // probabilities 0.25 against targets 1 it is -log 0.25.
  std::string bce =
      "import \"nn\"\n"
      "model B() {\n"
      "  param z: [3, 4] = zeros()\n"
      "  fn forward(t) { return binary_cross_entropy_with_logits(z, t) + binary_cross_entropy(sigmoid(z) * 0.5, ones_like(t)) }\n"
      "}\n"
      "train {\n  model = B()\n  input t: [3, 4] = randn(1.0)\n  loss = model(sigmoid(t))\n  optimizer = sgd(lr = 0.1)\n}\n";
  Session b(write_temp("bce_values", bce), "", true);
  CHECK(std::fabs(b.trainer->forward_loss() - (std::log(2.0) - std::log(0.25))) < 1e-6);
}

TEST_CASE("MoE routing and output against a C++ computation: top-2, renormalised weights, capacity drops, dense variant, balance loss", "[stdlib]") {
  // x and the expected results are parameters: every mse term is zero
  // exactly when the layer routes (slot = expert * C + position, keep) and
  // computes what the loops below do.
  const int G = 2, S = 6, D = 8, F = 12, E = 4, K = 2, C = 3;  // C = ceil(K * S * 1.0 / E)
  std::string program =
      "import \"nn\"\n"
      "model T() {\n"
      "  param x: [2, 6, 8] = normal(1.0)\n"
      "  param want: [2, 6, 8] = zeros()\n"
      "  param want_dense: [2, 6, 8] = zeros()\n"
      "  param want_slot: [2, 2, 6] = zeros()\n"
      "  param want_keep: [2, 2, 6] = zeros()\n"
      "  param want_balance: [1] = zeros()\n"
      "  m = MoE(8, 12, 4, top_k = 2, capacity_factor = 1.0)\n"
      "  dm = MoE(8, 12, 4, top_k = 2, capacity_factor = 1.0, dense = true)\n"
      "  fn forward() {\n"
      "    let r = moe_route(x, m.router, 4, 2, 3)\n"
      "    let balance = moe_balance_loss(r[3], r[4], 4)\n"
      "    return [mse(m(x), want), mse(dm(x), want_dense), mse(to_f32(r[0]), want_slot), mse(r[1], want_keep),\n"
      "            mse(balance, want_balance) + mse(dm.forward_aux(x)[1], want_balance)]\n"
      "  }\n"
      "}\n"
      "train {\n  model = T()\n  let l = model()\n  loss = l[0] + l[1] + l[2] + l[3] + l[4]\n  optimizer = sgd(lr = 0.1)\n}\n";
  Session s(write_temp("moe_values", program), "", true);
  std::vector<float> x = s.trainer->parameters().at("x");
  std::vector<float> router = spread_values(E * D, 1.5, 0.3), wg = spread_values(E * D * F, 0.4, 1.1), wu = spread_values(E * D * F, 0.4, 2.3),
                     wd = spread_values(E * F * D, 0.4, 0.7);
  for (const char* m : {"m.", "dm."}) {
    s.trainer->set_parameter(std::string(m) + "router", router);
    s.trainer->set_parameter(std::string(m) + "w_gate", wg);
    s.trainer->set_parameter(std::string(m) + "w_up", wu);
    s.trainer->set_parameter(std::string(m) + "w_down", wd);
  }
  auto xa = [&](int g, int t, int i) { return static_cast<double>(x[(g * S + t) * D + i]); };
  // Expert e (SwiGLU; w_gate/w_up [E, D, F], w_down [E, F, D]) on token (g, t).
  auto expert = [&](int e, int g, int t) {
    std::vector<double> h(F), y(D, 0.0);
    for (int j = 0; j < F; ++j) {
      double a = 0, b = 0;
      for (int i = 0; i < D; ++i) {
        a += xa(g, t, i) * wg[(e * D + i) * F + j];
        b += xa(g, t, i) * wu[(e * D + i) * F + j];
      }
      h[j] = a / (1.0 + std::exp(-a)) * b;
    }
    for (int i = 0; i < D; ++i)
      for (int j = 0; j < F; ++j) y[i] += h[j] * wd[(e * F + j) * D + i];
    return y;
  };
  std::vector<float> want(G * S * D, 0.f), dense(G * S * D, 0.f), slot(G * K * S, 0.f), keep(G * K * S, 0.f);
  int dropped = 0;
  std::vector<double> share(E, 0.0), mean_p(E, 0.0);  // the load-balancing loss's terms
  for (int g = 0; g < G; ++g) {
    std::vector<std::array<int, K>> choice(S);
    std::vector<std::array<double, K>> weight(S);
    for (int t = 0; t < S; ++t) {
      std::vector<double> p(E);
      double mx = -1e300, z = 0;
      for (int e = 0; e < E; ++e) {
        p[e] = 0;
        for (int i = 0; i < D; ++i) p[e] += xa(g, t, i) * router[e * D + i];
        mx = std::max(mx, p[e]);
      }
      for (int e = 0; e < E; ++e) z += p[e] = std::exp(p[e] - mx);
      for (int e = 0; e < E; ++e) mean_p[e] += p[e] / z / (G * S);
      std::vector<int> order(E);
      for (int e = 0; e < E; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      double top = 0;
      for (int k = 0; k < K; ++k) top += p[order[k]] / z;
      for (int k = 0; k < K; ++k) {
        choice[t][k] = order[k];
        share[order[k]] += 1.0 / (G * S * K);
        weight[t][k] = p[order[k]] / z / top;  // renormalised over the top-k (Mixtral)
      }
    }
    // Every token's first choice queues before any second choice; past C
    // slots an expert drops the choice.
    std::vector<int> filled(E, 0);
    for (int k = 0; k < K; ++k)
      for (int t = 0; t < S; ++t) {
        int e = choice[t][k], pos = filled[e]++;
        bool kept = pos < C;
        dropped += !kept;
        slot[(g * K + k) * S + t] = kept ? static_cast<float>(e * C + pos) : 0.f;
        keep[(g * K + k) * S + t] = kept ? 1.f : 0.f;
        std::vector<double> y = expert(e, g, t);
        for (int i = 0; i < D; ++i) {
          if (kept) want[(g * S + t) * D + i] += static_cast<float>(weight[t][k] * y[i]);
          dense[(g * S + t) * D + i] += static_cast<float>(weight[t][k] * y[i]);
        }
      }
  }
  INFO("choices dropped: " << dropped << " of " << G * K * S);
  REQUIRE(dropped > 0);  // the case exercises the capacity
  double scale = 0;
  for (float v : want) scale += static_cast<double>(v) * v / want.size();
  REQUIRE(scale > 1e-4);  // the experts' outputs are not negligible
  s.trainer->set_parameter("want", want);
  s.trainer->set_parameter("want_dense", dense);
  s.trainer->set_parameter("want_slot", slot);
  s.trainer->set_parameter("want_keep", keep);
  double balance = 0;
  for (int e = 0; e < E; ++e) balance += E * share[e] * mean_p[e];
  s.trainer->set_parameter("want_balance", {static_cast<float>(balance)});
  CHECK(s.trainer->forward_loss() < 1e-10 * scale);
  // Without the drops the sparse layer's output is another one.
  s.trainer->set_parameter("want", dense);
  CHECK(s.trainer->forward_loss() > 1e-4 * scale);
}
