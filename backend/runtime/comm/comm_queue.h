// One thread that runs a rank's collectives in the order they are
// submitted, so that compute can go on while they are in flight (the
// data-parallel gradient allreduce overlapping the rest of the backward).
// Collectives of one communicator must still run one at a time and in the
// same order on every rank: the queue keeps both, as long as every
// collective of that communicator goes through it (or the queue is
// drained first).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace nns::backend {

class CommQueue {
 public:
  using Ticket = uint64_t;
  CommQueue();
  ~CommQueue();  // finishes what was submitted, then joins
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Runs `task` on the queue's thread after every task submitted before it.
  Ticket submit(std::function<void()> task);
  // Returns once task `t` (and every earlier one) has run; rethrows the
  // first exception a task threw (a peer that died, say). After a failure
  // the later tasks are not run: each wait rethrows it.
  void wait(Ticket t);
  void drain() { wait(submitted_); }

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Ticket, std::function<void()>>> tasks_;
  Ticket submitted_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nns::backend
