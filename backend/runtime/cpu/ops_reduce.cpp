// CPU kernel wrappers: reductions, constants, Swin constants. Registered by node kind through register_reduce_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- reductions ------------------------------------------------------------------------------
void reduce_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  KERNEL(reduce)(c.node.kind == "sum" ? cpu::Reduction::sum : cpu::Reduction::mean, c.in[0].f32(), c.out[0].f32(), outer, len, inner);
}
void reduce_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  KERNEL(reduce_backward)(c.base_kind() == "sum" ? cpu::Reduction::sum : cpu::Reduction::mean, c.dy(0).f32(), dx, outer, len, inner);
}

// amax / amin / argmax over attr `dim`: the extreme's value, or its index (int32).
cpu::Extreme extreme_kind(const std::string& k) { return k == "amin" ? cpu::Extreme::min : cpu::Extreme::max; }
void extreme_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  bool index = c.node.kind == "argmax";
  KERNEL(reduce_extreme)(extreme_kind(c.node.kind), c.in[0].f32(), index ? nullptr : c.out[0].f32(), index ? c.out[0].i32() : nullptr,
                         outer, len, inner);
}
void extreme_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  KERNEL(reduce_extreme_backward)(c.x(0).f32(), c.y(0).f32(), c.dy(0).f32(), dx, outer, len, inner);
}

// ---- constants --------------------------------------------------------------------------------------
// full(shape, value), zeros_like(x), ones_like(x) and arange(n).
void fill_value_fwd(const Call& c) {
  const std::string& k = c.node.kind;
  float v = k == "zeros_like" ? 0.f : k == "ones_like" ? 1.f : static_cast<float>(c.attr_float("value", 0));
  KERNEL(fill)(c.out[0].f32(), c.out[0].numel(), v);
}
void arange_fwd(const Call& c) { KERNEL(arange)(c.out[0].f32(), c.out[0].numel()); }

// ---- constants (Swin) -------------------------------------------------------------------------------
// relative_position_index of Swin: (dh + w - 1) * (2w - 1) + (dw + w - 1).
void swin_relative_index_fwd(const Call& c) {
  int64_t w = c.attr_int("window"), n = w * w;
  int32_t* out = c.out[0].i32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t dh = i / w - j / w + w - 1, dw = i % w - j % w + w - 1;
      out[i * n + j] = static_cast<int32_t>(dh * (2 * w - 1) + dw);
    }
}
// Swin's shifted-window attention mask: tokens from different regions of
// the rolled map may not attend to each other (-100, as in the paper's code).
void swin_shift_mask_fwd(const Call& c) {
  int64_t H = c.attr_int("height"), W = c.attr_int("width"), win = c.attr_int("window"), shift = c.attr_int("shift");
  auto region = [&](int64_t p, int64_t size) { return p < size - win ? 0 : (p < size - shift ? 1 : 2); };
  int64_t gw = W / win, n = win * win, nw = (H / win) * gw;
  float* out = c.out[0].f32();
  std::vector<int> label(static_cast<size_t>(n));
  for (int64_t w = 0; w < nw; ++w) {
    for (int64_t t = 0; t < n; ++t) {
      int64_t h = (w / gw) * win + t / win, x = (w % gw) * win + t % win;
      label[t] = region(h, H) * 3 + region(x, W);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) out[(w * n + i) * n + j] = label[i] == label[j] ? 0.f : -100.f;
  }
}

// T5's relative_position_bucket for (query i, key j), relative = j - i.
// Bidirectional: half the buckets for keys after the query. In each
// direction the first half of the buckets are exact distances, the rest
// grow logarithmically up to max_distance (the last bucket beyond).
void t5_relative_bucket_fwd(const Call& c) {
  int64_t q = c.attr_int("qlen"), k = c.attr_int("klen");
  int64_t buckets = c.attr_int_or("buckets", 32), dist = c.attr_int_or("max_distance", 128);
  auto bi = c.node.attrs.find("bidirectional");
  bool bidirectional = bi == c.node.attrs.end() || (std::holds_alternative<bool>(bi->second) ? std::get<bool>(bi->second) : c.attr_int("bidirectional") != 0);
  int64_t per_side = bidirectional ? buckets / 2 : buckets, exact = per_side / 2;
  int32_t* out = c.out[0].i32();
  for (int64_t i = 0; i < q; ++i)
    for (int64_t j = 0; j < k; ++j) {
      int64_t rel = j - i, base = 0, n;
      if (bidirectional) {
        if (rel > 0) base = per_side;
        n = rel < 0 ? -rel : rel;
      } else {
        n = rel < 0 ? -rel : 0;
      }
      int64_t b = n;
      if (n >= exact) {
        double scaled = std::log(static_cast<double>(n) / exact) / std::log(static_cast<double>(dist) / exact) * (per_side - exact);
        b = std::min<int64_t>(exact + static_cast<int64_t>(scaled), per_side - 1);
      }
      out[i * k + j] = static_cast<int32_t>(base + b);
    }
}

}  // namespace

void register_reduce_kernels(KernelTable& table) {
  table.insert({
      {"sum", reduce_fwd}, {"mean", reduce_fwd}, {"sum_backward", reduce_bwd}, {"mean_backward", reduce_bwd},
      {"amax", extreme_fwd}, {"amin", extreme_fwd}, {"argmax", extreme_fwd}, {"amax_backward", extreme_bwd},
      {"amin_backward", extreme_bwd}, {"full", fill_value_fwd}, {"zeros_like", fill_value_fwd},
      {"ones_like", fill_value_fwd}, {"arange", arange_fwd}, {"swin_relative_index", swin_relative_index_fwd},
      {"swin_shift_mask", swin_shift_mask_fwd}, {"t5_relative_bucket", t5_relative_bucket_fwd},
  });
}

}  // namespace nns::backend::cpu_ops
