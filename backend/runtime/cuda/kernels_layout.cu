// Layout rows on the device: reshape/view (a copy), permute/transpose,
// roll, pad, concat, split/chunk, forward and backward, with the contracts
// of the CPU backend's node wrappers (cpu_backend.cpp) and cpu::ref. Every
// kernel is one index per element of the tensor it writes, reading the
// element it maps to: pure data movement, so results are bit-identical to
// the reference.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/launch.h"

namespace nns::backend::NNS_DEV {

namespace layout {

// Dims and strides captured by value into a kernel (the rank is bounded by
// cpu::kMaxRank, 6, which the language's shape checks enforce).
constexpr int kMaxDims = 6;
struct Dims {
  int rank = 0;
  int64_t d[kMaxDims] = {};
};

// out[i] = in[sum_k coord_k(i) * in_stride[k]], coord in out_dims
// (row-major): permute in both directions is this gather.
void strided_gather(const float* in, float* out, Dims out_dims, Dims in_stride, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) {
    int64_t rest = i, off = 0;
    for (int k = out_dims.rank - 1; k >= 0; --k) {
      int64_t c = rest % out_dims.d[k];
      rest /= out_dims.d[k];
      off += c * in_stride.d[k];
    }
    out[i] = in[off];
  });
}

// y[i] = x[coord - shift (mod size) per dim]: roll by `shift` (roll's
// backward passes the negated shifts).
void roll(const float* x, float* y, Dims dims, Dims shift, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) {
    int64_t rest = i, off = 0, stride = 1;
    for (int k = dims.rank - 1; k >= 0; --k) {
      int64_t size = dims.d[k], c = rest % size;
      rest /= size;
      int64_t src = ((c - shift.d[k]) % size + size) % size;
      off += src * stride;
      stride *= size;
    }
    y[i] = x[off];
  });
}

// pad: y [x_dims + before + after] holds x at offset `before`, zeros elsewhere.
void pad(const float* x, float* y, Dims x_dims, Dims y_dims, Dims before, int64_t ny, Stream s) {
  for_each(ny, s, NNS_KERNEL(int64_t i) {
    int64_t rest = i, off = 0, stride = 1;
    bool inside = true;
    for (int k = y_dims.rank - 1; k >= 0; --k) {
      int64_t c = rest % y_dims.d[k] - before.d[k];
      rest /= y_dims.d[k];
      if (c < 0 || c >= x_dims.d[k]) inside = false;
      off += c * stride;
      stride *= x_dims.d[k];
    }
    y[i] = inside ? x[off] : 0.0f;
  });
}

// pad's backward: dx[i] = dy at x's coordinates + before.
void pad_backward(const float* dy, float* dx, Dims x_dims, Dims y_dims, Dims before, int64_t nx, Stream s) {
  for_each(nx, s, NNS_KERNEL(int64_t i) {
    int64_t rest = i, off = 0, stride = 1;
    for (int k = x_dims.rank - 1; k >= 0; --k) {
      int64_t c = rest % x_dims.d[k] + before.d[k];
      rest /= x_dims.d[k];
      off += c * stride;
      stride *= y_dims.d[k];
    }
    dx[i] = dy[off];
  });
}

// One piece [outer, size, inner] at offset `start` along the middle dim of
// the whole [outer, total, inner]: into the whole (concat, split's
// backward) or out of it (split, concat's backward).
void piece_to_whole(const float* piece, float* whole, int64_t outer, int64_t size, int64_t inner, int64_t total, int64_t start,
                    Stream s) {
  for_each(outer * size * inner, s, NNS_KERNEL(int64_t i) {
    int64_t o = i / (size * inner), rest = i % (size * inner);
    whole[o * total * inner + start * inner + rest] = piece[i];
  });
}
void whole_to_piece(const float* whole, float* piece, int64_t outer, int64_t size, int64_t inner, int64_t total, int64_t start,
                    Stream s) {
  for_each(outer * size * inner, s, NNS_KERNEL(int64_t i) {
    int64_t o = i / (size * inner), rest = i % (size * inner);
    piece[i] = whole[o * total * inner + start * inner + rest];
  });
}

}  // namespace layout

namespace {

using layout::Dims;
using sema::Shape;


Dims dims_of(const Shape& s) {
  if (s.size() > static_cast<size_t>(layout::kMaxDims))
    throw RuntimeError("the CUDA backend's layout kernels take tensors of rank <= " + std::to_string(layout::kMaxDims) +
                       ", not " + std::to_string(s.size()));
  Dims d;
  d.rank = static_cast<int>(s.size());
  for (size_t k = 0; k < s.size(); ++k) d.d[k] = s[k];
  return d;
}

Dims row_major_strides(const Dims& dims) {
  Dims st;
  st.rank = dims.rank;
  int64_t stride = 1;
  for (int k = dims.rank - 1; k >= 0; --k) {
    st.d[k] = stride;
    stride *= dims.d[k];
  }
  return st;
}

// reshape / view: the same bytes under another shape.
void reshape_fwd(const Call& c) {
  size_t bytes = static_cast<size_t>(c.in[0].numel() * sema::dtype_bytes(c.in[0].dtype));
  if (bytes) copy_device_async(c.out[0].data, c.in[0].data, bytes, c.stream);
}
void identity_bwd(const Call& c) {
  if (float* dx = c.dx(0))
    if (int64_t n = c.dy(0).numel()) copy_device_async(dx, c.dy(0).f32(), sizeof(float) * static_cast<size_t>(n), c.stream);
}

void permute_fwd(const Call& c) {
  Dims x = dims_of(c.in[0].shape), xs = row_major_strides(x), y, ys;
  std::vector<int> perm = c.permutation(c.in[0].shape.size());
  y.rank = ys.rank = x.rank;
  for (int k = 0; k < x.rank; ++k) {
    y.d[k] = x.d[perm[k]];
    ys.d[k] = xs.d[perm[k]];  // stepping y's dim k steps x's dim perm[k]
  }
  layout::strided_gather(c.in[0].f32(), c.out[0].f32(), y, ys, c.in[0].numel(), c.stream);
}
void permute_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  Dims x = dims_of(c.x(0).shape), y, dy_in_x;
  std::vector<int> perm = c.permutation(c.x(0).shape.size());
  y.rank = dy_in_x.rank = x.rank;
  for (int k = 0; k < x.rank; ++k) y.d[k] = x.d[perm[k]];
  Dims ys = row_major_strides(y);
  for (int k = 0; k < x.rank; ++k) dy_in_x.d[perm[k]] = ys.d[k];  // x's dim perm[k] is dy's dim k
  layout::strided_gather(c.dy(0).f32(), dx, x, dy_in_x, c.x(0).numel(), c.stream);
}

// The net shift per dim (several shifts of one dim add up), reduced mod size.
Dims net_shifts(const Call& c, const Dims& dims, int64_t sign) {
  Dims shift;
  shift.rank = dims.rank;
  std::vector<int64_t> shifts = c.attr_ints("shifts"), roll_dims = c.attr_ints("dims");
  for (size_t s = 0; s < roll_dims.size() && s < shifts.size(); ++s) {
    int64_t k = norm_axis(roll_dims[s], static_cast<size_t>(dims.rank)), size = dims.d[k];
    if (size > 0) shift.d[k] = ((shift.d[k] + sign * (shifts[s] % size)) % size + size) % size;
  }
  return shift;
}
void roll_fwd(const Call& c) {
  Dims d = dims_of(c.in[0].shape);
  layout::roll(c.in[0].f32(), c.out[0].f32(), d, net_shifts(c, d, 1), c.in[0].numel(), c.stream);
}
void roll_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  Dims d = dims_of(c.x(0).shape);
  layout::roll(c.dy(0).f32(), dx, d, net_shifts(c, d, -1), c.x(0).numel(), c.stream);
}

// pads = [before0, after0, before1, after1, ...] over x's dims.
void pad_geometry(const Call& c, const Shape& xs, Dims& x, Dims& y, Dims& before) {
  x = dims_of(xs);
  std::vector<int64_t> pads = c.attr_ints("pads");
  y.rank = before.rank = x.rank;
  for (int k = 0; k < x.rank; ++k) {
    before.d[k] = pads[2 * k];
    y.d[k] = x.d[k] + pads[2 * k] + pads[2 * k + 1];
  }
}
void pad_fwd(const Call& c) {
  Dims x, y, before;
  pad_geometry(c, c.in[0].shape, x, y, before);
  layout::pad(c.in[0].f32(), c.out[0].f32(), x, y, before, c.out[0].numel(), c.stream);
}
void pad_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  Dims x, y, before;
  pad_geometry(c, c.x(0).shape, x, y, before);
  layout::pad_backward(c.dy(0).f32(), dx, x, y, before, c.x(0).numel(), c.stream);
}

// concat: the inputs are the pieces; split / chunk: the outputs are. One
// launch per piece (a handful), each piece's pointer a kernel argument.
struct Pieces {
  int64_t outer = 1, inner = 1, total = 0;
};
Pieces pieces_of(const Shape& whole, int64_t dim) {
  Pieces p;
  for (int64_t k = 0; k < dim; ++k) p.outer *= whole[k];
  for (size_t k = static_cast<size_t>(dim) + 1; k < whole.size(); ++k) p.inner *= whole[k];
  p.total = whole[dim];
  return p;
}
void concat_fwd(const Call& c) {
  int64_t dim = norm_axis(c.attr_int("dim"), c.out[0].shape.size()), start = 0;
  Pieces p = pieces_of(c.out[0].shape, dim);
  for (const TensorView& t : c.in) {
    int64_t size = t.shape[dim];
    layout::piece_to_whole(t.f32(), c.out[0].f32(), p.outer, size, p.inner, p.total, start, c.stream);
    start += size;
  }
}
void concat_bwd(const Call& c) {
  int64_t dim = norm_axis(c.attr_int("dim"), c.y(0).shape.size()), start = 0;
  Pieces p = pieces_of(c.y(0).shape, dim);
  for (size_t i = 0; i < c.fwd_inputs(); ++i) {
    int64_t size = c.x(i).shape[dim];
    if (float* dx = c.dx(i)) layout::whole_to_piece(c.dy(0).f32(), dx, p.outer, size, p.inner, p.total, start, c.stream);
    start += size;
  }
}
void split_fwd(const Call& c) {
  int64_t dim = norm_axis(c.attr_int("dim"), c.in[0].shape.size()), start = 0;
  Pieces p = pieces_of(c.in[0].shape, dim);
  for (const TensorView& t : c.out) {
    int64_t size = t.shape[dim];
    layout::whole_to_piece(c.in[0].f32(), t.f32(), p.outer, size, p.inner, p.total, start, c.stream);
    start += size;
  }
}
void split_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t dim = norm_axis(c.attr_int("dim"), c.x(0).shape.size()), start = 0;
  Pieces p = pieces_of(c.x(0).shape, dim);
  for (size_t j = 0; j < c.fwd_outputs(); ++j) {
    int64_t size = c.y(j).shape[dim];
    layout::piece_to_whole(c.dy(j).f32(), dx, p.outer, size, p.inner, p.total, start, c.stream);
    start += size;
  }
}

}  // namespace

void register_layout_kernels(KernelTable& t) {
  t["reshape"] = reshape_fwd;
  t["view"] = reshape_fwd;
  t["reshape_backward"] = identity_bwd;
  t["view_backward"] = identity_bwd;
  t["permute"] = permute_fwd;
  t["transpose"] = permute_fwd;
  t["permute_backward"] = permute_bwd;
  t["transpose_backward"] = permute_bwd;
  t["roll"] = roll_fwd;
  t["roll_backward"] = roll_bwd;
  t["pad"] = pad_fwd;
  t["pad_backward"] = pad_bwd;
  t["concat"] = concat_fwd;
  t["concat_backward"] = concat_bwd;
  t["split"] = split_fwd;
  t["chunk"] = split_fwd;
  t["split_backward"] = split_bwd;
  t["chunk_backward"] = split_bwd;
}

}  // namespace nns::backend::NNS_DEV
