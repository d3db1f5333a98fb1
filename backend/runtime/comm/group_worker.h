// Posted allreduces on the host, run on one thread per group so that they
// overlap the computation that follows the post (the plan executor posts a
// gradient bucket as soon as its gradients are final, and waits for it at
// their first later use).
//
// The Communicator allows different groups on different threads at once,
// one thread per group at a time, and requires every member of a group to
// issue that group's collectives in the same order. Each group's posts
// therefore run in post order on the group's own thread, and a collective
// the caller runs itself on a group first waits for that group's posts
// (drain): the group's order is the program's order on every member.
// Groups on different threads need no common order: their connections are
// their own.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nns::backend {

class GroupWorkers {
 public:
  // The outcome of one posted task: wait() blocks until it ran and
  // rethrows what it threw.
  class Ticket {
   public:
    void wait();

   private:
    friend class GroupWorkers;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
  };

  GroupWorkers() = default;
  GroupWorkers(const GroupWorkers&) = delete;
  GroupWorkers& operator=(const GroupWorkers&) = delete;
  ~GroupWorkers();  // finishes what was posted, then joins the threads

  // Runs `task` on `group`'s thread after the group's earlier posts.
  std::shared_ptr<Ticket> post(const std::vector<int>& group, std::function<void()> task);
  // Returns once every task posted on `group` so far has run (its outcome
  // stays with its ticket).
  void drain(const std::vector<int>& group);

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<std::function<void()>, std::shared_ptr<Ticket>>> queue;
    bool busy = false, stop = false;
    std::thread thread;
    void loop();
  };
  std::mutex mu_;  // guards workers_
  std::map<std::vector<int>, std::unique_ptr<Worker>> workers_;
};

}  // namespace nns::backend
