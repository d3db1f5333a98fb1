#include "backend/runtime/progress_line.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace nns::backend {

bool wants_live_progress(std::FILE* out) {
  const char* mode = std::getenv("NNS_PROGRESS");
  if (mode && std::strcmp(mode, "lines") == 0) return false;
  return out && ::isatty(::fileno(out)) == 1;
}

std::string short_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  return buf;
}

std::string progress_text(int64_t step, int64_t steps, double loss, double lr, double rate, const char* unit,
                          double eta_seconds, const std::string& peak) {
  // A rate in thousands past 10k keeps the line short enough for a narrow terminal.
  char rate_text[32];
  if (rate >= 1e4)
    std::snprintf(rate_text, sizeof rate_text, "%.1fk", rate / 1e3);
  else
    std::snprintf(rate_text, sizeof rate_text, "%.0f", rate);
  const std::string eta = eta_seconds < 0 ? "?" : short_duration(eta_seconds);
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld (%3.0f%%)  loss %.4f  lr %.3g  %s %s/s  ETA %s  peak %s",
                static_cast<long long>(step), static_cast<long long>(steps),
                100.0 * static_cast<double>(step) / static_cast<double>(steps), loss, lr, rate_text, unit, eta.c_str(),
                peak.c_str());
  return line;
}

}  // namespace nns::backend
