// Unit tests of the Z3 plan checker: plans evaluated from .nns text, then
// (for the rules the plan builtins already enforce while evaluating)
// corrupted by hand, so that the checker — not the builtins — must find the
// breach. Each rule has a passing and a failing case with the exact message.
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <unistd.h>

#include "semantics/checker/checker.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"
#include "tp_model.h"

using namespace nns;
using sema::check::Verdict;

namespace {

std::string write_temp(const std::string& name, const std::string& text) { return test::write_temp("checker_test", name, text); }

struct Checked : test::Elaboration {
  sema::Plan plan;
  sema::check::CheckOptions opts;

  Checked(const std::string& path, const std::string& config, const std::string& plan_name, int64_t ngpus)
      : Elaboration(config) {
    REQUIRE(load(path));
    bool ok = evaluate_plan(plan_name, ngpus, plan);
    INFO(errors());
    REQUIRE(ok);
    opts.sources = &sources;
    if (const auto& t = interp->train()) opts.micro_batches = t->micro_batches;
  }
  sema::check::CheckResult run() { return sema::check::check_plan(interp->graph(), plan, opts); }
  // The single error of an illegal plan, with its notes, as printed.
  std::string diagnostic(const sema::check::CheckResult& r) const {
    std::string s;
    for (const auto& d : r.diagnostics) s += diags.format(d, false);
    return s;
  }
  int root(const std::string& op_name) const {
    const sema::Graph& g = interp->graph();
    for (size_t n = 0; n < plan.root_of_node.size(); ++n)
      if (plan.root_of_node[n] >= 0 && g.node(static_cast<int>(n)).name == op_name) return plan.root_of_node[n];
    FAIL("no op " << op_name);
    return -1;
  }
};

// x -> linear#0 -> gelu#0 -> add#0 <- linear#1 <- x; mse#0 as the loss:
// the memory tests' model (its plan tp on lines 13-18) and a plan that
// replicates every op.
const std::string kModel = std::string(test::kTensorParallelModel) +
                           "plan whole(ngpus) {\n"                   // line 20
                           "  replicate(select(\"*\"), 0..ngpus)\n"  // 21
                           "}\n";

std::string model_path() {
  static std::string path = write_temp("model", kModel);
  return path;
}

std::string example(const char* name) { return std::string(NNS_SOURCE_DIR) + "/examples/" + name; }

}  // namespace

TEST_CASE("every shipped plan is legal", "[checker]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t gpus;
  };
  const Case cases[] = {
      {"01_mlp.nns", "small", "dp", 4},      {"01_mlp.nns", "small", "megatron", 4}, {"01_mlp.nns", "small", "pipeline", 2},
      {"gpt.nns", "tiny", "dp", 4},          {"gpt.nns", "tiny", "megatron", 4},     {"gpt.nns", "tiny", "hybrid", 4},
      {"swin.nns", "tiny", "dp", 4},         {"swin.nns", "tiny", "megatron", 4},    {"swin.nns", "tiny", "coshard", 2},
      {"gpt.nns", "gpt3_1_3b", "megatron", 16}, {"swin.nns", "swin_32gpu", "coshard", 32},
  };
  for (const Case& c : cases) {
    INFO(c.file << " " << c.config << " " << c.plan << " on " << c.gpus);
    Checked e(example(c.file), c.config, c.plan, c.gpus);
    auto r = e.run();
    INFO(e.diagnostic(r) << r.reason);
    CHECK(r.verdict == Verdict::Legal);
  }
}

TEST_CASE("tensor parallel MLP: legal", "[checker]") {
  Checked e(model_path(), "", "tp", 2);
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Legal);
  CHECK(r.stats.directives == 2);  // the two splits: the placements constrain nothing here (memory is checked after lowering)
}

TEST_CASE("coverage: parts that overlap", "[checker][coverage]") {
  Checked e(model_path(), "", "tp", 2);
  sema::SubOp& p1 = e.plan.subops[e.plan.subops[e.root("linear#0")].children[1]];
  p1.outputs[0].start[1] = 0;  // part 1 computes part 0's columns
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Illegal);
  CHECK(e.diagnostic(r).find("error: the parts of the split on 'n' overlap: parts 0 and 1 both compute [0:8) of dim 1 of output 0 of op "
                             "'linear#0'\n") != std::string::npos);
  CHECK(e.diagnostic(r).find(":14:11: error:") != std::string::npos);
}

TEST_CASE("coverage: parts that leave a gap", "[checker][coverage]") {
  Checked e(model_path(), "", "tp", 2);
  sema::SubOp& p1 = e.plan.subops[e.plan.subops[e.root("linear#0")].children[1]];
  p1.outputs[0].start[1] = 10;
  p1.outputs[0].length[1] = 6;
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Illegal);
  CHECK(r.diagnostics[0].message ==
        "the parts of the split on 'n' leave a gap: no part computes [8:10) of dim 1 of output 0 of op 'linear#0'");
}

TEST_CASE("coverage: a part that reads the wrong slice", "[checker][coverage]") {
  Checked e(model_path(), "", "tp", 2);
  sema::SubOp& p0 = e.plan.subops[e.plan.subops[e.root("linear#0")].children[0]];
  p0.inputs[1].start[0] = 8;  // reads the weight rows of part 1, none reads rows 0..7
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Illegal);
  CHECK(r.diagnostics[0].message ==
        "the parts of the split on 'n' leave a gap: no part computes [0:8) of dim 0 of input 1 of op 'linear#0'");
}

TEST_CASE("coverage: a partial sum claimed as the complete value", "[checker][coverage]") {
  Checked e(model_path(), "", "tp", 2);
  sema::SubOp& p1 = e.plan.subops[e.plan.subops[e.root("linear#1")].children[1]];
  p1.outputs[0].value_index = 0;
  p1.outputs[0].value_parts = 1;
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Illegal);
  CHECK(r.diagnostics[0].message ==
        "part 1 of the split on 'k' claims output 0 of op 'linear#1' as a complete value, but each part computes only a partial sum: "
        "adding the 2 parts would count it 2 times");
  CHECK(r.diagnostics[0].loc.line == 16);
}

TEST_CASE("coverage: a partial sum counted twice", "[checker][coverage]") {
  Checked e(model_path(), "", "tp", 2);
  sema::SubOp& p1 = e.plan.subops[e.plan.subops[e.root("linear#1")].children[1]];
  p1.outputs[0].value_index = 0;
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Illegal);
  CHECK(r.diagnostics[0].message ==
        "parts 0 and 1 of the split on 'k' both produce partial sum 0/2 of output 0 of op 'linear#1': the sum would count it twice");
}

TEST_CASE("coverage: the whole op must touch complete tensors", "[checker][coverage]") {
  Checked e(model_path(), "", "whole", 2);
  e.plan.subops[e.root("gelu#0")].inputs[0].length[0] = 2;
  auto r = e.run();
  REQUIRE(r.verdict == Verdict::Illegal);
  CHECK(r.diagnostics[0].message ==
        "op 'gelu#0' as a whole must cover its complete input 0 [0:4, 0:16], but the plan's op covers [0:2, 0:16]");
  CHECK(r.diagnostics[0].loc.line == 21);
}

TEST_CASE("split legality: unknown, frozen and value splits; divisibility", "[checker][split]") {
  SECTION("an identifier the op does not have") {
    Checked e(model_path(), "", "tp", 2);
    for (int c : e.plan.subops[e.root("linear#0")].children) e.plan.subops[c].split_id = "zz";
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message == "op 'linear#0' has no dimension 'zz' to split (annotation \"*0 k+, n k+ -> *0 n\")");
  }
  SECTION("a value split of an op that is not linear") {
    Checked e(model_path(), "", "whole", 2);
    int gelu = e.root("gelu#0");
    auto parts = sema::split_subop(e.plan.subops[gelu], gelu, sema::transform_space(e.interp->graph().node(e.plan.subops[gelu].node).anno)[0], 2);
    e.plan.subops[gelu].children.clear();
    for (auto& part : parts) {
      part.split_id = "value";
      part.devices = {0};
      e.plan.subops[gelu].children.push_back(static_cast<int>(e.plan.subops.size()));
      e.plan.subops.push_back(part);
    }
    e.plan.subops[gelu].devices.clear();
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message == "op 'gelu#0' (gelu) cannot be split by value: it is not linear in its first input");
  }
  SECTION("a count that does not divide the size") {
    Checked e(model_path(), "", "whole", 2);
    int lin = e.root("linear#0");
    const sema::OpNode& n = e.interp->graph().node(e.plan.subops[lin].node);
    sema::TransformChoice choice;
    for (const auto& c : sema::transform_space(n.anno)) if (c.id == "n") choice = c;
    auto parts = sema::split_subop(e.plan.subops[lin], lin, choice, 3);
    e.plan.subops[lin].children.clear();
    e.plan.subops[lin].devices.clear();
    for (auto& part : parts) {
      part.devices = {0};
      e.plan.subops[lin].children.push_back(static_cast<int>(e.plan.subops.size()));
      e.plan.subops.push_back(part);
    }
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message == "cannot split 'n' of op 'linear#0' into 3 parts: its size 16 is not divisible by 3");
  }
}

TEST_CASE("devices: in range, not twice, at least one", "[checker][devices]") {
  Checked e(model_path(), "", "tp", 2);
  int leaf = e.plan.subops[e.root("linear#0")].children[1];
  SECTION("out of range") {
    e.plan.subops[leaf].devices = {5};
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message ==
          "part 1 of 2 on 'n' of op 'linear#0' is placed on device 5, but the plan runs on 2 device(s), numbered 0..1");
    CHECK(r.diagnostics[0].loc.line == 15);
  }
  SECTION("twice") {
    e.plan.subops[leaf].devices = {1, 1};
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message == "part 1 of 2 on 'n' of op 'linear#0' is placed on device 1 twice");
  }
  SECTION("none") {
    e.plan.subops[leaf].devices.clear();
    e.plan.subops[leaf].assign_loc = {};
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message ==
          "part 1 of 2 on 'n' of op 'linear#0' runs on no device: assign or replicate it (e.g. replicate(unassigned(), 0..ngpus))");
    CHECK(r.diagnostics[0].loc.line == 4);  // the op's call site stands for the missing placement
  }
}

TEST_CASE("order: a cycle is reported with its directives", "[checker][order]") {
  Checked e(model_path(), "", "whole", 2);
  e.plan.orders.push_back({e.root("linear#1"), e.root("gelu#0"), {}});
  SECTION("one order is fine") {
    CHECK(e.run().verdict == Verdict::Legal);
  }
  SECTION("with the data flow linear#0 -> gelu#0, gelu#0 before linear#1 before linear#0 is a cycle") {
    front::SourceLoc here{0, 21, 3, 10};
    e.plan.orders[0] = {e.root("gelu#0"), e.root("linear#1"), here};
    e.plan.orders.push_back({e.root("linear#1"), e.root("linear#0"), {0, 18, 3, 10}});
    auto r = e.run();
    REQUIRE(r.verdict == Verdict::Illegal);
    CHECK(r.diagnostics[0].message ==
          "op-order cycle: 'gelu#0' runs before 'linear#1', 'linear#1' runs before 'linear#0', 'linear#0' feeds 'gelu#0'; no schedule "
          "can satisfy these order directives");
    CHECK(r.diagnostics[0].loc.line == 18);  // the first in source order
    REQUIRE(r.diagnostics[0].notes.size() == 1);
    CHECK(r.diagnostics[0].notes[0].loc.line == 21);
  }
}

TEST_CASE("exit codes and memory sizes", "[checker]") {
  CHECK(sema::check::exit_code(Verdict::Legal) == 0);
  CHECK(sema::check::exit_code(Verdict::Illegal) == 65);
  CHECK(sema::check::exit_code(Verdict::Unknown) == 70);
  int64_t b = 0;
  std::string label, err;
  CHECK(sema::check::parse_memory_size("80GiB", b, label, err));
  CHECK(b == int64_t{80} << 30);
  CHECK(sema::check::parse_memory_size("512 MiB", b, label, err));
  CHECK(b == int64_t{512} << 20);
  CHECK(sema::check::parse_memory_size("1.5TB", b, label, err));
  CHECK(b == 1500000000000);
  // A device's name is the planner's (its profile's memory), not the checker's.
  CHECK_FALSE(sema::check::parse_memory_size("h100", b, label, err));
  CHECK_FALSE(sema::check::parse_memory_size("lots", b, label, err));
  CHECK(err.find("not a size") != std::string::npos);
  CHECK_FALSE(sema::check::parse_memory_size("-3GiB", b, label, err));
}
