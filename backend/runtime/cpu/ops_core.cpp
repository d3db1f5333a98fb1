// CPU kernel wrappers: matrix products, fill, add_n, the identity gradient. Registered by node kind through register_core_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- matrix products ----------------------------------------------------------------
void matmul_fwd(const Call& c) {
  const Shape& a = c.in[0].shape;
  const Shape& b = c.in[1].shape;
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  int64_t batch = prod(a, 0, a.size() - 2);
  MATMUL_KERNEL(matmul)(c.in[0].f32(), c.in[1].f32(), c.out[0].f32(), batch, batch, m, k, n, false, false, 0.f);
}
void matmul_bwd(const Call& c) {
  const Shape& a = c.x(0).shape;
  const Shape& b = c.x(1).shape;
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  int64_t batch = prod(a, 0, a.size() - 2);
  MATMUL_KERNEL(matmul_backward)(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32(), c.dx(0), c.dx(1), batch, batch, m, k, n, false, false);
}
// x and w may be row-strided views (reads_row_strided: fp32 only), and so
// may y, written in place or accumulated into (writes_in_place); the
// backward's dy may be row-strided too.
int64_t row_length(const TensorView& t, int64_t k) { return t.row_stride > 0 ? t.row_stride : k; }
bool strided(const TensorView& x, const TensorView& w) { return x.row_stride > 0 || w.row_stride > 0; }
void linear_fwd(const Call& c) {
  int64_t k = c.in[0].shape.back(), n = c.in[1].shape[0];
  const float* bias = c.in.size() > 2 ? c.in[2].f32() : nullptr;
  const TensorView& y = c.out[0];
  if (strided(c.in[0], c.in[1]) || y.row_stride > 0 || y.accumulate) {
    if (c.precision != Precision::F32) throw RuntimeError("internal: a row-strided " + c.node.kind + " below fp32");
    return KERNEL(linear_strided)(c.in[0].f32(), row_length(c.in[0], k), c.in[1].f32(), row_length(c.in[1], k), bias,
                                  y.f32(), c.in[0].numel() / k, k, n, y.row_stride, y.accumulate);
  }
  MATMUL_KERNEL(linear)(c.in[0].f32(), c.in[1].f32(), bias, y.f32(), c.in[0].numel() / k, k, n);
}
void linear_bwd(const Call& c) {
  int64_t k = c.x(0).shape.back(), n = c.x(1).shape[0];
  float* dbias = c.fwd_inputs() > 2 ? c.dx(2) : nullptr;
  // dx added to what its view holds (writes_in_place: an earlier kernel's partial sum).
  const bool add_dx = c.dx(0) != nullptr && c.out[0].accumulate;
  if (strided(c.x(0), c.x(1)) || c.dy(0).row_stride > 0 || add_dx) {
    if (c.precision != Precision::F32) throw RuntimeError("internal: a row-strided " + c.node.kind + " below fp32");
    return KERNEL(linear_backward_strided)(c.x(0).f32(), row_length(c.x(0), k), c.x(1).f32(), row_length(c.x(1), k),
                                           c.dy(0).f32(), c.dx(0), c.dx(1), dbias, c.x(0).numel() / k, k, n,
                                           c.dy(0).row_stride, add_dx);
  }
  MATMUL_KERNEL(linear_backward)(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32(), c.dx(0), c.dx(1), dbias, c.x(0).numel() / k, k, n);
}

// ---- autograd helpers --------------------------------------------------------------------------------
void fill_fwd(const Call& c) {
  float v = static_cast<float>(c.attr_float("value", 0));
  float* y = c.out[0].f32();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) y[i] = v;
}
void add_n_fwd(const Call& c) {
  float* y = c.out[0].f32();
  int64_t n = c.out[0].numel();
  std::memcpy(y, c.in[0].f32(), sizeof(float) * n);
  for (size_t k = 1; k < c.in.size(); ++k) {
    const float* x = c.in[k].f32();
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  }
}

}  // namespace

void identity_bwd(const Call& c) {
  if (float* dx = c.dx(0)) std::memcpy(dx, c.dy(0).f32(), sizeof(float) * c.dy(0).numel());
}

void register_core_kernels(KernelTable& table) {
  table.insert({
      {"matmul", matmul_fwd}, {"matmul_backward", matmul_bwd}, {"bmm", matmul_fwd}, {"bmm_backward", matmul_bwd},
      {"linear", linear_fwd}, {"linear_backward", linear_bwd}, {"linear_bias", linear_fwd},
      {"linear_bias_backward", linear_bwd}, {"add_scalar_backward", identity_bwd}, {"reshape_backward", identity_bwd},
      {"view_backward", identity_bwd}, {"to_f32_backward", identity_bwd}, {"fill", fill_fwd}, {"add_n", add_n_fwd},
  });
}

}  // namespace nns::backend::cpu_ops
