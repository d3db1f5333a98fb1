// Where REPL input comes from. On a terminal: libedit (emacs keys, a
// history file kept across sessions, tab completion through a callback,
// Ctrl-C cancels the line being typed, Ctrl-D on an empty line ends input).
// Otherwise (a pipe, a file): plain lines, no prompt, no echo.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace nns::repl {

// What tab completion offers for the text before the cursor: candidates
// for the word that starts at `from` (each one the whole new word, a
// trailing space included when the word is finished).
struct Completion {
  size_t from = 0;
  std::vector<std::string> candidates;
};
using Completer = std::function<Completion(const std::string& before_cursor)>;

class LineReader {
 public:
  // `interactive`: use libedit on the terminal. `history_path` empty: no
  // history file.
  LineReader(bool interactive, std::string history_path, Completer completer);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  enum class Status { Line, Interrupted, Eof };
  // One line (without its newline). The prompt is shown only interactively.
  Status read(const std::string& prompt, std::string& line);
  // Appends to the history (and its file) — interactive only.
  void add_history(const std::string& line);
  bool interactive() const { return interactive_; }

  // Callbacks from libedit (public for the C trampolines).
  struct Impl;
  Completion complete(const std::string& before_cursor);

 private:
  bool interactive_;
  std::string history_path_;
  Completer completer_;
  Impl* impl_ = nullptr;
  std::string pending_;  // non-interactive: bytes read past the last line
  bool eof_ = false;
};

// Longest common prefix of the candidates.
std::string common_prefix(const std::vector<std::string>& words);

}  // namespace nns::repl
