#include "backend/runtime/cpu/thread_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace nns::backend::cpu {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr double kWindowSeconds = 0.1;

}  // namespace

int work_threads(int64_t forward_macs, int cores) {
  int64_t by_work = forward_macs / 50'000'000;
  return static_cast<int>(std::clamp<int64_t>(by_work, 1, std::max(1, cores)));
}

ThreadGovernor::ThreadGovernor(int cap, int cores) : cap_(std::max(1, cap)), cores_(std::max(1, cores)), threads_(std::max(1, cap)) {
  ok_ = sample(total_, idle_, own_);
  since_ = now_s();
}

bool ThreadGovernor::sample(uint64_t& total, uint64_t& idle, uint64_t& own) const {
  std::ifstream st("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {};
  if (!(st >> cpu) || cpu != "cpu") return false;
  for (uint64_t& x : v) st >> x;
  total = 0;
  for (int i = 0; i < 8; ++i) total += v[i];  // guest time is already in user
  idle = v[3] + v[4];                          // idle + iowait
  // /proc/self/stat: fields 14 and 15 are utime and stime (all threads);
  // the command name (field 2) may hold spaces, so count from its ')'.
  std::ifstream self("/proc/self/stat");
  std::string line;
  if (!std::getline(self, line)) return false;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  own = utime + stime;
  return true;
}

int ThreadGovernor::decide() {
  if (!ok_ || cap_ <= 1) return threads_;
  double t = now_s();
  if (t - since_ < kWindowSeconds) return threads_;
  uint64_t total = 0, idle = 0, own = 0;
  if (!(ok_ = sample(total, idle, own))) return threads_;
  double dt = static_cast<double>(total - total_), busy = dt - static_cast<double>(idle - idle_);
  double mine = static_cast<double>(own - own_);
  total_ = total, idle_ = idle, own_ = own, since_ = t;
  if (dt <= 0) return threads_;
  // Cores' worth of time other processes used in the window.
  double others = std::max(0.0, (busy - mine) / (dt / cores_));
  int idle_cores = static_cast<int>(std::floor(static_cast<double>(cores_) - others + 0.5));
  threads_ = std::clamp(idle_cores, 1, cap_);
  return threads_;
}

}  // namespace nns::backend::cpu
