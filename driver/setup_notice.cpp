#include "driver/setup_notice.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace nns::driver {

double notice_after() {
  // check_nns_variables (before anything runs) has refused a malformed value.
  if (const char* text = std::getenv("NNS_SETUP_NOTICE"); text && *text) return std::strtod(text, nullptr);
  return ::isatty(STDERR_FILENO) == 1 ? 2.0 : -1.0;
}

SetupNotice::SetupNotice(std::string what) : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {
  const double after = notice_after();
  if (after < 0) return;
  if (after == 0) {  // "at once": said here, so that it never races the phase's end
    spoke_ = true;
    std::fprintf(stderr, "nns: %s ...\n", what_.c_str());
    std::fflush(stderr);
    return;
  }
  watch_ = std::thread([this, after] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(after), [this] { return done_; })) return;
    spoke_ = true;
    std::fprintf(stderr, "nns: %s ...\n", what_.c_str());
    std::fflush(stderr);
  });
}

SetupNotice::~SetupNotice() {
  if (watch_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    watch_.join();
  }
  if (spoke_) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "nns: %s: done in %.1f s\n", what_.c_str(), s);
  }
}

}  // namespace nns::driver
