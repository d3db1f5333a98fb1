// nns repl with standard input from a pipe: no prompts, no colour, line by
// line, exit 65 when any input failed — and the whole issue's session:
// megatron for gpt.nns built directive by directive, saved, and run on two
// CPU ranks with --verify.
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

#include "process_util.h"

namespace fs = std::filesystem;
using repl_test::run_piped;

namespace {
repl_test::Piped repl(const std::vector<std::string>& args, const std::string& input) {
  std::vector<std::string> argv = {NNS_BINARY, "repl"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_piped(argv, input, NNS_SOURCE_DIR, {"NO_COLOR="});
}
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("pipe: megatron directive by directive, saved, run with --verify", "[pipe]") {
  fs::path saved = fs::temp_directory_path() / ("nns_repl_pipe_" + std::to_string(getpid()) + ".nns");
  std::string script =
      "fn spread(parts) {\n"
      "  for i in 0..len(parts) { assign(parts[i], i) }\n"
      "}\n"
      "for op in select(\"blocks.*.attn.attention#*\") { spread(trans(op, dim = \"h\", num = ngpus)) }\n"
      "for op in select(\"blocks.*.mlp.fc1.linear#*\") {\n"
      "  spread(trans(op, dim = \"n\", num = ngpus))\n"
      "}\n"
      "for op in select(\"blocks.*.mlp.fc1.add#*\") + select(\"blocks.*.mlp.gelu#*\") { spread(trans(op, idx = 0, dim = 2, num = ngpus)) }\n"
      "for op in select(\"blocks.*.mlp.fc2.linear#*\") { spread(trans(op, dim = \"k\", num = ngpus)) }\n"
      "replicate(unassigned(), 0..ngpus)\n"
      "status\n"
      "save " + saved.string() + "\n"
      "run 3 --verify\n";
  repl_test::Piped r = repl({"examples/gpt.nns", "--config", "tiny", "--gpus", "2"}, script);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("nns> ") == std::string::npos);  // no prompts from a pipe
  CHECK(r.output.find("\x1b[") == std::string::npos);  // no colour
  CHECK(count(r.output, "+ allreduce {0,1} 64.00 KiB") == 8);  // attention: 2 per block; MLP: fc1 input grad, fc2 output
  CHECK(r.output.find("comm    8 collective(s) per step, 512.00 KiB") != std::string::npos);
  CHECK(r.output.find("saved plan session for any device count (parametric in ngpus; checked at 2 and 4)") !=
        std::string::npos);
  CHECK(r.output.find("running the session plan on 2 CPU rank(s), 3 step(s), verified against one device") != std::string::npos);
  CHECK(r.output.find("step    3/3") != std::string::npos);
  CHECK(r.output.find("verify: largest relative error") != std::string::npos);
  CHECK(r.output.find(": PASS (fp32 derived bounds: largest error/bound ") != std::string::npos);

  // The saved file: the model with the plan, as file mode reads it; the same
  // partition as the file's own megatron plan.
  repl_test::Piped mine = run_piped({NNS_BINARY, "check", saved.string(), "--config", "tiny", "--plan", "session", "--gpus", "2", "--emit=plan"},
                                    "", NNS_SOURCE_DIR);
  repl_test::Piped theirs =
      run_piped({NNS_BINARY, "check", "examples/gpt.nns", "--config", "tiny", "--plan", "megatron", "--gpus", "2", "--emit=plan"}, "", NNS_SOURCE_DIR);
  REQUIRE(mine.exit_code == 0);
  REQUIRE(theirs.exit_code == 0);
  CHECK(mine.output.substr(mine.output.find('\n')) == theirs.output.substr(theirs.output.find('\n')));
  fs::remove(saved);
}

// save writes a plan parametric in ngpus where its directives allow it: a
// plan made at 4 devices runs at 2. Where a directive names a device that
// exists only at 4, the plan stays pinned and save names that directive.
TEST_CASE("pipe: a plan saved at 4 devices runs at 2; a pinned one says which directive pins it", "[pipe]") {
  fs::path saved = fs::temp_directory_path() / ("nns_repl_param_" + std::to_string(getpid()) + ".nns");
  std::string script =
      "for op in select(\"blocks.*.attn.attention#*\") {\n"
      "  let parts = trans(op, dim = \"h\", num = ngpus)\n"
      "  for i in 0..ngpus { assign(parts[i], i) }\n"
      "}\n"
      "replicate(unassigned(), 0..ngpus)\n"
      "save " +
      saved.string() + "\n";
  repl_test::Piped r = repl({"examples/gpt.nns", "--config", "tiny", "--gpus", "4"}, script);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("saved plan session for any device count (parametric in ngpus; checked at 4 and 2)") !=
        std::string::npos);
  repl_test::Piped two = run_piped({NNS_BINARY, "run", saved.string(), "--config", "tiny", "--plan", "session",
                                    "--gpus", "2", "--steps", "2", "--verify"},
                                   "", NNS_SOURCE_DIR);
  INFO(two.output);
  CHECK(two.exit_code == 0);
  CHECK(two.output.find(": PASS (fp32 derived bounds: ") != std::string::npos);

  std::string pinned_script =
      "let p = trans(select(\"blocks.0.attn.attention#*\")[0], dim = \"h\", num = 2)\n"
      "assign(p[0], 0)\n"
      "assign(p[1], 3)\n"
      "replicate(unassigned(), 0..ngpus)\n"
      "save " +
      saved.string() + "\n";
  repl_test::Piped pinned = repl({"examples/gpt.nns", "--config", "tiny", "--gpus", "4"}, pinned_script);
  INFO(pinned.output);
  REQUIRE(pinned.exit_code == 0);
  CHECK(pinned.output.find("saved plan session for 4 device(s)") != std::string::npos);
  CHECK(
      pinned.output.find("note: pinned to 4 device(s): at 2 device(s) `assign(p0[1], 3)`: device 3 is out of range") !=
      std::string::npos);
  repl_test::Piped at_two =
      run_piped({NNS_BINARY, "check", saved.string(), "--config", "tiny", "--plan", "session", "--gpus", "2"}, "",
                NNS_SOURCE_DIR);
  CHECK(at_two.exit_code == 65);
  CHECK(at_two.output.find("was made for 4 device(s)") != std::string::npos);
  fs::remove(saved);
}

TEST_CASE("pipe: a failed input does not end the session; the exit status says it failed", "[pipe]") {
  repl_test::Piped r = repl({"examples/gpt.nns", "--config", "tiny"}, "nosuch\ncfg.dim\nshow nosuch\ncfg.heads\n");
  CHECK(r.output.find("<repl:1>:1:1: error: undefined name 'nosuch'") != std::string::npos);
  CHECK(r.output.find("64\n") != std::string::npos);
  CHECK(r.output.find("no op or parameter named 'nosuch'") != std::string::npos);
  CHECK(r.output.find("4\n") != std::string::npos);
  CHECK(r.exit_code == 65);
  r = repl({"examples/gpt.nns", "--config", "tiny"}, "cfg.dim\n");
  CHECK(r.output == "64\n");
  CHECK(r.exit_code == 0);
}

TEST_CASE("pipe: input that ends inside a block is reported", "[pipe]") {
  repl_test::Piped r = repl({"examples/gpt.nns", "--config", "tiny"}, "fn f(x) {\n  return x\n");
  CHECK(r.output.find("error") != std::string::npos);
  CHECK(r.exit_code == 65);
}

TEST_CASE("pipe: files that cannot be loaded", "[pipe]") {
  repl_test::Piped r = repl({"examples/nosuch.nns"}, "");
  CHECK(r.exit_code == 65);
  CHECK(r.output.find("cannot read file 'examples/nosuch.nns'") != std::string::npos);
  r = repl({"examples/gpt.nns", "--config", "nosuch"}, "");
  CHECK(r.exit_code == 64);
  r = repl({"examples/gpt.nns", "--gpus", "0"}, "");
  CHECK(r.exit_code == 64);
}
