// Fast 2-d pooling on oneDNN's pooling primitives, on the caller's plain
// NCHW layout. Max pooling's backward needs the forward's workspace (where
// each maximum was); the forward kernel does not keep it between calls (a
// node's outputs are its only state), so the backward runs the training
// forward again into a per-call workspace: one extra cheap pass instead of
// state carried between nodes.
#include "backend/runtime/cpu/dnnl_context.h"
#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

using dnnl::memory;
using namespace dnnl_ctx;

namespace {

struct PoolMds {
  memory::desc x, y;
  memory::dims strides, kernel, pad;
  explicit PoolMds(const Pool2dDims& d)
      : x(plain_md({d.n, d.c, d.h, d.w})),
        y(plain_md({d.n, d.c, d.out_h(), d.out_w()})),
        strides{d.stride, d.stride},
        kernel{d.k, d.k},
        pad{d.pad, d.pad} {}
};

dnnl::pooling_forward::primitive_desc forward_pd(const PoolMds& md, dnnl::algorithm alg, dnnl::prop_kind prop) {
  dnnl::pooling_forward::desc desc(prop, alg, md.x, md.y, md.strides, md.kernel, md.pad, md.pad);
  return dnnl::pooling_forward::primitive_desc(desc, engine());
}

bool empty(const Pool2dDims& d) { return d.n * d.c * d.h * d.w == 0 || d.out_h() <= 0 || d.out_w() <= 0; }

void pool_forward(const float* x, float* y, const Pool2dDims& d, dnnl::algorithm alg, PrimKind kind) {
  if (empty(d)) return;
  PoolMds md(d);
  const dnnl::primitive& prim = cached(kind, {d.n, d.c, d.h, d.w, d.k, d.stride, d.pad}, [&] {
    return dnnl::primitive(dnnl::pooling_forward(forward_pd(md, alg, dnnl::prop_kind::forward_inference)));
  });
  execute(prim, {{DNNL_ARG_SRC, wrap(md.x, x)}, {DNNL_ARG_DST, wrap(md.y, y)}});
}

}  // namespace

void max_pool2d(const float* x, float* y, const Pool2dDims& d) {
  pool_forward(x, y, d, dnnl::algorithm::pooling_max, PrimKind::pool_max_fwd);
}

void avg_pool2d(const float* x, float* y, const Pool2dDims& d) {
  pool_forward(x, y, d, dnnl::algorithm::pooling_avg_include_padding, PrimKind::pool_avg_fwd);
}

void max_pool2d_backward(const float* x, const float* dy, float* dx, const Pool2dDims& d) {
  if (empty(d)) return;
  PoolMds md(d);
  auto fwd_pd = forward_pd(md, dnnl::algorithm::pooling_max, dnnl::prop_kind::forward_training);
  std::vector<int64_t> key{d.n, d.c, d.h, d.w, d.k, d.stride, d.pad};
  // Copies (handles): a second cached() call may clear the cache.
  dnnl::primitive fwd = cached(PrimKind::pool_max_fwd_train, key, [&] { return dnnl::primitive(dnnl::pooling_forward(fwd_pd)); });
  dnnl::primitive bwd = cached(PrimKind::pool_max_bwd, key, [&] {
    dnnl::pooling_backward::desc desc(dnnl::algorithm::pooling_max, md.x, md.y, md.strides, md.kernel, md.pad, md.pad);
    return dnnl::primitive(dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(desc, engine(), fwd_pd)));
  });
  memory workspace(fwd_pd.workspace_desc(), engine());
  float* y = scratch(0, size_t(d.n * d.c * d.out_h() * d.out_w()));
  execute(fwd, {{DNNL_ARG_SRC, wrap(md.x, x)}, {DNNL_ARG_DST, wrap(md.y, y)}, {DNNL_ARG_WORKSPACE, workspace}});
  execute(bwd, {{DNNL_ARG_DIFF_DST, wrap(md.y, dy)}, {DNNL_ARG_DIFF_SRC, wrap(md.x, dx)}, {DNNL_ARG_WORKSPACE, workspace}});
}

void avg_pool2d_backward(const float* dy, float* dx, const Pool2dDims& d) {
  if (empty(d)) return;
  PoolMds md(d);
  const dnnl::primitive& bwd = cached(PrimKind::pool_avg_bwd, {d.n, d.c, d.h, d.w, d.k, d.stride, d.pad}, [&] {
    auto fwd_pd = forward_pd(md, dnnl::algorithm::pooling_avg_include_padding, dnnl::prop_kind::forward_training);
    dnnl::pooling_backward::desc desc(dnnl::algorithm::pooling_avg_include_padding, md.x, md.y, md.strides, md.kernel, md.pad, md.pad);
    return dnnl::primitive(dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(desc, engine(), fwd_pd)));
  });
  execute(bwd, {{DNNL_ARG_DIFF_DST, wrap(md.y, dy)}, {DNNL_ARG_DIFF_SRC, wrap(md.x, dx)}});
}

}  // namespace nns::backend::cpu::fast
