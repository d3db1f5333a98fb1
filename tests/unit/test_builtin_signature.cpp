// Unit tests for semantics/builtin_signature.h: the one-line parameter
// declarations of the builtins, and a walk over every registered builtin
// (language, plan, schedule, table) checking that an extra positional
// argument and a misspelt keyword are refused with a located error instead
// of being silently ignored.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "semantics/interpreter.h"

using namespace nns::sema;
namespace fs = std::filesystem;

namespace nns::sema {
void install_builtins(Env& env);       // builtins.cpp
void install_plan_builtins(Env& env);  // plan_builtins.cpp (tables, schedules, symbolic)
}  // namespace nns::sema

namespace {

// Evaluates `text` as a program; returns the first error's message and
// where it points ("" when the program is fine).
struct Eval {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags{sources};
  std::string error;
  nns::front::SourceLoc loc;
  explicit Eval(const std::string& text) {
    static std::atomic<int> counter{0};
    fs::path file = fs::temp_directory_path() /
                    ("nns_unit_sig_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".nns");
    std::ofstream(file) << text;
    Interpreter in(sources, diags, EvalOptions{});
    if (in.parse(file.string())) in.evaluate();
    for (const auto& d : diags.all())
      if (d.severity == nns::front::Severity::Error && error.empty()) {
        error = d.message;
        loc = d.loc;
      }
    fs::remove(file);
  }
};

std::vector<std::pair<std::string, const Builtin*>> all_builtins(Env& env) {
  install_builtins(env);
  install_plan_builtins(env);
  std::vector<std::pair<std::string, const Builtin*>> out;
  for (const std::string& name : env.order) {
    const Value* v = env.find_local(name);
    if (v && v->is<std::shared_ptr<Builtin>>()) out.emplace_back(name, v->as<std::shared_ptr<Builtin>>().get());
  }
  return out;
}

}  // namespace

TEST_CASE("builtin signature: the spec's positional, keyword-only and repeated parameters", "[builtin_signature]") {
  BuiltinSignature s = BuiltinSignature::parse("op, dim, num, *, idx");
  REQUIRE(s.params.size() == 4);
  CHECK(s.max_positional() == 3);
  CHECK(s.keyword_names() == std::vector<std::string>{"op", "dim", "num", "idx"});
  CHECK_FALSE(s.params[3].positional);
  BuiltinSignature p = BuiltinSignature::parse("x, /");
  CHECK(p.max_positional() == 1);
  CHECK(p.keyword_names().empty());
  BuiltinSignature v = BuiltinSignature::parse("witness, /, constraints...");
  CHECK(v.variadic);
  CHECK(v.max_positional() == SIZE_MAX);
  CHECK(BuiltinSignature::parse("").params.empty());
  CHECK_THROWS(BuiltinSignature::parse("a, a"));
  CHECK_THROWS(BuiltinSignature::parse("a..., b"));
  CHECK_THROWS(BuiltinSignature::parse("a,, b"));
  CHECK_THROWS(BuiltinSignature::parse("*, a..."));
}

TEST_CASE("builtin signature: every builtin refuses an extra positional argument", "[builtin_signature]") {
  Env env;
  auto builtins = all_builtins(env);
  REQUIRE(builtins.size() > 50);
  for (const auto& [name, b] : builtins) {
    INFO(name << " must be registered with define_builtins and a parameter spec");
    CHECK(b->signature.declared);
    size_t n = b->signature.max_positional();
    if (n == SIZE_MAX) continue;  // print, min, max, symbolic take any number
    std::string args;
    for (size_t i = 0; i <= n; ++i) args += (i ? ", " : "") + std::to_string(i);
    Eval e("let x = " + name + "(" + args + ")\n");
    INFO(name << "(" << args << ")");
    CHECK(e.error.find(name + "() takes at most " + std::to_string(n) + " argument(s), " + std::to_string(n + 1) +
                       " given") != std::string::npos);
    // Pointed at the first argument too many, not at the call.
    CHECK(e.loc.line == 1);
    CHECK(e.loc.col ==
          static_cast<int>(std::string("let x = " + name + "(").size() + args.rfind(std::to_string(n)) + 1));
  }
}

TEST_CASE("builtin signature: every builtin refuses a misspelt keyword, naming the nearest", "[builtin_signature]") {
  Env env;
  for (const auto& [name, b] : all_builtins(env)) {
    std::vector<std::string> keywords = b->signature.keyword_names();
    std::string longest;
    for (const std::string& k : keywords)
      if (k.size() > longest.size()) longest = k;
    // One letter doubled: a plausible typo of the longest keyword.
    std::string typo = longest.empty() ? "zz" : longest + longest.back();
    Eval e("let x = " + name + "(" + typo + " = 0)\n");
    INFO(name << "(" << typo << " = 0)");
    CHECK(e.error.find(name + "() has no parameter '" + typo + "'") != std::string::npos);
    if (!longest.empty()) CHECK(e.error.find("did you mean '" + longest + "'") != std::string::npos);
    CHECK(e.loc.col == static_cast<int>(std::string("let x = " + name + "(").size()) + 1);
  }
}

TEST_CASE("builtin signature: an argument given by position and by keyword is refused", "[builtin_signature]") {
  Eval e("let x = normal(0.1, std = 0.2)\n");
  CHECK(e.error.find("normal(): argument 'std' given twice") != std::string::npos);
  Eval ok("let x = sgd(0.1, momentum = 0.9)\nprint(x)\n");
  CHECK(ok.error.empty());
}
