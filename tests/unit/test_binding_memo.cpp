// Unit tests for the per-op memo of annotation bindings (semantics/calls.cpp,
// OpDef::bindings): a call whose shapes and given sizes an earlier call of
// the same op had reuses that binding; any difference binds afresh, and the
// graph is the one binding every call would build.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "semantics/interpreter.h"

using namespace nns::sema;
namespace fs = std::filesystem;

namespace {

struct MemoRun {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags{sources};
  std::unique_ptr<Interpreter> interp;
  fs::path dir;
  bool ok = false;

  explicit MemoRun(const std::string& text) {
    static std::atomic<int> counter{0};
    dir = fs::temp_directory_path() / ("nns_unit_memo_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir);
    std::ofstream(dir / "main.nns") << text;
    interp = std::make_unique<Interpreter>(sources, diags, EvalOptions{"", {}});
    ok = interp->parse((dir / "main.nns").string()) && interp->evaluate();
  }
  ~MemoRun() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  const OpDef& op(const std::string& name) {
    Value* v = interp->session_env()->find(name);
    REQUIRE(v);
    REQUIRE(v->is<std::shared_ptr<OpDef>>());
    return *v->as<std::shared_ptr<OpDef>>();
  }
  const OpNode& node(const std::string& name) {
    for (const OpNode& n : interp->graph().nodes())
      if (n.name == name) return n;
    FAIL("no node named " << name);
    return interp->graph().nodes().front();
  }
};

}  // namespace

TEST_CASE("binding memo: equal shapes bind once, other shapes bind again", "[interpreter][dimop]") {
  MemoRun run(R"(
model M() {
  param a: [4, 8] = normal(0.02)
  param b: [8, 16] = normal(0.02)
  param c: [16, 2] = normal(0.02)
  fn forward() {
    let y = matmul(a, b)
    let z = matmul(a, b)
    return matmul(y + z, c)
  }
}
let m = M()
let out = m.forward()
)");
  INFO((run.diags.all().empty() ? std::string() : run.diags.all()[0].message));
  REQUIRE(run.ok);
  // Two distinct bindings of matmul: [4,8]x[8,16] (twice) and [4,16]x[16,2].
  CHECK(run.op("matmul").bindings.size() == 2);
  const OpNode& first = run.node("matmul#0");
  const OpNode& second = run.node("matmul#1");
  const OpNode& third = run.node("matmul#2");
  CHECK(first.anno.sizes == second.anno.sizes);
  CHECK(first.anno.sizes.at("n") == 16);
  CHECK(third.anno.sizes.at("k") == 16);
  CHECK(third.anno.sizes.at("n") == 2);
  CHECK(run.interp->graph().tensor(third.outputs[0]).shape == Shape{4, 2});
}

TEST_CASE("binding memo: sizes given by the call are part of the key", "[interpreter][dimop]") {
  // split_heads-like composite: the same input shape with another `h` binds
  // the hidden dimension differently.
  MemoRun run(R"(
op heads(x, h: int) : "b (h d) -> b h d" {
  return reshape(x, [x.shape[0], h, x.shape[1] // h])
}
model M() {
  param a: [2, 8] = normal(0.02)
  fn forward() {
    let p = heads(a, 2)
    let q = heads(a, 4)
    let r = heads(a, 2)
    return [p, q, r]
  }
}
let m = M()
let out = m.forward()
)");
  INFO((run.diags.all().empty() ? std::string() : run.diags.all()[0].message));
  REQUIRE(run.ok);
  CHECK(run.op("heads").bindings.size() == 2);
  CHECK(run.node("heads#0").anno.output_shapes[0] == Shape{2, 2, 4});
  CHECK(run.node("heads#1").anno.output_shapes[0] == Shape{2, 4, 2});
  CHECK(run.node("heads#2").anno.output_shapes[0] == Shape{2, 2, 4});
}
