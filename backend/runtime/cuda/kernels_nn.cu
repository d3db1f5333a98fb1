// nn rows on the device: softmax, log_softmax, layer_norm, causal_mask,
// embedding (and index_select's row gather, lookup.h), cross_entropy, mse
// and dropout, forward and backward, with the contracts of the CPU
// backend's node wrappers (cpu_backend.cpp) and the arithmetic of cpu::ref
// (double wherever ref accumulates in double, the same formulas in the same
// order), so results agree with the reference within the CPU table's bounds.
// Row reductions are one index per row writing per-row statistics to
// scratch, then one index per element; column sums one index per column;
// scalar losses an ordered two-level sum (the same bits every run).
#include <cmath>
#include <string>

#include "backend/runtime/cpu/philox.h"
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/launch.h"
#include "backend/runtime/cuda/lookup.h"

namespace nns::backend::NNS_DEV {

namespace nn {

constexpr int64_t kSumGroup = 256;  // values per group of the ordered sums

// out[0] = float(sum(v[0..n)) / divisor) (0 when n == 0), summed in double
// in a fixed order: groups of kSumGroup consecutive values, then the group
// sums in order. `groups` holds (n + kSumGroup - 1) / kSumGroup doubles.
void ordered_mean(const double* v, int64_t n, double divisor, double* groups, float* out, Stream s) {
  const int64_t ng = (n + kSumGroup - 1) / kSumGroup;
  for_each(ng, s, NNS_KERNEL(int64_t g) {
    int64_t end = (g + 1) * kSumGroup < n ? (g + 1) * kSumGroup : n;
    double acc = 0;
    for (int64_t i = g * kSumGroup; i < end; ++i) acc += v[i];
    groups[g] = acc;
  });
  for_each(1, s, NNS_KERNEL(int64_t) {
    double total = 0;
    for (int64_t g = 0; g < ng; ++g) total += groups[g];
    out[0] = n > 0 ? float(total / divisor) : 0.0f;
  });
}

// Per row: the max and log(sum(exp(x - max))) in double (ref's row_logsumexp).
void row_logsumexp(const float* x, double* mx_out, double* lse_out, int64_t rows, int64_t cols, Stream s) {
  for_each(rows, s, NNS_KERNEL(int64_t r) {
    const float* xr = x + r * cols;
    double mx = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) {
      double v = xr[j];
      mx = mx < v ? v : mx;  // std::max(mx, v)
    }
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += exp(double(xr[j]) - mx);
    mx_out[r] = mx;
    lse_out[r] = log(sum);
  });
}

void softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log_form, double* scratch, Stream s) {
  double* mx = scratch;
  double* lse = scratch + rows;
  row_logsumexp(x, mx, lse, rows, cols, s);
  if (log_form)
    for_each(rows * cols, s, NNS_KERNEL(int64_t i) { y[i] = float(x[i] - mx[i / cols] - lse[i / cols]); });
  else
    for_each(rows * cols, s, NNS_KERNEL(int64_t i) { y[i] = float(exp(x[i] - mx[i / cols] - lse[i / cols])); });
}

// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, bool log_form, double* row_sum,
                      Stream s) {
  for_each(rows, s, NNS_KERNEL(int64_t r) {
    double acc = 0;
    for (int64_t j = 0; j < cols; ++j) acc += log_form ? double(dy[r * cols + j]) : double(dy[r * cols + j]) * y[r * cols + j];
    row_sum[r] = acc;
  });
  if (log_form)
    for_each(rows * cols, s, NNS_KERNEL(int64_t i) { dx[i] = float(dy[i] - exp(double(y[i])) * row_sum[i / cols]); });
  else
    for_each(rows * cols, s, NNS_KERNEL(int64_t i) { dx[i] = float(y[i] * (dy[i] - row_sum[i / cols])); });
}

// Per row: mean and 1 / sqrt(var + eps), in double (ref's layer_norm).
void layer_norm_stats(const float* x, double* mean, double* rstd, int64_t rows, int64_t cols, float eps, Stream s) {
  for_each(rows, s, NNS_KERNEL(int64_t r) {
    const float* xr = x + r * cols;
    double mu = 0;
    for (int64_t j = 0; j < cols; ++j) mu += xr[j];
    mu /= double(cols);
    double var = 0;
    for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(cols);
    mean[r] = mu;
    rstd[r] = 1 / sqrt(var + eps);
  });
}

void layer_norm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t cols, float eps,
                double* scratch, Stream s) {
  double* mean = scratch;
  double* rstd = scratch + rows;
  layer_norm_stats(x, mean, rstd, rows, cols, eps, s);
  for_each(rows * cols, s, NNS_KERNEL(int64_t i) {
    int64_t r = i / cols, j = i % cols;
    double v = (x[i] - mean[r]) * rstd[r];
    v *= gamma[j];
    v += beta[j];
    y[i] = float(v);
  });
}

// The backward of layer_norm as the CPU backend runs it: the statistics
// recomputed and rounded to float (ref's mean / rstd outputs), then
// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma, and the
// parameter gradients as column sums over rows in double.
void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                         int64_t rows, int64_t cols, float eps, double* scratch, Stream s) {
  double* mean = scratch;              // float-rounded, held as double
  double* rstd = scratch + rows;       // float-rounded, held as double
  double* mean_g = scratch + 2 * rows;
  double* mean_gx = scratch + 3 * rows;
  layer_norm_stats(x, mean, rstd, rows, cols, eps, s);
  for_each(rows, s, NNS_KERNEL(int64_t r) {
    double mu = double(float(mean[r])), rs = double(float(rstd[r]));
    mean[r] = mu;
    rstd[r] = rs;
    double g_sum = 0, gx_sum = 0;
    for (int64_t j = 0; j < cols; ++j) {
      double xhat = (x[r * cols + j] - mu) * rs;
      double dxhat = double(dy[r * cols + j]) * gamma[j];
      g_sum += dxhat;
      gx_sum += dxhat * xhat;
    }
    mean_g[r] = g_sum / double(cols);
    mean_gx[r] = gx_sum / double(cols);
  });
  if (dx)
    for_each(rows * cols, s, NNS_KERNEL(int64_t i) {
      int64_t r = i / cols, j = i % cols;
      double xhat = (x[i] - mean[r]) * rstd[r];
      double dxhat = double(dy[i]) * gamma[j];
      dx[i] = float(rstd[r] * (dxhat - mean_g[r] - xhat * mean_gx[r]));
    });
  if (dgamma || dbeta)
    for_each(cols, s, NNS_KERNEL(int64_t j) {
      double dg = 0, db = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double xhat = (x[r * cols + j] - mean[r]) * rstd[r];
        dg += double(dy[r * cols + j]) * xhat;
        db += dy[r * cols + j];
      }
      if (dgamma) dgamma[j] = float(dg);
      if (dbeta) dbeta[j] = float(db);
    });
}

// y = x with the strict upper triangle of each [rows, cols] matrix set to
// -inf (forward) or dy with it zeroed (backward).
void causal_mask(const float* x, float* y, int64_t n, int64_t rows, int64_t cols, bool backward, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t k) {
    int64_t j = k % cols, i = (k / cols) % rows;
    y[k] = j > i ? (backward ? 0.0f : -INFINITY) : x[k];
  });
}

// Row gather: y[i, :] = table[ids[i] - offset, :], zeros for ids the shard
// does not hold.
void embedding(const float* table, const int32_t* ids, float* y, int64_t num_ids, int64_t vocab, int64_t dim, int64_t offset,
               Stream s) {
  for_each(num_ids * dim, s, NNS_KERNEL(int64_t e) {
    int64_t i = e / dim, d = e % dim, row = int64_t(ids[i]) - offset;
    y[e] = row >= 0 && row < vocab ? table[row * dim + d] : 0.0f;
  });
}

// One index per table row, scanning the ids in order: a row gathers the
// gradients of the ids that read it, in float, in id order (ref's order),
// with no atomics. Each index reads every id: vocab x num_ids comparisons.
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num_ids, int64_t vocab, int64_t dim,
                        int64_t offset, Stream s) {
  for_each(vocab, s, NNS_KERNEL(int64_t row) {
    float* out = dtable + row * dim;
    for (int64_t d = 0; d < dim; ++d) out[d] = 0.0f;
    for (int64_t i = 0; i < num_ids; ++i)
      if (int64_t(ids[i]) - offset == row)
        for (int64_t d = 0; d < dim; ++d) out[d] += dy[i * dim + d];
  });
}

// Per row: mx + log(sum(exp(x - mx))) - x[target] (ref's cross_entropy term).
void cross_entropy_terms(const float* logits, const int32_t* targets, double* terms, int64_t rows, int64_t classes, Stream s) {
  for_each(rows, s, NNS_KERNEL(int64_t r) {
    const float* xr = logits + r * classes;
    double mx = -INFINITY;
    for (int64_t j = 0; j < classes; ++j) {
      double v = xr[j];
      mx = mx < v ? v : mx;
    }
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += exp(double(xr[j]) - mx);
    terms[r] = mx + log(sum) - xr[targets[r]];
  });
}

// dlogits = dloss / rows * (softmax(x) - onehot(target)); dloss is read on
// the device (the upstream gradient is a device scalar).
void cross_entropy_backward(const float* logits, const int32_t* targets, const float* dloss, float* dlogits, int64_t rows,
                            int64_t classes, double* scratch, Stream s) {
  double* mx = scratch;
  double* sum = scratch + rows;
  for_each(rows, s, NNS_KERNEL(int64_t r) {
    const float* xr = logits + r * classes;
    double m = -INFINITY;
    for (int64_t j = 0; j < classes; ++j) {
      double v = xr[j];
      m = m < v ? v : m;
    }
    double acc = 0;
    for (int64_t j = 0; j < classes; ++j) acc += exp(double(xr[j]) - m);
    mx[r] = m;
    sum[r] = acc;
  });
  for_each(rows * classes, s, NNS_KERNEL(int64_t i) {
    int64_t r = i / classes, j = i % classes;
    double g = double(dloss[0]) / double(rows);
    double p = exp(double(logits[i]) - mx[r]) / sum[r];
    dlogits[i] = float(g * (p - (j == targets[r] ? 1.0 : 0.0)));
  });
}

// Lane l of the mse: sum of (pred - target)^2 over i = l, l + lanes, ...
void squared_error_lanes(const float* pred, const float* target, int64_t n, int64_t lanes, double* lane_sums, Stream s) {
  for_each(lanes, s, NNS_KERNEL(int64_t l) {
    double acc = 0;
    for (int64_t i = l; i < n; i += lanes) {
      double d = double(pred[i]) - target[i];
      acc += d * d;
    }
    lane_sums[l] = acc;
  });
}

void mse_backward(const float* pred, const float* target, const float* dloss, float* dpred, float* dtarget, int64_t n,
                  Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) {
    double g = 2.0 * dloss[0] * (double(pred[i]) - target[i]) / double(n);
    if (dpred) dpred[i] = float(g);
    if (dtarget) dtarget[i] = float(-g);
  });
}

// y = x * keep(i) / (1 - p) with keep(i) = philox_uniform(seed, offset + i)
// >= p: philox.h's functions themselves, so the mask is the CPU backend's
// bit for bit. p <= 0 copies, p >= 1 writes zeros (cpu::ref::dropout).
void dropout(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset, Stream s) {
  if (p <= 0.0f) {
    for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = x[i]; });
    return;
  }
  if (p >= 1.0f) {
    for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = 0.0f; });
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);
  for_each(n, s, NNS_KERNEL(int64_t i) {
    bool keep = cpu::philox_uniform(seed, offset + uint64_t(i)) >= p;
    y[i] = x[i] * (keep ? keep_scale : 0.0f);  // a multiply by the mask: NaN stays NaN
  });
}

}  // namespace nn

namespace {

void softmax_fwd(const Call& c) {
  int64_t cols = c.in[0].shape.back();
  if (cols == 0) return;
  int64_t rows = c.in[0].numel() / cols;
  nn::softmax(c.in[0].f32(), c.out[0].f32(), rows, cols, c.node.kind == "log_softmax", c.scratch.get<double>(2 * rows),
              c.stream);
}
void softmax_bwd(const Call& c) {
  float* dx = c.dx(0);
  int64_t cols = c.x(0).shape.back();
  if (!dx || cols == 0) return;
  int64_t rows = c.x(0).numel() / cols;
  nn::softmax_backward(c.y(0).f32(), c.dy(0).f32(), dx, rows, cols, c.base_kind() == "log_softmax",
                       c.scratch.get<double>(rows), c.stream);
}

void layer_norm_fwd(const Call& c) {
  int64_t cols = c.in[0].shape.back();
  if (cols == 0) return;
  int64_t rows = c.in[0].numel() / cols;
  nn::layer_norm(c.in[0].f32(), c.in[1].f32(), c.in[2].f32(), c.out[0].f32(), rows, cols,
                 static_cast<float>(c.attr_float("eps", 1e-5)), c.scratch.get<double>(2 * rows), c.stream);
}
void layer_norm_bwd(const Call& c) {
  int64_t cols = c.x(0).shape.back();
  if (cols == 0) return;
  int64_t rows = c.x(0).numel() / cols;
  nn::layer_norm_backward(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32(), c.dx(0), c.dx(1), c.dx(2), rows, cols,
                          static_cast<float>(c.attr_float("eps", 1e-5)), c.scratch.get<double>(4 * rows), c.stream);
}

void causal_mask_fwd(const Call& c) {
  const sema::Shape& s = c.in[0].shape;
  nn::causal_mask(c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), s[s.size() - 2], s.back(), false, c.stream);
}
void causal_mask_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const sema::Shape& s = c.x(0).shape;
  nn::causal_mask(c.dy(0).f32(), dx, c.x(0).numel(), s[s.size() - 2], s.back(), true, c.stream);
}

void cross_entropy_fwd(const Call& c) {
  int64_t classes = c.in[0].shape.back(), rows = classes > 0 ? c.in[0].numel() / classes : 0;
  int32_t bad = 0;
  if (find_out_of_range(c.in[1].i32(), rows, classes, c.scratch, c.stream, &bad))
    throw RuntimeError("cross_entropy: target " + std::to_string(bad) + " out of range [0, " + std::to_string(classes) + ")");
  double* terms = c.scratch.get<double>(rows);
  if (rows > 0) nn::cross_entropy_terms(c.in[0].f32(), c.in[1].i32(), terms, rows, classes, c.stream);
  nn::ordered_mean(terms, rows, double(rows), c.scratch.get<double>((rows + nn::kSumGroup - 1) / nn::kSumGroup),
                   c.out[0].f32(), c.stream);
}
void cross_entropy_bwd(const Call& c) {
  float* dx = c.dx(0);
  int64_t classes = c.x(0).shape.back();
  if (!dx || classes == 0) return;
  int64_t rows = c.x(0).numel() / classes;
  nn::cross_entropy_backward(c.x(0).f32(), c.x(1).i32(), c.dy(0).f32(), dx, rows, classes, c.scratch.get<double>(2 * rows),
                             c.stream);
}

// Lanes of the mse sum: 64 Ki keep a GPU busy (as kernels_basic.cu's sum
// of squares); their sums then go through the ordered two-level sum.
constexpr int64_t kMseLanes = 65536;
void mse_fwd(const Call& c) {
  int64_t n = c.in[0].numel(), lanes = n < kMseLanes ? n : kMseLanes;
  double* lane_sums = c.scratch.get<double>(lanes);
  if (n > 0) nn::squared_error_lanes(c.in[0].f32(), c.in[1].f32(), n, lanes, lane_sums, c.stream);
  nn::ordered_mean(lane_sums, lanes, double(n), c.scratch.get<double>((lanes + nn::kSumGroup - 1) / nn::kSumGroup),
                   c.out[0].f32(), c.stream);
}
void mse_bwd(const Call& c) {
  nn::mse_backward(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32(), c.dx(0), c.dx(1), c.x(0).numel(), c.stream);
}

// Dropout masks depend on (seed, step, element): never on the device or
// the launch (cpu_backend.cpp's dropout_seed).
uint64_t dropout_seed(const Call& c) {
  return static_cast<uint64_t>(c.attr_int("seed")) * 1000003ULL + static_cast<uint64_t>(c.step);
}
void dropout_fwd(const Call& c) {
  nn::dropout(c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("p", 0)), dropout_seed(c),
              static_cast<uint64_t>(c.attr_int_or("element_offset", 0)), c.stream);
}
void dropout_bwd(const Call& c) {
  if (float* dx = c.dx(0))
    nn::dropout(c.dy(0).f32(), dx, c.dy(0).numel(), static_cast<float>(c.attr_float("p", 0)), dropout_seed(c),
                static_cast<uint64_t>(c.attr_int_or("element_offset", 0)), c.stream);
}

}  // namespace

void lookup_fwd(const Call& c) {
  bool emb = c.node.kind == "embedding";
  const TensorView& table = emb ? c.in[1] : c.in[0];
  const TensorView& ids = emb ? c.in[0] : c.in[1];
  int64_t vocab = table.shape[0], dim = vocab > 0 ? table.numel() / vocab : 0;
  // A vocab-split sub-op holds rows [vocab_offset, vocab_offset + vocab) of
  // a table of vocab_size rows; ids it does not hold give zero rows.
  int64_t offset = c.attr_int_or("vocab_offset", 0), full = c.attr_int_or("vocab_size", vocab);
  int32_t bad = 0;
  if (find_out_of_range(ids.i32(), ids.numel(), full, c.scratch, c.stream, &bad))
    throw RuntimeError("node " + c.node.name + ": index " + std::to_string(bad) + " out of range [0, " + std::to_string(full) + ")");
  nn::embedding(table.f32(), ids.i32(), c.out[0].f32(), ids.numel(), vocab, dim, offset, c.stream);
}

void lookup_bwd(const Call& c) {
  bool emb = c.base_kind() == "embedding";
  size_t ti = emb ? 1 : 0;
  float* dtable = c.dx(ti);
  if (!dtable) return;
  const TensorView& table = c.x(ti);
  const TensorView& ids = c.x(emb ? 0 : 1);
  int64_t vocab = table.shape[0], dim = vocab > 0 ? table.numel() / vocab : 0;
  nn::embedding_backward(ids.i32(), c.dy(0).f32(), dtable, ids.numel(), vocab, dim, c.attr_int_or("vocab_offset", 0), c.stream);
}

void register_nn_kernels(KernelTable& t) {
  t["softmax"] = softmax_fwd;
  t["log_softmax"] = softmax_fwd;
  t["softmax_backward"] = softmax_bwd;
  t["log_softmax_backward"] = softmax_bwd;
  t["layer_norm"] = layer_norm_fwd;
  t["layer_norm_backward"] = layer_norm_bwd;
  t["causal_mask"] = causal_mask_fwd;
  t["causal_mask_backward"] = causal_mask_bwd;
  t["embedding"] = lookup_fwd;
  t["embedding_backward"] = lookup_bwd;
  t["cross_entropy"] = cross_entropy_fwd;
  t["cross_entropy_backward"] = cross_entropy_bwd;
  t["mse"] = mse_fwd;
  t["mse_backward"] = mse_bwd;
  t["dropout"] = dropout_fwd;
  t["dropout_backward"] = dropout_bwd;
}

}  // namespace nns::backend::NNS_DEV
