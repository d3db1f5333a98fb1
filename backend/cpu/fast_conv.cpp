// Fast conv2d: oneDNN convolution forward, backward-data and
// backward-weights primitives over the caller's NCHW / OIHW buffers.
#include "backend/cpu/dnnl_context.h"
#include "backend/cpu/kernels.h"

namespace nns::backend::cpu::fast {

using dnnl::memory;
using namespace dnnl_ctx;

namespace {

struct ConvMds {
  memory::desc x, w, b, y;
  memory::dims strides, pad;
  explicit ConvMds(const Conv2dDims& d)
      : x(plain_md({d.n, d.c, d.h, d.w})),
        w(plain_md({d.o, d.c, d.kh, d.kw})),
        b(plain_md({d.o})),
        y(plain_md({d.n, d.o, d.out_h(), d.out_w()})),
        strides{d.stride_h, d.stride_w},
        pad{d.pad_h, d.pad_w} {}
};

std::vector<int64_t> conv_key(const Conv2dDims& d, bool flag) {
  return {d.n, d.c, d.h, d.w, d.o, d.kh, d.kw, d.stride_h, d.stride_w, d.pad_h, d.pad_w, flag};
}

// The forward primitive descriptor, also the hint the backward ones need.
dnnl::convolution_forward::primitive_desc forward_pd(const ConvMds& md, bool with_bias) {
  auto desc = with_bias
      ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, md.x, md.w, md.b,
                                        md.y, md.strides, md.pad, md.pad)
      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, md.x, md.w, md.y,
                                        md.strides, md.pad, md.pad);
  return dnnl::convolution_forward::primitive_desc(desc, engine());
}

bool empty(const Conv2dDims& d) {
  return d.n * d.c * d.h * d.w * d.o * d.kh * d.kw == 0 || d.out_h() <= 0 || d.out_w() <= 0;
}

}  // namespace

void conv2d(const float* x, const float* w, const float* bias, float* y, const Conv2dDims& d) {
  if (empty(d)) return;
  ConvMds md(d);
  bool with_bias = bias != nullptr;
  const dnnl::primitive& prim =
      cached(PrimKind::conv_fwd, conv_key(d, with_bias), [&]() -> dnnl::primitive {
        return dnnl::convolution_forward(forward_pd(md, with_bias));
      });
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, wrap(md.x, x)}, {DNNL_ARG_WEIGHTS, wrap(md.w, w)}, {DNNL_ARG_DST, wrap(md.y, y)}};
  if (with_bias) args.emplace(DNNL_ARG_BIAS, wrap(md.b, bias));
  execute(prim, args);
}

void conv2d_backward_data(const float* dy, const float* w, float* dx, const Conv2dDims& d) {
  if (empty(d)) return;
  ConvMds md(d);
  const dnnl::primitive& prim =
      cached(PrimKind::conv_bwd_data, conv_key(d, false), [&]() -> dnnl::primitive {
        dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, md.x, md.w,
                                                   md.y, md.strides, md.pad, md.pad);
        return dnnl::convolution_backward_data(
            dnnl::convolution_backward_data::primitive_desc(desc, engine(), forward_pd(md, false)));
      });
  execute(prim, {{DNNL_ARG_DIFF_DST, wrap(md.y, dy)},
                 {DNNL_ARG_WEIGHTS, wrap(md.w, w)},
                 {DNNL_ARG_DIFF_SRC, wrap(md.x, dx)}});
}

void conv2d_backward_weights(const float* x, const float* dy, float* dw, float* dbias,
                             const Conv2dDims& d) {
  if (empty(d) || (!dw && !dbias)) return;
  ConvMds md(d);
  if (!dw) dw = scratch(0, size_t(d.o * d.c * d.kh * d.kw));  // oneDNN always writes dw
  bool with_bias = dbias != nullptr;
  const dnnl::primitive& prim = cached(
      PrimKind::conv_bwd_weights, conv_key(d, with_bias), [&]() -> dnnl::primitive {
        auto desc = with_bias
            ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, md.x,
                                                       md.w, md.b, md.y, md.strides, md.pad, md.pad)
            : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, md.x,
                                                       md.w, md.y, md.strides, md.pad, md.pad);
        return dnnl::convolution_backward_weights(dnnl::convolution_backward_weights::primitive_desc(
            desc, engine(), forward_pd(md, with_bias)));
      });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(md.x, x)},
                                       {DNNL_ARG_DIFF_DST, wrap(md.y, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, wrap(md.w, dw)}};
  if (with_bias) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(md.b, dbias));
  execute(prim, args);
}

}  // namespace nns::backend::cpu::fast
