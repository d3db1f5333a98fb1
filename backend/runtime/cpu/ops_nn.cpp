// CPU kernel wrappers: softmax, layer_norm, causal_mask, embedding and index_select, losses. Registered by node kind through register_nn_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- normalisation ------------------------------------------------------------------------
void softmax_fwd(const Call& c) {
  int64_t cols = c.in[0].shape.back();
  if (c.node.kind == "softmax") KERNEL(softmax)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel() / cols, cols);
  else KERNEL(log_softmax)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel() / cols, cols);
}
void softmax_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t cols = c.x(0).shape.back(), rows = c.x(0).numel() / cols;
  if (c.base_kind() == "softmax") KERNEL(softmax_backward)(c.y(0).f32(), c.dy(0).f32(), dx, rows, cols);
  else KERNEL(log_softmax_backward)(c.y(0).f32(), c.dy(0).f32(), dx, rows, cols);
}
void layer_norm_fwd(const Call& c) {
  int64_t cols = c.in[0].shape.back();
  KERNEL(layer_norm)(c.in[0].f32(), c.in[1].f32(), c.in[2].f32(), c.out[0].f32(), nullptr, nullptr, c.in[0].numel() / cols, cols,
                     static_cast<float>(c.attr_float("eps", 1e-5)));
}
void layer_norm_bwd(const Call& c) {
  int64_t cols = c.x(0).shape.back(), rows = c.x(0).numel() / cols;
  float eps = static_cast<float>(c.attr_float("eps", 1e-5));
  // The forward output does not keep the statistics; recompute them (one
  // cheap pass) instead of storing two extra tensors per layer norm.
  std::vector<float> y(static_cast<size_t>(c.x(0).numel())), mean(rows), rstd(rows);
  KERNEL(layer_norm)(c.x(0).f32(), c.x(1).f32(), c.x(2).f32(), y.data(), mean.data(), rstd.data(), rows, cols, eps);
  KERNEL(layer_norm_backward)(c.x(0).f32(), c.x(1).f32(), mean.data(), rstd.data(), c.dy(0).f32(), c.dx(0), c.dx(1), c.dx(2), rows,
                              cols, eps);
}
void causal_mask_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  int64_t rows = s[s.size() - 2], cols = s.back(), mats = c.in[0].numel() / (rows * cols);
  const float* x = c.in[0].f32();
  float* y = c.out[0].f32();
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t k = (b * rows + i) * cols + j;
        y[k] = j > i ? -INFINITY : x[k];
      }
}
void causal_mask_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  int64_t rows = s[s.size() - 2], cols = s.back(), mats = c.x(0).numel() / (rows * cols);
  const float* dy = c.dy(0).f32();
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t k = (b * rows + i) * cols + j;
        dx[k] = j > i ? 0.f : dy[k];
      }
}

// ---- lookups -----------------------------------------------------------------------------
// embedding(ids, table) and index_select(table, idx) are the same row gather.
void gather_fwd(const Call& c) {
  bool emb = c.node.kind == "embedding";
  const TensorView& table = emb ? c.in[1] : c.in[0];
  const TensorView& ids = emb ? c.in[0] : c.in[1];
  int64_t vocab = table.shape[0], dim = table.numel() / vocab;
  // A vocab-split sub-op holds rows [vocab_offset, vocab_offset + vocab) of
  // a table of vocab_size rows; ids it does not hold give zero rows.
  int64_t offset = c.attr_int_or("vocab_offset", 0), full = c.attr_int_or("vocab_size", vocab);
  for (int64_t i = 0, n = ids.numel(); i < n; ++i)
    if (ids.i32()[i] < 0 || ids.i32()[i] >= full)
      throw RuntimeError("node " + c.node.name + ": index " + std::to_string(ids.i32()[i]) + " out of range [0, " + std::to_string(full) + ")");
  KERNEL(embedding)(table.f32(), ids.i32(), c.out[0].f32(), ids.numel(), vocab, dim, offset);
}
void gather_bwd(const Call& c) {
  bool emb = c.base_kind() == "embedding";
  size_t ti = emb ? 1 : 0;
  float* dtable = c.dx(ti);
  if (!dtable) return;
  const TensorView& table = c.x(ti);
  const TensorView& ids = c.x(emb ? 0 : 1);
  int64_t vocab = table.shape[0], dim = table.numel() / vocab;
  std::memset(dtable, 0, sizeof(float) * table.numel());
  KERNEL(embedding_backward)(ids.i32(), c.dy(0).f32(), dtable, ids.numel(), vocab, dim, c.attr_int_or("vocab_offset", 0));
}

// ---- losses ---------------------------------------------------------------------------------------
void cross_entropy_fwd(const Call& c) {
  int64_t classes = c.in[0].shape.back(), rows = c.in[0].numel() / classes;
  for (int64_t i = 0; i < rows; ++i)
    if (c.in[1].i32()[i] < 0 || c.in[1].i32()[i] >= classes)
      throw RuntimeError("cross_entropy: target " + std::to_string(c.in[1].i32()[i]) + " out of range [0, " + std::to_string(classes) + ")");
  c.out[0].f32()[0] = KERNEL(cross_entropy)(c.in[0].f32(), c.in[1].i32(), rows, classes);
}
void cross_entropy_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t classes = c.x(0).shape.back(), rows = c.x(0).numel() / classes;
  KERNEL(cross_entropy_backward)(c.x(0).f32(), c.x(1).i32(), c.dy(0).f32()[0], dx, rows, classes);
}
void mse_fwd(const Call& c) { c.out[0].f32()[0] = KERNEL(mse)(c.in[0].f32(), c.in[1].f32(), c.in[0].numel()); }
void mse_bwd(const Call& c) { KERNEL(mse_backward)(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32()[0], c.dx(0), c.dx(1), c.x(0).numel()); }

}  // namespace

void register_nn_kernels(KernelTable& table) {
  table.insert({
      {"softmax", softmax_fwd}, {"log_softmax", softmax_fwd}, {"softmax_backward", softmax_bwd},
      {"log_softmax_backward", softmax_bwd}, {"layer_norm", layer_norm_fwd}, {"layer_norm_backward", layer_norm_bwd},
      {"causal_mask", causal_mask_fwd}, {"causal_mask_backward", causal_mask_bwd}, {"embedding", gather_fwd},
      {"embedding_backward", gather_bwd}, {"index_select", gather_fwd}, {"index_select_backward", gather_bwd},
      {"cross_entropy", cross_entropy_fwd}, {"cross_entropy_backward", cross_entropy_bwd}, {"mse", mse_fwd},
      {"mse_backward", mse_bwd},
  });
}

}  // namespace nns::backend::cpu_ops
