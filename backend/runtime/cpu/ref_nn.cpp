// Reference softmax, log_softmax, layer norm and the elementwise functions:
// one row (or element) at a time, in double, straight from the defining
// formulas.
#include <cmath>
#include <cstddef>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::ref {

namespace {

// Max and log(sum(exp(x - max))) of one row: the stable logsumexp.
void row_logsumexp(const float* x, int64_t cols, double* max_out, double* log_sum_out) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, double(x[j]));
  double sum = 0;
  for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(x[j]) - mx);
  *max_out = mx;
  *log_sum_out = std::log(sum);
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)

double act_value(Activation act, double x, double p) {
  switch (act) {
    case Activation::relu: return x > 0 ? x : 0.0;
    case Activation::gelu_tanh:
      return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
    case Activation::gelu_erf: return 0.5 * x * (1 + std::erf(x * kInvSqrt2));
    case Activation::sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::tanh: return std::tanh(x);
    case Activation::silu: return x / (1 + std::exp(-x));
    case Activation::exp: return std::exp(x);
    case Activation::log: return std::log(x);
    case Activation::sqrt: return std::sqrt(x);
    case Activation::rsqrt: return 1 / std::sqrt(x);
    case Activation::abs: return std::fabs(x);
    case Activation::neg: return -x;
    case Activation::sin: return std::sin(x);
    case Activation::cos: return std::cos(x);
    case Activation::pow: return std::pow(x, p);
  }
  return 0;
}

double act_derivative(Activation act, double x, double p) {
  switch (act) {
    case Activation::relu: return x > 0 ? 1.0 : 0.0;
    case Activation::gelu_tanh: {
      double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
      double du = kSqrt2OverPi * (1 + 3 * kGeluCubic * x * x);
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
    }
    case Activation::gelu_erf:
      return 0.5 * (1 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
    case Activation::sigmoid: {
      double s = 1 / (1 + std::exp(-x));
      return s * (1 - s);
    }
    case Activation::tanh: {
      double t = std::tanh(x);
      return 1 - t * t;
    }
    case Activation::silu: {
      double s = 1 / (1 + std::exp(-x));
      return s * (1 + x * (1 - s));
    }
    case Activation::exp: return std::exp(x);
    case Activation::log: return 1 / x;
    case Activation::sqrt: return 0.5 / std::sqrt(x);
    case Activation::rsqrt: return -0.5 / (x * std::sqrt(x));
    case Activation::abs: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case Activation::neg: return -1;
    case Activation::sin: return std::cos(x);
    case Activation::cos: return -std::sin(x);
    case Activation::pow: return p == 0 ? 0.0 : p * std::pow(x, p - 1);
  }
  return 0;
}

}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double mx, lse;
    row_logsumexp(x + r * cols, cols, &mx, &lse);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = float(std::exp(x[r * cols + j] - mx - lse));
  }
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    double dot = 0;
    for (int64_t j = 0; j < cols; ++j) dot += double(dyr[j]) * yr[j];
    for (int64_t j = 0; j < cols; ++j) dx[r * cols + j] = float(yr[j] * (dyr[j] - dot));
  }
}

void log_softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double mx, lse;
    row_logsumexp(x + r * cols, cols, &mx, &lse);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = float(x[r * cols + j] - mx - lse);
  }
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                          int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += dy[r * cols + j];
    for (int64_t j = 0; j < cols; ++j)
      dx[r * cols + j] = float(dy[r * cols + j] - std::exp(double(y[r * cols + j])) * sum);
  }
}

void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                float* rstd, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double mu = 0;
    for (int64_t j = 0; j < cols; ++j) mu += xr[j];
    mu /= double(cols);
    double var = 0;
    for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(cols);
    double rs = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      double v = (xr[j] - mu) * rs;
      if (gamma) v *= gamma[j];
      if (beta) v += beta[j];
      y[r * cols + j] = float(v);
    }
    if (mean) mean[r] = float(mu);
    if (rstd) rstd[r] = float(rs);
  }
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta, int64_t rows, int64_t cols, float /*eps*/) {
  std::vector<double> dg(size_t(cols), 0.0), db(size_t(cols), 0.0);
  std::vector<double> xhat(static_cast<size_t>(cols)), dxhat(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    double rs = rstd[r];
    // With xhat = (x - mean) rstd and g = dy * gamma:
    // dx = rstd (g - mean(g) - xhat mean(g xhat)).
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      xhat[j] = (xr[j] - double(mean[r])) * rs;
      dxhat[j] = double(dyr[j]) * (gamma ? gamma[j] : 1.0f);
      mean_g += dxhat[j];
      mean_gx += dxhat[j] * xhat[j];
      dg[j] += double(dyr[j]) * xhat[j];
      db[j] += dyr[j];
    }
    mean_g /= double(cols);
    mean_gx /= double(cols);
    if (dx)
      for (int64_t j = 0; j < cols; ++j)
        dx[r * cols + j] = float(rs * (dxhat[j] - mean_g - xhat[j] * mean_gx));
  }
  for (int64_t j = 0; j < cols; ++j) {
    if (dgamma) dgamma[j] = float(dg[j]);
    if (dbeta) dbeta[j] = float(db[j]);
  }
}

void activation(Activation act, const float* x, float* y, int64_t n, float p) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(act_value(act, x[i], p));
}

void activation_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n,
                         float p) {
  for (int64_t i = 0; i < n; ++i) dx[i] = float(dy[i] * act_derivative(act, x[i], p));
}

}  // namespace nns::backend::cpu::ref
