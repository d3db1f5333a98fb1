// A setup phase that runs long says what it is doing (issue 27): the
// elaboration of a big model, the Z3 check and program verification of a
// plan, a rank's lowering. Silent when the phase ends within the threshold
// (2 s, NNS_SETUP_NOTICE seconds), and only on a terminal unless
// NNS_SETUP_NOTICE is set: piped output and the golden error files stay as
// they are whatever the machine's load.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace nns::driver {

// Seconds before a long phase speaks: NNS_SETUP_NOTICE when set (0: at
// once), else 2 on a terminal; negative: never (stderr piped, not asked).
double notice_after();

class SetupNotice {
 public:
  // `what`: "checking plan megatron (Z3, then program verification)".
  explicit SetupNotice(std::string what);
  ~SetupNotice();  // stops the watch; a phase that spoke says how long it took
  SetupNotice(const SetupNotice&) = delete;
  SetupNotice& operator=(const SetupNotice&) = delete;

 private:
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, spoke_ = false;
  std::thread watch_;
};

}  // namespace nns::driver
