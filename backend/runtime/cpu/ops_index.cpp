// CPU kernel wrappers: scans, selection, indexed access, casts. Registered by node kind through register_index_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- scans, selection, indexed access, casts -----------------------------------------------------------
// Each as [outer, len, inner] around attr `dim` of x (reduce_dims).
void cumsum_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  KERNEL(cumsum)(c.in[0].f32(), c.out[0].f32(), outer, len, inner);
}
void cumsum_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  KERNEL(cumsum_backward)(c.dy(0).f32(), dx, outer, len, inner);
}
void topk_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  KERNEL(topk)(c.in[0].f32(), c.out[0].f32(), c.out[1].i32(), outer, len, inner, c.attr_int("k"));
}
void topk_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  KERNEL(topk_backward)(c.y(1).i32(), c.dy(0).f32(), dx, outer, len, inner, c.attr_int("k"));
}
// gather / scatter_add read positions from a tensor the program computed:
// one outside [0, size of dim) is the user's error, reported, not followed.
void check_positions(const Call& c, const TensorView& index, int64_t size) {
  const int32_t* ix = index.i32();
  for (int64_t i = 0, n = index.numel(); i < n; ++i)
    if (ix[i] < 0 || ix[i] >= size)
      throw RuntimeError("node " + c.node.name + ": index " + std::to_string(ix[i]) + " out of range [0, " + std::to_string(size) +
                         ") along dim " + std::to_string(c.attr_int("dim")));
}
void gather_dim_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  check_positions(c, c.in[1], len);
  int64_t m = c.in[1].shape[norm_axis(c.attr_int("dim"), c.in[0].shape.size())];
  KERNEL(gather)(c.in[0].f32(), c.in[1].i32(), c.out[0].f32(), outer, len, inner, m);
}
void gather_dim_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  int64_t m = c.x(1).shape[norm_axis(c.attr_int("dim"), c.x(0).shape.size())];
  KERNEL(gather_backward)(c.x(1).i32(), c.dy(0).f32(), dx, outer, len, inner, m);
}
void scatter_add_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  check_positions(c, c.in[1], len);
  int64_t m = c.in[1].shape[norm_axis(c.attr_int("dim"), c.in[0].shape.size())];
  KERNEL(scatter_add)(c.in[0].f32(), c.in[1].i32(), c.in[2].f32(), c.out[0].f32(), outer, len, inner, m);
}
void scatter_add_bwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  int64_t m = c.x(1).shape[norm_axis(c.attr_int("dim"), c.x(0).shape.size())];
  KERNEL(scatter_add_backward)(c.x(1).i32(), c.dy(0).f32(), c.dx(0), c.dx(2), outer, len, inner, m);
}
// to_f32 / to_i32: a copy when the operand already has the dtype.
void to_f32_fwd(const Call& c) {
  if (c.in[0].dtype == sema::DType::F32) return copy(c.in[0], c.out[0]);
  KERNEL(cast_to_f32)(c.in[0].i32(), c.out[0].f32(), c.in[0].numel());
}
void to_i32_fwd(const Call& c) {
  if (c.in[0].dtype == sema::DType::I32) return copy(c.in[0], c.out[0]);
  const float* x = c.in[0].f32();
  for (int64_t i = 0, n = c.in[0].numel(); i < n; ++i)
    // NaN fails both comparisons; floats this large are integers, so -2^31 and 2^31 bound the range.
    if (!(x[i] >= -2147483648.0f && x[i] < 2147483648.0f))
      throw RuntimeError("node " + c.node.name + ": to_i32 of " + std::to_string(x[i]) + ", which is outside the i32 range");
  KERNEL(cast_to_i32)(x, c.out[0].i32(), c.in[0].numel());
}

}  // namespace

void register_index_kernels(KernelTable& table) {
  table.insert({
      {"cumsum", cumsum_fwd}, {"cumsum_backward", cumsum_bwd}, {"topk", topk_fwd}, {"topk_backward", topk_bwd},
      {"gather", gather_dim_fwd}, {"gather_backward", gather_dim_bwd}, {"scatter_add", scatter_add_fwd},
      {"scatter_add_backward", scatter_add_bwd}, {"to_f32", to_f32_fwd}, {"to_i32", to_i32_fwd},
  });
}

}  // namespace nns::backend::cpu_ops
