#include "semantics/check_deadline.h"

#include <algorithm>

namespace nns::sema {

double CheckDeadline::limit_ms_ = 0;
std::atomic<uint64_t> CheckDeadline::calls_{0};
const char* CheckDeadline::stage_ = "the check";
std::chrono::steady_clock::time_point CheckDeadline::end_{};

void CheckDeadline::start(double limit_ms) {
  limit_ms_ = limit_ms;
  calls_ = 0;
  stage_ = "the check";
  end_ = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(limit_ms * 1000));
}

void CheckDeadline::poll_now() {
  if (limit_ms_ > 0 && std::chrono::steady_clock::now() >= end_) throw CheckTimeout(stage_, limit_ms_);
}

unsigned CheckDeadline::remaining_ms(unsigned cap) {
  if (limit_ms_ <= 0) return cap;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now()).count();
  return static_cast<unsigned>(std::clamp<int64_t>(left, 1, cap));
}

}  // namespace nns::sema
