// conv2d, conv2d_bias, max_pool2d and avg_pool2d on the device, forward and
// backward, with the contracts of the CPU backend's node wrappers
// (cpu/ops_conv.cpp: NCHW, one stride and one padding for both axes) and the
// arithmetic of cpu::ref (ref_linalg.cpp, ref_pool.cpp).
//
// On a GPU with cuDNN the wrappers run cuDNN (dnn.h: measured, cached,
// deterministic algorithms) and fall back to the kernels here where cuDNN
// declines a shape, is switched off (NNS_CUDNN=0) or absent (the
// emulation). These are our own direct kernels: one index per output
// element of the forward, per input-gradient element and per
// weight-gradient element of the backward, each summing its terms serially
// (in double for the convolution, as ref): correct and deterministic, not
// fast. The conformance tables compare both paths with the CPU reference.
#include <cmath>
#include <string>

#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/launch.h"

namespace nns::backend::NNS_DEV {

namespace conv {

// Geometry of one convolution (cpu::Conv2dDims), captured by value.
struct ConvDims {
  int64_t n, c, h, w;   // input [n, c, h, w]
  int64_t o, kh, kw;    // weight [o, c, kh, kw]
  int64_t stride, pad;  // both axes
  int64_t oh, ow;       // output [n, o, oh, ow]
};

// y[b,o,i,j] = bias[o] + sum_{c,u,v} x[b,c,i*s-p+u,j*s-p+v] w[o,c,u,v], in
// double, in ref's (c, u, v) order.
void conv2d(const float* x, const float* w, const float* bias, float* y, ConvDims d, Stream s) {
  for_each(d.n * d.o * d.oh * d.ow, s, NNS_KERNEL(int64_t e) {
    int64_t j = e % d.ow, i = (e / d.ow) % d.oh, o = (e / (d.ow * d.oh)) % d.o, b = e / (d.ow * d.oh * d.o);
    double acc = bias ? double(bias[o]) : 0.0;
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t u = 0; u < d.kh; ++u) {
        int64_t h = i * d.stride - d.pad + u;
        if (h < 0 || h >= d.h) continue;
        for (int64_t v = 0; v < d.kw; ++v) {
          int64_t ww = j * d.stride - d.pad + v;
          if (ww < 0 || ww >= d.w) continue;
          acc += double(x[((b * d.c + c) * d.h + h) * d.w + ww]) * w[((o * d.c + c) * d.kh + u) * d.kw + v];
        }
      }
    y[e] = float(acc);
  });
}

// dx[b,c,h,w] = sum over the outputs (o, i, j) whose window reads (h, w)
// at tap (u, v) = (h + p - i*s, w + p - j*s) of dy[b,o,i,j] w[o,c,u,v]:
// ref's scatter as a gather, one index per input element, in double.
void conv2d_backward_data(const float* dy, const float* w, float* dx, ConvDims d, Stream s) {
  for_each(d.n * d.c * d.h * d.w, s, NNS_KERNEL(int64_t e) {
    int64_t ww = e % d.w, h = (e / d.w) % d.h, c = (e / (d.w * d.h)) % d.c, b = e / (d.w * d.h * d.c);
    double acc = 0;
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t u = 0; u < d.kh; ++u) {
        int64_t ti = h + d.pad - u;  // i * stride
        if (ti < 0 || ti % d.stride != 0 || ti / d.stride >= d.oh) continue;
        int64_t i = ti / d.stride;
        for (int64_t v = 0; v < d.kw; ++v) {
          int64_t tj = ww + d.pad - v;
          if (tj < 0 || tj % d.stride != 0 || tj / d.stride >= d.ow) continue;
          int64_t j = tj / d.stride;
          acc += double(dy[((b * d.o + o) * d.oh + i) * d.ow + j]) * w[((o * d.c + c) * d.kh + u) * d.kw + v];
        }
      }
    dx[e] = float(acc);
  });
}

// dw[o,c,u,v] = sum_{b,i,j} dy[b,o,i,j] x[b,c,i*s-p+u,j*s-p+v], in double,
// in ref's (b, i, j) order: one index per weight element.
void conv2d_backward_weights(const float* x, const float* dy, float* dw, ConvDims d, Stream s) {
  for_each(d.o * d.c * d.kh * d.kw, s, NNS_KERNEL(int64_t e) {
    int64_t v = e % d.kw, u = (e / d.kw) % d.kh, c = (e / (d.kw * d.kh)) % d.c, o = e / (d.kw * d.kh * d.c);
    double acc = 0;
    for (int64_t b = 0; b < d.n; ++b)
      for (int64_t i = 0; i < d.oh; ++i) {
        int64_t h = i * d.stride - d.pad + u;
        if (h < 0 || h >= d.h) continue;
        for (int64_t j = 0; j < d.ow; ++j) {
          int64_t ww = j * d.stride - d.pad + v;
          if (ww < 0 || ww >= d.w) continue;
          acc += double(dy[((b * d.o + o) * d.oh + i) * d.ow + j]) * x[((b * d.c + c) * d.h + h) * d.w + ww];
        }
      }
    dw[e] = float(acc);
  });
}

// dbias[o] = sum_{b,i,j} dy[b,o,i,j] in double: one index per channel.
void conv2d_backward_bias(const float* dy, float* dbias, ConvDims d, Stream s) {
  for_each(d.o, s, NNS_KERNEL(int64_t o) {
    double acc = 0;
    for (int64_t b = 0; b < d.n; ++b)
      for (int64_t k = 0; k < d.oh * d.ow; ++k) acc += dy[(b * d.o + o) * d.oh * d.ow + k];
    dbias[o] = float(acc);
  });
}

// Geometry of one pooling (cpu::Pool2dDims): square window k, one stride,
// symmetric padding; planes = n * c.
struct PoolDims {
  int64_t planes, h, w, k, stride, pad, oh, ow;
};

// The first maximum of output o's window in row-major order (ref's
// max_pool2d_backward: the first element beating the best so far), as a
// flat input index; -1 when the window holds no real element.
inline NNS_HD int64_t window_argmax(const float* x, PoolDims d, int64_t p, int64_t i, int64_t j) {
  int64_t arg = -1;
  float best = -INFINITY;
  for (int64_t u = 0; u < d.k; ++u)
    for (int64_t v = 0; v < d.k; ++v) {
      int64_t r = i * d.stride - d.pad + u, c = j * d.stride - d.pad + v;
      if (r < 0 || r >= d.h || c < 0 || c >= d.w) continue;
      int64_t in = (p * d.h + r) * d.w + c;
      if (arg < 0 || x[in] > best) {
        best = x[in];
        arg = in;
      }
    }
  return arg;
}

// The outputs whose window covers input row r: i in [i_lo, i_hi] with
// i*s - p <= r <= i*s - p + k - 1.
inline NNS_HD void covering(int64_t r, int64_t k, int64_t stride, int64_t pad, int64_t out, int64_t* lo, int64_t* hi) {
  int64_t t = r + pad - k + 1;  // i*s >= t
  int64_t first = t <= 0 ? 0 : (t + stride - 1) / stride;
  int64_t last = (r + pad) / stride;  // i*s <= r + p (r + p >= 0)
  *lo = first;
  *hi = last < out - 1 ? last : out - 1;
}

// max: -inf padding, NaN propagates (ref's update rule); avg: the float sum
// of the window's real elements in row-major order times 1 / k^2.
void pool2d(const float* x, float* y, PoolDims d, bool max, Stream s) {
  const float inv = 1.f / static_cast<float>(d.k * d.k);
  for_each(d.planes * d.oh * d.ow, s, NNS_KERNEL(int64_t e) {
    int64_t j = e % d.ow, i = (e / d.ow) % d.oh, p = e / (d.ow * d.oh);
    float acc = max ? -INFINITY : 0.f;
    for (int64_t u = 0; u < d.k; ++u)
      for (int64_t v = 0; v < d.k; ++v) {
        int64_t r = i * d.stride - d.pad + u, c = j * d.stride - d.pad + v;
        if (r < 0 || r >= d.h || c < 0 || c >= d.w) continue;
        float xv = x[(p * d.h + r) * d.w + c];
        if (max) {
          if (xv > acc || xv != xv) acc = xv;
        } else {
          acc += xv;
        }
      }
    y[e] = max ? acc : acc * inv;
  });
}

// dx of each input element: the sum, in output order (ref's order), of
// dy over the outputs whose window covers it and (max) picked it.
void pool2d_backward(const float* x, const float* dy, float* dx, PoolDims d, bool max, Stream s) {
  const float inv = 1.f / static_cast<float>(d.k * d.k);
  for_each(d.planes * d.h * d.w, s, NNS_KERNEL(int64_t e) {
    int64_t c = e % d.w, r = (e / d.w) % d.h, p = e / (d.w * d.h);
    int64_t i_lo, i_hi, j_lo, j_hi;
    covering(r, d.k, d.stride, d.pad, d.oh, &i_lo, &i_hi);
    covering(c, d.k, d.stride, d.pad, d.ow, &j_lo, &j_hi);
    float acc = 0.f;
    for (int64_t i = i_lo; i <= i_hi; ++i)
      for (int64_t j = j_lo; j <= j_hi; ++j) {
        float g = dy[(p * d.oh + i) * d.ow + j];
        if (max) {
          if (window_argmax(x, d, p, i, j) == e) acc += g;
        } else {
          acc += g * inv;
        }
      }
    dx[e] = acc;
  });
}

}  // namespace conv

namespace {

conv::ConvDims conv_dims(const Call& c, const sema::Shape& x, const sema::Shape& w) {
  conv::ConvDims d;
  d.n = x[0], d.c = x[1], d.h = x[2], d.w = x[3];
  d.o = w[0], d.kh = w[2], d.kw = w[3];
  d.stride = c.attr_int("stride");
  d.pad = c.attr_int("padding");
  d.oh = (d.h + 2 * d.pad - d.kh) / d.stride + 1;
  d.ow = (d.w + 2 * d.pad - d.kw) / d.stride + 1;
  return d;
}
ConvGeometry geometry(const conv::ConvDims& d) {
  ConvGeometry g;
  g.n = d.n, g.c = d.c, g.h = d.h, g.w = d.w, g.o = d.o, g.kh = d.kh, g.kw = d.kw;
  g.stride = d.stride, g.pad = d.pad, g.oh = d.oh, g.ow = d.ow;
  return g;
}
// cuDNN where it takes the shape (dnn.h), else the own kernel.
void conv_fwd(const Call& c) {
  const conv::ConvDims d = conv_dims(c, c.in[0].shape, c.in[1].shape);
  const float* bias = c.in.size() > 2 ? c.in[2].f32() : nullptr;
  if (c.dnn.conv_forward(geometry(d), c.in[0].f32(), c.in[1].f32(), bias, c.out[0].f32(), c.scratch)) return;
  conv::conv2d(c.in[0].f32(), c.in[1].f32(), bias, c.out[0].f32(), d, c.stream);
}
void conv_bwd(const Call& c) {
  conv::ConvDims d = conv_dims(c, c.x(0).shape, c.x(1).shape);
  if (float* dx = c.dx(0))
    if (!c.dnn.conv_backward_data(geometry(d), c.dy(0).f32(), c.x(1).f32(), dx, c.scratch))
      conv::conv2d_backward_data(c.dy(0).f32(), c.x(1).f32(), dx, d, c.stream);
  if (float* dw = c.dx(1))
    if (!c.dnn.conv_backward_filter(geometry(d), c.x(0).f32(), c.dy(0).f32(), dw, c.scratch))
      conv::conv2d_backward_weights(c.x(0).f32(), c.dy(0).f32(), dw, d, c.stream);
  if (c.fwd_inputs() > 2)
    if (float* dbias = c.dx(2)) conv::conv2d_backward_bias(c.dy(0).f32(), dbias, d, c.stream);
}

conv::PoolDims pool_dims(const Call& c, const sema::Shape& x) {
  conv::PoolDims d;
  d.planes = x[0] * x[1], d.h = x[2], d.w = x[3];
  d.k = c.attr_int("kernel");
  d.stride = c.attr_int("stride");
  d.pad = c.attr_int_or("padding", 0);
  d.oh = (d.h + 2 * d.pad - d.k) / d.stride + 1;
  d.ow = (d.w + 2 * d.pad - d.k) / d.stride + 1;
  return d;
}
bool is_max(const std::string& kind) { return kind.compare(0, 3, "max") == 0; }
PoolGeometry geometry(const conv::PoolDims& d, const sema::Shape& x) {
  PoolGeometry g;
  g.n = x[0], g.c = x[1], g.h = d.h, g.w = d.w, g.k = d.k, g.stride = d.stride, g.pad = d.pad, g.oh = d.oh, g.ow = d.ow;
  return g;
}
void pool_fwd(const Call& c) {
  const conv::PoolDims d = pool_dims(c, c.in[0].shape);
  const bool max = is_max(c.node.kind);
  if (c.dnn.pool_forward(geometry(d, c.in[0].shape), max, c.in[0].f32(), c.out[0].f32())) return;
  conv::pool2d(c.in[0].f32(), c.out[0].f32(), d, max, c.stream);
}
void pool_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const conv::PoolDims d = pool_dims(c, c.x(0).shape);
  const bool max = is_max(c.node.kind);
  if (c.dnn.pool_backward(geometry(d, c.x(0).shape), max, c.x(0).f32(), c.dy(0).f32(), dx, c.scratch)) return;
  conv::pool2d_backward(c.x(0).f32(), c.dy(0).f32(), dx, d, max, c.stream);
}

}  // namespace

void register_conv_kernels(KernelTable& t) {
  t["conv2d"] = conv_fwd;
  t["conv2d_bias"] = conv_fwd;
  t["conv2d_backward"] = conv_bwd;
  t["conv2d_bias_backward"] = conv_bwd;
  t["max_pool2d"] = pool_fwd;
  t["avg_pool2d"] = pool_fwd;
  t["max_pool2d_backward"] = pool_bwd;
  t["avg_pool2d_backward"] = pool_bwd;
}

}  // namespace nns::backend::NNS_DEV
