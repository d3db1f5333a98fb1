// One deadline for a whole collective, spread over its many waits (the
// collectives of comm/ written over Gloo's transport).
#pragma once

#include <chrono>

namespace nns::backend {

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout) : end_(std::chrono::steady_clock::now() + timeout) {}
  // What is left, at least 1 ms: a wait of 0 would mean "no timeout" to Gloo.
  std::chrono::milliseconds left() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(1);
  }
  bool expired() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

}  // namespace nns::backend
