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

  // TooLong: the line ran past kMaxLineBytes; it is dropped (its rest is
  // skipped up to the next newline) and `line` is empty.
  enum class Status { Line, Interrupted, Eof, TooLong };
  // The longest line read accepts. A 100 MB line used to hold the REPL for
  // minutes (each 4 KB read scanned the whole buffer for its newline).
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;
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
  size_t scanned_ = 0;   // pending_[0, scanned_) holds no newline
  bool skipping_ = false;  // dropping the rest of a line that was too long
  bool eof_ = false;
};

// Longest common prefix of the candidates.
std::string common_prefix(const std::vector<std::string>& words);

}  // namespace nns::repl
