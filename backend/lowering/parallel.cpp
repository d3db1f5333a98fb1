#include "backend/lowering/parallel.h"

#include <algorithm>
#include <cstdlib>

namespace nns::backend {

unsigned check_threads(size_t items) {
  unsigned t = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  // Read once: the variable does not change during a run.
  static const long forced = [] {
    const char* v = std::getenv("NNS_CHECK_THREADS");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  if (forced > 0) t = std::min(t, static_cast<unsigned>(forced));
  return static_cast<unsigned>(std::min<size_t>(t, std::max<size_t>(items, 1)));
}

}  // namespace nns::backend
