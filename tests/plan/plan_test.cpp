#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <unistd.h>

#include "backend/lowering/comm_plan.h"
#include "semantics/interpreter.h"

using namespace nns;

namespace {

struct Elaborated {
  front::SourceManager sources;
  front::DiagnosticEngine diags{sources};
  std::unique_ptr<sema::Interpreter> interp;
  sema::Plan plan;
  bool ok = false;

  Elaborated(const std::string& path, const std::string& config, const std::string& plan_name, int64_t ngpus) {
    interp = std::make_unique<sema::Interpreter>(sources, diags, sema::EvalOptions{config, {}});
    REQUIRE(interp->parse(path));
    REQUIRE(interp->evaluate());
    ok = interp->evaluate_plan(plan_name, ngpus, plan);
  }
  std::string errors() const {
    std::string s;
    for (const auto& d : diags.all()) s += diags.format(d, false);
    return s;
  }
};

std::string example(const char* name) { return std::string(NNS_SOURCE_DIR) + "/examples/" + name; }

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/nns_plan_test_" + std::to_string(getpid()) + "_" + name + ".nns";
  std::ofstream(path) << text;
  return path;
}

const char* kMlp =
    "model M() {\n"
    "  param w1: [16, 8] = normal(0.02)\n"
    "  param w2: [8, 16] = normal(0.02)\n"
    "  fn forward(x) { return linear(softmax(relu(linear(x, w1))), w2) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [4, 8] = randn()\n"
    "  input y: [4, 8] = randn()\n"
    "  loss = mse(model(x), y)\n"
    "  optimizer = sgd(lr = 0.1)\n"
    "}\n";

int count_steps(const backend::CommPlan& cp, backend::AdapterStep::Prim prim, bool backward) {
  int n = 0;
  for (const auto& e : cp.edges)
    if (e.backward == backward)
      for (const auto& s : e.adapter.steps) n += s.prim == prim ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("megatron on GPT: one allreduce per attention and per MLP in forward and in backward", "[plan][comm]") {
  Elaborated e(example("gpt.nns"), "tiny", "megatron", 2);
  REQUIRE(e.ok);
  backend::CommPlan cp = backend::derive_communication(e.interp->graph(), e.plan);
  const int layers = 2;
  CHECK(count_steps(cp, backend::AdapterStep::AllReduce, false) == 2 * layers);
  CHECK(count_steps(cp, backend::AdapterStep::AllReduce, true) == 2 * layers);
  CHECK(count_steps(cp, backend::AdapterStep::AllGather, false) == 0);
  CHECK(count_steps(cp, backend::AdapterStep::AllToAll, false) == 0);
  for (const auto& edge : cp.edges) {
    INFO(edge.note);
    CHECK(edge.note.empty());
    for (const auto& s : edge.adapter.steps)
      if (s.prim == backend::AdapterStep::AllReduce) CHECK(s.groups == std::vector<std::vector<int>>{{0, 1}});
  }
}

TEST_CASE("data parallelism: every parameter's gradient is allreduced over all devices, nothing else moves", "[plan][comm]") {
  Elaborated e(write_temp("dp", std::string(kMlp) +
                                    "plan dp(ngpus) { for op in select(\"*\") { let p = trans(op, dim = \"batch\", num = ngpus)\n"
                                    "  for i in 0..ngpus { assign(p[i], i) } } }\n"),
               "", "dp", 4);
  REQUIRE(e.ok);
  backend::CommPlan cp = backend::derive_communication(e.interp->graph(), e.plan);
  CHECK(count_steps(cp, backend::AdapterStep::AllReduce, false) == 0);
  int grad_allreduces = 0;
  for (const auto& edge : cp.edges) {
    if (edge.adapter.steps.empty()) continue;
    REQUIRE(edge.backward);
    REQUIRE(edge.consumer == -1);  // a parameter update
    REQUIRE(edge.adapter.steps.size() == 1);
    CHECK(edge.adapter.steps[0].prim == backend::AdapterStep::AllReduce);
    CHECK(edge.adapter.steps[0].groups == std::vector<std::vector<int>>{{0, 1, 2, 3}});
    ++grad_allreduces;
  }
  CHECK(grad_allreduces == 2);  // w1 and w2
}

TEST_CASE("coshard: two head groups per device merge locally before any communication", "[plan][comm]") {
  Elaborated e(example("swin.nns"), "tiny", "coshard", 2);
  REQUIRE(e.ok);
  backend::CommPlan cp = backend::derive_communication(e.interp->graph(), e.plan);
  for (const auto& edge : cp.edges) {
    INFO(edge.note);
    CHECK(edge.note.empty());
  }
  // Window attention outputs: partial sums of 4 head groups, 2 per device,
  // reduced across the 2 devices only.
  bool saw = false;
  for (const auto& edge : cp.edges) {
    if (edge.backward || edge.producer < 0) continue;
    if (e.interp->graph().node(edge.producer).kind != "window_attention") continue;
    REQUIRE(edge.adapter.steps.size() == 1);
    CHECK(edge.adapter.steps[0].prim == backend::AdapterStep::AllReduce);
    CHECK(edge.adapter.steps[0].groups == std::vector<std::vector<int>>{{0, 1}});
    saw = true;
  }
  CHECK(saw);
}

TEST_CASE("sub-op slices follow the annotation: k splits give partial sums", "[plan]") {
  Elaborated e(write_temp("slices", std::string(kMlp) +
                                        "plan p(ngpus) { let a = trans(select(\"linear#1\")[0], dim = \"k\", num = 2)\n"
                                        "  assign(a[0], 0)\n  assign(a[1], 1)\n  replicate(unassigned(), 0..ngpus) }\n"),
               "", "p", 2);
  REQUIRE(e.ok);
  const sema::SubOp& second = e.plan.subops[e.plan.subops[e.plan.root_of_node[3]].children[1]];
  CHECK(second.inputs[0].start == std::vector<int64_t>{0, 8});   // x[:, 8:16]
  CHECK(second.inputs[0].length == std::vector<int64_t>{4, 8});
  CHECK(second.inputs[1].start == std::vector<int64_t>{0, 8});   // w2[:, 8:16]
  CHECK(second.outputs[0].value_index == 1);
  CHECK(second.outputs[0].value_parts == 2);
  CHECK(second.devices == std::vector<int>{1});
}

namespace {
void expect_plan_error(const std::string& body, int64_t ngpus, const std::string& message, int line, int col) {
  Elaborated e(write_temp("bad", std::string(kMlp) + "plan bad(ngpus) {\n" + body + "}\n"), "", "bad", ngpus);
  INFO(e.errors());
  CHECK_FALSE(e.ok);
  REQUIRE(!e.diags.all().empty());
  const auto& d = e.diags.all()[0];
  CHECK(d.message.find(message) != std::string::npos);
  CHECK(d.loc.line == line);
  CHECK(d.loc.col == col);
}
}  // namespace

// kMlp has 12 lines, so the plan's first body line is line 14.
TEST_CASE("bad plans are refused at the directive", "[plan][errors]") {
  SECTION("an op left without a device") {
    expect_plan_error("  assign(select(\"linear#0\"), 0)\n", 2, "leaves 4 op(s) without a device; first: 'relu#0'", 13, 6);
  }
  SECTION("a split of a frozen dimension") {
    expect_plan_error("  trans(select(\"softmax#0\")[0], dim = \"n\", num = 2)\n", 2, "cannot split 'n^' of op 'softmax#0'", 14, 3);
    expect_plan_error("  trans(select(\"relu#0\")[0], dim = \"q\", num = 2)\n", 2, "has no dimension 'q'", 14, 3);
  }
  SECTION("a split count that does not divide the size") {
    expect_plan_error("  trans(select(\"linear#0\")[0], dim = \"n\", num = 3)\n", 3, "its size 16 is not divisible by 3", 14, 3);
  }
  SECTION("a device number out of range") {
    expect_plan_error("  replicate(unassigned(), 0..4)\n", 2, "device 2 is out of range", 14, 3);
    expect_plan_error("  assign(select(\"*\"), 7)\n", 4, "device 7 is out of range", 14, 3);
  }
  SECTION("placing an op twice") {
    expect_plan_error("  assign(select(\"*\"), 0)\n  assign(select(\"relu#0\"), 1)\n", 2, "is placed already", 15, 3);
  }
  SECTION("plan primitives outside a plan") {
    front::SourceManager sources;
    front::DiagnosticEngine diags(sources);
    sema::Interpreter in(sources, diags, {});
    REQUIRE(in.parse(write_temp("outside", "let x = select(\"*\")\n")));
    CHECK_FALSE(in.evaluate());
    REQUIRE(!diags.all().empty());
    CHECK(diags.all()[0].message.find("plan primitive") != std::string::npos);
  }
}

TEST_CASE("every shipped plan evaluates and yields regular layouts", "[plan]") {
  struct Case { const char* file; const char* config; const char* plan; int64_t ngpus; };
  for (Case c : {Case{"01_mlp.nns", "", "dp", 2}, Case{"01_mlp.nns", "", "megatron", 2}, Case{"01_mlp.nns", "", "pipeline", 2},
                 Case{"gpt.nns", "tiny", "dp", 4}, Case{"gpt.nns", "tiny", "megatron", 4}, Case{"gpt.nns", "tiny", "hybrid", 4},
                 Case{"swin.nns", "tiny", "dp", 2}, Case{"swin.nns", "tiny", "megatron", 2}, Case{"swin.nns", "tiny", "coshard", 2},
                 Case{"swin.nns", "tiny", "dp", 32}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.ngpus);
    Elaborated e(example(c.file), c.config, c.plan, c.ngpus);
    INFO(e.errors());
    REQUIRE(e.ok);
    backend::CommPlan cp = backend::derive_communication(e.interp->graph(), e.plan);
    for (const auto& edge : cp.edges) {
      INFO(edge.note);
      CHECK(edge.note.empty());
    }
  }
}
