// How many kernel threads one device uses by default, when the user gave
// no --threads: no more than the model's work can keep busy, and no more
// than the cores other processes leave idle. Both matter on a CPU: OpenMP
// threads that wait at a barrier for a partner the kernel has descheduled
// spin on the core that partner needs (a gpt tiny step went from 1.2 ms to
// 3-5 ms, swin tiny from 28 to 70-85 ms, with one busy loop on the other
// of two cores), and tiny kernels run slower on two threads than on one.
#pragma once

#include <cstdint>

namespace nns::backend::cpu {

// Threads the work of one step can use: one per 50 M multiply-adds of the
// forward (matmul/linear/conv), at least 1, at most `cores`. Measured here
// (2 cores): gpt tiny (15 M) and t5 tiny (3 M) run faster on 1 thread than
// on 2; swin tiny (120 M) 1.25x faster on 2.
int work_threads(int64_t forward_macs, int cores);

// Samples how busy the machine's cores are with other processes (not this
// one) from /proc/stat and /proc/self/stat, over windows of at least
// 100 ms (the kernel counts in 10 ms ticks), and says how many threads fit
// the idle cores, capped by `cap`. On a machine without /proc it keeps `cap`.
class ThreadGovernor {
 public:
  ThreadGovernor(int cap, int cores);
  // The thread count for the next step: changes at most once per window.
  int decide();
  int current() const { return threads_; }

 private:
  bool sample(uint64_t& total, uint64_t& idle, uint64_t& own) const;
  int cap_, cores_, threads_;
  uint64_t total_ = 0, idle_ = 0, own_ = 0;
  double since_ = 0;  // seconds on the steady clock of the last sample
  bool ok_ = false;
};

}  // namespace nns::backend::cpu
