#include "repl/signals.h"

#include <csignal>
#include <fcntl.h>
#include <unistd.h>

namespace nns::repl {

namespace {
int pipe_fds[2] = {-1, -1};
volatile sig_atomic_t busy = 0;
volatile sig_atomic_t busy_strikes = 0;

void on_sigint(int) {
  if (busy && ++busy_strikes >= 3) {
    const char msg[] = "\nnns: interrupted\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(130);
  }
  char c = 1;
  ssize_t ignored = write(pipe_fds[1], &c, 1);  // non-blocking: a full pipe already says "interrupted"
  (void)ignored;
}
}  // namespace

void install_interrupt_handler() {
  if (pipe_fds[0] < 0) {
    if (pipe(pipe_fds) != 0) return;
    for (int fd : pipe_fds) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

int interrupt_fd() { return pipe_fds[0]; }

bool take_interrupt() {
  if (pipe_fds[0] < 0) return false;
  bool any = false;
  char buf[64];
  while (read(pipe_fds[0], buf, sizeof buf) > 0) any = true;
  return any;
}

void set_busy(bool b) {
  busy_strikes = 0;
  busy = b ? 1 : 0;
}

}  // namespace nns::repl
