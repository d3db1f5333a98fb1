// Test helpers that run `nns repl` as a real process: through pipes
// (scripted input, captured output) and through a pseudo-terminal
// (forkpty: what a user at a terminal sends and sees). Written in C++ so
// that the tests need nothing beyond the build (no python, no expect).
#pragma once

#include <pty.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace repl_test {

struct Piped {
  std::string output;  // stdout and stderr, interleaved as written
  int exit_code = -1;
};

// Runs `args` (argv[0] the program) in `cwd`, feeding `input` on stdin.
inline Piped run_piped(const std::vector<std::string>& args, const std::string& input, const std::string& cwd,
                       const std::vector<std::string>& env = {}, int timeout_s = 240) {
  Piped res;
  int in_pipe[2], out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) return res;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(out_pipe[1], 2);
    close(in_pipe[1]);
    close(out_pipe[0]);
    if (chdir(cwd.c_str()) != 0) _exit(127);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  signal(SIGPIPE, SIG_IGN);
  size_t written = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool in_open = true;
  if (input.empty()) {
    close(in_pipe[1]);
    in_open = false;
  }
  for (;;) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {in_open ? in_pipe[1] : -1, POLLOUT, 0}};
    int r = poll(fds, 2, 200);
    if (r < 0) continue;
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      char buf[4096];
      ssize_t n = read(out_pipe[0], buf, sizeof buf);
      if (n <= 0) break;
      res.output.append(buf, static_cast<size_t>(n));
    }
    if (in_open && (fds[1].revents & (POLLOUT | POLLERR))) {
      ssize_t n = write(in_pipe[1], input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if (n < 0 || written == input.size()) {
        close(in_pipe[1]);
        in_open = false;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      res.output += "\n[test: timed out]\n";
      break;
    }
  }
  close(out_pipe[0]);
  if (in_open) close(in_pipe[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

// Terminal output with escape sequences and carriage returns taken out,
// so expectations read as the text a user sees.
inline std::string plain(const std::string& raw) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '\x1b') {
      if (i + 1 < raw.size() && raw[i + 1] == '[') {
        i += 2;
        while (i < raw.size() && !(raw[i] >= '@' && raw[i] <= '~')) ++i;
      } else {
        ++i;  // a two-byte escape
      }
      continue;
    }
    if (c == '\r' || c == '\a') continue;
    if (c == '\b') {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out += c;
  }
  return out;
}

// `nns repl` on a pseudo-terminal.
class PtySession {
 public:
  PtySession(const std::vector<std::string>& args, const std::string& cwd, const std::vector<std::string>& env) {
    winsize ws{};
    ws.ws_row = 50;
    ws.ws_col = 250;  // wide: no wrapping of long lines in the editor
    pid_ = forkpty(&master_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      if (chdir(cwd.c_str()) != 0) _exit(127);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~PtySession() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool started() const { return pid_ > 0 && master_ >= 0; }

  void send(const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = write(master_, s.data() + done, s.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }

  // Waits until `text` appears in the (plain) output after the last match;
  // false on timeout or end of output.
  bool expect(const std::string& text, int timeout_s = 30) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
      std::string p = plain(raw_);
      size_t at = p.find(text, seen_);
      if (at != std::string::npos) {
        seen_ = at + text.size();
        return true;
      }
      if (std::chrono::steady_clock::now() > deadline || !pump(200)) return false;
    }
  }

  // Waits for the process to end; its exit code, or -1 on timeout.
  int wait_exit(int timeout_s = 30) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
      int status = 0;
      pid_t w = waitpid(pid_, &status, WNOHANG);
      if (w == pid_) {
        exited_ = true;
        while (pump(50)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      pump(100);
    }
  }

  const std::string& raw() const { return raw_; }
  std::string output() const { return plain(raw_) + (closed_errno_ >= 0 ? "\n[terminal closed: " + std::string(std::strerror(closed_errno_)) + "]" : ""); }
  std::string unseen() const { return plain(raw_).substr(std::min(seen_, plain(raw_).size())); }

 private:
  // Reads what is available within `ms`; false once the terminal is closed.
  bool pump(int ms) {
    pollfd fd{master_, POLLIN, 0};
    int r = poll(&fd, 1, ms);
    if (r < 0) return errno == EINTR;
    if (r == 0) return true;
    char buf[4096];
    ssize_t n = read(master_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      closed_errno_ = n < 0 ? errno : 0;
      return false;
    }
    raw_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int master_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string raw_;
  size_t seen_ = 0;
  int closed_errno_ = -1;
};

}  // namespace repl_test
