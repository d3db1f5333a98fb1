// CPU kernel wrappers: conv2d, pooling. Registered by node kind through register_conv_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- convolution --------------------------------------------------------------------------------
cpu::Conv2dDims conv_dims(const Call& c, const Shape& x, const Shape& w) {
  cpu::Conv2dDims d;
  d.n = x[0]; d.c = x[1]; d.h = x[2]; d.w = x[3];
  d.o = w[0]; d.kh = w[2]; d.kw = w[3];
  d.stride_h = d.stride_w = c.attr_int("stride");
  d.pad_h = d.pad_w = c.attr_int("padding");
  return d;
}
void conv_fwd(const Call& c) {
  cpu::Conv2dDims d = conv_dims(c, c.in[0].shape, c.in[1].shape);
  KERNEL(conv2d)(c.in[0].f32(), c.in[1].f32(), c.in.size() > 2 ? c.in[2].f32() : nullptr, c.out[0].f32(), d);
}
void conv_bwd(const Call& c) {
  cpu::Conv2dDims d = conv_dims(c, c.x(0).shape, c.x(1).shape);
  if (float* dx = c.dx(0)) KERNEL(conv2d_backward_data)(c.dy(0).f32(), c.x(1).f32(), dx, d);
  float* dbias = c.fwd_inputs() > 2 ? c.dx(2) : nullptr;
  if (c.dx(1) || dbias) KERNEL(conv2d_backward_weights)(c.x(0).f32(), c.dy(0).f32(), c.dx(1), dbias, d);
}

// ---- pooling ----------------------------------------------------------------------------------------
cpu::Pool2dDims pool_dims(const Call& c, const Shape& x) {
  cpu::Pool2dDims d;
  d.n = x[0]; d.c = x[1]; d.h = x[2]; d.w = x[3];
  d.k = c.attr_int("kernel");
  d.stride = c.attr_int("stride");
  d.pad = c.attr_int_or("padding", 0);
  return d;
}
void max_pool_fwd(const Call& c) { KERNEL(max_pool2d)(c.in[0].f32(), c.out[0].f32(), pool_dims(c, c.in[0].shape)); }
void max_pool_bwd(const Call& c) {
  if (float* dx = c.dx(0)) KERNEL(max_pool2d_backward)(c.x(0).f32(), c.dy(0).f32(), dx, pool_dims(c, c.x(0).shape));
}
void avg_pool_fwd(const Call& c) { KERNEL(avg_pool2d)(c.in[0].f32(), c.out[0].f32(), pool_dims(c, c.in[0].shape)); }
void avg_pool_bwd(const Call& c) {
  if (float* dx = c.dx(0)) KERNEL(avg_pool2d_backward)(c.dy(0).f32(), dx, pool_dims(c, c.x(0).shape));
}

}  // namespace

void register_conv_kernels(KernelTable& table) {
  table.insert({
      {"conv2d", conv_fwd}, {"conv2d_bias", conv_fwd}, {"conv2d_backward", conv_bwd},
      {"conv2d_bias_backward", conv_bwd}, {"max_pool2d", max_pool_fwd}, {"max_pool2d_backward", max_pool_bwd},
      {"avg_pool2d", avg_pool_fwd}, {"avg_pool2d_backward", avg_pool_bwd},
  });
}

}  // namespace nns::backend::cpu_ops
