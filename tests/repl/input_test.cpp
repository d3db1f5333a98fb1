// What the REPL decides before the interpreter sees a line: complete or
// not (continuation prompt), command or .nns, and what Tab offers.
#include <catch2/catch.hpp>

#include "repl/completion.h"
#include "repl/input.h"

using namespace nns::repl;

TEST_CASE("input_complete waits for unclosed brackets and blocks") {
  CHECK(input_complete("x = 1"));
  CHECK_FALSE(input_complete("fn f(x) {"));
  CHECK_FALSE(input_complete("for i in 0..3 { let l = [1,"));
  CHECK(input_complete("for i in 0..3 { let l = [1,\n2] }"));
  CHECK(input_complete("f(\n1)"));
  CHECK(input_complete("s = \"{(\""));          // brackets in a string
  CHECK(input_complete("x = 1  # { in a comment"));
  CHECK(input_complete("s = \"\\\"{\""));        // an escaped quote
  CHECK(input_complete("}"));                    // extra closer: the parser reports it
  CHECK_FALSE(input_complete("let d = {a: 1,\n# }\n"));
}

TEST_CASE("parse_command tells commands from .nns text") {
  Command c;
  REQUIRE(parse_command("ops", c));
  CHECK(c.name == "ops");
  CHECK(c.args.empty());
  REQUIRE(parse_command("  ops *.linear#*  ", c));
  CHECK(c.args == std::vector<std::string>{"*.linear#*"});
  REQUIRE(parse_command("run 5 --verify", c));
  CHECK(c.args == std::vector<std::string>{"5", "--verify"});
  REQUIRE(parse_command("show blocks.0.attn.attention#0  # a comment", c));
  CHECK(c.args == std::vector<std::string>{"blocks.0.attn.attention#0"});
  REQUIRE(parse_command("plan megatron", c));
  CHECK(c.args == std::vector<std::string>{"megatron"});
  REQUIRE(parse_command("exit", c));
  CHECK(c.name == "quit");
  REQUIRE(parse_command("save /tmp/p.nns", c));
  CHECK(c.args == std::vector<std::string>{"/tmp/p.nns"});
  REQUIRE(parse_command("ops *", c));
  REQUIRE(parse_command(":plan", c));
  CHECK(c.name == "plan");
  REQUIRE(parse_command("save \"a file.nns\"", c));
  CHECK(c.args == std::vector<std::string>{"a file.nns"});

  // .nns that starts with a command word
  CHECK_FALSE(parse_command("ops = select(\"*\")", c));
  CHECK_FALSE(parse_command("run(3)", c));
  CHECK_FALSE(parse_command("plan megatron(ngpus) {", c));
  CHECK_FALSE(parse_command("ops * 2", c));
  CHECK_FALSE(parse_command("ops.x", c));
  CHECK_FALSE(parse_command("ops[0]", c));
  CHECK_FALSE(parse_command("undo == 1", c));
  CHECK_FALSE(parse_command("opsx", c));
  CHECK_FALSE(parse_command("let ops = 1", c));
  CHECK_FALSE(parse_command("cfg.dim", c));
}

namespace {
CompletionData data() {
  CompletionData d;
  d.commands = command_names();
  d.help_topics = {"help", "ops", "show", "trans"};
  d.op_names = {"blocks.0.attn.attention#0", "blocks.0.mlp.fc1.linear#0", "blocks.1.attn.attention#0", "head.linear#0"};
  d.param_names = {"blocks.0.attn.wq", "wte"};
  d.anno_ids = {"b", "h", "k", "n"};
  d.plan_names = {"dp", "megatron"};
  d.names = {"cfg", "select", "splittable", "spread"};
  d.members = [](const std::string& chain) -> std::vector<std::string> {
    if (chain == "cfg") return {"dim", "heads", "layers"};
    return {};
  };
  return d;
}
}  // namespace

TEST_CASE("completion: commands, names and members") {
  CompletionData d = data();
  Completion c = complete_input("sh", true, d);
  CHECK(c.from == 0);
  CHECK(c.candidates == std::vector<std::string>{"show "});
  // Not on a continuation line: commands are whole inputs.
  CHECK(complete_input("sh", false, d).candidates.empty());
  c = complete_input("sp", true, d);
  CHECK(c.candidates == std::vector<std::string>{"splittable", "spread"});
  c = complete_input("x = cfg.he", true, d);
  CHECK(c.from == 8);
  CHECK(c.candidates == std::vector<std::string>{"heads"});
  c = complete_input("for i in 0..3 { fo", false, d);
  CHECK(c.candidates == std::vector<std::string>{"for"});
}

TEST_CASE("completion: op and parameter names one dotted level at a time") {
  CompletionData d = data();
  Completion c = complete_input("show blo", true, d);
  CHECK(c.from == 5);
  CHECK(c.candidates == std::vector<std::string>{"blocks."});
  c = complete_input("show blocks.", true, d);
  CHECK(c.candidates == std::vector<std::string>{"blocks.0.", "blocks.1."});
  c = complete_input("show blocks.0.attn.", true, d);
  CHECK(c.candidates == std::vector<std::string>{"blocks.0.attn.attention#0 ", "blocks.0.attn.wq "});
  c = complete_input("ops blocks.0.attn.", true, d);  // ops: ops only
  CHECK(c.candidates == std::vector<std::string>{"blocks.0.attn.attention#0 "});
  c = complete_input("let x = select(\"blocks.0.m", true, d);
  CHECK(c.from == 16);
  CHECK(c.candidates == std::vector<std::string>{"blocks.0.mlp."});
  c = complete_input("let x = select(\"hea", true, d);
  CHECK(c.candidates == std::vector<std::string>{"head."});
  c = complete_input("let x = select(\"head.", true, d);
  CHECK(c.candidates == std::vector<std::string>{"head.linear#0\""});
}

TEST_CASE("completion: annotation identifiers after dim =, plan names, help topics") {
  CompletionData d = data();
  Completion c = complete_input("trans(op, dim = \"", true, d);
  CHECK(c.candidates == std::vector<std::string>{"b\"", "batch\"", "h\"", "k\"", "n\"", "value\""});
  c = complete_input("trans(op, dim=\"v", true, d);
  CHECK(c.candidates == std::vector<std::string>{"value\""});
  c = complete_input("plan me", true, d);
  CHECK(c.candidates == std::vector<std::string>{"megatron "});
  c = complete_input("help tr", true, d);
  CHECK(c.candidates == std::vector<std::string>{"trans "});
  c = complete_input("run 5 --v", true, d);
  CHECK(c.candidates == std::vector<std::string>{"--verify "});
  CHECK(complete_input("x = 1  # sh", true, d).candidates.empty());
}

TEST_CASE("completion: after dim = \", the identifiers of the op the call's first argument names") {
  CompletionData d = data();
  std::vector<std::string> asked;
  d.op_anno_ids = [&](const std::string& expr) -> std::vector<std::string> {
    asked.push_back(expr);
    if (expr == "op") return {"b", "h"};
    return {};
  };
  Completion c = complete_input("trans(op, dim = \"", true, d);
  CHECK(c.candidates == std::vector<std::string>{"b\"", "batch\"", "h\"", "value\""});
  // The open call's first argument, past nested calls, strings and brackets.
  c = complete_input("for o in x { spread(trans(select(\"a(,\")[0], dim = \"", false, d);
  CHECK(asked.back() == "select(\"a(,\")[0]");
  CHECK(c.candidates ==
        std::vector<std::string>{"b\"", "batch\"", "h\"", "k\"", "n\"", "value\""});  // names no op: all
  CHECK(open_call_first_arg("f(a, g(b, c), ") == "a");
  CHECK(open_call_first_arg("f(a, g(b, ") == "b");
  CHECK(open_call_first_arg("f(a) + ").empty());
  CHECK(open_call_first_arg("x[1, ").empty());  // a list, not a call
}
