#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <unistd.h>

#include "backend/lowering/auto_order.h"
#include "backend/lowering/comm_plan.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

struct Elaborated : test::Elaboration {
  sema::Plan plan;
  bool ok = false;

  Elaborated(const std::string& path, const std::string& config, const std::string& plan_name, int64_t ngpus)
      : Elaboration(config) {
    REQUIRE(load(path));
    ok = evaluate_plan(plan_name, ngpus, plan);
  }
};

std::string example(const char* name) { return std::string(NNS_SOURCE_DIR) + "/examples/" + name; }

std::string write_temp(const std::string& name, const std::string& text) { return test::write_temp("plan_test", name, text); }

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
                 Case{"swin.nns", "tiny", "dp", 32}, Case{"llama.nns", "tiny", "dp", 4}, Case{"llama.nns", "tiny", "megatron", 4},
                 Case{"llama.nns", "tiny", "hybrid", 4}, Case{"resnet.nns", "tiny", "dp", 4}, Case{"moe.nns", "tiny", "dp", 4},
                 Case{"moe.nns", "tiny", "ep", 4}}) {
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

TEST_CASE("assign(parts, devices) places parts[i] on devices[i]; order = \"auto\" is recorded, placed as given", "[plan][auto-order]") {
  for (const char* order : {"", ", order = \"given\"", ", order = \"auto\""}) {
    INFO("order" << order);
    Elaborated e(write_temp("assign_list", std::string(kMlp) + "plan p(ngpus) {\n  let parts = trans(select(\"linear#0\")[0], dim = \"batch\", num = 4)\n" +
                                               "  assign(parts, [3, 1, 2, 0]" + order + ")\n  replicate(unassigned(), 0..ngpus) }\n"),
                 "", "p", 4);
    INFO(e.errors());
    REQUIRE(e.ok);
    const std::vector<int>& parts = e.plan.subops[e.plan.root_of_node[0]].children;
    REQUIRE(parts.size() == 4);
    std::vector<int> devices;
    for (int s : parts) devices.push_back(e.plan.subops[s].devices.at(0));
    CHECK(devices == std::vector<int>{3, 1, 2, 0});
    bool auto_order = std::string(order).find("auto") != std::string::npos;
    REQUIRE(e.plan.auto_orders.size() == (auto_order ? 1u : 0u));
    if (auto_order) {
      CHECK(e.plan.auto_orders[0].subops == parts);
      CHECK(e.plan.auto_orders[0].devices == std::vector<int>{3, 1, 2, 0});
      CHECK(e.plan.auto_orders[0].chosen.empty());
      CHECK(e.plan.auto_orders[0].loc.line == 15);
    }
  }
}

TEST_CASE("auto-order candidates: the digit permutations of the part index, identity first, distinct, capped", "[plan][auto-order]") {
  CHECK(backend::auto_order_candidates(1) == std::vector<std::vector<int>>{{0}});
  CHECK(backend::auto_order_candidates(7) == std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6}});
  CHECK(backend::auto_order_candidates(4) == std::vector<std::vector<int>>{{0, 1, 2, 3}, {0, 2, 1, 3}});
  auto eight = backend::auto_order_candidates(8);
  CHECK(eight.size() == 6);
  CHECK(eight[0] == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  // nnScaler's order: part i on device 0,4,1,5,2,6,3,7.
  CHECK(std::find(eight.begin(), eight.end(), std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}) != eight.end());
  auto twelve = backend::auto_order_candidates(12);  // digits 2, 2, 3
  CHECK(twelve.size() == 6);
  std::vector<int> twos_swapped{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11};
  CHECK(std::find(twelve.begin(), twelve.end(), twos_swapped) != twelve.end());
  for (const auto& c : twelve) {
    std::vector<int> sorted = c;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 12; ++i) CHECK(sorted[i] == i);  // a permutation of the positions
  }
  CHECK(backend::auto_order_candidates(1024).size() == backend::kMaxAutoOrderCandidates);
}

TEST_CASE("derive_communication restricted to some ops gives exactly their edges of the whole derivation", "[plan][comm][auto-order]") {
  Elaborated e(example("gpt.nns"), "tiny", "hybrid", 4);
  REQUIRE(e.ok);
  const sema::Graph& g = e.interp->graph();
  backend::CommPlan all = backend::derive_communication(g, e.plan);
  for (size_t node = 0; node < e.plan.root_of_node.size(); ++node) {
    if (e.plan.root_of_node[node] < 0) continue;
    std::vector<bool> only(e.plan.root_of_node.size(), false);
    only[node] = true;
    std::vector<const backend::CommEdge*> expected;
    for (const auto& edge : all.edges)
      if (edge.producer == static_cast<int>(node) || edge.consumer == static_cast<int>(node)) expected.push_back(&edge);
    backend::CommPlan some = backend::derive_communication(g, e.plan, &only);
    INFO("node " << g.node(static_cast<int>(node)).name);
    REQUIRE(some.edges.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(some.edges[i].tensor == expected[i]->tensor);
      CHECK(some.edges[i].backward == expected[i]->backward);
      CHECK(some.edges[i].from.to_string() == expected[i]->from.to_string());
      CHECK(some.edges[i].to.to_string() == expected[i]->to.to_string());
      CHECK(some.edges[i].adapter.cost == expected[i]->adapter.cost);
    }
  }
}

TEST_CASE("order = \"auto\" chooses nnScaler's order for a V(2) D0(4) -> D0(8) edge", "[plan][auto-order]") {
  std::string file = std::string(NNS_SOURCE_DIR) + "/tests/plan/plans/auto_order.nns";
  Elaborated e(file, "small", "auto", 8);
  REQUIRE(e.ok);
  REQUIRE(e.plan.auto_orders.size() == 1);
  backend::choose_auto_orders(e.interp->graph(), e.plan);
  const sema::AutoOrder& a = e.plan.auto_orders[0];
  CHECK(a.chosen == std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7});
  CHECK(a.cost_chosen < a.cost_given);
  for (size_t i = 0; i < a.subops.size(); ++i) CHECK(e.plan.subops[a.subops[i]].devices == std::vector<int>{a.chosen[i]});
  CHECK(e.plan.dump(e.interp->graph()).find("order auto: parts of mse#0 on devices 0,4,1,5,2,6,3,7 (adapters ") != std::string::npos);
  // Chosen already: a second call changes nothing.
  std::vector<int> before = a.chosen;
  backend::choose_auto_orders(e.interp->graph(), e.plan);
  CHECK(e.plan.auto_orders[0].chosen == before);
}

TEST_CASE("split_in_plan appends exactly the parts split_subop makes, also while the sub-ops grow", "[plan]") {
  Elaborated e(example("gpt.nns"), "tiny", "megatron", 2);
  REQUIRE(e.ok);
  sema::Plan p = e.interp->new_plan("split", 4);
  // Every top-level op with a splittable dim, split in two, then its first
  // part split again: the sub-op vector reallocates many times meanwhile
  // (the parent is read after the parts are made room for).
  size_t splits = 0;
  const size_t roots = p.subops.size();
  for (size_t r = 0; r < roots; ++r) {
    const sema::OpNode& n = e.interp->graph().node(p.subops[r].node);
    std::vector<sema::TransformChoice> space = sema::transform_space(n.anno);
    if (space.empty()) continue;
    int parent = static_cast<int>(r);
    for (int depth = 0; depth < 2; ++depth) {
      const sema::TransformChoice& choice = space[static_cast<size_t>(depth) % space.size()];
      std::vector<sema::SubOp> want = sema::split_subop(p.subops[static_cast<size_t>(parent)], parent, choice, 2);
      front::SourceLoc loc{0, 7, static_cast<int>(r), 1};
      std::vector<int> ids = sema::split_in_plan(p, parent, choice, 2, loc);
      REQUIRE(ids.size() == 2);
      CHECK(p.subops[static_cast<size_t>(parent)].children == ids);
      for (size_t i = 0; i < ids.size(); ++i) {
        const sema::SubOp& got = p.subops[static_cast<size_t>(ids[i])];
        CHECK(ids[i] == static_cast<int>(p.subops.size() - ids.size() + i));
        CHECK(got.node == want[i].node);
        CHECK(got.parent == parent);
        CHECK(got.split_id == want[i].split_id);
        CHECK(got.split_index == static_cast<int>(i));
        CHECK(got.split_num == 2);
        CHECK(got.split_loc.line == 7);
        CHECK(got.split_loc.col == static_cast<int>(r));
        CHECK(got.devices.empty());
        REQUIRE(got.inputs.size() == want[i].inputs.size());
        REQUIRE(got.outputs.size() == want[i].outputs.size());
        for (size_t k = 0; k < got.inputs.size(); ++k)
          CHECK(got.inputs[k].to_string() == want[i].inputs[k].to_string());
        for (size_t k = 0; k < got.outputs.size(); ++k)
          CHECK(got.outputs[k].to_string() == want[i].outputs[k].to_string());
      }
      parent = ids[0];
      ++splits;
    }
  }
  CHECK(splits >= 8);
  CHECK(p.subops.size() == roots + 2 * splits);
}

TEST_CASE("plan evaluation makes room for every op split over the devices twice, within a cap", "[plan]") {
  // dp splits each op over the devices: the parts fit the room made before
  // the plan ran, so the sub-op array never moved (evaluate_plan's
  // reserve_subops).
  const std::string dp =
      "plan dp(ngpus) { for op in select(\"*\") { let p = trans(op, dim = \"batch\", num = ngpus)\n"
      "  for i in 0..ngpus { assign(p[i], i) } } }\n";
  Elaborated e(write_temp("room", std::string(kMlp) + dp), "", "dp", 4);
  REQUIRE(e.ok);
  const size_t roots = static_cast<size_t>(
      std::count_if(e.plan.root_of_node.begin(), e.plan.root_of_node.end(), [](int r) { return r >= 0; }));
  REQUIRE(roots >= 2);
  CHECK(e.plan.subops.size() == roots * 5);
  CHECK(e.plan.subops.capacity() >= roots * (1 + 2 * 4));
  // A device count whose room would be terabytes reserves at most the cap
  // (address space only): 4M sub-ops.
  Elaborated huge(write_temp("room_cap", std::string(kMlp) + "plan one(ngpus) { replicate(unassigned(), 0) }\n"), "",
                  "one", int64_t{1} << 40);
  REQUIRE(huge.ok);
  CHECK(huge.plan.subops.size() == roots);
  CHECK(huge.plan.subops.capacity() <= (size_t{1} << 22));
  CHECK(huge.plan.subops.capacity() >= roots);
}
