// Unit tests for semantics/interpreter: small .nns programs written to
// temporary files, evaluated, and checked through the Graph they build
// (qualified names, op kinds, shapes, costs), the train spec, configs,
// plans, imports and the diagnostics of bad programs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "semantics/autograd.h"
#include "semantics/interpreter.h"

using namespace nns::sema;
namespace fs = std::filesystem;

namespace {

// A fresh folder per test run for the programs and the modules they import.
fs::path temp_dir() {
  static std::atomic<int> counter{0};
  fs::path dir = fs::temp_directory_path() /
                 ("nns_unit_interp_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

struct Run {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags{sources};
  std::unique_ptr<Interpreter> interp;
  bool ok = false;
  fs::path dir;

  // Writes `text` as main.nns (plus `modules`, name -> text, beside it) and
  // parses and evaluates it with `config`.
  Run(const std::string& text, const std::string& config = "",
      const std::vector<std::pair<std::string, std::string>>& modules = {}) {
    dir = temp_dir();
    for (const auto& [name, body] : modules) write(dir / name, body);
    write(dir / "main.nns", text);
    interp = std::make_unique<Interpreter>(sources, diags, EvalOptions{config, {}});
    ok = interp->parse((dir / "main.nns").string()) && interp->evaluate();
  }
  ~Run() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Graph& graph() { return interp->graph(); }
  std::string first_error() const {
    for (const auto& d : diags.all())
      if (d.severity == nns::front::Severity::Error) return d.message;
    return "";
  }
  const nns::front::Diagnostic& first_diag() const {
    REQUIRE(!diags.all().empty());
    return diags.all()[0];
  }
  // Tensor and node lookups by (qualified) name.
  const TensorInfo& tensor(const std::string& name) {
    for (const TensorInfo& t : graph().tensors())
      if (t.name == name) return t;
    FAIL("no tensor named " << name);
    return graph().tensors().front();
  }
  const OpNode& node(const std::string& name) {
    for (const OpNode& n : graph().nodes())
      if (n.name == name) return n;
    FAIL("no node named " << name);
    return graph().nodes().front();
  }
  std::vector<std::string> node_names() {
    std::vector<std::string> names;
    for (const OpNode& n : graph().nodes()) names.push_back(n.name);
    return names;
  }
  std::vector<std::string> param_names() {
    std::vector<std::string> names;
    for (int id : graph().params()) names.push_back(graph().tensor(id).name);
    return names;
  }
  const Shape& out_shape(const std::string& node_name) {
    const OpNode& n = node(node_name);
    REQUIRE(n.outputs.size() == 1);
    return graph().tensor(n.outputs[0]).shape;
  }
};

const char* kMlp = R"(
config small {
  batch = 4
  dim = 8
  hidden = 16
}
config wide extends small {
  hidden = 64
}
model Mlp(d, h) {
  param w1: [h, d] = normal(0.02)
  param w2: [d, h] = normal(0.02)
  fn forward(x) {
    return linear(gelu(linear(x, w1)), w2)
  }
}
train {
  model = Mlp(cfg.dim, cfg.hidden)
  input x: [cfg.batch, cfg.dim] = randn()
  input y: [cfg.batch, cfg.dim] = randn()
  loss = mse(model(x), y)
  optimizer = sgd(lr = 0.05, momentum = 0.9)
  data = synthetic(seed = 7)
  steps = 20
}
plan dp(n) { }
plan megatron(n) { }
)";

}  // namespace

TEST_CASE("interpreter: the MLP lesson builds its graph", "[interpreter]") {
  Run r(kMlp);
  REQUIRE(r.ok);
  CHECK(r.param_names() == std::vector<std::string>{"w1", "w2"});
  CHECK(r.tensor("w1").shape == Shape{16, 8});
  CHECK(r.tensor("w1").init.to_string() == "normal(0.02)");
  CHECK(r.tensor("x").kind == TensorKind::Input);
  CHECK(r.tensor("x").init.kind == "randn");
  CHECK(r.node_names() == std::vector<std::string>{"linear#0", "gelu#0", "linear#1", "mse#0"});
  CHECK(r.out_shape("linear#0") == Shape{4, 16});
  CHECK(r.out_shape("gelu#0") == Shape{4, 16});
  CHECK(r.out_shape("linear#1") == Shape{4, 8});
  CHECK(r.out_shape("mse#0") == Shape{1});
  CHECK(r.node("linear#0").macs == 4 * 8 * 16);
  CHECK(r.node("linear#1").macs == 4 * 16 * 8);
  CHECK(r.node("gelu#0").macs == 0);
  CHECK(r.node("linear#0").anno.anno.to_string() == "*0 k+, n k+ -> *0 n");
  CHECK(r.node("linear#0").anno.sizes.at("k") == 8);
  CHECK(r.node("linear#0").anno.sizes.at("n") == 16);
  CHECK(r.node("linear#1").inputs[0] == r.node("gelu#0").outputs[0]);
  CHECK(r.node("linear#0").loc.line == 14);
  CHECK(summarize(r.graph()).forward_macs == 2 * 4 * 8 * 16);
}

TEST_CASE("interpreter: the train block becomes a TrainSpec", "[interpreter]") {
  Run r(kMlp);
  REQUIRE(r.ok);
  const auto& t = r.interp->train();
  REQUIRE(t.has_value());
  CHECK(t->loss == r.node("mse#0").outputs[0]);
  CHECK(r.graph().loss == t->loss);
  CHECK(t->optimizer.kind == "sgd");
  CHECK(t->optimizer.lr == Approx(0.05));
  CHECK(t->optimizer.momentum == Approx(0.9));
  CHECK(t->data.kind == "synthetic");
  CHECK(t->data.seed == 7);
  CHECK(t->steps == 20);
  CHECK(t->micro_batches == 1);
  CHECK(t->schedule.kind == "constant");
  CHECK(t->clip == 0);
  CHECK(t->loc.line == 17);
}

TEST_CASE("interpreter: adamw, schedules, clipping and micro-batches", "[interpreter]") {
  Run r(R"(
train {
  input x: [4, 2] = randn()
  loss = mean(mean(x))
  optimizer = adamw(lr = 0.001, beta2 = 0.95, weight_decay = 0.1)
  schedule = cosine_lr(warmup = 5, min_lr = 0.0001)
  data = safetensors("data.safetensors")
  micro_batches = 2
  clip = 1.0
  let unused = 3
}
)");
  REQUIRE(r.ok);
  const auto& t = r.interp->train();
  REQUIRE(t.has_value());
  CHECK(t->optimizer.kind == "adamw");
  CHECK(t->optimizer.beta1 == Approx(0.9));
  CHECK(t->optimizer.beta2 == Approx(0.95));
  CHECK(t->optimizer.eps == Approx(1e-8));
  CHECK(t->optimizer.weight_decay == Approx(0.1));
  CHECK(t->schedule.kind == "cosine");
  CHECK(t->schedule.warmup == 5);
  CHECK(t->schedule.min_lr == Approx(0.0001));
  CHECK(t->data.kind == "safetensors");
  CHECK(t->data.path == "data.safetensors");
  CHECK(t->micro_batches == 2);
  CHECK(t->clip == Approx(1.0));
}

TEST_CASE("interpreter: a program without a train block has no loss", "[interpreter]") {
  Run r("let a = 1\n");
  REQUIRE(r.ok);
  CHECK_FALSE(r.interp->train().has_value());
  CHECK(r.graph().loss == -1);
  CHECK(r.graph().nodes().empty());
  CHECK(r.interp->config_name().empty());
}

TEST_CASE("interpreter: configs: the first is the default, --config picks another", "[interpreter]") {
  Run first(kMlp);
  REQUIRE(first.ok);
  CHECK(first.interp->config_name() == "small");
  CHECK(first.interp->config_names() == std::vector<std::string>{"small", "wide"});
  CHECK(first.tensor("w1").shape == Shape{16, 8});

  Run wide(kMlp, "wide");
  REQUIRE(wide.ok);
  CHECK(wide.interp->config_name() == "wide");
  CHECK(wide.tensor("w1").shape == Shape{64, 8});  // hidden overridden
  CHECK(wide.tensor("x").shape == Shape{4, 8});    // batch inherited

  Run unknown(kMlp, "huge");
  CHECK_FALSE(unknown.ok);
  CHECK(unknown.first_error() == "unknown config 'huge'; available: small, wide");
  CHECK_FALSE(unknown.first_diag().loc.valid());  // a usage problem: no place in the file
}

TEST_CASE("interpreter: plans are collected in file order", "[interpreter]") {
  Run r(kMlp);
  REQUIRE(r.ok);
  REQUIRE(r.interp->plans().size() == 2);
  CHECK(r.interp->plans()[0].name == "dp");
  CHECK(r.interp->plans()[1].name == "megatron");
  REQUIRE(r.interp->plans()[1].fn->params.size() == 1);
  CHECK(r.interp->plans()[1].fn->params[0].name == "n");
}

TEST_CASE("interpreter: submodules and lists of them give qualified names", "[interpreter]") {
  Run r(R"(
model Dense(d) {
  param weight: [d, d] = normal(0.02)
  fn forward(x) { return gelu(linear(x, weight)) }
}
model Block(d) {
  fc = Dense(d)
  norm_w = 1
  fn forward(x) { return x + fc(x) }
}
model Net(d, depth) {
  param embed: [d] = zeros()
  blocks = [Block(d) for i in 0..depth]
  shared = Dense(d)
  fn forward(x) {
    x = x + embed
    for b in blocks {
      x = b(x)
    }
    return shared(shared(x))
  }
}
train {
  model = Net(4, 3)
  input x: [2, 4] = randn()
  loss = mean(mean(model(x)))
}
)");
  REQUIRE(r.ok);
  CHECK(r.param_names() == std::vector<std::string>{"embed", "blocks.0.fc.weight", "blocks.1.fc.weight",
                                                    "blocks.2.fc.weight", "shared.weight"});
  CHECK(r.node_names() == std::vector<std::string>{
                              "add#0",
                              "blocks.0.fc.linear#0", "blocks.0.fc.gelu#0", "blocks.0.add#0",
                              "blocks.1.fc.linear#0", "blocks.1.fc.gelu#0", "blocks.1.add#0",
                              "blocks.2.fc.linear#0", "blocks.2.fc.gelu#0", "blocks.2.add#0",
                              "shared.linear#0", "shared.gelu#0", "shared.linear#1", "shared.gelu#1",
                              "mean#0", "mean#1"});
  // Both calls of the shared module use its one weight.
  CHECK(r.node("shared.linear#0").inputs[1] == r.node("shared.linear#1").inputs[1]);
  CHECK(r.node("add#0").anno.anno.to_string() == "a b, b -> a b");  // broadcast of [4] over [2, 4]
}

TEST_CASE("interpreter: composite ops nest their body's nodes", "[interpreter]") {
  Run r(R"(
op scaled_act(x, w) : "b k+, n k+ -> b n" {
  let y = linear(x, w)
  return gelu(y) * 0.5
}
model M() {
  param w: [6, 4] = normal(0.02)
  fn forward(x) { return scaled_act(x, w) }
}
train {
  model = M()
  input x: [3, 4] = randn()
  loss = mean(mean(model(x)))
}
)");
  REQUIRE(r.ok);
  const OpNode& comp = r.node("scaled_act#0");
  CHECK(comp.composite);
  CHECK(comp.parent == -1);
  REQUIRE(comp.children.size() == 3);
  CHECK(r.graph().node(comp.children[0]).name == "scaled_act#0.linear#0");
  CHECK(r.graph().node(comp.children[1]).name == "scaled_act#0.gelu#0");
  CHECK(r.graph().node(comp.children[2]).name == "scaled_act#0.mul_scalar#0");
  for (int c : comp.children) CHECK(r.graph().node(c).parent == comp.id);
  CHECK(r.graph().node(comp.children[2]).attrs.at("s") == Attr{0.5});
  // The composite's output is its body's last tensor, re-pointed to it.
  REQUIRE(comp.outputs.size() == 1);
  CHECK(comp.outputs[0] == r.graph().node(comp.children[2]).outputs[0]);
  CHECK(r.graph().tensor(comp.outputs[0]).producer == comp.id);
  CHECK(r.graph().tensor(comp.outputs[0]).shape == Shape{3, 6});
  CHECK(comp.macs == 3 * 4 * 6);  // the sum of its children's
  CHECK(comp.anno.sizes.at("b") == 3);
  CHECK(r.graph().top_level_nodes().size() == 3);  // scaled_act, mean, mean
}

TEST_CASE("interpreter: hidden-dim annotations take sizes from int attributes", "[interpreter]") {
  Run r(R"(
op heads(x, h: int) : "b (h e) -> b h e" {
  return reshape(x, [x.shape[0], h, x.shape[1] // h])
}
train {
  input x: [2, 12] = randn()
  let y = heads(x, h = 3)
  let z = heads(x, h = 4)
  loss = mean(mean(mean(y))) + mean(mean(mean(z)))
}
)");
  REQUIRE(r.ok);
  CHECK(r.out_shape("heads#0") == Shape{2, 3, 4});
  CHECK(r.out_shape("heads#1") == Shape{2, 4, 3});
  CHECK(r.node("heads#0").attrs.at("h") == Attr{int64_t{3}});
  CHECK(r.node("heads#0").anno.sizes.at("e") == 4);
  CHECK(r.node("heads#1").anno.sizes.at("e") == 3);
}

TEST_CASE("interpreter: dtypes flow from inputs to outputs", "[interpreter]") {
  Run r(R"(
model Emb(v, d) {
  param table: [v, d] = normal(0.02)
  fn forward(ids) { return embedding(ids, table) }
}
train {
  model = Emb(50, 8)
  input ids: [2, 5] i32 = tokens(50)
  input half: [2, 5, 8] bf16 = randn()
  let e = model(ids)
  let h = view(half, [10, 8])
  loss = mean(mean(mean(e)))
}
)");
  REQUIRE(r.ok);
  CHECK(r.tensor("ids").dtype == DType::I32);
  CHECK(r.tensor("ids").init.to_string() == "tokens(50)");
  const OpNode& emb = r.node("embedding#0");
  CHECK(r.graph().tensor(emb.outputs[0]).dtype == DType::F32);
  CHECK(r.graph().tensor(emb.outputs[0]).shape == Shape{2, 5, 8});
  // Data movement keeps the dtype; arithmetic on it (f32 kernels) is refused at the call.
  CHECK(r.graph().tensor(r.node("view#0").outputs[0]).dtype == DType::BF16);
  Run arith(R"(
train {
  input half: [2, 8] bf16 = randn()
  input x: [2, 8] = randn()
  let h = x + half
  loss = mean(mean(x))
}
)");
  CHECK_FALSE(arith.ok);
  CHECK(arith.first_error().find("argument 'y' has dtype bf16, but 'add' takes f32 tensors") != std::string::npos);
}

TEST_CASE("interpreter: a buffer is a parameter without gradient or update", "[interpreter]") {
  Run r(R"(
model Rope(s, d) {
  buffer angles: [s, d] = rotary(500.0)
  param w: [d, d] = normal(0.1)
  fn forward(x) { return linear(x, w) * cos(angles) }
}
train {
  model = Rope(4, 6)
  input x: [4, 6] = randn()
  loss = mean(mean(model(x)))
}
)");
  REQUIRE(r.ok);
  const TensorInfo& b = r.tensor("angles");
  CHECK(b.kind == TensorKind::Param);
  CHECK(b.buffer);
  CHECK(b.init.to_string() == "rotary(500)");
  CHECK_FALSE(r.tensor("w").buffer);
  GraphSummary s = summarize(r.graph());
  CHECK(s.param_count == 36);
  CHECK(s.buffer_count == 24);
  TrainingGraphInfo info = build_training_graph(r.graph(), "sgd");
  REQUIRE(info.param_grads.size() == 1);
  CHECK(info.param_grads[0].first == r.tensor("w").id);
  CHECK(info.optimizer.size() == 1);
  CHECK(r.graph().dump().find("buffer %0 angles: f32[4, 6] = rotary(500)") != std::string::npos);
}

TEST_CASE("interpreter: topk returns f32 values and i32 indices", "[interpreter]") {
  Run r(R"(
train {
  input x: [4, 8] = randn()
  let t = topk(x, 3)
  let g = gather(x, 1, t[1])
  loss = mean(mean(t[0] + g + to_f32(t[1])))
}
)");
  REQUIRE(r.ok);
  const OpNode& n = r.node("topk#0");
  REQUIRE(n.outputs.size() == 2);
  CHECK(r.graph().tensor(n.outputs[0]).dtype == DType::F32);
  CHECK(r.graph().tensor(n.outputs[1]).dtype == DType::I32);
  CHECK(r.graph().tensor(n.outputs[1]).shape == Shape{4, 3});
  CHECK(r.graph().tensor(r.node("to_f32#0").outputs[0]).dtype == DType::F32);
}

TEST_CASE("interpreter: tensor comparisons, ** and the math builtins", "[interpreter]") {
  Run r(R"(
train {
  input x: [4, 8] = randn()
  input y: [8] = randn()
  let c = x < y
  let d = x >= 0.5
  let e = 2 == x
  let p = x ** 3
  let q = sqrt(2.0) + exp(0.0) + log(1.0) + abs(-2) + sin(0.0) + cos(0.0)
  print(q)
  loss = mean(mean(where(c, p, sqrt(abs(x)))))
}
)");
  REQUIRE(r.ok);
  CHECK(r.node("lt#0").inputs.size() == 2);
  CHECK(r.out_shape("lt#0") == Shape{4, 8});
  CHECK(r.graph().tensor(r.node("lt#0").outputs[0]).dtype == DType::F32);
  // A number compared with a tensor becomes a one-element constant, on its side.
  CHECK(r.out_shape("full#0") == Shape{1});
  CHECK(std::get<double>(r.node("full#0").attrs.at("value")) == 0.5);
  CHECK(r.node("ge#0").inputs[1] == r.node("full#0").outputs[0]);
  CHECK(r.node("eq#0").inputs[0] == r.node("full#1").outputs[0]);
  CHECK(std::get<double>(r.node("pow_scalar#0").attrs.at("p")) == 3.0);
  // sqrt/abs/exp/log/sin/cos of numbers stay numbers (no op); of tensors, ops.
  std::vector<std::string> names = r.node_names();
  CHECK(std::count(names.begin(), names.end(), "sqrt#0") == 1);
  CHECK(std::count(names.begin(), names.end(), "sqrt#1") == 0);
  CHECK(std::count(names.begin(), names.end(), "abs#0") == 1);
}

TEST_CASE("interpreter: tensor operators that have no meaning are errors", "[interpreter]") {
  Run pow_left("train {\n  input x: [4] = randn()\n  let p = 2 ** x\n  loss = mean(x)\n}\n");
  CHECK_FALSE(pow_left.ok);
  CHECK(pow_left.first_error() == "operator '**' between an int and a tensor is not supported");
  Run member("train {\n  input x: [4] = randn()\n  let b = 1 in [x]\n  loss = mean(x)\n}\n");
  CHECK_FALSE(member.ok);
  CHECK(member.first_error() == "'in' cannot test tensors for membership (== on tensors is elementwise)");
}

TEST_CASE("interpreter: imports, aliased and merged, from the importing file's folder", "[interpreter]") {
  Run r(R"(
import "layers"
import "layers" as L
train {
  model = L.Double(4)
  input x: [2, 4] = randn()
  loss = mean(mean(model(x))) + mean(mean(x)) * SCALE
}
)", "", {{"layers.nns", "let SCALE = 2.0\nmodel Double(d) {\n  param w: [d, d] = ones()\n  fn forward(x) { return linear(linear(x, w), w) }\n}\n"}});
  REQUIRE(r.ok);
  CHECK(r.param_names() == std::vector<std::string>{"w"});
  CHECK(r.node("linear#1").inputs[1] == r.node("linear#0").inputs[1]);
  // Ops from the imported model point into the imported file.
  const std::string& path = r.sources.file(r.node("linear#0").loc.file).path;
  CHECK(fs::path(path).filename() == "layers.nns");
  CHECK(r.node("linear#0").loc.line == 4);
}

TEST_CASE("interpreter: an error in an imported module points into that module", "[interpreter]") {
  Run r("import \"helpers\"\nlet a = twice(3)\n", "", {{"helpers.nns", "fn twice(x) {\n  return x * undefined_name\n}\n"}});
  CHECK_FALSE(r.ok);
  const auto& d = r.first_diag();
  CHECK(d.message == "undefined name 'undefined_name'");
  CHECK(fs::path(r.sources.file(d.loc.file).path).filename() == "helpers.nns");
  CHECK(d.loc.line == 2);
  CHECK(d.loc.col == 14);
  // The note says where the failing function was called from.
  REQUIRE(d.notes.size() == 1);
  CHECK(d.notes[0].message == "in call to 'twice'");
  CHECK(fs::path(r.sources.file(d.notes[0].loc.file).path).filename() == "main.nns");
  CHECK(d.notes[0].loc.line == 2);
}

TEST_CASE("interpreter: a syntax error in an imported module stops before evaluation", "[interpreter]") {
  Run r("import \"broken\"\nprint(1)\n", "", {{"broken.nns", "let a = (1\n"}});
  CHECK_FALSE(r.ok);
  REQUIRE(r.diags.error_count() == 1);
  CHECK(r.first_error() == "this '(' is never closed (a ')' is missing)");
  CHECK(fs::path(r.sources.file(r.first_diag().loc.file).path).filename() == "broken.nns");
}

TEST_CASE("interpreter: a missing main file is an error without location", "[interpreter]") {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags(sources);
  Interpreter interp(sources, diags, EvalOptions{});
  CHECK_FALSE(interp.parse("/nonexistent/nns/file.nns"));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.all()[0].message ==
        "cannot read file '/nonexistent/nns/file.nns' (cannot open: No such file or directory)");
  CHECK_FALSE(diags.all()[0].loc.valid());
}

TEST_CASE("interpreter: shape errors name the op and point at the call", "[interpreter]") {
  Run r(R"(
model M() {
  param w: [8, 3] = normal(0.02)
  fn forward(x) { return linear(x, w) }
}
train {
  model = M()
  input x: [2, 4] = randn()
  loss = mean(mean(model(x)))
}
)");
  CHECK_FALSE(r.ok);
  const auto& d = r.first_diag();
  CHECK(d.message ==
        "shape error in call to op 'linear': input 'x' of shape [2, 4] (input 0), parameter 'w' of shape [8, 3] (input 1) "
        "do not fit its annotation: identifier 'k' is 4 in input 0 dim 1 but 3 in input 1 dim 1");
  CHECK(d.loc.line == 4);
  CHECK(d.loc.col == 26);
  // Notes: the declarations of the operands named, the annotation's (in the
  // prelude), then the call chain.
  REQUIRE(d.notes.size() == 4);
  CHECK(d.notes[0].message == "'x' declared here");
  CHECK(d.notes[0].loc.line == 8);
  CHECK(d.notes[1].message == "'w' declared here");
  CHECK(d.notes[1].loc.line == 3);
  CHECK(d.notes[2].message == "annotation of 'linear' declared here");
  CHECK(fs::path(r.sources.file(d.notes[2].loc.file).path).filename() == "prelude.nns");
  CHECK(d.notes[3].message == "in call to 'forward'");
  CHECK(d.notes[3].loc.line == 9);
}

TEST_CASE("interpreter: declaration errors are all reported, evaluation stops at the first", "[interpreter]") {
  Run decls("op a(x) { return x }\nop b(x) : \"i j\" { return x }\nlet n = 1 / 0\n");
  CHECK_FALSE(decls.ok);
  CHECK(decls.diags.error_count() == 2);  // the division is never reached

  Run eval("let a = 1 / 0\nlet b = nope\n");
  CHECK_FALSE(eval.ok);
  CHECK(eval.diags.error_count() == 1);
  CHECK(eval.first_error() == "division by zero");
}

TEST_CASE("interpreter: a second assignment of a training setting is an error", "[interpreter]") {
  Run r("train {\n  input x: [2] = randn()\n  loss = mean(x)\n  steps = 1\n  steps = 2\n}\n");
  CHECK_FALSE(r.ok);
  CHECK(r.first_error() == "training setting 'steps' is set twice");
  CHECK(r.first_diag().loc.line == 5);
}

TEST_CASE("interpreter: failure() says why a phase failed", "[interpreter]") {
  const std::string plans = std::string(kMlp) + R"(
plan everywhere(ngpus) { replicate(unassigned(), 0..ngpus) }
plan nowhere(ngpus) { }
)";
  Run ok(plans);
  REQUIRE(ok.ok);
  CHECK(ok.interp->failure() == Interpreter::Failure::None);

  Run config(plans, "huge");
  CHECK_FALSE(config.ok);
  CHECK(config.interp->failure() == Interpreter::Failure::UnknownConfig);
  CHECK(config.first_error() == "unknown config 'huge'; available: small, wide");  // the diagnostic stays

  Plan p;
  CHECK_FALSE(ok.interp->evaluate_plan("pipeline", 2, p));
  CHECK(ok.interp->failure() == Interpreter::Failure::UnknownPlan);
  CHECK(ok.first_error() == "unknown plan 'pipeline'; available: dp, megatron, everywhere, nowhere");
  CHECK_FALSE(ok.interp->evaluate_plan("nowhere", 2, p));  // leaves ops without a device
  CHECK(ok.interp->failure() == Interpreter::Failure::Other);
  CHECK_FALSE(ok.interp->evaluate_plan("dp", 2, p));  // a parameter other than ngpus without default
  CHECK(ok.interp->failure() == Interpreter::Failure::Other);
  CHECK(ok.interp->evaluate_plan("everywhere", 2, p));
  CHECK(ok.interp->failure() == Interpreter::Failure::None);

  Run bad("let a = 1 / 0\n");
  CHECK_FALSE(bad.ok);
  CHECK(bad.interp->failure() == Interpreter::Failure::Other);
  Run syntax("let a = (1\n");
  CHECK_FALSE(syntax.ok);
  CHECK(syntax.interp->failure() == Interpreter::Failure::Other);

  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags(sources);
  Interpreter missing(sources, diags, EvalOptions{});
  CHECK_FALSE(missing.parse("/nonexistent/nns/file.nns"));
  CHECK(missing.failure() == Interpreter::Failure::Other);
}
