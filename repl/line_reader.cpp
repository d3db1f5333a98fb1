#include "repl/line_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <histedit.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "repl/signals.h"

namespace nns::repl {

std::string common_prefix(const std::vector<std::string>& words) {
  if (words.empty()) return "";
  std::string p = words[0];
  for (const std::string& w : words) {
    size_t n = 0;
    while (n < p.size() && n < w.size() && p[n] == w[n]) ++n;
    p.resize(n);
  }
  return p;
}

struct LineReader::Impl {
  EditLine* el = nullptr;
  History* hist = nullptr;
  std::string prompt;
  bool interrupted = false;
  LineReader* owner = nullptr;
};

namespace {

LineReader::Impl* impl_of(EditLine* el) {
  void* data = nullptr;
  el_get(el, EL_CLIENTDATA, &data);
  return static_cast<LineReader::Impl*>(data);
}

char* prompt_fn(EditLine* el) { return const_cast<char*>(impl_of(el)->prompt.c_str()); }

// Ends the line being edited as cancelled: the terminal cursor goes after
// its last character (re-printing what is shown there) and "^C" marks it,
// as a shell does.
void mark_cancelled(EditLine* el) {
  impl_of(el)->interrupted = true;
  const LineInfo* li = el_line(el);
  std::fwrite(li->cursor, 1, static_cast<size_t>(li->lastchar - li->cursor), stdout);
  std::fputs("^C", stdout);
  std::fflush(stdout);
}

// One character for libedit. Waiting in poll() on the terminal and on the
// interrupt pipe is what lets Ctrl-C cancel the line: libedit's raw mode
// keeps ISIG, so the terminal turns Ctrl-C into SIGINT (and drops what was
// typed), and the handler wakes this poll. Returning -1 ends el_gets at
// once — not relying on a key binding, which libedit may replace with its
// own no-op tty functions when it re-reads the terminal's settings.
int getc_fn(EditLine* el, wchar_t* out) {
  for (;;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    int r = poll(fds, interrupt_fd() >= 0 ? 2 : 1, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (interrupt_fd() >= 0 && (fds[1].revents & POLLIN)) {
      take_interrupt();
      mark_cancelled(el);
      return -1;
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    unsigned char b[4];
    ssize_t n = read(STDIN_FILENO, b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    // UTF-8: the lead byte says how many continuation bytes follow.
    int extra = b[0] < 0x80 ? 0 : (b[0] & 0xE0) == 0xC0 ? 1 : (b[0] & 0xF0) == 0xE0 ? 2 : (b[0] & 0xF8) == 0xF0 ? 3 : 0;
    wchar_t c = extra == 0 ? b[0] : extra == 1 ? (b[0] & 0x1F) : extra == 2 ? (b[0] & 0x0F) : (b[0] & 0x07);
    for (int i = 0; i < extra; ++i) {
      unsigned char cb;
      if (read(STDIN_FILENO, &cb, 1) != 1) break;
      c = (c << 6) | (cb & 0x3F);
    }
    *out = c;
    return 1;
  }
}

// Ctrl-C as a byte (a terminal without ISIG).
unsigned char interrupt_fn(EditLine* el, int) {
  mark_cancelled(el);
  return CC_NEWLINE;
}

int terminal_columns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

void list_candidates(const std::vector<std::string>& c) {
  size_t width = 0;
  for (const std::string& s : c) width = std::max(width, s.size());
  width += 2;
  size_t cols = std::max<size_t>(1, static_cast<size_t>(terminal_columns()) / width);
  std::string out = "\n";
  size_t shown = std::min<size_t>(c.size(), 200);
  for (size_t i = 0; i < shown; ++i) {
    std::string s = c[i];
    bool last_in_row = (i + 1) % cols == 0 || i + 1 == shown;
    if (!last_in_row) s.resize(width, ' ');
    out += s;
    if (last_in_row) out += "\n";
  }
  if (shown < c.size()) out += "... and " + std::to_string(c.size() - shown) + " more\n";
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

unsigned char complete_fn(EditLine* el, int) {
  LineReader::Impl* impl = impl_of(el);
  const LineInfo* li = el_line(el);
  std::string before(li->buffer, static_cast<size_t>(li->cursor - li->buffer));
  Completion c = impl->owner->complete(before);
  if (c.candidates.empty() || c.from > before.size()) return CC_REFRESH_BEEP;
  std::string typed = before.substr(c.from);
  std::string prefix = common_prefix(c.candidates);
  if (prefix.size() > typed.size() && prefix.compare(0, typed.size(), typed) == 0) {
    el_insertstr(el, prefix.substr(typed.size()).c_str());
    return CC_REFRESH;
  }
  if (c.candidates.size() == 1) return CC_NORM;  // already complete
  list_candidates(c.candidates);
  return CC_REDISPLAY;
}

}  // namespace

Completion LineReader::complete(const std::string& before) { return completer_ ? completer_(before) : Completion{}; }

LineReader::LineReader(bool interactive, std::string history_path, Completer completer)
    : interactive_(interactive), history_path_(std::move(history_path)), completer_(std::move(completer)) {
  if (!interactive_) return;
  impl_ = new Impl;
  impl_->owner = this;
  impl_->el = el_init("nns", stdin, stdout, stderr);
  EditLine* el = impl_->el;
  el_set(el, EL_CLIENTDATA, impl_);
  el_set(el, EL_EDITOR, "emacs");
  el_set(el, EL_PROMPT, prompt_fn);
  el_set(el, EL_GETCFN, getc_fn);
  el_set(el, EL_ADDFN, "nns-complete", "complete a command, op, parameter or name", complete_fn);
  el_set(el, EL_BIND, "^I", "nns-complete", nullptr);
  el_set(el, EL_ADDFN, "nns-interrupt", "cancel the input", interrupt_fn);
  el_set(el, EL_BIND, "^C", "nns-interrupt", nullptr);
  impl_->hist = history_init();
  HistEvent ev;
  history(impl_->hist, &ev, H_SETSIZE, 1000);
  history(impl_->hist, &ev, H_SETUNIQUE, 1);
  if (!history_path_.empty()) history(impl_->hist, &ev, H_LOAD, history_path_.c_str());  // absent on the first run
  el_set(el, EL_HIST, history, impl_->hist);
  el_source(el, nullptr);  // the user's ~/.editrc, as every libedit program reads it
}

LineReader::~LineReader() {
  if (!impl_) return;
  if (impl_->el) el_end(impl_->el);
  if (impl_->hist) history_end(impl_->hist);
  delete impl_;
}

LineReader::Status LineReader::read(const std::string& prompt, std::string& line) {
  line.clear();
  if (interactive_) {
    impl_->prompt = prompt;
    impl_->interrupted = false;
    el_resize(impl_->el);  // the window may have changed while a command ran
    // Raw mode before the prompt is drawn: libedit would set it only at its
    // first read, and a key typed on seeing the prompt (Ctrl-D above all)
    // would meet the terminal still in cooked mode.
    el_set(impl_->el, EL_PREP_TERM, 1);
    // Entering raw mode, libedit rebinds the terminal's special characters
    // to its own (no-op) tty functions when it finds the settings changed;
    // our keys go back on top every time.
    el_set(impl_->el, EL_BIND, "^C", "nns-interrupt", nullptr);
    el_set(impl_->el, EL_BIND, "^I", "nns-complete", nullptr);
    int count = 0;
    const char* text = el_gets(impl_->el, &count);
    if (impl_->interrupted) {
      std::fputs("\n", stdout);
      std::fflush(stdout);
      return Status::Interrupted;
    }
    if (!text || count <= 0) {
      std::fputs("\n", stdout);
      std::fflush(stdout);
      return Status::Eof;
    }
    if (static_cast<size_t>(count) > kMaxLineBytes) return Status::TooLong;
    line.assign(text, static_cast<size_t>(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return Status::Line;
  }
  // Plain input: lines from a buffer refilled by read(2), waiting in poll()
  // so that an interrupt can cancel a pending multi-line input.
  for (;;) {
    size_t nl = pending_.find('\n', scanned_);
    if (nl != std::string::npos) {
      scanned_ = 0;
      if (skipping_) {  // the end of a line already refused
        pending_.erase(0, nl + 1);
        skipping_ = false;
        continue;
      }
      if (nl > kMaxLineBytes) {
        pending_.erase(0, nl + 1);
        return Status::TooLong;
      }
      line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return Status::Line;
    }
    scanned_ = pending_.size();
    if (pending_.size() > kMaxLineBytes) {
      // Refused now, not when its newline finally comes: the rest is dropped
      // as it arrives.
      pending_.clear();
      scanned_ = 0;
      const bool first = !skipping_;
      skipping_ = true;
      if (first) return Status::TooLong;
      continue;
    }
    if (eof_) {
      if (skipping_) pending_.clear(), skipping_ = false;
      if (pending_.empty()) return Status::Eof;
      scanned_ = 0;
      line.swap(pending_);
      pending_.clear();
      return Status::Line;
    }
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    int r = poll(fds, interrupt_fd() >= 0 ? 2 : 1, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      eof_ = true;
      continue;
    }
    if (interrupt_fd() >= 0 && (fds[1].revents & POLLIN)) {
      take_interrupt();
      return Status::Interrupted;
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[4096];
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) eof_ = true;
    else pending_.append(buf, static_cast<size_t>(n));
  }
}

void LineReader::add_history(const std::string& line) {
  if (!interactive_ || line.find_first_not_of(" \t") == std::string::npos) return;
  HistEvent ev;
  history(impl_->hist, &ev, H_ENTER, line.c_str());
  // Saved at once: a session that is killed keeps what was typed.
  if (!history_path_.empty()) history(impl_->hist, &ev, H_SAVE, history_path_.c_str());
}

}  // namespace nns::repl
