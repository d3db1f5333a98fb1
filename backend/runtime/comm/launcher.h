// The multi-process launcher for CPU ranks on one host (what `nns run
// --gpus N` uses for its N rank processes). Ranks started by torchrun,
// srun or mpirun, one process each, launch nothing: they read who they are
// from their launcher's variables (launch_env.h).
//
// launch_local_ranks forks one child process per rank. Each child gets
//   NNS_RANK, NNS_WORLD_SIZE, NNS_LOCAL_RANK, NNS_LOCAL_WORLD_SIZE (the
//   same two numbers: one host), NNS_MASTER_ADDR=127.0.0.1,
//   NNS_MASTER_PORT=<a free port picked by the launcher>,
//   NNS_THREADS=max(1, cores / world_size)   (unless NNS_THREADS is set:
//                                             then it is passed through)
// so rank_main can build a Communicator with CommConfig::from_env() and set
// its kernel thread count with rank_threads(). rank_main's return value is
// the child's exit status; an exception escaping it is printed and gives
// exit status 70.
//
// Output: rank 0's stdout is the launcher's stdout; the other ranks' stdout
// goes to /dev/null unless NNS_VERBOSE_RANKS=1 (then it is shared, unprefixed).
// Every rank's stderr passes through line by line, prefixed "[rank R] ".
//
// Failure: when a rank exits non-zero or is killed by a signal, the
// launcher prints "nns: rank R failed (exit code C)" (or "(signal S)")
// "; stopping the other ranks" to stderr, sends SIGTERM to the ranks still
// running, SIGKILL to those still alive 3 s later, reaps them all and
// returns the failed rank's exit code (65 when it refused a bad input
// file, say), or 70 when a signal killed it. It returns 0 when every rank
// exits 0. Each rank is named "nns rank R" (ps, top, /proc/PID/comm).
// SIGINT, SIGTERM or SIGHUP to the launcher while ranks run stops them the
// same way, and the launcher returns 128 + the signal. No orphans: each child
// asks the kernel (PR_SET_PDEATHSIG) for SIGKILL if the launcher dies.
//
// Call it before the process starts threads or OpenMP kernels: fork()
// copies only the calling thread, and libgomp cannot be used in a child
// forked after its thread pool started.
#pragma once

#include <poll.h>

#include <chrono>
#include <functional>

namespace nns::backend {

// The launcher's status when a rank fails (docs/architecture.md, "Exit codes": 70 = runtime failure).
constexpr int kRankFailedExit = 70;

int launch_local_ranks(int world_size, const std::function<int(int rank)>& rank_main);

// NNS_THREADS if set and positive, else max(1, cores / R) where R is the
// number of ranks on this host (launch_env.h: local_world_size; 1 without
// any launcher's variables).
int rank_threads();

// How long a rank waiting for a peer's message keeps polling its sockets
// before it sleeps in poll(): NNS_COMM_SPIN_US if set (0: never), else
// 50 us when this host's ranks have a core each, else 0 (a spinning rank
// would take the core from the peer it waits for). On the 2-core VM a
// rank woken from poll() by a message took 15-40 us to run again; the
// alphafold2 tiny dap step (416 all-to-alls) went from 38-45 ms to 24-26 ms
// with the spin (2026-11-25).
std::chrono::microseconds comm_spin();

// poll(2) for a rank waiting on its sockets: polls without sleeping for up
// to comm_spin(), then sleeps in poll() for up to timeout_ms. Returns what
// the last poll() returned.
int poll_after_spin(pollfd* fds, nfds_t n, int timeout_ms);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
int find_free_port();

}  // namespace nns::backend
