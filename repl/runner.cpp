#include "repl/runner.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "repl/signals.h"

namespace nns::repl {

ChildResult run_child(const std::vector<std::string>& argv, const std::string& cwd, bool capture) {
  ChildResult res;
  std::fflush(stdout);
  std::fflush(stderr);
  int out_pipe[2] = {-1, -1};
  if (capture && pipe(out_pipe) != 0) {
    res.started = false;
    res.captured = std::string("cannot create a pipe: ") + std::strerror(errno);
    return res;
  }
  take_interrupt();  // an old Ctrl-C must not stop the new run
  pid_t pid = fork();
  if (pid < 0) {
    res.started = false;
    res.captured = std::string("cannot fork: ") + std::strerror(errno);
    return res;
  }
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (capture) {
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(out_pipe[1], STDERR_FILENO);
      close(out_pipe[0]);
      close(out_pipe[1]);
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(127);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "nns: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: whichever of parent and child runs first
  if (capture) close(out_pipe[1]);
  using Clock = std::chrono::steady_clock;
  Clock::time_point killed_at{};
  bool sent_kill = false;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    pollfd fds[2] = {{interrupt_fd(), POLLIN, 0}, {capture ? out_pipe[0] : -1, POLLIN, 0}};
    int r = poll(fds, 2, 100);
    if (r < 0 && errno != EINTR) break;
    if (interrupt_fd() >= 0 && (fds[0].revents & POLLIN) && take_interrupt()) {
      res.interrupted = true;
      killpg(pid, SIGINT);
      if (killed_at == Clock::time_point{}) killed_at = Clock::now();
    }
    if (capture && (fds[1].revents & (POLLIN | POLLHUP))) {
      char buf[4096];
      ssize_t n = read(out_pipe[0], buf, sizeof buf);
      if (n > 0) res.captured.append(buf, static_cast<size_t>(n));
    }
    if (res.interrupted && !sent_kill && Clock::now() - killed_at > std::chrono::seconds(3)) {
      killpg(pid, SIGKILL);
      sent_kill = true;
    }
  }
  if (capture) {
    char buf[4096];
    ssize_t n;
    while ((n = read(out_pipe[0], buf, sizeof buf)) > 0) res.captured.append(buf, static_cast<size_t>(n));
    close(out_pipe[0]);
  }
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) res.exit_code = 128 + WTERMSIG(status);
  // Ranks the child launched share its group; none may outlive an interrupt.
  if (res.interrupted) killpg(pid, SIGKILL);
  return res;
}

}  // namespace nns::repl
