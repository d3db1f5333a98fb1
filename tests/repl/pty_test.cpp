// The REPL at a terminal: nns repl runs on a pseudo-terminal (forkpty) and
// the test types what a user would — Tab, Up, Ctrl-C, Ctrl-D — and reads
// the screen text back (escape sequences stripped).
#include <catch2/catch.hpp>

#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <string>

#include "process_util.h"

namespace fs = std::filesystem;
using repl_test::PtySession;

// Waits for text on the screen; a failure shows what the screen holds.
#define SCREEN_WITHIN(s, text, seconds)                                                        \
  do {                                                                                         \
    if (!(s).expect(text, seconds)) FAIL("expected '" << (text) << "'; the screen:\n" << (s).output()); \
  } while (0)
#define SCREEN(s, text) SCREEN_WITHIN(s, text, 30)

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/nns_repl_pty_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<std::string> env_for(const TempDir& home) {
  return {"HOME=" + home.path.string(), "NNS_HISTORY=" + (home.path / "history").string(), "TERM=xterm", "NO_COLOR=1"};
}

PtySession gpt(const TempDir& home, const std::string& gpus = "2") {
  return PtySession({NNS_BINARY, "repl", "examples/gpt.nns", "--config", "tiny", "--gpus", gpus}, NNS_SOURCE_DIR, env_for(home));
}

}  // namespace

TEST_CASE("pty: prompt, a value, Ctrl-D ends the session", "[pty]") {
  TempDir home;
  PtySession s = gpt(home);
  REQUIRE(s.started());
  SCREEN(s, "nns repl: examples/gpt.nns (config tiny)");
  SCREEN(s, "nns> ");
  s.send("cfg.dim * 2\r");
  SCREEN(s, "128");
  SCREEN(s, "nns> ");
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("pty: Tab completes commands, op names and annotation identifiers", "[pty]") {
  TempDir home;
  PtySession s = gpt(home);
  SCREEN(s, "nns> ");
  // A command word, then an op name one dotted level at a time.
  s.send("sh\t");
  SCREEN(s, "show ");
  s.send("blocks.0.at\t");
  SCREEN(s, "blocks.0.attn.");
  s.send("att\t");
  SCREEN(s, "attention#0 ");
  s.send("\r");
  SCREEN(s, "transform space: 2 choice(s)");
  SCREEN(s, "nns> ");
  // Several candidates: listed, and the line comes back.
  s.send("ops blocks.\t");
  SCREEN(s, "blocks.0.");
  SCREEN(s, "blocks.1.");
  s.send("1.mlp.fc\t");
  SCREEN(s, "fc1.");
  SCREEN(s, "fc2.");
  s.send("2.*\r");
  SCREEN(s, "blocks.1.mlp.fc2.linear#0");
  SCREEN(s, "(2 of 29 ops)");
  // An annotation identifier inside dim = "...", and a config entry.
  s.send("splittable(select(\"blocks.0.mlp.fc1.linear#0\")[0], dim = \"val\t");
  SCREEN(s, "value\"");
  s.send(")\r");
  SCREEN(s, "true");
  s.send("cfg.hea\t");
  SCREEN(s, "heads");
  s.send("\r");
  SCREEN(s, "4");
  s.send("quit\r");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("pty: an unclosed block continues with ...>", "[pty]") {
  TempDir home;
  PtySession s = gpt(home);
  SCREEN(s, "nns> ");
  s.send("fn twice(x) {\r");
  SCREEN(s, "...> ");
  s.send("return [x,\r");
  SCREEN(s, "...> ");
  s.send("x] }\r");
  SCREEN(s, "nns> ");
  s.send("twice(21)\r");
  SCREEN(s, "[21, 21]");
  SCREEN(s, "nns> ");
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("pty: Ctrl-C cancels the input being typed", "[pty]") {
  TempDir home;
  PtySession s = gpt(home);
  SCREEN(s, "nns> ");
  // Ctrl-C once the typed text is on the screen, as a user presses it: sent
  // in the same burst, the terminal's interrupt would flush the text (and
  // its echo) before the REPL had read it, and the test would race that.
  s.send("let cancelled = 1");
  SCREEN(s, "let cancelled = 1");
  s.send("\x03");
  SCREEN(s, "^C");
  SCREEN(s, "nns> ");
  // In the middle of a block, too: back to the first prompt.
  s.send("for i in 0..3 {\r");
  SCREEN(s, "...> ");
  s.send("\x03");
  SCREEN(s, "nns> ");
  s.send("cancelled\r");
  SCREEN(s, "undefined name 'cancelled'");
  // Keys typed while the REPL is busy may meet the terminal in cooked
  // mode, where Ctrl-D is no character: wait for the prompt, as a user does.
  SCREEN(s, "nns> ");
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("pty: history is kept across sessions", "[pty]") {
  TempDir home;
  {
    PtySession s = gpt(home);
    SCREEN(s, "nns> ");
    s.send("let remembered = 41 + 1\r");
    SCREEN(s, "nns> ");
    s.send("\x04");
    REQUIRE(s.wait_exit() == 0);
  }
  REQUIRE(fs::exists(home.path / "history"));
  PtySession s = gpt(home);
  SCREEN(s, "nns> ");
  s.send("\x1b[A");  // Up: the last line of the previous session
  SCREEN(s, "let remembered = 41 + 1");
  s.send("\r");
  SCREEN(s, "nns> ");
  s.send("remembered\r");
  SCREEN(s, "42");
  SCREEN(s, "nns> ");
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("pty: Ctrl-C stops a run and the session goes on", "[pty]") {
  TempDir home;
  PtySession s = gpt(home);
  SCREEN(s, "nns> ");
  s.send("plan megatron\r");
  SCREEN(s, "legal and complete");
  s.send("run 100000\r");
  SCREEN_WITHIN(s, "step 1/100000", 120);  // on a terminal: the progress line (progress_line.h)
  s.send("\x03");
  SCREEN_WITHIN(s, "run interrupted", 60);
  SCREEN(s, "nns> ");
  s.send("cfg.dim\r");
  SCREEN(s, "64");
  SCREEN(s, "nns> ");
  s.send("\x04");
  int code = s.wait_exit();
  std::string out = s.output();
  INFO(out.substr(out.size() > 3000 ? out.size() - 3000 : 0));
  CHECK(code == 0);
}

TEST_CASE("pty: colour on a terminal unless NO_COLOR", "[pty]") {
  TempDir home;
  PtySession s({NNS_BINARY, "repl", "examples/gpt.nns", "--config", "tiny", "--gpus", "2"}, NNS_SOURCE_DIR,
               {"HOME=" + home.path.string(), "NNS_HISTORY=" + (home.path / "history").string(), "TERM=xterm", "NO_COLOR="});
  SCREEN(s, "nns> ");
  s.send("trans(select(\"blocks.0.mlp.fc2.linear#0\")[0], dim = \"zz\", num = 2)\r");
  SCREEN(s, "refused: the plan is unchanged");
  CHECK(s.raw().find("\x1b[1;31merror") != std::string::npos);
  s.send("plan megatron\r");
  SCREEN(s, "legal and complete");
  CHECK(s.raw().find("\x1b[32m+ allreduce") != std::string::npos);
  SCREEN(s, "nns> ");
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("pty: evaluation cannot be stopped halfway, so three Ctrl-C end nns", "[pty]") {
  TempDir home;
  // No evaluation budget: the loop below must outlast the Ctrl-Cs however
  // slowly a loaded machine delivers them (the default budget would end
  // it in about a second).
  PtySession s({NNS_BINARY, "repl", "examples/gpt.nns", "--config", "tiny", "--gpus", "2", "--eval-budget", "0"}, NNS_SOURCE_DIR,
               env_for(home));
  SCREEN(s, "nns> ");
  s.send("for i in 0..1000000000 { }\r");  // minutes of work
  // The line accepted (the echo of its Enter, not just of its text: a
  // Ctrl-C before that cancels the typed line instead).
  SCREEN(s, "for i in 0..1000000000 { }\n");
  // A Ctrl-C that arrives before the evaluation has begun (a loaded
  // machine) counts for the line reader, not the three: keep pressing,
  // each time waiting for the screen, until nns says it was interrupted.
  bool ended = false;
  for (int i = 0; i < 40 && !ended; ++i) {
    s.send("\x03");
    ended = s.expect("nns: interrupted", 1);
  }
  INFO("the screen:\n" << s.output());
  CHECK(ended);
  CHECK(s.wait_exit() == 130);
}
