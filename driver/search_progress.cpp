#include "driver/search_progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "driver/setup_notice.h"

namespace nns::driver {

SearchProgressLine::SearchProgressLine(std::string what)
    : what_(std::move(what)),
      start_(std::chrono::steady_clock::now()),
      last_(start_),
      after_(notice_after()),
      live_(::isatty(STDERR_FILENO) == 1) {}

SearchProgressLine::~SearchProgressLine() {
  if (!spoke_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%snns: %s: done in %.1f s\n", live_ ? "\r\033[K" : "", what_.c_str(), s);
}

std::string SearchProgressLine::text(const std::string& what, const planner::SearchProgress& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s: %s %d of %d done, %lld candidates, %lld unit solves, best ", what.c_str(),
                p.phase, p.points_done, p.points, static_cast<long long>(p.evaluated),
                static_cast<long long>(p.unit_solves));
  std::string line = buf;
  if (!p.best) return line + "none yet";
  std::snprintf(buf, sizeof buf, "%.4g ms/step (%s)", p.best->step_time * 1e3, p.best->describe().c_str());
  return line + buf;
}

void SearchProgressLine::update(const planner::SearchProgress& p) {
  if (after_ < 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - start_).count() < after_) return;
  // At most about once a second (the first update as soon as the threshold passes).
  if (spoke_ && std::chrono::duration<double>(now - last_).count() < 1.0) return;
  last_ = now;
  spoke_ = true;
  std::string line = "nns: " + text(what_, p);
  if (live_) {
    // A redrawn line must not wrap: the carriage return goes back to the
    // start of the last screen line only.
    struct winsize ws {};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && line.size() >= ws.ws_col)
      line.resize(ws.ws_col - 1);
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  } else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace nns::driver
