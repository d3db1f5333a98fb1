// Shared helpers of the backend kernel tests: seeded random buffers, the
// fast-vs-ref comparison that prints one table row per case, and central
// finite differences for the gradient checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::test {

namespace cpu = nns::backend::cpu;
using Buf = std::vector<float>;

inline int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline Buf zeros(int64_t n) { return Buf(static_cast<size_t>(n), 0.0f); }

// Uniform in [lo, hi), reproducible per seed.
inline Buf random_buf(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Buf out(static_cast<size_t>(n));
  for (float& v : out) v = dist(gen);
  return out;
}

// Uniform magnitude in [lo, hi) with a random sign: keeps inputs away from
// zero (divisors, relu's kink).
inline Buf random_away_from_zero(int64_t n, uint32_t seed, float lo, float hi) {
  Buf out = random_buf(n, seed, lo, hi);
  std::mt19937 gen(seed ^ 0x5bd1e995u);
  for (float& v : out)
    if (gen() & 1) v = -v;
  return out;
}

inline std::string dims_str(const std::vector<int64_t>& dims) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < dims.size(); ++i) s << (i ? "," : "") << dims[i];
  s << "]";
  return s.str();
}

// The error measure of every comparison: max_i |got_i - want_i| /
// (|want_i| + max(mean_i |want_i|, scale_floor)). Relative where values are
// large, and relative to the tensor's typical magnitude where a value is
// near zero (cancellation in a sum makes an element's own relative error
// meaningless). scale_floor (default 0) is for outputs with a natural
// absolute scale, e.g. log-probabilities, whose all-zero case is log(1).
struct ErrorStats {
  double err = 0;
  int64_t worst = -1;
  float got = 0, want = 0;
};

inline ErrorStats error_stats(const float* got, const float* want, int64_t n,
                              double scale_floor = 0) {
  ErrorStats s;
  double mean_abs = 0;
  for (int64_t i = 0; i < n; ++i) mean_abs += std::fabs(double(want[i]));
  mean_abs = std::max(n > 0 ? mean_abs / double(n) : 0.0, scale_floor);
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] == want[i]) continue;  // also equal infinities (masked logits)
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;  // NaN propagated by both (amax)
    double diff = std::fabs(double(got[i]) - double(want[i]));
    if (std::isnan(got[i]) != std::isnan(want[i])) diff = INFINITY;
    if (diff == 0) continue;
    double e = diff / (std::fabs(double(want[i])) + mean_abs + 1e-30);
    if (e > s.err || s.worst < 0) {
      s.err = e;
      s.worst = i;
      s.got = got[i];
      s.want = want[i];
    }
  }
  return s;
}

inline bool verbose() {
  static const bool v = std::getenv("NNS_BACKEND_TABLE") != nullptr;
  return v;
}

// One row of the conformance table; printed on failure (and always when
// NNS_BACKEND_TABLE is set).
inline std::string table_row(const std::string& op, const std::string& shape,
                             const std::string& output, int64_t n, const ErrorStats& s,
                             double tol, bool pass) {
  char line[512];
  std::snprintf(line, sizeof line, "| %-22s | %-34s | %-8s | %8lld | %9.2e | %9.2e | %6lld | %13.6g | %13.6g | %s |",
                op.c_str(), shape.c_str(), output.c_str(), static_cast<long long>(n), s.err, tol,
                static_cast<long long>(s.worst), double(s.got), double(s.want),
                pass ? "ok" : "FAIL");
  return line;
}

inline const char* table_header() {
  return "| op                     | case                               | output   |    numel |       err |       tol |  worst |     got(fast) |     want(ref) | res  |";
}

// Compares one output of fast (got) against ref (want) with tolerance tol
// (tol 0: bit-identical) and records a Catch check with the row as message.
inline void expect_close(const std::string& op, const std::string& shape,
                         const std::string& output, const Buf& got, const Buf& want, double tol,
                         double scale_floor = 0) {
  REQUIRE(got.size() == want.size());
  ErrorStats s = error_stats(got.data(), want.data(), int64_t(got.size()), scale_floor);
  bool pass = s.err <= tol;
  std::string row = table_row(op, shape, output, int64_t(got.size()), s, tol, pass);
  if (verbose()) std::printf("%s\n", row.c_str());
  if (!pass) {
    static bool header_done = false;
    if (!header_done) std::fprintf(stderr, "%s\n", table_header());
    header_done = true;
    std::fprintf(stderr, "%s\n", row.c_str());
  }
  INFO(table_header() << "\n" << row);
  CHECK(pass);
}

inline void expect_close_scalar(const std::string& op, const std::string& shape,
                                const std::string& output, float got, float want, double tol,
                                double scale_floor = 0) {
  expect_close(op, shape, output, Buf{got}, Buf{want}, tol, scale_floor);
}

// ---- finite differences -------------------------------------------------------

// Gradient check of a reference backward: `loss()` evaluates the forward and
// returns sum(out * w) in double for fixed random weights w (the analytic
// gradient is then the backward with dy = w). For each element of `input`,
// central differences (L(x+h) - L(x-h)) / (x+h - x-h), where the
// denominator is the difference of the float values actually stored, in
// double, so rounding of x +- h costs nothing.
inline Buf finite_difference(Buf& input, const std::function<double()>& loss, float h) {
  Buf grad(input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    float saved = input[i];
    float up = saved + h, down = saved - h;
    input[i] = up;
    double l_up = loss();
    input[i] = down;
    double l_down = loss();
    input[i] = saved;
    grad[i] = float((l_up - l_down) / (double(up) - double(down)));
  }
  return grad;
}

// sum(out * w) in double.
inline double weighted_sum(const Buf& out, const Buf& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * w[i];
  return s;
}

// One gradient check of the gradcheck_*_test.cpp tables: `analytic` (a
// reference backward called with dy = w) against central differences of
// `loss` in every element of `input`, with the step and tolerance that
// gradcheck_nn_test.cpp explains.
constexpr float kGradStep = 4e-3f;
constexpr double kGradTol = 2e-3;
inline void grad_check(const std::string& op, const std::string& shape, const std::string& input_name,
                       Buf& input, const Buf& analytic, const std::function<double()>& loss) {
  Buf fd = finite_difference(input, loss, kGradStep);
  expect_close("grad " + op, shape, input_name, analytic, fd, kGradTol);
}

}  // namespace nns::backend::test
