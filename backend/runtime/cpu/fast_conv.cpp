// Fast conv2d: oneDNN convolution forward, backward-data and
// backward-weights primitives. The caller's buffers are NCHW / OIHW; the
// primitives are created with format_tag::any, so oneDNN picks its blocked
// layouts (nChw16c...) and the plan reorders around each call. On this
// AVX-512 machine that is 2-5x faster than the gemm-based kernels oneDNN
// runs on plain layouts, reorders included (ResNet/Swin-like shapes), and
// up to 10x for weight gradients; backward-data with few input channels is
// the exception (below).
#include "backend/runtime/cpu/dnnl_context.h"
#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

using dnnl::memory;
using namespace dnnl_ctx;

namespace {

// Plain descriptors (the caller's layouts) and "any" ones (for creation).
struct ConvMds {
  memory::desc x, w, b, y;
  memory::desc x_any, w_any, y_any;
  memory::dims strides, pad;
  explicit ConvMds(const Conv2dDims& d)
      : x(plain_md({d.n, d.c, d.h, d.w})),
        w(plain_md({d.o, d.c, d.kh, d.kw})),
        b(plain_md({d.o})),
        y(plain_md({d.n, d.o, d.out_h(), d.out_w()})),
        x_any({d.n, d.c, d.h, d.w}, memory::data_type::f32, memory::format_tag::any),
        w_any({d.o, d.c, d.kh, d.kw}, memory::data_type::f32, memory::format_tag::any),
        y_any({d.n, d.o, d.out_h(), d.out_w()}, memory::data_type::f32, memory::format_tag::any),
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
                                        dnnl::algorithm::convolution_direct, md.x_any, md.w_any,
                                        md.b, md.y_any, md.strides, md.pad, md.pad)
      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, md.x_any, md.w_any,
                                        md.y_any, md.strides, md.pad, md.pad);
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
  const Plan& plan = cached_plan(PrimKind::conv_fwd, conv_key(d, with_bias), [&] {
    auto pd = forward_pd(md, with_bias);
    std::unordered_map<int, memory::desc> user{
        {DNNL_ARG_SRC, md.x}, {DNNL_ARG_WEIGHTS, md.w}, {DNNL_ARG_DST, md.y}};
    if (with_bias) user.emplace(DNNL_ARG_BIAS, md.b);
    return make_plan(dnnl::convolution_forward(pd), pd, user, {DNNL_ARG_DST});
  });
  std::unordered_map<int, const float*> args{{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}};
  if (with_bias) args.emplace(DNNL_ARG_BIAS, bias);
  execute_plan(plan, args);
}

void conv2d_backward_data(const float* dy, const float* w, float* dx, const Conv2dDims& d) {
  if (empty(d)) return;
  ConvMds md(d);
  const Plan& plan = cached_plan(PrimKind::conv_bwd_data, conv_key(d, false), [&] {
    // Blocked layouts pad channels to a multiple of 16; with fewer input
    // channels (an image's 3) the blocked backward-data kernel measured 7-10x
    // slower than the plain gemm-based one, so those keep the caller's layouts.
    bool blocked = d.c >= 16;
    dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, blocked ? md.x_any : md.x, blocked ? md.w_any : md.w,
        blocked ? md.y_any : md.y, md.strides, md.pad, md.pad);
    dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), forward_pd(md, false));
    return make_plan(dnnl::convolution_backward_data(pd), pd,
                     {{DNNL_ARG_DIFF_DST, md.y}, {DNNL_ARG_WEIGHTS, md.w}, {DNNL_ARG_DIFF_SRC, md.x}},
                     {DNNL_ARG_DIFF_SRC});
  });
  execute_plan(plan, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, dx}});
}

void conv2d_backward_weights(const float* x, const float* dy, float* dw, float* dbias,
                             const Conv2dDims& d) {
  if (empty(d) || (!dw && !dbias)) return;
  ConvMds md(d);
  if (!dw) dw = scratch(0, size_t(d.o * d.c * d.kh * d.kw));  // oneDNN always writes dw
  bool with_bias = dbias != nullptr;
  const Plan& plan = cached_plan(PrimKind::conv_bwd_weights, conv_key(d, with_bias), [&] {
    auto desc = with_bias
        ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, md.x_any,
                                                   md.w_any, md.b, md.y_any, md.strides, md.pad,
                                                   md.pad)
        : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, md.x_any,
                                                   md.w_any, md.y_any, md.strides, md.pad, md.pad);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, engine(), forward_pd(md, with_bias));
    std::unordered_map<int, memory::desc> user{
        {DNNL_ARG_SRC, md.x}, {DNNL_ARG_DIFF_DST, md.y}, {DNNL_ARG_DIFF_WEIGHTS, md.w}};
    if (with_bias) user.emplace(DNNL_ARG_DIFF_BIAS, md.b);
    return make_plan(dnnl::convolution_backward_weights(pd), pd, user,
                     {DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS});
  });
  std::unordered_map<int, const float*> args{
      {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
  if (with_bias) args.emplace(DNNL_ARG_DIFF_BIAS, dbias);
  execute_plan(plan, args);
}

}  // namespace nns::backend::cpu::fast
