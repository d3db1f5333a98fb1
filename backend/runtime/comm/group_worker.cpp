#include "backend/runtime/comm/group_worker.h"

#include <utility>

namespace nns::backend {

void GroupWorkers::Ticket::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void GroupWorkers::Worker::loop() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [this] { return stop || !queue.empty(); });
    if (queue.empty()) return;  // stopped, nothing left
    auto [task, ticket] = std::move(queue.front());
    queue.pop_front();
    busy = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> t(ticket->mu_);
      ticket->done_ = true;
      ticket->error_ = error;
    }
    ticket->cv_.notify_all();
    lock.lock();
    busy = false;
    cv.notify_all();
  }
}

std::shared_ptr<GroupWorkers::Ticket> GroupWorkers::post(const std::vector<int>& group, std::function<void()> task) {
  Worker* w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Worker>& slot = workers_[group];
    if (!slot) {
      slot = std::make_unique<Worker>();
      Worker* fresh = slot.get();
      fresh->thread = std::thread([fresh] { fresh->loop(); });
    }
    w = slot.get();
  }
  auto ticket = std::make_shared<Ticket>();
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->queue.emplace_back(std::move(task), ticket);
  }
  w->cv.notify_all();
  return ticket;
}

void GroupWorkers::drain(const std::vector<int>& group) {
  Worker* w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(group);
    if (it == workers_.end()) return;
    w = it->second.get();
  }
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait(lock, [w] { return w->queue.empty() && !w->busy; });
}

GroupWorkers::~GroupWorkers() {
  for (auto& [group, w] : workers_) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
    if (w->thread.joinable()) w->thread.join();
  }
}

}  // namespace nns::backend
