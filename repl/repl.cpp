// The read-eval-print loop: reads lines (libedit on a terminal, plain
// lines otherwise), joins them while an input is incomplete, and hands
// each complete input to the Session.
#include "repl/repl.h"

#include <clocale>
#include <cstdlib>
#include <iostream>
#include <unistd.h>

#include "repl/line_reader.h"
#include "repl/session.h"
#include "repl/signals.h"

namespace nns::repl {

namespace {

std::string history_path() {
  if (const char* p = std::getenv("NNS_HISTORY"); p && *p) return p;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.nns_history";
  return "";
}

}  // namespace

int run_repl(const ReplOptions& o) {
  bool interactive = isatty(STDIN_FILENO) != 0;
  const char* no_colour = std::getenv("NO_COLOR");
  SessionOptions so;
  so.file = o.file;
  so.config = o.config;
  so.ngpus = o.ngpus;
  so.stdlib_dirs = o.stdlib_dirs;
  so.nns_binary = o.nns_binary;
  so.budget = o.budget;
  so.colour = interactive && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) && !(no_colour && *no_colour);
  Session session(so, std::cout, std::cerr);
  int code = 0;
  if (!session.start(code)) return code;
  if (interactive) {
    std::setlocale(LC_CTYPE, "");  // libedit shows non-ASCII text by the locale
    std::cout << session.banner() << std::flush;
  }
  install_interrupt_handler();
  std::string pending;  // lines of an input that is not complete yet
  LineReader reader(interactive, interactive ? history_path() : "",
                    [&](const std::string& before) { return session.complete(before, pending.empty()); });
  bool any_failed = false;
  for (;;) {
    std::string line;
    LineReader::Status st = reader.read(pending.empty() ? "nns> " : "...> ", line);
    if (st == LineReader::Status::Interrupted) {
      pending.clear();
      continue;
    }
    if (st == LineReader::Status::TooLong) {
      std::cerr << "nns: error: input line longer than " << LineReader::kMaxLineBytes
                << " bytes; it is ignored (put large data in a file)\n";
      pending.clear();
      any_failed = true;
      continue;
    }
    if (st == LineReader::Status::Eof) {
      // A script that ends inside a block: let the parser say what is missing.
      if (!pending.empty() && !interactive && !session.handle(pending)) any_failed = true;
      break;
    }
    reader.add_history(line);
    if (pending.empty()) {
      Command cmd;
      if (parse_command(line, cmd)) {
        if (!session.handle(line)) any_failed = true;
        if (session.quit_requested()) break;
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      pending = line;
    } else {
      pending += "\n" + line;
    }
    if (!input_complete(pending)) continue;
    if (!session.handle(pending)) any_failed = true;
    pending.clear();
    if (session.quit_requested()) break;
  }
  std::cout << std::flush;
  return !interactive && any_failed ? 65 : 0;
}

}  // namespace nns::repl
