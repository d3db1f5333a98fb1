// Fast softmax, log_softmax, layer norm and elementwise functions on oneDNN
// primitives (sin and cos, which oneDNN lacks, in plain C++). Backward
// primitives are built against their forward primitive descriptor (oneDNN's
// "hint"), created once per cache miss.
#include <vector>
#include <algorithm>
#include <cmath>

#include "backend/runtime/cpu/dnnl_context.h"
#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

using dnnl::memory;
using dnnl::prop_kind;
using namespace dnnl_ctx;

namespace {

// softmax_forward and logsoftmax_forward share the shape of their API; so do
// the backward ones. Fwd/Bwd are the primitive types.
template <class Fwd>
typename Fwd::primitive_desc softmax_fwd_pd(const memory::desc& md) {
  return typename Fwd::primitive_desc(typename Fwd::desc(prop_kind::forward_training, md, 1),
                                      engine());
}

template <class Fwd>
void softmax_forward_impl(PrimKind kind, const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  memory::desc md = plain_md({rows, cols});
  const dnnl::primitive& prim =
      cached(kind, {rows, cols}, [&]() -> dnnl::primitive { return Fwd(softmax_fwd_pd<Fwd>(md)); });
  execute(prim, {{DNNL_ARG_SRC, wrap(md, x)}, {DNNL_ARG_DST, wrap(md, y)}});
}

template <class Fwd, class Bwd>
void softmax_backward_impl(PrimKind kind, const float* y, const float* dy, float* dx, int64_t rows,
                           int64_t cols) {
  if (rows * cols == 0) return;
  memory::desc md = plain_md({rows, cols});
  const dnnl::primitive& prim = cached(kind, {rows, cols}, [&]() -> dnnl::primitive {
    typename Bwd::desc desc(md, md, 1);
    return Bwd(typename Bwd::primitive_desc(desc, engine(), softmax_fwd_pd<Fwd>(md)));
  });
  execute(prim, {{DNNL_ARG_DST, wrap(md, y)},
                 {DNNL_ARG_DIFF_DST, wrap(md, dy)},
                 {DNNL_ARG_DIFF_SRC, wrap(md, dx)}});
}

// Layer norm always runs with a scale and a shift (ones / zeros stand in for
// null ones), so each shape needs one primitive whatever the caller passes.
const auto kLnormFlags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

dnnl::layer_normalization_forward::primitive_desc lnorm_fwd_pd(const memory::desc& data,
                                                               const memory::desc& stats,
                                                               float eps, prop_kind kind) {
  dnnl::layer_normalization_forward::desc desc(kind, data, stats, eps, kLnormFlags);
  return dnnl::layer_normalization_forward::primitive_desc(desc, engine());
}

const float* filled(int slot, int64_t n, float value, const float* given) {
  if (given) return given;
  float* buf = scratch(slot, size_t(n));
  for (int64_t i = 0; i < n; ++i) buf[i] = value;
  return buf;
}

// A oneDNN eltwise algorithm with its alpha and beta (y = f(x; alpha, beta)).
struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0.0f, beta = 0.0f;
};

// The oneDNN form of each function; false for those oneDNN 2.6 lacks (sin, cos).
bool eltwise_of(Activation act, float p, Eltwise& e) {
  using dnnl::algorithm;
  switch (act) {
    case Activation::relu: e = {algorithm::eltwise_relu}; return true;
    case Activation::gelu_tanh: e = {algorithm::eltwise_gelu_tanh}; return true;
    case Activation::gelu_erf: e = {algorithm::eltwise_gelu_erf}; return true;
    case Activation::sigmoid: e = {algorithm::eltwise_logistic}; return true;
    case Activation::tanh: e = {algorithm::eltwise_tanh}; return true;
    case Activation::silu: e = {algorithm::eltwise_swish, 1.0f}; return true;  // x * sigmoid(alpha x)
    case Activation::exp: e = {algorithm::eltwise_exp}; return true;
    case Activation::log: e = {algorithm::eltwise_log}; return true;
    case Activation::sqrt: e = {algorithm::eltwise_sqrt}; return true;
    case Activation::rsqrt: e = {algorithm::eltwise_pow, 1.0f, -0.5f}; return true;  // alpha x^beta
    case Activation::abs: e = {algorithm::eltwise_abs}; return true;
    case Activation::neg: e = {algorithm::eltwise_linear, -1.0f, 0.0f}; return true;  // alpha x + beta
    case Activation::pow: e = {algorithm::eltwise_pow, 1.0f, p}; return true;
    case Activation::sin:
    case Activation::cos: return false;
  }
  return false;
}

dnnl::eltwise_forward::primitive_desc eltwise_fwd_pd(const Eltwise& e, const memory::desc& md) {
  dnnl::eltwise_forward::desc desc(prop_kind::forward_training, e.alg, md, e.alpha, e.beta);
  return dnnl::eltwise_forward::primitive_desc(desc, engine());
}

// sin and cos: plain loops (libm), which the memory traffic dominates anyway.
void trig(Activation act, const float* x, float* y, int64_t n) {
  if (act == Activation::sin)
    for (int64_t i = 0; i < n; ++i) y[i] = std::sin(x[i]);
  else
    for (int64_t i = 0; i < n; ++i) y[i] = std::cos(x[i]);
}

void trig_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n) {
  if (act == Activation::sin)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * std::cos(x[i]);
  else
    for (int64_t i = 0; i < n; ++i) dx[i] = -dy[i] * std::sin(x[i]);
}

}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  softmax_forward_impl<dnnl::softmax_forward>(PrimKind::softmax_fwd, x, y, rows, cols);
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  softmax_backward_impl<dnnl::softmax_forward, dnnl::softmax_backward>(PrimKind::softmax_bwd, y,
                                                                        dy, dx, rows, cols);
}

void log_softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  softmax_forward_impl<dnnl::logsoftmax_forward>(PrimKind::logsoftmax_fwd, x, y, rows, cols);
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                          int64_t cols) {
  softmax_backward_impl<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>(
      PrimKind::logsoftmax_bwd, y, dy, dx, rows, cols);
}

// Cross entropy on oneDNN's (log-)softmax: its JIT exp is vectorised, where
// a plain loop calls libm's scalar exp per logit (the whole cost of this
// op, 50k logits per row for a GPT vocabulary).
float cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t classes) {
  if (rows == 0) return 0.0f;
  // Log-probabilities in chunks of rows, at most ~4 MiB of scratch.
  int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(classes, 1));
  chunk = std::min(chunk, rows);
  float* logp = scratch(0, size_t(chunk * classes));
  double total = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    int64_t n = std::min(chunk, rows - r0);
    log_softmax(logits + r0 * classes, logp, n, classes);
    for (int64_t r = 0; r < n; ++r) total -= logp[r * classes + targets[r0 + r]];
  }
  return float(total / double(rows));
}

void cross_entropy_backward(const float* logits, const int32_t* targets, float dloss,
                            float* dlogits, int64_t rows, int64_t classes) {
  if (rows * classes == 0) return;
  // dlogits = g * (softmax - onehot): the softmax lands in the output, then
  // one scaling sweep.
  softmax(logits, dlogits, rows, classes);
  float g = dloss / float(rows);
  for (int64_t i = 0; i < rows * classes; ++i) dlogits[i] *= g;
  for (int64_t r = 0; r < rows; ++r) dlogits[r * classes + targets[r]] -= g;
}

void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                float* rstd, int64_t rows, int64_t cols, float eps) {
  if (rows * cols == 0) return;
  memory::desc data = plain_md({rows, cols}), stats = plain_md({rows}), param = plain_md({cols});
  // oneDNN writes the variance; it goes into rstd's buffer and is converted
  // in place below. Inference (no stats wanted) still computes them, into scratch.
  float* mean_out = mean ? mean : scratch(2, size_t(rows));
  float* var_out = rstd ? rstd : scratch(3, size_t(rows));
  const dnnl::primitive& prim =
      cached(PrimKind::lnorm_fwd, {rows, cols, float_bits(eps)}, [&]() -> dnnl::primitive {
        return dnnl::layer_normalization_forward(
            lnorm_fwd_pd(data, stats, eps, prop_kind::forward_training));
      });
  execute(prim, {{DNNL_ARG_SRC, wrap(data, x)},
                 {DNNL_ARG_DST, wrap(data, y)},
                 {DNNL_ARG_MEAN, wrap(stats, mean_out)},
                 {DNNL_ARG_VARIANCE, wrap(stats, var_out)},
                 {DNNL_ARG_SCALE, wrap(param, filled(0, cols, 1.0f, gamma))},
                 {DNNL_ARG_SHIFT, wrap(param, filled(1, cols, 0.0f, beta))}});
  if (rstd)
    for (int64_t r = 0; r < rows; ++r) rstd[r] = 1.0f / std::sqrt(rstd[r] + eps);
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta, int64_t rows, int64_t cols, float eps) {
  if (rows * cols == 0) return;
  memory::desc data = plain_md({rows, cols}), stats = plain_md({rows}), param = plain_md({cols});
  // Back from rstd to the variance oneDNN expects: var + eps = 1 / rstd^2,
  // and oneDNN adds eps back, so the round trip loses only rounding.
  float* var = scratch(2, size_t(rows));
  for (int64_t r = 0; r < rows; ++r) var[r] = 1.0f / (rstd[r] * rstd[r]) - eps;
  float* dx_out = dx ? dx : scratch(3, size_t(rows * cols));
  float* dgamma_out = dgamma ? dgamma : scratch(1, size_t(cols));  // oneDNN writes all diffs
  float* dbeta_out = dbeta ? dbeta : scratch(4, size_t(cols));
  const dnnl::primitive& prim =
      cached(PrimKind::lnorm_bwd, {rows, cols, float_bits(eps)}, [&]() -> dnnl::primitive {
        dnnl::layer_normalization_backward::desc desc(prop_kind::backward, data, data, stats, eps,
                                                      kLnormFlags);
        return dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(
            desc, engine(), lnorm_fwd_pd(data, stats, eps, prop_kind::forward_training)));
      });
  execute(prim, {{DNNL_ARG_SRC, wrap(data, x)},
                 {DNNL_ARG_DIFF_DST, wrap(data, dy)},
                 {DNNL_ARG_MEAN, wrap(stats, mean)},
                 {DNNL_ARG_VARIANCE, wrap(stats, var)},
                 {DNNL_ARG_SCALE, wrap(param, filled(0, cols, 1.0f, gamma))},
                 // Unused by the math, but oneDNN 2.6 rejects the call without it.
                 {DNNL_ARG_SHIFT, wrap(param, filled(5, cols, 0.0f, nullptr))},
                 {DNNL_ARG_DIFF_SRC, wrap(data, dx_out)},
                 {DNNL_ARG_DIFF_SCALE, wrap(param, dgamma_out)},
                 {DNNL_ARG_DIFF_SHIFT, wrap(param, dbeta_out)}});
  // dgamma and dbeta are sums over every row, and oneDNN accumulates them in
  // fp32 in a row blocking that depends on the row count: with dy summing to
  // much less than its magnitude (a bias under a mean-pooled head), results
  // then drift by ~1e-5 between a batch and its halves. Recompute both in
  // double (one cheap pass), so a batch-split plan reproduces one device.
  if (dgamma || dbeta) {
    std::vector<double> sg(size_t(cols), 0.0), sb(size_t(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      const float* dyr = dy + r * cols;
      double m = mean[r], rs = rstd[r];
      for (int64_t c = 0; c < cols; ++c) {
        sg[size_t(c)] += double(dyr[c]) * ((double(xr[c]) - m) * rs);
        sb[size_t(c)] += double(dyr[c]);
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (dgamma) dgamma[c] = float(sg[size_t(c)]);
      if (dbeta) dbeta[c] = float(sb[size_t(c)]);
    }
  }
}

void activation(Activation act, const float* x, float* y, int64_t n, float p) {
  if (n == 0) return;
  Eltwise e;
  if (!eltwise_of(act, p, e)) return trig(act, x, y, n);
  memory::desc md = plain_md({n});
  const dnnl::primitive& prim =
      cached(PrimKind::eltwise_fwd, {int64_t(act), n, float_bits(p)}, [&]() -> dnnl::primitive {
        return dnnl::eltwise_forward(eltwise_fwd_pd(e, md));
      });
  execute(prim, {{DNNL_ARG_SRC, wrap(md, x)}, {DNNL_ARG_DST, wrap(md, y)}});
}

void activation_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n,
                         float p) {
  if (n == 0) return;
  Eltwise e;
  if (!eltwise_of(act, p, e)) return trig_backward(act, x, dy, dx, n);
  memory::desc md = plain_md({n});
  const dnnl::primitive& prim =
      cached(PrimKind::eltwise_bwd, {int64_t(act), n, float_bits(p)}, [&]() -> dnnl::primitive {
        dnnl::eltwise_backward::desc desc(e.alg, md, md, e.alpha, e.beta);
        return dnnl::eltwise_backward(
            dnnl::eltwise_backward::primitive_desc(desc, engine(), eltwise_fwd_pd(e, md)));
      });
  execute(prim, {{DNNL_ARG_SRC, wrap(md, x)},
                 {DNNL_ARG_DIFF_DST, wrap(md, dy)},
                 {DNNL_ARG_DIFF_SRC, wrap(md, dx)}});
}

}  // namespace nns::backend::cpu::fast
