// A small parallel loop for the check's per-rank work (lowering each rank,
// the buffer check of each rank, rank signatures, replica comparisons,
// adapter searches; docs/verify.md, "On all cores"): the items are independent, so they run on the machine's
// cores, and each writes only its own result slot, which the caller then
// reads in item order. Output is therefore the same byte for byte whatever
// the thread count; NNS_CHECK_THREADS=1 runs everything on the calling
// thread (debugging, or comparing against the serial result).
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace nns::backend {

// Threads for `items` independent items: hardware_concurrency (at most 8),
// never more than the items, 1 with NNS_CHECK_THREADS=1 (any positive value
// caps it).
unsigned check_threads(size_t items);

// Runs fn(i) for every i in [0, n). Items are handed out in increasing
// order; after an exception no new item starts, the started ones finish, and
// the exception of the lowest item that threw is rethrown here (the one a
// serial loop would have met first among those run).
template <class F>
void parallel_for(size_t n, F&& fn) {
  const unsigned threads = check_threads(n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::vector<std::exception_ptr> error(threads);
  std::vector<size_t> error_at(threads, n);
  auto work = [&](unsigned t) {
    for (size_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        error[t] = std::current_exception();
        error_at[t] = i;
        stop = true;
        return;
      }
    }
  };
  // Every worker on a thread of its own, the caller waiting: what the
  // workers allocate and keep (lowered programs) then lives in their
  // malloc arenas, not in the caller's, whose later allocations (the kernel
  // bodies of the capacity check) would otherwise search around it. With
  // one worker on the caller, Swin's 1024-rank bodies lowering took 11 s
  // instead of 3.
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (std::thread& th : pool) th.join();
  size_t first = n;
  std::exception_ptr e;
  for (unsigned t = 0; t < threads; ++t)
    if (error[t] && error_at[t] < first) {
      first = error_at[t];
      e = error[t];
    }
  if (e) std::rethrow_exception(e);
}

}  // namespace nns::backend
