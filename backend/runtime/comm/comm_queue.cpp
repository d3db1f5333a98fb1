#include "backend/runtime/comm/comm_queue.h"

namespace nns::backend {

CommQueue::CommQueue() : thread_([this] { loop(); }) {}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CommQueue::Ticket CommQueue::submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.emplace_back(++submitted_, std::move(task));
  cv_.notify_all();
  return submitted_;
}

void CommQueue::wait(Ticket t) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ >= t || error_; });
  if (error_) std::rethrow_exception(error_);
}

void CommQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop_ and nothing left
    auto [ticket, task] = std::move(tasks_.front());
    tasks_.pop_front();
    if (!error_) {
      lock.unlock();
      std::exception_ptr failed;
      try {
        task();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !error_) error_ = failed;
    }
    done_ = ticket;
    cv_.notify_all();
  }
}

}  // namespace nns::backend
