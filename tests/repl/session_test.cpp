// The session without a terminal: directives one at a time with their
// reports, refusal and rollback, undo/reset/gpus, stale op handles, the
// plan text round trip (every shipped plan, and hand-made ones with nested
// splits, recompute and order), commands and errors that never end the
// session.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "repl/report.h"
#include "repl/session.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace nns;
using namespace nns::repl;

namespace {

struct Fixture {
  std::ostringstream out, err;
  Session session;
  explicit Fixture(const std::string& file, const std::string& config = "tiny", int64_t gpus = 2)
      : session(options(file, config, gpus), out, err) {
    int code = 0;
    bool ok = session.start(code);
    INFO(err.str());
    REQUIRE(ok);
  }
  static SessionOptions options(const std::string& file, const std::string& config, int64_t gpus) {
    SessionOptions o;
    o.file = file.empty() ? "" : std::string(NNS_SOURCE_DIR) + "/" + file;
    o.config = config;
    o.ngpus = gpus;
    o.nns_binary = NNS_BINARY;
    return o;
  }
  // Runs one input; returns what it printed (stdout then stderr).
  std::string run(const std::string& input, bool expect_ok = true) {
    out.str("");
    err.str("");
    bool ok = session.handle(input);
    std::string text = out.str() + err.str();
    INFO(input << "\n" << text);
    CHECK(ok == expect_ok);
    return text;
  }
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The plan that `plan NAME` of the file gives, evaluated by file mode's path.
sema::Plan file_plan(const std::string& file, const std::string& config, const std::string& name, int64_t gpus) {
  test::Elaboration e(config);
  REQUIRE(e.load(file));
  sema::Plan p;
  bool ok = e.evaluate_plan(name, gpus, p);
  INFO(e.errors());
  REQUIRE(ok);
  return p;
}

// Writes model + plan text to a temp file and evaluates plan `name` from it.
sema::Plan reevaluate(const std::string& model, const std::string& config, const std::string& plan_text, const std::string& name, int64_t gpus,
                      bool expect_ok = true) {
  std::ifstream in(model);
  std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::path path = fs::path(model).parent_path() / (".roundtrip_test_" + std::to_string(getpid()) + ".nns");
  {
    std::ofstream o(path);
    o << src << "\n" << plan_text;
  }
  test::Elaboration e(config);
  bool ok = e.load(path.string());
  sema::Plan p;
  if (ok) ok = e.evaluate_plan(name, gpus, p);
  fs::remove(path);
  INFO(plan_text << "\n" << e.errors());
  CHECK(ok == expect_ok);
  return p;
}

const std::string kGpt = std::string(NNS_SOURCE_DIR) + "/examples/gpt.nns";

}  // namespace

TEST_CASE("megatron for gpt.nns directive by directive: the allreduces appear") {
  Fixture f("examples/gpt.nns");
  f.run("fn spread(parts) {\n  for i in 0..len(parts) { assign(parts[i], i) }\n}");
  std::string r = f.run("for op in select(\"blocks.*.attn.attention#*\") { spread(trans(op, dim = \"h\", num = ngpus)) }");
  CHECK(count(r, "+ allreduce {0,1} 64.00 KiB") == 4);  // per block: output forward, input gradient backward
  CHECK(r.find("fwd %60 blocks.0.attn.attention#0 -> blocks.0.attn.add#0") != std::string::npos);
  CHECK(r.find("op      blocks.0.attn.attention#0: h=0/2 -> [0], h=1/2 -> [1]") != std::string::npos);
  CHECK(r.find("comm    +4 -0: 4 collective(s) per step") != std::string::npos);
  CHECK(r.find("memory  0..1: ") != std::string::npos);
  CHECK(r.find("verdict legal so far: 27 sub-op(s) have no device yet") != std::string::npos);

  r = f.run("for op in select(\"blocks.*.mlp.fc1.linear#*\") { spread(trans(op, dim = \"n\", num = ngpus)) }");
  CHECK(count(r, "+ allgather dim 2 {0,1}") == 2);  // the hidden features are gathered until the GELU is split too
  r = f.run("for op in select(\"blocks.*.mlp.fc1.add#*\") + select(\"blocks.*.mlp.gelu#*\") { spread(trans(op, idx = 0, dim = 2, num = ngpus)) }");
  CHECK(r.find("comm    +2 -2") != std::string::npos);
  r = f.run("for op in select(\"blocks.*.mlp.fc2.linear#*\") { spread(trans(op, dim = \"k\", num = ngpus)) }");
  CHECK(count(r, "- allgather") == 2);
  CHECK(count(r, "+ allreduce {0,1} 64.00 KiB  fwd") == 2);
  CHECK(r.find("8 collective(s) per step, 512.00 KiB") != std::string::npos);
  r = f.run("replicate(unassigned(), 0..ngpus)");
  CHECK(r.find("comm    unchanged: 8 collective(s) per step") != std::string::npos);
  CHECK(r.find("verdict legal and complete") != std::string::npos);

  // The same plan as the file's megatron, evaluated the file way.
  CHECK(same_plan(f.session.plan(), file_plan(kGpt, "tiny", "megatron", 2)));
  CHECK(f.session.undo_depth() == 5);
}

TEST_CASE("a refused directive prints its diagnostic and leaves the plan unchanged") {
  Fixture f("examples/gpt.nns");
  sema::Plan before = f.session.plan();
  std::string r = f.run("trans(select(\"blocks.0.mlp.fc1.linear#0\")[0], dim = \"zz\", num = 2)", false);
  CHECK(r.find("<repl:1>:1:1: error: op 'blocks.0.mlp.fc1.linear#0' has no dimension 'zz'") != std::string::npos);
  CHECK(r.find("splittable: *0, *1, k, n, value") != std::string::npos);
  CHECK(r.find("refused: the plan is unchanged") != std::string::npos);
  CHECK(same_plan(before, f.session.plan()));

  // Not divisible.
  r = f.run("trans(select(\"blocks.0.attn.attention#0\")[0], dim = \"h\", num = 3)", false);
  CHECK(r.find("its size 4 is not divisible by 3") != std::string::npos);
  // A device out of range.
  r = f.run("assign(select(\"add#0\"), 5)", false);
  CHECK(r.find("device 5 is out of range") != std::string::npos);

  // Two ops split, then the third fails: the whole input is rolled back.
  r = f.run("for op in select(\"blocks.*.attn.attention#*\") + select(\"blocks.0.ln1.layer_norm#0\") { trans(op, dim = \"h\", num = 2) }",
            false);
  CHECK(r.find("has no dimension 'h'") != std::string::npos);
  CHECK(r.find("(the input's earlier changes were rolled back)") != std::string::npos);
  CHECK(same_plan(before, f.session.plan()));
  CHECK(f.session.undo_depth() == 0);
}

TEST_CASE("undo, reset and gpus move between plans; stale op handles are refused") {
  Fixture f("examples/gpt.nns");
  sema::Plan empty = f.session.plan();
  f.run("let parts = trans(select(\"blocks.0.attn.attention#0\")[0], dim = \"h\", num = 2)");
  sema::Plan split = f.session.plan();
  f.run("assign(parts[0], 0)");
  f.run("assign(parts[1], 1)");
  CHECK(f.session.undo_depth() == 3);
  std::string r = f.run("undo 2");
  CHECK(r.find("undone 2 change(s); 1 left to undo") != std::string::npos);
  CHECK(same_plan(f.session.plan(), split));
  f.run("undo");
  CHECK(same_plan(f.session.plan(), empty));
  // parts named sub-ops that no longer exist.
  r = f.run("assign(parts[0], 0)", false);
  CHECK(r.find("this op handle no longer exists") != std::string::npos);
  CHECK(f.run("parts").find("[<op: undone>, <op: undone>]") != std::string::npos);
  r = f.run("undo", false);
  CHECK(r.find("nothing to undo") != std::string::npos);

  f.run("plan megatron");
  sema::Plan mega = f.session.plan();
  r = f.run("reset");
  CHECK(r.find("comm    +0 -8: 0 collective(s) per step") != std::string::npos);
  CHECK(same_plan(f.session.plan(), empty));
  f.run("undo");
  CHECK(same_plan(f.session.plan(), mega));

  r = f.run("gpus 4");
  CHECK(f.session.plan().ngpus == 4);
  CHECK(f.run("ngpus").find("4") != std::string::npos);
  f.run("plan megatron");
  CHECK(same_plan(f.session.plan(), file_plan(kGpt, "tiny", "megatron", 4)));
  f.run("undo 2");
  CHECK(f.session.plan().ngpus == 2);
  CHECK(f.run("ngpus") == "2\n");
  CHECK(f.run("gpus") == "2 device(s)\n");
}

TEST_CASE("plan prints text that evaluates to the same plan: every shipped plan") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t gpus;
  };
  const Case cases[] = {
      {"examples/gpt.nns", "tiny", "dp", 2},       {"examples/gpt.nns", "tiny", "megatron", 2}, {"examples/gpt.nns", "tiny", "megatron", 4},
      {"examples/gpt.nns", "tiny", "hybrid", 4},   {"examples/swin.nns", "tiny", "", 2},        {"examples/01_mlp.nns", "", "", 2},
  };
  for (const Case& c : cases) {
    Fixture f(c.file, c.config, c.gpus);
    std::string model = std::string(NNS_SOURCE_DIR) + "/" + c.file;
    std::vector<std::string> plans;
    if (*c.plan) {
      plans.push_back(c.plan);
    } else {
      for (const sema::PlanInfo& p : f.session.interpreter().plans()) plans.push_back(p.name);
    }
    for (const std::string& name : plans) {
      INFO(c.file << " plan " << name << " on " << c.gpus);
      f.run("plan " + name);
      std::string text = f.session.plan_text("roundtrip");
      sema::Plan again = reevaluate(model, c.config, text, "roundtrip", c.gpus);
      CHECK(same_plan(again, f.session.plan()));
      f.run("reset");
    }
  }
}

TEST_CASE("plan text round trip: nested splits, partial replication, recompute, order") {
  Fixture f("examples/gpt.nns", "tiny", 4);
  f.run("let attn = trans(select(\"blocks.0.attn.attention#0\")[0], dim = \"b\", num = 2)");
  f.run("let heads = trans(attn[1], dim = \"h\", num = 2)");
  f.run("assign(attn[0], 3)");
  f.run("assign(heads[0], 1)\nassign(heads[1], 2)");
  f.run("replicate(select(\"blocks.0.ln1.layer_norm#0\"), [2, 0])");
  f.run("let fc = trans(select(\"blocks.1.mlp.fc1.linear#0\")[0], dim = \"n\", num = 4)");
  f.run("for i in 0..4 { assign(fc[i], 3 - i) }");
  f.run("recompute(select(\"blocks.1.mlp.fc1.linear#0\"))");
  f.run("recompute(heads[0])");
  f.run("order(select(\"blocks.0.ln1.layer_norm#0\")[0], heads[1])");
  f.run("order(fc[2], fc[1])");
  std::string text = f.session.plan_text("handmade");
  CHECK(text.find("# not finished") != std::string::npos);
  // Incomplete: file mode refuses it, and says why.
  reevaluate(kGpt, "tiny", text, "handmade", 4, false);
  f.run("replicate(unassigned(), 0..ngpus)");
  text = f.session.plan_text("handmade");
  sema::Plan again = reevaluate(kGpt, "tiny", text, "handmade", 4);
  INFO(text);
  CHECK(same_plan(again, f.session.plan()));
  // Made for 4 devices: evaluating it for 2 fails its assert.
  reevaluate(kGpt, "tiny", text, "handmade", 2, false);
}

TEST_CASE("ops, show, status and comm") {
  Fixture f("examples/gpt.nns");
  std::string r = f.run("ops *.fc1.linear#*");
  CHECK(r.find("blocks.0.mlp.fc1.linear#0  linear  \"*0 *1 k+, n k+ -> *0 *1 n\"  [4, 32, 64], [256, 64] -> [4, 32, 256]  whole, not placed") !=
        std::string::npos);
  CHECK(r.find("(2 of 29 ops)") != std::string::npos);
  CHECK(f.run("ops nothing*").find("no op matches 'nothing*'") != std::string::npos);
  CHECK(count(f.run("ops"), "\n") == 30);

  r = f.run("show blocks.0.mlp.fc2.linear#0");
  CHECK(r.find("annotation  \"*0 *1 k+, n k+ -> *0 *1 n\"") != std::string::npos);
  CHECK(r.find("sizes       *0 = 4, *1 = 32, k = 256, n = 64") != std::string::npos);
  CHECK(r.find("k+ (size 256): in0 split dim 2, in1 split dim 1, out0 partial-sum") != std::string::npos);
  CHECK(r.find("+ allreduce {0,1} 64.00 KiB  fwd %67 blocks.0.mlp.fc2.linear#0 -> blocks.0.mlp.fc2.add#0") != std::string::npos);
  CHECK(r.find("value: ") != std::string::npos);
  // show only tries: the plan is as it was.
  CHECK(f.session.undo_depth() == 0);
  CHECK(unplaced_leaves(f.session.plan()) == 29);
  // An op partitioned already: trials start from it whole.
  f.run("plan megatron");
  r = f.run("show blocks.0.attn.attention#0");
  CHECK(r.find("partition   h=0/2 -> [0], h=1/2 -> [1]") != std::string::npos);
  CHECK(r.find("starting from the op unpartitioned") != std::string::npos);
  // A parameter.
  r = f.run("show blocks.0.mlp.fc1.weight");
  CHECK(r.find("parameter f32[256, 64]") != std::string::npos);
  CHECK(r.find("device 0    [0:128, 0:64]") != std::string::npos);
  CHECK(r.find("device 1    [128:256, 0:64]") != std::string::npos);
  // One op by pattern; several is an error that names them.
  CHECK(f.run("show ln_f.*").find("ln_f.layer_norm#0: layer_norm") != std::string::npos);
  CHECK(f.run("show *.fc1.linear#*", false).find("matches 2 ops") != std::string::npos);
  CHECK(f.run("show nosuch", false).find("no op or parameter named 'nosuch'") != std::string::npos);

  r = f.run("status");
  CHECK(r.find("plan    2 device(s): 10 op(s) partitioned, 39 sub-op(s), 0 without a device") != std::string::npos);
  CHECK(r.find("comm    8 collective(s) per step, 512.00 KiB") != std::string::npos);
  r = f.run("comm");
  CHECK(count(r, "allreduce groups {0,1} bytes 65536") == 8);
}

TEST_CASE("the session keeps definitions; errors never end it") {
  Fixture f("examples/gpt.nns");
  f.run("fn twice(x) { return x * 2 }");
  CHECK(f.run("twice(cfg.dim)") == "128\n");
  CHECK(f.run("\"a\\tb\"") == "\"a\\tb\"\n");
  CHECK(f.run("[i for i in 0..40]").find(", ... (40 items)]") != std::string::npos);
  CHECK(f.run("select(\"blocks.0.attn.*\")").find("[<op blocks.0.attn.attention#0>, <op blocks.0.attn.add#0>]") != std::string::npos);
  CHECK(f.run("Gpt").find("<model Gpt>") != std::string::npos);
  CHECK(f.run("1.0 / 4") == "0.25\n");
  CHECK(f.run("2.0") == "2.0\n");
  f.run("let x = ", false);  // a syntax error
  CHECK(f.run("nosuch + 1", false).find("undefined name 'nosuch'") != std::string::npos);
  CHECK(f.run("run x", false).find("usage: run N [--verify]") != std::string::npos);
  CHECK(f.run("help nosuch", false).find("no help on 'nosuch'") != std::string::npos);
  CHECK(f.run("train { steps = 1 }", false).find("train block belongs in the model file") != std::string::npos);
  CHECK(f.run("return 1", false).find("'return' outside a function") != std::string::npos);
  // Plans defined at the prompt see the session's functions.
  f.run("fn everything() { return unassigned() }");
  f.run("plan all_replicated(ngpus) { replicate(everything(), 0..ngpus) }");
  CHECK(f.run("plan all_replicated").find("legal and complete") != std::string::npos);
  CHECK(f.run("twice(21)") == "42\n");
  CHECK(f.run("help").find("run N [--verify]") != std::string::npos);
  CHECK(f.run("help trans").find("op-trans") != std::string::npos);
  CHECK_FALSE(f.session.quit_requested());
  f.run("quit");
  CHECK(f.session.quit_requested());
}

TEST_CASE("a session without a model file") {
  Fixture f("", "");
  CHECK(f.run("1 + 1") == "2\n");
  f.run("import \"nn\"");
  CHECK(f.run("LayerNorm").find("<model LayerNorm>") != std::string::npos);
  CHECK(f.run("ops") == "(0 of 0 ops: no model file)\n");
  CHECK(f.run("run 1", false).find("this session has no model file") != std::string::npos);
}

TEST_CASE("completion after dim = \" offers the identifiers of that op only") {
  Fixture f("examples/gpt.nns");
  auto cands = [&](const std::string& before) { return f.session.complete(before, true).candidates; };
  const std::string plan_before = f.session.plan_text("p");
  std::vector<std::string> attention = cands("trans(select(\"blocks.0.attn.attention#*\")[0], dim = \"");
  CHECK(std::find(attention.begin(), attention.end(), "h\"") != attention.end());
  CHECK(std::find(attention.begin(), attention.end(), "k\"") == attention.end());  // a linear's reduction dim
  f.run("let fc = select(\"blocks.0.mlp.fc1.linear#*\")");
  std::vector<std::string> linear = cands("trans(fc[0], dim = \"");
  CHECK(std::find(linear.begin(), linear.end(), "k\"") != linear.end());
  CHECK(std::find(linear.begin(), linear.end(), "h\"") == linear.end());
  // Not a plain name or select(...): nothing is evaluated, every op's identifiers.
  std::vector<std::string> any = cands("trans(f(1), dim = \"");
  CHECK(std::find(any.begin(), any.end(), "h\"") != any.end());
  CHECK(std::find(any.begin(), any.end(), "k\"") != any.end());
  CHECK(f.session.plan_text("p") == plan_before);  // completion evaluates on a scratch plan
}

TEST_CASE("config NAME evaluates the file again with that config; a bad one changes nothing") {
  Fixture f("examples/gpt.nns");
  f.run(
      "for op in select(\"blocks.*.attn.attention#*\") { let p = trans(op, dim = \"h\", num = 2)\n  for i in 0..2 { assign(p[i], i) } }");
  REQUIRE(f.session.undo_depth() == 1);
  CHECK(f.run("config").find("config tiny; the file's configs: tiny tiny_pipe") == 0);
  CHECK(f.run("config tiny_pip", false).find("has no config 'tiny_pip' (did you mean 'tiny_pipe'?)") !=
        std::string::npos);
  CHECK(f.session.interpreter().config_name() == "tiny");
  CHECK(f.session.undo_depth() == 1);  // refused: nothing changed
  std::string r = f.run("config sc21_1_7b");
  CHECK(r.find("config sc21_1_7b: ") == 0);
  CHECK(r.find("a new plan for 2 device(s)") != std::string::npos);
  CHECK(f.session.interpreter().config_name() == "sc21_1_7b");
  CHECK(f.session.undo_depth() == 0);
  for (const sema::SubOp& s : f.session.plan().subops) CHECK(s.leaf());  // the plan starts over
  // The new config's shapes: sc21_1_7b has hidden 2304 (Megatron SC'21 Table 1).
  CHECK(f.run("cfg.dim").find("2304") != std::string::npos);
}

TEST_CASE("save writes a file that nns check reads back") {
  Fixture f("examples/gpt.nns");
  f.run("plan megatron");
  fs::path path = fs::temp_directory_path() / ("nns_repl_save_" + std::to_string(getpid()) + ".nns");
  std::string r = f.run("save " + path.string());
  CHECK(r.find("saved plan session for any device count (parametric in ngpus; checked at 2 and 4)") !=
        std::string::npos);
  front::SourceManager sources;
  front::DiagnosticEngine diags(sources);
  sema::Interpreter interp(sources, diags, {"tiny", {}});
  REQUIRE(interp.parse(path.string()));
  REQUIRE(interp.evaluate());
  sema::Plan p;
  REQUIRE(interp.evaluate_plan("session", 2, p));
  CHECK(same_plan(p, f.session.plan()));
  f.run("save " + path.string() + " --plan-only");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.rfind("plan session(ngpus) {", 0) == 0);
  fs::remove(path);
  CHECK(f.run("save /nonexistent/dir/x.nns", false).find("cannot write") != std::string::npos);
}

TEST_CASE("the Z3 checker's verdict answers each directive; an illegal plan is refused") {
  Fixture f("examples/gpt.nns");
  std::string r = f.run("for op in select(\"blocks.*.attn.attention#*\") { let p = trans(op, dim = \"h\", num = 2)\n"
                        "  for i in 0..2 { assign(p[i], i) } }");
  CHECK(r.find("proved by the Z3 checker") != std::string::npos);
  // Legal for plan evaluation (order() only refuses an op before itself),
  // but a cycle: the two reshapes of the loss are independent, and each is
  // ordered before the other.
  sema::Plan before = f.session.plan();
  r = f.run("order(select(\"reshape#0\")[0], select(\"reshape#1\")[0])\n"
            "order(select(\"reshape#1\")[0], select(\"reshape#0\")[0])",
            false);
  CHECK(r.find("verdict illegal: the Z3 checker found the conflict above") != std::string::npos);
  CHECK(r.find("<repl:2>:1:1: error: op-order cycle") != std::string::npos);  // the unsat core, at the directives
  CHECK(r.find("<repl:2>:2:1: note") != std::string::npos);
  CHECK(r.find("refused: the plan is unchanged") != std::string::npos);
  CHECK(same_plan(before, f.session.plan()));

  // A constraint table typed at the prompt; a directive that breaks it is refused.
  f.run("reset");
  r = f.run("split_only(select(kind = \"attention\"), [\"b\"], name = \"attention splits batch only\")");
  CHECK(r.find("table   + attention splits batch only") != std::string::npos);
  r = f.run("let heads = trans(select(\"blocks.0.attn.attention#0\")[0], dim = \"h\", num = 2)", false);
  CHECK(r.find("attention splits batch only") != std::string::npos);
  CHECK(r.find("refused: the plan is unchanged") != std::string::npos);
  r = f.run("let rows = trans(select(\"blocks.0.attn.attention#0\")[0], dim = \"b\", num = 2)");
  CHECK(r.find("proved by the Z3 checker") != std::string::npos);
  // The table survives the round trip through plan text.
  f.run("replicate(unassigned(), 0..ngpus)");
  std::string text = f.session.plan_text("tabled");
  CHECK(text.find("split_only([by_name(\"blocks.0.attn.attention#0\"), by_name(\"blocks.1.attn.attention#0\")], [\"b\"], name = \"attention splits batch only\")") !=
        std::string::npos);
  sema::Plan again = reevaluate(kGpt, "tiny", text, "tabled", 2);
  CHECK(same_plan(again, f.session.plan()));
}
