// One wall-clock limit for the whole check of a plan (`--check-timeout MS`):
// plan evaluation, nns choosing device orders, the Z3 checker, deriving the
// communication and program verification all poll it, so that the limit
// bounds the check and not each Z3 call alone. Past it, poll() throws
// CheckTimeout naming the stage that was running; the driver reports it
// with exit 70.
//
// Process-wide (one check runs at a time; lowering polls from its threads). Without start()
// nothing is limited and poll() costs a branch.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace nns::sema {

struct CheckTimeout : std::runtime_error {
  CheckTimeout(const std::string& stage, double limit_ms)
      : std::runtime_error("--check-timeout " + std::to_string(static_cast<int64_t>(limit_ms)) + " ms ran out during " + stage), stage(stage) {}
  std::string stage;
};

class CheckDeadline {
 public:
  // Starts the limit (milliseconds from now); 0 clears it.
  static void start(double limit_ms);
  static void clear() { start(0); }
  static bool active() { return limit_ms_ > 0; }
  // Names the stage that runs from now on (in the CheckTimeout message).
  static void stage(const char* name) { stage_ = name; }
  // Throws CheckTimeout when the limit has passed. Reads the clock every
  // 64th call: callers poll in inner loops.
  static void poll() {
    if (limit_ms_ > 0 && (calls_.fetch_add(1, std::memory_order_relaxed) & 63) == 0) poll_now();
  }
  static void poll_now();
  // Milliseconds left, at most `cap` (and at least 1); `cap` when no limit.
  static unsigned remaining_ms(unsigned cap);

 private:
  static double limit_ms_;
  static std::atomic<uint64_t> calls_;  // lowering polls from several threads
  static const char* stage_;
  static std::chrono::steady_clock::time_point end_;
};

}  // namespace nns::sema
