// CPU kernel wrappers: reshape, permute, roll, pad, concat, split. Registered by node kind through register_layout_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- data movement ------------------------------------------------------------------------------
void reshape_fwd(const Call& c) { copy(c.in[0], c.out[0]); }
void permute_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  std::vector<int> perm = c.permutation(s.size());
  KERNEL(permute)(c.in[0].f32(), c.out[0].f32(), static_cast<int>(s.size()), s.data(), perm.data());
}
void permute_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  std::vector<int> perm = c.permutation(s.size());
  KERNEL(permute_backward)(c.dy(0).f32(), dx, static_cast<int>(s.size()), s.data(), perm.data());
}
void roll_args(const Call& c, size_t rank, std::vector<int64_t>& shifts, std::vector<int>& dims) {
  shifts = c.attr_ints("shifts");
  for (int64_t d : c.attr_ints("dims")) dims.push_back(static_cast<int>(norm_axis(d, rank)));
}
void roll_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  std::vector<int64_t> shifts;
  std::vector<int> dims;
  roll_args(c, s.size(), shifts, dims);
  KERNEL(roll)(c.in[0].f32(), c.out[0].f32(), static_cast<int>(s.size()), s.data(), static_cast<int>(dims.size()), shifts.data(), dims.data());
}
void roll_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  std::vector<int64_t> shifts;
  std::vector<int> dims;
  roll_args(c, s.size(), shifts, dims);
  KERNEL(roll_backward)(c.dy(0).f32(), dx, static_cast<int>(s.size()), s.data(), static_cast<int>(dims.size()), shifts.data(), dims.data());
}
void pad_args(const Call& c, size_t rank, std::vector<int64_t>& before, std::vector<int64_t>& after) {
  std::vector<int64_t> pads = c.attr_ints("pads");
  for (size_t i = 0; i < rank; ++i) {
    before.push_back(pads[2 * i]);
    after.push_back(pads[2 * i + 1]);
  }
}
void pad_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  std::vector<int64_t> before, after;
  pad_args(c, s.size(), before, after);
  KERNEL(pad)(c.in[0].f32(), c.out[0].f32(), static_cast<int>(s.size()), s.data(), before.data(), after.data());
}
void pad_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  std::vector<int64_t> before, after;
  pad_args(c, s.size(), before, after);
  KERNEL(pad_backward)(c.dy(0).f32(), dx, static_cast<int>(s.size()), s.data(), before.data(), after.data());
}
// concat: inputs are the pieces; split/chunk: outputs are the pieces.
void pieces_geometry(const Shape& whole, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = prod(whole, 0, dim);
  inner = prod(whole, dim + 1, whole.size());
}
void concat_fwd(const Call& c) {
  const Shape& s = c.out[0].shape;
  int64_t dim = norm_axis(c.attr_int("dim"), s.size()), outer, inner;
  pieces_geometry(s, dim, outer, inner);
  std::vector<const float*> ptrs;
  std::vector<int64_t> sizes;
  for (const TensorView& t : c.in) { ptrs.push_back(t.f32()); sizes.push_back(t.shape[dim]); }
  KERNEL(concat)(ptrs.data(), static_cast<int>(ptrs.size()), sizes.data(), outer, inner, c.out[0].f32());
}
void concat_bwd(const Call& c) {
  size_t k = c.fwd_inputs();
  const Shape& s = c.y(0).shape;
  int64_t dim = norm_axis(c.attr_int("dim"), s.size()), outer, inner;
  pieces_geometry(s, dim, outer, inner);
  std::vector<float*> ptrs;
  std::vector<int64_t> sizes;
  std::vector<std::vector<float>> scratch;
  for (size_t i = 0; i < k; ++i) {
    sizes.push_back(c.x(i).shape[dim]);
    float* p = c.dx(i);
    if (!p) { scratch.emplace_back(static_cast<size_t>(c.x(i).numel())); p = scratch.back().data(); }
    ptrs.push_back(p);
  }
  KERNEL(concat_backward)(c.dy(0).f32(), ptrs.data(), static_cast<int>(k), sizes.data(), outer, inner);
}
void split_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  int64_t dim = norm_axis(c.attr_int("dim"), s.size()), outer, inner;
  pieces_geometry(s, dim, outer, inner);
  std::vector<float*> ptrs;
  std::vector<int64_t> sizes;
  for (const TensorView& t : c.out) { ptrs.push_back(t.f32()); sizes.push_back(t.shape[dim]); }
  KERNEL(split)(c.in[0].f32(), ptrs.data(), static_cast<int>(ptrs.size()), sizes.data(), outer, inner);
}
void split_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  int64_t dim = norm_axis(c.attr_int("dim"), s.size()), outer, inner;
  pieces_geometry(s, dim, outer, inner);
  std::vector<const float*> ptrs;
  std::vector<int64_t> sizes;
  for (size_t j = 0; j < c.fwd_outputs(); ++j) { ptrs.push_back(c.dy(j).f32()); sizes.push_back(c.y(j).shape[dim]); }
  KERNEL(split_backward)(ptrs.data(), static_cast<int>(ptrs.size()), sizes.data(), outer, inner, dx);
}

}  // namespace

void register_layout_kernels(KernelTable& table) {
  table.insert({
      {"reshape", reshape_fwd}, {"view", reshape_fwd}, {"permute", permute_fwd}, {"transpose", permute_fwd},
      {"permute_backward", permute_bwd}, {"transpose_backward", permute_bwd}, {"roll", roll_fwd},
      {"roll_backward", roll_bwd}, {"pad", pad_fwd}, {"pad_backward", pad_bwd}, {"concat", concat_fwd},
      {"concat_backward", concat_bwd}, {"split", split_fwd}, {"chunk", split_fwd}, {"split_backward", split_bwd},
      {"chunk_backward", split_bwd}, {"detach", reshape_fwd},
  });
}

}  // namespace nns::backend::cpu_ops
