#include "backend/runtime/comm/env_vars.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace nns::backend {

namespace {

enum class Kind { Int, Seconds, Flag };

struct EnvVar {
  const char* name;
  Kind kind;
  double lo, hi;     // the accepted range (Flag: 0..1)
  const char* what;  // for messages
};

// The NNS_* variables with a numeric or on/off value. Others (paths, host
// names, NNS_LAUNCHER, NNS_FAULT) are checked where they are used.
constexpr EnvVar kVars[] = {
    {"NNS_THREADS", Kind::Int, 1, 4096, "threads per rank"},
    {"NNS_COMM_SPIN_US", Kind::Int, 0, 10000000, "microseconds a rank polls before it sleeps"},
    {"NNS_BIND", Kind::Flag, 0, 1, "0 leaves local ranks unbound, 1 binds them to cores"},
    {"NNS_VERBOSE_RANKS", Kind::Flag, 0, 1, "1 lets every rank print"},
    {"NNS_COMM_TIMEOUT", Kind::Seconds, 0.001, 86400, "seconds a collective or the rendezvous waits"},
    {"NNS_CUDNN", Kind::Flag, 0, 1,
     "0 runs the CUDA backend's own convolution, pooling and attention kernels instead of cuDNN"},
    {"NNS_CUDNN_TRACE", Kind::Flag, 0, 1, "1 prints which sdpa shapes run on cuDNN, and why the others do not"},
    {"NNS_MAX_LOCAL_RANKS", Kind::Int, 1, 65536, "the most ranks nns run --gpus starts on this host"},
    {"NNS_HEARTBEAT_TIMEOUT", Kind::Seconds, 0, 86400, "seconds of silence before a rank is reported stopped; 0: off"},
    {"NNS_SETUP_NOTICE", Kind::Seconds, 0, 86400,
     "seconds a setup phase (elaboration, check, lowering) runs before it says what it does; set: also when not on a terminal"},
};

const EnvVar* find_var(const char* name) {
  for (const EnvVar& v : kVars)
    if (std::string(v.name) == name) return &v;
  return nullptr;
}

std::string range_text(const EnvVar& v) {
  auto num = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.15g", x);
    return std::string(b);
  };
  switch (v.kind) {
    case Kind::Flag: return "0 or 1";
    case Kind::Int: return "an integer from " + num(v.lo) + " to " + num(v.hi);
    case Kind::Seconds: return "a number of seconds from " + num(v.lo) + " to " + num(v.hi);
  }
  return "";
}

bool valid(const EnvVar& v, const char* text) {
  if (v.kind == Kind::Seconds) {
    char* end = nullptr;
    errno = 0;
    double s = std::strtod(text, &end);
    return *text && *end == '\0' && errno == 0 && std::isfinite(s) && s >= v.lo && s <= v.hi;
  }
  int64_t n = 0;
  return parse_strict_int(text, n) && n >= v.lo && n <= v.hi;
}

}  // namespace

bool parse_strict_int(const char* text, int64_t& out) {
  if (!text) return false;
  const char* p = text;
  bool negative = *p == '-';
  if (negative) ++p;
  if (!*p) return false;
  int64_t n = 0;
  for (; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, *p - '0', &n)) return false;
  }
  out = negative ? -n : n;
  return true;
}

std::string check_nns_variables(const EnvLookup& env) {
  for (const EnvVar& v : kVars) {
    const char* text = env(v.name);
    if (!text || !*text) continue;  // empty: unset, as everywhere else
    if (!valid(v, text))
      return std::string(v.name) + "='" + text + "': expected " + range_text(v) + " (" + v.what + ")";
  }
  return "";
}

int64_t nns_env_int(const char* name, int64_t fallback) {
  const EnvVar* v = find_var(name);
  const char* text = std::getenv(name);
  if (!v || !text || !*text || !valid(*v, text)) return fallback;
  int64_t n = 0;
  parse_strict_int(text, n);
  return n;
}

std::string local_ranks_problem(int64_t ranks) {
  if (int64_t cap = nns_env_int("NNS_MAX_LOCAL_RANKS", 0); cap > 0)
    return ranks <= cap ? ""
                        : std::to_string(ranks) + " local ranks, more than NNS_MAX_LOCAL_RANKS=" + std::to_string(cap);
  cpu_set_t set;
  const int64_t cores = sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
  if (ranks > 8 * cores)
    return std::to_string(ranks) + " local ranks on " + std::to_string(cores) +
           " core(s), more than 8 per core (set NNS_MAX_LOCAL_RANKS to allow it)";
  const int64_t pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  constexpr int64_t kPerRank = int64_t{64} << 20;
  if (pages > 0 && page > 0 && ranks > pages / (kPerRank / page))
    return std::to_string(ranks) + " local ranks need at least " + std::to_string(ranks * 64) + " MiB; " +
           std::to_string(pages / ((int64_t{1} << 20) / page)) +
           " MiB are available (set NNS_MAX_LOCAL_RANKS to allow it)";
  return "";
}

std::string describe_nns_variables() {
  std::string out;
  for (const EnvVar& v : kVars) out += std::string(v.name) + " (" + v.what + "; " + range_text(v) + ")\n";
  return out;
}

}  // namespace nns::backend
