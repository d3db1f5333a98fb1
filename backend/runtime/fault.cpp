#include "backend/runtime/fault.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace nns::backend {
namespace {

int g_rank = 0;
int64_t g_step = 0;

// "POINT:RANK:STEP" split once; an unset or malformed value never fires.
struct FaultSpec {
  bool armed = false;
  std::string point, rank, step;
};

const FaultSpec& spec() {
  static const FaultSpec s = [] {
    FaultSpec f;
    const char* v = std::getenv("NNS_FAULT");
    if (!v || !*v) return f;
    std::string text = v;
    size_t a = text.find(':'), b = a == std::string::npos ? a : text.find(':', a + 1);
    if (b == std::string::npos) {
      std::fprintf(stderr, "nns: warning: NNS_FAULT='%s' is not POINT:RANK:STEP; ignored\n", v);
      return f;
    }
    f.point = text.substr(0, a);
    f.rank = text.substr(a + 1, b - a - 1);
    f.step = text.substr(b + 1);
    f.armed = true;
    return f;
  }();
  return s;
}

}  // namespace

void set_fault_context(int rank, int64_t step) {
  g_rank = rank;
  g_step = step;
}

void fault_point(const char* point) {
  const FaultSpec& f = spec();
  if (!f.armed || f.point != point) return;
  if (f.rank != "*" && f.rank != std::to_string(g_rank)) return;
  if (f.step != "*" && f.step != std::to_string(g_step)) return;
  std::fprintf(stderr, "nns: fault injection (NNS_FAULT): killing rank %d at '%s', step %lld\n", g_rank, point, static_cast<long long>(g_step));
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached
}

}  // namespace nns::backend
