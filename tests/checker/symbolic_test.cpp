// Symbolic sizes: the expression language (parse, print, evaluate, fold)
// and the checker's proofs through the API.
#include <catch2/catch.hpp>

#include <fstream>
#include <unistd.h>

#include "semantics/checker/checker.h"
#include "semantics/interpreter.h"
#include "semantics/symbolic.h"
#include "tests/test_util.h"

using namespace nns;
using namespace nns::sema;

TEST_CASE("symbolic expressions: parse, print, evaluate", "[symbolic]") {
  SymPtr e = sym_parse("batch % 8 == 0 and seq >= 128");
  CHECK(sym_text(e) == "batch % 8 == 0 and seq >= 128");
  CHECK(sym_eval(e, {{"batch", 16}, {"seq", 128}}) == 1);
  CHECK(sym_eval(e, {{"batch", 12}, {"seq", 128}}) == 0);
  CHECK(sym_text(sym_parse("(a + b) * c - d // (e - 1)")) == "(a + b) * c - d // (e - 1)");
  CHECK(sym_eval(sym_parse("-7 // 2"), {}) == -4);  // floor, as the language's //
  CHECK(sym_eval(sym_parse("-7 % 2"), {}) == 1);
  CHECK(sym_eval(sym_parse("not 1 == 2 or 0"), {}) == 1);
  std::vector<std::string> names;
  sym_symbols(sym_parse("a * b + a"), names);
  CHECK(names == std::vector<std::string>{"a", "b"});
  CHECK_THROWS_WITH(sym_parse("a / 2"), Catch::Contains("use // for integer division"));
  CHECK_THROWS_WITH(sym_parse("a +"), Catch::Contains("unexpected end"));
  CHECK_THROWS_WITH(sym_eval(sym_parse("x"), {}), Catch::Contains("unknown symbol 'x'"));
}

TEST_CASE("symbolic expressions fold constants and keep structure", "[symbolic]") {
  SymPtr b = sym_var("batch");
  CHECK(sym_is_const(sym_binary(SymExpr::Mul, sym_const(6), sym_const(7))));
  CHECK(sym_binary(SymExpr::Mul, sym_const(1), b) == b);
  CHECK(sym_same(sym_binary(SymExpr::Mul, b, sym_const(4)), sym_parse("batch * 4")));
  CHECK_FALSE(sym_same(sym_binary(SymExpr::Mul, b, sym_const(4)), sym_parse("4 * batch")));
  CHECK(sym_has_opaque(sym_binary(SymExpr::Add, b, sym_opaque(3, "x"))));
}

namespace {
std::string write_temp(const std::string& name, const std::string& text) { return test::write_temp("symbolic_test", name, text); }

const char* kSym =
    "config sym {\n"
    "  batch = symbolic(8, \"batch % 4 == 0\")\n"
    "}\n"
    "model M() {\n"
    "  param w: [16, 16] = normal(0.02)\n"
    "  fn forward(x) { return linear(x, w) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [cfg.batch * 2, 16] = randn()\n"
    "  loss = mse(model(x), x)\n"
    "  optimizer = sgd(lr = 0.1)\n"
    "}\n"
    "plan dp(ngpus) {\n"
    "  let parts = trans(select(\"linear#0\")[0], dim = \"batch\", num = ngpus)\n"
    "  for i in 0..ngpus { assign(parts[i], i) }\n"
    "  replicate(unassigned(), 0..ngpus)\n"
    "}\n";

check::CheckResult check_sym(int64_t gpus, std::string& messages) {
  front::SourceManager sources;
  front::DiagnosticEngine diags(sources);
  Interpreter in(sources, diags, EvalOptions{"", {}});
  REQUIRE(in.parse(write_temp("sym", kSym)));
  REQUIRE(in.evaluate());
  const Graph& g = in.graph();
  REQUIRE(g.symbols.size() == 1);
  CHECK(g.symbols[0].name == "batch");
  CHECK(g.symbols[0].witness == 8);
  // The input's first dim carries the expression, the shape the witness.
  const TensorInfo& x = g.tensor(g.inputs()[0]);
  CHECK(x.shape[0] == 16);
  REQUIRE(x.sym_shape.size() == 2);
  CHECK(sym_text(x.sym_shape[0]) == "batch * 2");
  Plan plan;
  REQUIRE(in.evaluate_plan("dp", gpus, plan));
  check::CheckOptions opts;
  auto r = check::check_plan(g, plan, opts);
  for (const auto& d : r.diagnostics) messages += diags.format(d, false);
  return r;
}
}  // namespace

TEST_CASE("symbolic sizes: a proof for every admissible size, or a counter-example", "[symbolic][checker]") {
  std::string messages;
  SECTION("batch * 2 splits into 8 for every multiple of 4") {
    auto r = check_sym(8, messages);
    CHECK(r.verdict == check::Verdict::Legal);
    CHECK(r.symbolic);
    CHECK(r.stats.obligations >= 1);
  }
  SECTION("but not into 16: batch = 4 is admissible") {
    auto r = check_sym(16, messages);
    REQUIRE(r.verdict == check::Verdict::Illegal);
    CHECK(messages.find("error: cannot split '*0' of part") == std::string::npos);
    CHECK(messages.find("cannot split '*0' of op 'linear#0' into 16 parts for every admissible size: for batch = ") != std::string::npos);
    CHECK(messages.find("is not divisible by 16") != std::string::npos);
    CHECK(messages.find("note: 'batch' is symbolic (witness 8, admitting batch % 4 == 0)") != std::string::npos);
  }
}
