// Reductions over one dim (sum, mean, amax, amin, argmax) and the
// constructors (full, arange, zeros_like, ones_like) of the CUDA backend.
// A reduction sees its input as [outer, len, inner] around attr `dim` and
// runs one index per output element, looping serially along len in
// increasing order: the arithmetic and order of cpu::ref (ref_tensor.cpp:
// double accumulators, the first extreme, NaN as the extreme), so results
// match the reference bit for bit. Gradients run one index per input
// element (sum, mean) or per output element, writing the len elements of
// its own column (amax, amin: the tied extremes share dy).
#include <string>

#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"
#include "backend/runtime/cuda/launch.h"

// Kernel launchers live in a named namespace: nvcc's extended lambdas
// (NNS_KERNEL) may not sit in functions with internal linkage.
namespace nns::backend::NNS_DEV::reduce {

// y[o, j] = sum (or mean) over l of x[o, l, j].
void sum(bool mean, const float* x, float* y, int64_t outer, int64_t len, int64_t inner, Stream s) {
  for_each(outer * inner, s, NNS_KERNEL(int64_t i) {
    int64_t o = i / inner, j = i % inner;
    const float* col = x + o * len * inner + j;
    double acc = 0;
    for (int64_t l = 0; l < len; ++l) acc += col[l * inner];
    if (mean) acc /= double(len);
    y[i] = float(acc);
  });
}

// dx[o, l, j] = dy[o, j] (divided by len for the mean).
void sum_backward(bool mean, const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner, Stream s) {
  for_each(outer * len * inner, s, NNS_KERNEL(int64_t k) {
    int64_t o = k / (len * inner), j = k % inner;
    double g = dy[o * inner + j];
    if (mean) g /= double(len);
    dx[k] = float(g);
  });
}

// The first maximum (minimum) along len and its position, NaN counting as
// the extreme; either output may be null. len >= 1.
void extreme(bool max, const float* x, float* values, int32_t* indices, int64_t outer, int64_t len, int64_t inner, Stream s) {
  for_each(outer * inner, s, NNS_KERNEL(int64_t i) {
    int64_t o = i / inner, j = i % inner;
    const float* col = x + o * len * inner + j;
    int64_t best = 0;
    double best_v = col[0];
    for (int64_t l = 1; l < len && best_v == best_v; ++l) {
      double v = col[l * inner];
      bool better = v != v || (max ? v > best_v : v < best_v);
      if (better) {
        best = l;
        best_v = v;
      }
    }
    if (values) values[i] = float(best_v);
    if (indices) indices[i] = int32_t(best);
  });
}

// dx: dy shared equally by the elements equal to their column's extreme
// (PyTorch's amax / amin backward), 0 elsewhere; a NaN extreme equals nothing.
void extreme_backward(const float* x, const float* values, const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner,
                      Stream s) {
  for_each(outer * inner, s, NNS_KERNEL(int64_t i) {
    int64_t o = i / inner, j = i % inner;
    const float* col = x + o * len * inner + j;
    float* dcol = dx + o * len * inner + j;
    float v = values[i];
    int64_t ties = 0;
    for (int64_t l = 0; l < len; ++l) ties += col[l * inner] == v;
    double share = ties > 0 ? double(dy[i]) / double(ties) : 0.0;
    for (int64_t l = 0; l < len; ++l) dcol[l * inner] = col[l * inner] == v ? float(share) : 0.0f;
  });
}

// y[i] = i (exact up to 2^24).
void arange(float* y, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = float(double(i)); });
}

}  // namespace nns::backend::NNS_DEV::reduce

namespace nns::backend::NNS_DEV {

namespace {

// x as [outer, len, inner] around attr `dim` (negative: from the end), as
// the CPU backend's reduce_dims.
struct Dims {
  int64_t outer = 1, len = 1, inner = 1;
};
Dims reduce_dims(const Call& c, const sema::Shape& x) {
  int64_t rank = static_cast<int64_t>(x.size()), d = c.attr_int("dim");
  if (d < 0) d += rank;
  if (d < 0 || d >= rank) throw RuntimeError("node " + c.node.name + ": dim " + std::to_string(c.attr_int("dim")) + " out of range for rank " +
                                             std::to_string(rank));
  Dims r;
  for (int64_t i = 0; i < d; ++i) r.outer *= x[static_cast<size_t>(i)];
  r.len = x[static_cast<size_t>(d)];
  for (int64_t i = d + 1; i < rank; ++i) r.inner *= x[static_cast<size_t>(i)];
  return r;
}

void sum_fwd(const Call& c) {
  Dims d = reduce_dims(c, c.in[0].shape);
  reduce::sum(c.node.kind == "mean", c.in[0].f32(), c.out[0].f32(), d.outer, d.len, d.inner, c.stream);
}
void sum_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  Dims d = reduce_dims(c, c.x(0).shape);
  reduce::sum_backward(c.base_kind() == "mean", c.dy(0).f32(), dx, d.outer, d.len, d.inner, c.stream);
}

// amax / amin: the extreme's value; argmax: its index (int32).
void extreme_fwd(const Call& c) {
  Dims d = reduce_dims(c, c.in[0].shape);
  if (d.len == 0 && d.outer * d.inner > 0) throw RuntimeError("node " + c.node.name + ": " + c.node.kind + " over an empty dim");
  bool index = c.node.kind == "argmax";
  reduce::extreme(c.node.kind != "amin", c.in[0].f32(), index ? nullptr : c.out[0].f32(), index ? c.out[0].i32() : nullptr, d.outer, d.len,
                  d.inner, c.stream);
}
void extreme_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  Dims d = reduce_dims(c, c.x(0).shape);
  reduce::extreme_backward(c.x(0).f32(), c.y(0).f32(), c.dy(0).f32(), dx, d.outer, d.len, d.inner, c.stream);
}

// full(shape, value), zeros_like(x), ones_like(x) and arange(n).
void fill_value_fwd(const Call& c) {
  const std::string& k = c.node.kind;
  float v = k == "zeros_like" ? 0.f : k == "ones_like" ? 1.f : static_cast<float>(c.attr_float("value", 0));
  kernels::fill(c.out[0].f32(), c.out[0].numel(), v, c.stream);
}
void arange_fwd(const Call& c) { reduce::arange(c.out[0].f32(), c.out[0].numel(), c.stream); }

}  // namespace

void register_reduce_kernels(KernelTable& t) {
  for (const char* k : {"sum", "mean"}) {
    t[k] = sum_fwd;
    t[std::string(k) + "_backward"] = sum_bwd;
  }
  for (const char* k : {"amax", "amin"}) {
    t[k] = extreme_fwd;
    t[std::string(k) + "_backward"] = extreme_bwd;
  }
  t["argmax"] = extreme_fwd;
  for (const char* k : {"full", "zeros_like", "ones_like"}) t[k] = fill_value_fwd;
  t["arange"] = arange_fwd;
}

}  // namespace nns::backend::NNS_DEV
