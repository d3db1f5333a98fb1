#include "backend/runtime/comm/launcher.h"
#include "backend/runtime/comm/env_vars.h"
#include "backend/runtime/comm/launch_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace nns::backend {
namespace {

using Clock = std::chrono::steady_clock;

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// When the ranks have a core each or more (world_size <= cores), rank r
// keeps to its own share of the cores this process may use (r*k .. r*k+k-1,
// k = cores / world_size), as MPI launchers bind ranks by default: the
// scheduler otherwise sometimes left two ranks of a 2-rank run on one core
// of the 2-core VM for a whole run, where a rank polling for its peer's
// message (comm_spin) took the core from the peer (mlp small pipeline:
// 0.07 ms steps in some runs, 0.31 ms in others, 2026-11-25).
// NNS_BIND=0 leaves the ranks unbound.
void bind_to_cores(int rank, int world_size) {
  if (nns_env_int("NNS_BIND", 1) == 0) return;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  const int n = static_cast<int>(cores.size());
  if (world_size > n || n == 0) return;
  const int k = n / world_size;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = rank * k; i < rank * k + k; ++i) CPU_SET(cores[static_cast<size_t>(i)], &mine);
  sched_setaffinity(0, sizeof mine, &mine);
}

void write_fd(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Copies a child's stderr to ours a line at a time with its rank prefix.
// Whole lines are written under one lock so ranks never interleave
// mid-line.
void forward_stderr(int fd, int rank, std::mutex& out_mu) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::string pending;
  char buf[4096];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    pending.append(buf, static_cast<size_t>(r));
    std::string lines;
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      lines += prefix;
      lines.append(pending, start, nl - start + 1);
      start = nl + 1;
    }
    pending.erase(0, start);
    if (!lines.empty()) {
      std::lock_guard<std::mutex> lock(out_mu);
      write_fd(2, lines);
    }
  }
  if (!pending.empty()) {
    std::lock_guard<std::mutex> lock(out_mu);
    write_fd(2, prefix + pending + "\n");
  }
  ::close(fd);
}

// Runs in the forked child; never returns.
[[noreturn]] void child_main(int rank, int world_size, int port, pid_t launcher, int err_fd,
                             const std::vector<int>& inherited_fds, const std::function<int(int)>& rank_main) {
  // Die with the launcher. The parent may already be gone by the time the
  // request is made, which getppid() then reveals.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(kRankFailedExit);
  // "nns rank 3" in ps/top (and for a user, or a fault test, to find a rank).
  const std::string title = "nns rank " + std::to_string(rank);
  ::prctl(PR_SET_NAME, title.c_str(), 0, 0, 0);
  // The launcher stops ranks with SIGTERM, whatever its own disposition.
  // Handlers the parent installed for fatal signals (a test framework's
  // crash reporter, say) would report as the parent from inside a rank;
  // ignored signals stay ignored.
  std::signal(SIGTERM, SIG_DFL);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGINT}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) std::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  for (int fd : inherited_fds) ::close(fd);
  ::dup2(err_fd, 2);
  ::close(err_fd);
  const char* verbose = std::getenv("NNS_VERBOSE_RANKS");
  if (rank > 0 && !(verbose && std::string(verbose) == "1")) {
    int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd >= 0) {
      ::dup2(null_fd, 1);
      ::close(null_fd);
    }
  }
  ::setenv("NNS_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("NNS_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  ::setenv("NNS_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("NNS_LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  ::setenv("NNS_MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("NNS_MASTER_PORT", std::to_string(port).c_str(), 1);
  if (nns_env_int("NNS_THREADS", 0) <= 0)
    ::setenv("NNS_THREADS", std::to_string(std::max(1, cpu_count() / world_size)).c_str(), 1);
  comm_spin();  // decided on the host's cores, before the binding narrows what this process sees
  bind_to_cores(rank, world_size);

  int rc = kRankFailedExit;
  try {
    rc = rank_main(rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nns: rank %d: error: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "nns: rank %d: error: unknown exception\n", rank);
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  // _exit, not exit: the child's copy of the parent's static objects and
  // atexit handlers (a test framework's reporters, for one) must not run
  // once per rank.
  ::_exit(rc >= 0 && rc <= 255 ? rc : kRankFailedExit);
}

struct Child {
  pid_t pid = -1;
  bool done = false;
  int status = 0;
};

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// Among ranks found dead in the same scan, the one most likely to be the
// cause: a signal or a deliberate exit code beats 70, which is also what
// ranks exit with when a collective reports the first rank's death.
int pick_culprit(const std::vector<Child>& kids, const std::vector<int>& just_failed) {
  auto score = [&](int r) {
    int st = kids[r].status;
    if (WIFSIGNALED(st)) return 0;
    return WEXITSTATUS(st) != kRankFailedExit ? 1 : 2;
  };
  int best = just_failed[0];
  for (int r : just_failed)
    if (score(r) < score(best)) best = r;
  return best;
}

// Reaps every child that has exited; returns the ranks that failed.
std::vector<int> reap(std::vector<Child>& kids) {
  std::vector<int> newly_failed;
  for (size_t r = 0; r < kids.size(); ++r) {
    if (kids[r].done) continue;
    int st = 0;
    pid_t p = ::waitpid(kids[r].pid, &st, WNOHANG);
    if (p == kids[r].pid || (p < 0 && errno == ECHILD)) {
      kids[r].done = true;
      kids[r].status = p == kids[r].pid ? st : 0;
      if (p == kids[r].pid && failed(st)) newly_failed.push_back(static_cast<int>(r));
    }
  }
  return newly_failed;
}

// SIGINT/SIGTERM/SIGHUP received by the launcher while ranks run: the
// loop stops the ranks, reaps them and returns 128 + the signal.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

bool all_done(const std::vector<Child>& kids) {
  return std::all_of(kids.begin(), kids.end(), [](const Child& c) { return c.done; });
}

}  // namespace

int find_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot find a free port: " + err);
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

int rank_threads() {
  if (int64_t t = nns_env_int("NNS_THREADS", 0); t > 0) return static_cast<int>(t);
  // The ranks that share this host's cores: all of a local launch, this
  // host's share of one started by torchrun, Slurm or Open MPI.
  LaunchEnv launch;
  std::string err;
  int world = 1;
  if (detect_launch_env(process_env(), launch, err)) world = launch.local_world_size;
  return std::max(1, cpu_count() / world);
}

std::chrono::microseconds comm_spin() {
  static const std::chrono::microseconds spin = [] {
    if (int64_t us = nns_env_int("NNS_COMM_SPIN_US", -1); us >= 0) return std::chrono::microseconds(us);
    LaunchEnv launch;
    std::string err;
    int world = 1;
    if (detect_launch_env(process_env(), launch, err)) world = launch.local_world_size;
    return std::chrono::microseconds(world <= cpu_count() ? 50 : 0);
  }();
  return spin;
}

int poll_after_spin(pollfd* fds, nfds_t n, int timeout_ms) {
  int rc = 0;
  if (const std::chrono::microseconds spin = comm_spin(); spin.count() > 0) {
    const auto until = Clock::now() + spin;
    while ((rc = ::poll(fds, n, 0)) == 0 && Clock::now() < until) {
    }
  }
  return rc == 0 ? ::poll(fds, n, timeout_ms) : rc;
}

int launch_local_ranks(int world_size, const std::function<int(int rank)>& rank_main) {
  if (world_size < 1) throw std::invalid_argument("launch_local_ranks: world size must be >= 1");
  const int port = find_free_port();
  const pid_t self = ::getpid();
  // The job's identity at the rendezvous (CommConfig::job_id): one token
  // for all the ranks forked below, unless the user named the job.
  if (const char* id = std::getenv("NNS_JOB_ID"); !id || !*id) {
    char token[40];
    std::snprintf(token, sizeof token, "nns-%d-%llx", static_cast<int>(self),
                  static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
    ::setenv("NNS_JOB_ID", token, 1);
  }
  // Buffered output would otherwise be written once by every child too.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);

  std::vector<Child> kids(world_size);
  std::vector<int> err_fds;  // read ends, index = rank
  for (int r = 0; r < world_size; ++r) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      child_main(r, world_size, port, self, p[1], err_fds, rank_main);
    }
    ::close(p[1]);
    if (pid < 0) {
      std::string err = std::strerror(errno);
      ::close(p[0]);
      for (int q = 0; q < r; ++q) ::kill(kids[q].pid, SIGKILL);
      for (int q = 0; q < r; ++q) ::waitpid(kids[q].pid, nullptr, 0);
      for (int fd : err_fds) ::close(fd);
      throw std::runtime_error("fork: " + err);
    }
    kids[r].pid = pid;
    err_fds.push_back(p[0]);
  }

  // Reader threads start only after the last fork, so no child is forked
  // from a multi-threaded parent by us.
  std::mutex out_mu;
  std::vector<std::thread> readers;
  for (int r = 0; r < world_size; ++r)
    readers.emplace_back([&, r] { forward_stderr(err_fds[r], r, out_mu); });

  // From here on an interrupt is the launcher's to handle: stop the ranks
  // and reap them (a launcher killed outright leaves them to
  // PR_SET_PDEATHSIG, and their zombies to whoever reaps orphans).
  g_stop_signal = 0;
  struct sigaction stop {}, old_int {}, old_term {}, old_hup {};
  stop.sa_handler = on_stop_signal;
  sigemptyset(&stop.sa_mask);
  sigaction(SIGINT, nullptr, &old_int);
  if (old_int.sa_handler != SIG_IGN) sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, &old_term);
  sigaction(SIGHUP, nullptr, &old_hup);
  if (old_hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &stop, nullptr);
  auto stop_ranks = [&] {
    for (auto& k : kids)
      if (!k.done) ::kill(k.pid, SIGTERM);
    auto deadline = Clock::now() + std::chrono::seconds(3);
    while (!all_done(kids) && Clock::now() < deadline) {
      reap(kids);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (auto& k : kids)
      if (!k.done) ::kill(k.pid, SIGKILL);
    for (auto& k : kids)
      if (!k.done) ::waitpid(k.pid, nullptr, 0), k.done = true;
  };

  int result = 0;
  while (!all_done(kids)) {
    if (int sig = g_stop_signal) {
      {
        std::lock_guard<std::mutex> lock(out_mu);
        write_fd(2, "nns: interrupted (signal " + std::to_string(sig) + "); stopping the ranks\n");
      }
      stop_ranks();
      result = 128 + sig;
      break;
    }
    std::vector<int> newly_failed = reap(kids);
    if (!newly_failed.empty()) {
      int r = pick_culprit(kids, newly_failed);
      // A rank that exits 70 may only have seen its peer's sockets close
      // while that peer, the cause, is still exiting with its own code (65
      // for a bad input file): the others get a moment to exit on their own
      // before the culprit is chosen among all that did.
      for (int waited = 0; waited < 500 && WIFEXITED(kids[r].status) && WEXITSTATUS(kids[r].status) == kRankFailedExit;
           waited += 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::vector<int> more = reap(kids);
        if (more.empty()) continue;
        more.push_back(r);
        r = pick_culprit(kids, more);
      }
      int st = kids[r].status;
      std::string why = WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st))
                                        : "exit code " + std::to_string(WEXITSTATUS(st));
      {
        std::lock_guard<std::mutex> lock(out_mu);
        write_fd(2, "nns: rank " + std::to_string(r) + " failed (" + why + "); stopping the other ranks\n");
      }
      // The culprit's own exit code when it chose one (65: a bad input file
      // every rank refused), else 70.
      result = WIFEXITED(st) ? WEXITSTATUS(st) : kRankFailedExit;
      stop_ranks();
      break;
    }
    // Polling keeps us from reaping children that are not ours, which
    // waitpid(-1) would do; 5 ms is far below any rank's lifetime.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& t : readers) t.join();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  return result;
}

}  // namespace nns::backend
