// The CPU backend: maps every graph node kind (forward and backward) onto
// the kernel library (kernels.h), fast or reference.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <algorithm>
#include <unordered_map>

#include "backend/runtime/backend.h"
#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/node_call.h"

namespace nns::backend {
namespace {

using sema::Attr;
using sema::OpNode;
using sema::Shape;
namespace ref = cpu::ref;
namespace fast = cpu::fast;

// Everything a node's kernel wrapper needs: the node (node_call.h) and how
// this backend runs it.
struct Call : NodeCall {
  bool reference;
  int64_t step;
  Precision precision;  // BF16 / F16: the matrix products' operands rounded to bfloat16 / binary16
};

#define KERNEL(name) (c.reference ? &ref::name : &fast::name)
// The matrix products honour the backend's precision.
#define MATMUL_KERNEL(name) \
  (c.precision == Precision::BF16 ? KERNEL(name##_bf16) : c.precision == Precision::F16 ? KERNEL(name##_fp16) : KERNEL(name))

int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + static_cast<int64_t>(rank) : a; }

void copy(const TensorView& src, const TensorView& dst) {
  std::memcpy(dst.data, src.data, static_cast<size_t>(src.numel() * sema::dtype_bytes(src.dtype)));
}

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
void linear_fwd(const Call& c) {
  int64_t k = c.in[0].shape.back(), n = c.in[1].shape[0];
  const float* bias = c.in.size() > 2 ? c.in[2].f32() : nullptr;
  MATMUL_KERNEL(linear)(c.in[0].f32(), c.in[1].f32(), bias, c.out[0].f32(), c.in[0].numel() / k, k, n);
}
void linear_bwd(const Call& c) {
  int64_t k = c.x(0).shape.back(), n = c.x(1).shape[0];
  float* dbias = c.fwd_inputs() > 2 ? c.dx(2) : nullptr;
  MATMUL_KERNEL(linear_backward)(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32(), c.dx(0), c.dx(1), dbias, c.x(0).numel() / k, k, n);
}

// ---- elementwise ----------------------------------------------------------------------
cpu::BinaryOp binary_kind(const std::string& k) {
  static const std::unordered_map<std::string, cpu::BinaryOp> kinds = {
      {"add", cpu::BinaryOp::add}, {"sub", cpu::BinaryOp::sub}, {"mul", cpu::BinaryOp::mul}, {"div", cpu::BinaryOp::div},
      {"maximum", cpu::BinaryOp::maximum}, {"minimum", cpu::BinaryOp::minimum},
      {"eq", cpu::BinaryOp::eq}, {"ne", cpu::BinaryOp::ne}, {"lt", cpu::BinaryOp::lt},
      {"le", cpu::BinaryOp::le}, {"gt", cpu::BinaryOp::gt}, {"ge", cpu::BinaryOp::ge}};
  return kinds.at(k);
}
std::string base_kind(const OpNode& n) {
  const std::string suffix = "_backward";
  if (n.kind.size() > suffix.size() && n.kind.compare(n.kind.size() - suffix.size(), suffix.size(), suffix) == 0)
    return n.kind.substr(0, n.kind.size() - suffix.size());
  return n.kind;
}
void binary_fwd(const Call& c) {
  const Shape& a = c.in[0].shape;
  const Shape& b = c.in[1].shape;
  KERNEL(binary)(binary_kind(c.node.kind), c.in[0].f32(), static_cast<int>(a.size()), a.data(), c.in[1].f32(),
                 static_cast<int>(b.size()), b.data(), c.out[0].f32());
}
void binary_bwd(const Call& c) {
  const Shape& a = c.x(0).shape;
  const Shape& b = c.x(1).shape;
  KERNEL(binary_backward)(binary_kind(base_kind(c.node)), c.x(0).f32(), static_cast<int>(a.size()), a.data(), c.x(1).f32(),
                          static_cast<int>(b.size()), b.data(), c.dy(0).f32(), c.dx(0), c.dx(1));
}
void add_scalar_fwd(const Call& c) {
  float s = static_cast<float>(c.attr_float("s", 0));
  const float* x = c.in[0].f32();
  float* y = c.out[0].f32();
  for (int64_t i = 0, n = c.in[0].numel(); i < n; ++i) y[i] = x[i] + s;
}
void identity_bwd(const Call& c) {
  if (float* dx = c.dx(0)) std::memcpy(dx, c.dy(0).f32(), sizeof(float) * c.dy(0).numel());
}
void mul_scalar_fwd(const Call& c) {
  KERNEL(scale)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("s", 1)));
}
void mul_scalar_bwd(const Call& c) {
  if (float* dx = c.dx(0)) KERNEL(scale_backward)(c.dy(0).f32(), dx, c.dy(0).numel(), static_cast<float>(c.attr_float("s", 1)));
}
cpu::Activation act_kind(const std::string& k) {
  static const std::unordered_map<std::string, cpu::Activation> kinds = {
      {"gelu", cpu::Activation::gelu_erf},  // PyTorch's nn.GELU default (exact)
      {"relu", cpu::Activation::relu}, {"sigmoid", cpu::Activation::sigmoid}, {"tanh", cpu::Activation::tanh},
      {"silu", cpu::Activation::silu}, {"exp", cpu::Activation::exp}, {"log", cpu::Activation::log},
      {"sqrt", cpu::Activation::sqrt}, {"rsqrt", cpu::Activation::rsqrt}, {"abs", cpu::Activation::abs},
      {"neg", cpu::Activation::neg}, {"sin", cpu::Activation::sin}, {"cos", cpu::Activation::cos},
      {"pow_scalar", cpu::Activation::pow}};
  return kinds.at(k);
}
// pow_scalar's exponent is its attr `p`; the other functions take none.
void act_fwd(const Call& c) {
  KERNEL(activation)(act_kind(c.node.kind), c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("p", 0)));
}
void act_bwd(const Call& c) {
  if (float* dx = c.dx(0))
    KERNEL(activation_backward)(act_kind(base_kind(c.node)), c.x(0).f32(), c.dy(0).f32(), dx, c.x(0).numel(),
                                static_cast<float>(c.attr_float("p", 0)));
}
// where(cond, a, b): three broadcast operands; cond gets no gradient.
void where_fwd(const Call& c) {
  const Shape& sc = c.in[0].shape;
  const Shape& sa = c.in[1].shape;
  const Shape& sb = c.in[2].shape;
  KERNEL(where)(c.in[0].f32(), static_cast<int>(sc.size()), sc.data(), c.in[1].f32(), static_cast<int>(sa.size()), sa.data(),
                c.in[2].f32(), static_cast<int>(sb.size()), sb.data(), c.out[0].f32());
}
void where_bwd(const Call& c) {
  const Shape& sc = c.x(0).shape;
  const Shape& sa = c.x(1).shape;
  const Shape& sb = c.x(2).shape;
  if (float* dcond = c.dx(0)) std::memset(dcond, 0, sizeof(float) * c.x(0).numel());
  KERNEL(where_backward)(c.x(0).f32(), static_cast<int>(sc.size()), sc.data(), static_cast<int>(sa.size()), sa.data(),
                         static_cast<int>(sb.size()), sb.data(), c.dy(0).f32(), c.dx(1), c.dx(2));
}
// Dropout masks depend on (seed, step, element): never on threads or ranks.
uint64_t dropout_seed(const Call& c) { return static_cast<uint64_t>(c.attr_int("seed")) * 1000003ULL + static_cast<uint64_t>(c.step); }
void dropout_fwd(const Call& c) {
  // element_offset: where a sub-op's slice starts in the full tensor (per-rank lowering).
  KERNEL(dropout)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("p", 0)), dropout_seed(c),
                  static_cast<uint64_t>(c.attr_int_or("element_offset", 0)));
}
void dropout_bwd(const Call& c) {
  if (float* dx = c.dx(0))
    KERNEL(dropout_backward)(c.dy(0).f32(), dx, c.dy(0).numel(), static_cast<float>(c.attr_float("p", 0)), dropout_seed(c),
                             static_cast<uint64_t>(c.attr_int_or("element_offset", 0)));
}

// ---- normalisation ------------------------------------------------------------------------
void softmax_fwd(const Call& c) {
  int64_t cols = c.in[0].shape.back();
  if (c.node.kind == "softmax") KERNEL(softmax)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel() / cols, cols);
  else KERNEL(log_softmax)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel() / cols, cols);
}
void softmax_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t cols = c.x(0).shape.back(), rows = c.x(0).numel() / cols;
  if (base_kind(c.node) == "softmax") KERNEL(softmax_backward)(c.y(0).f32(), c.dy(0).f32(), dx, rows, cols);
  else KERNEL(log_softmax_backward)(c.y(0).f32(), c.dy(0).f32(), dx, rows, cols);
}
void layer_norm_fwd(const Call& c) {
  int64_t cols = c.in[0].shape.back();
  KERNEL(layer_norm)(c.in[0].f32(), c.in[1].f32(), c.in[2].f32(), c.out[0].f32(), nullptr, nullptr, c.in[0].numel() / cols, cols,
                     static_cast<float>(c.attr_float("eps", 1e-5)));
}
void layer_norm_bwd(const Call& c) {
  int64_t cols = c.x(0).shape.back(), rows = c.x(0).numel() / cols;
  float eps = static_cast<float>(c.attr_float("eps", 1e-5));
  // The forward output does not keep the statistics; recompute them (one
  // cheap pass) instead of storing two extra tensors per layer norm.
  std::vector<float> y(static_cast<size_t>(c.x(0).numel())), mean(rows), rstd(rows);
  KERNEL(layer_norm)(c.x(0).f32(), c.x(1).f32(), c.x(2).f32(), y.data(), mean.data(), rstd.data(), rows, cols, eps);
  KERNEL(layer_norm_backward)(c.x(0).f32(), c.x(1).f32(), mean.data(), rstd.data(), c.dy(0).f32(), c.dx(0), c.dx(1), c.dx(2), rows,
                              cols, eps);
}
void causal_mask_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  int64_t rows = s[s.size() - 2], cols = s.back(), mats = c.in[0].numel() / (rows * cols);
  const float* x = c.in[0].f32();
  float* y = c.out[0].f32();
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t k = (b * rows + i) * cols + j;
        y[k] = j > i ? -INFINITY : x[k];
      }
}
void causal_mask_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  int64_t rows = s[s.size() - 2], cols = s.back(), mats = c.x(0).numel() / (rows * cols);
  const float* dy = c.dy(0).f32();
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t k = (b * rows + i) * cols + j;
        dx[k] = j > i ? 0.f : dy[k];
      }
}

// ---- lookups -----------------------------------------------------------------------------
// embedding(ids, table) and index_select(table, idx) are the same row gather.
void gather_fwd(const Call& c) {
  bool emb = c.node.kind == "embedding";
  const TensorView& table = emb ? c.in[1] : c.in[0];
  const TensorView& ids = emb ? c.in[0] : c.in[1];
  int64_t vocab = table.shape[0], dim = table.numel() / vocab;
  // A vocab-split sub-op holds rows [vocab_offset, vocab_offset + vocab) of
  // a table of vocab_size rows; ids it does not hold give zero rows.
  int64_t offset = c.attr_int_or("vocab_offset", 0), full = c.attr_int_or("vocab_size", vocab);
  for (int64_t i = 0, n = ids.numel(); i < n; ++i)
    if (ids.i32()[i] < 0 || ids.i32()[i] >= full)
      throw RuntimeError("node " + c.node.name + ": index " + std::to_string(ids.i32()[i]) + " out of range [0, " + std::to_string(full) + ")");
  KERNEL(embedding)(table.f32(), ids.i32(), c.out[0].f32(), ids.numel(), vocab, dim, offset);
}
void gather_bwd(const Call& c) {
  bool emb = base_kind(c.node) == "embedding";
  size_t ti = emb ? 1 : 0;
  float* dtable = c.dx(ti);
  if (!dtable) return;
  const TensorView& table = c.x(ti);
  const TensorView& ids = c.x(emb ? 0 : 1);
  int64_t vocab = table.shape[0], dim = table.numel() / vocab;
  std::memset(dtable, 0, sizeof(float) * table.numel());
  KERNEL(embedding_backward)(ids.i32(), c.dy(0).f32(), dtable, ids.numel(), vocab, dim, c.attr_int_or("vocab_offset", 0));
}

// ---- reductions ------------------------------------------------------------------------------
void reduce_dims(const Call& c, const Shape& x, int64_t& outer, int64_t& len, int64_t& inner) {
  int64_t d = norm_axis(c.attr_int("dim"), x.size());
  outer = prod(x, 0, d);
  len = x[d];
  inner = prod(x, d + 1, x.size());
}
void reduce_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  KERNEL(reduce)(c.node.kind == "sum" ? cpu::Reduction::sum : cpu::Reduction::mean, c.in[0].f32(), c.out[0].f32(), outer, len, inner);
}
void reduce_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  KERNEL(reduce_backward)(base_kind(c.node) == "sum" ? cpu::Reduction::sum : cpu::Reduction::mean, c.dy(0).f32(), dx, outer, len, inner);
}

// amax / amin / argmax over attr `dim`: the extreme's value, or its index (int32).
cpu::Extreme extreme_kind(const std::string& k) { return k == "amin" ? cpu::Extreme::min : cpu::Extreme::max; }
void extreme_fwd(const Call& c) {
  int64_t outer, len, inner;
  reduce_dims(c, c.in[0].shape, outer, len, inner);
  bool index = c.node.kind == "argmax";
  KERNEL(reduce_extreme)(extreme_kind(c.node.kind), c.in[0].f32(), index ? nullptr : c.out[0].f32(), index ? c.out[0].i32() : nullptr,
                         outer, len, inner);
}
void extreme_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  reduce_dims(c, c.x(0).shape, outer, len, inner);
  KERNEL(reduce_extreme_backward)(c.x(0).f32(), c.y(0).f32(), c.dy(0).f32(), dx, outer, len, inner);
}

// ---- constants --------------------------------------------------------------------------------------
// full(shape, value), zeros_like(x), ones_like(x) and arange(n).
void fill_value_fwd(const Call& c) {
  const std::string& k = c.node.kind;
  float v = k == "zeros_like" ? 0.f : k == "ones_like" ? 1.f : static_cast<float>(c.attr_float("value", 0));
  KERNEL(fill)(c.out[0].f32(), c.out[0].numel(), v);
}
void arange_fwd(const Call& c) { KERNEL(arange)(c.out[0].f32(), c.out[0].numel()); }

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

// ---- data movement ------------------------------------------------------------------------------
void reshape_fwd(const Call& c) { copy(c.in[0], c.out[0]); }
std::vector<int> permutation(const Call& c, size_t rank) {
  std::vector<int> perm(rank);
  std::string k = base_kind(c.node);
  if (k == "transpose") {
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int>(i);
    std::swap(perm[norm_axis(c.attr_int("dim0"), rank)], perm[norm_axis(c.attr_int("dim1"), rank)]);
  } else {
    std::vector<int64_t> dims = c.attr_ints("dims");
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int>(norm_axis(dims[i], rank));
  }
  return perm;
}
void permute_fwd(const Call& c) {
  const Shape& s = c.in[0].shape;
  std::vector<int> perm = permutation(c, s.size());
  KERNEL(permute)(c.in[0].f32(), c.out[0].f32(), static_cast<int>(s.size()), s.data(), perm.data());
}
void permute_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  const Shape& s = c.x(0).shape;
  std::vector<int> perm = permutation(c, s.size());
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

// ---- losses ---------------------------------------------------------------------------------------
void cross_entropy_fwd(const Call& c) {
  int64_t classes = c.in[0].shape.back(), rows = c.in[0].numel() / classes;
  for (int64_t i = 0; i < rows; ++i)
    if (c.in[1].i32()[i] < 0 || c.in[1].i32()[i] >= classes)
      throw RuntimeError("cross_entropy: target " + std::to_string(c.in[1].i32()[i]) + " out of range [0, " + std::to_string(classes) + ")");
  c.out[0].f32()[0] = KERNEL(cross_entropy)(c.in[0].f32(), c.in[1].i32(), rows, classes);
}
void cross_entropy_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t classes = c.x(0).shape.back(), rows = c.x(0).numel() / classes;
  KERNEL(cross_entropy_backward)(c.x(0).f32(), c.x(1).i32(), c.dy(0).f32()[0], dx, rows, classes);
}
void mse_fwd(const Call& c) { c.out[0].f32()[0] = KERNEL(mse)(c.in[0].f32(), c.in[1].f32(), c.in[0].numel()); }
void mse_bwd(const Call& c) { KERNEL(mse_backward)(c.x(0).f32(), c.x(1).f32(), c.dy(0).f32()[0], c.dx(0), c.dx(1), c.x(0).numel()); }

// ---- constants (Swin) -------------------------------------------------------------------------------
// relative_position_index of Swin: (dh + w - 1) * (2w - 1) + (dw + w - 1).
void swin_relative_index_fwd(const Call& c) {
  int64_t w = c.attr_int("window"), n = w * w;
  int32_t* out = c.out[0].i32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t dh = i / w - j / w + w - 1, dw = i % w - j % w + w - 1;
      out[i * n + j] = static_cast<int32_t>(dh * (2 * w - 1) + dw);
    }
}
// Swin's shifted-window attention mask: tokens from different regions of
// the rolled map may not attend to each other (-100, as in the paper's code).
void swin_shift_mask_fwd(const Call& c) {
  int64_t H = c.attr_int("height"), W = c.attr_int("width"), win = c.attr_int("window"), shift = c.attr_int("shift");
  auto region = [&](int64_t p, int64_t size) { return p < size - win ? 0 : (p < size - shift ? 1 : 2); };
  int64_t gw = W / win, n = win * win, nw = (H / win) * gw;
  float* out = c.out[0].f32();
  std::vector<int> label(static_cast<size_t>(n));
  for (int64_t w = 0; w < nw; ++w) {
    for (int64_t t = 0; t < n; ++t) {
      int64_t h = (w / gw) * win + t / win, x = (w % gw) * win + t % win;
      label[t] = region(h, H) * 3 + region(x, W);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) out[(w * n + i) * n + j] = label[i] == label[j] ? 0.f : -100.f;
  }
}

// T5's relative_position_bucket for (query i, key j), relative = j - i.
// Bidirectional: half the buckets for keys after the query. In each
// direction the first half of the buckets are exact distances, the rest
// grow logarithmically up to max_distance (the last bucket beyond).
void t5_relative_bucket_fwd(const Call& c) {
  int64_t q = c.attr_int("qlen"), k = c.attr_int("klen");
  int64_t buckets = c.attr_int_or("buckets", 32), dist = c.attr_int_or("max_distance", 128);
  auto bi = c.node.attrs.find("bidirectional");
  bool bidirectional = bi == c.node.attrs.end() || (std::holds_alternative<bool>(bi->second) ? std::get<bool>(bi->second) : c.attr_int("bidirectional") != 0);
  int64_t per_side = bidirectional ? buckets / 2 : buckets, exact = per_side / 2;
  int32_t* out = c.out[0].i32();
  for (int64_t i = 0; i < q; ++i)
    for (int64_t j = 0; j < k; ++j) {
      int64_t rel = j - i, base = 0, n;
      if (bidirectional) {
        if (rel > 0) base = per_side;
        n = rel < 0 ? -rel : rel;
      } else {
        n = rel < 0 ? -rel : 0;
      }
      int64_t b = n;
      if (n >= exact) {
        double scaled = std::log(static_cast<double>(n) / exact) / std::log(static_cast<double>(dist) / exact) * (per_side - exact);
        b = std::min<int64_t>(exact + static_cast<int64_t>(scaled), per_side - 1);
      }
      out[i * k + j] = static_cast<int32_t>(base + b);
    }
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

using Fn = void (*)(const Call&);
const std::unordered_map<std::string, Fn>& table() {
  static const std::unordered_map<std::string, Fn> t = {
      {"matmul", matmul_fwd}, {"matmul_backward", matmul_bwd}, {"bmm", matmul_fwd}, {"bmm_backward", matmul_bwd},
      {"linear", linear_fwd}, {"linear_backward", linear_bwd}, {"linear_bias", linear_fwd}, {"linear_bias_backward", linear_bwd},
      {"add", binary_fwd}, {"sub", binary_fwd}, {"mul", binary_fwd}, {"div", binary_fwd},
      {"add_backward", binary_bwd}, {"sub_backward", binary_bwd}, {"mul_backward", binary_bwd}, {"div_backward", binary_bwd},
      {"add_scalar", add_scalar_fwd}, {"add_scalar_backward", identity_bwd},
      {"mul_scalar", mul_scalar_fwd}, {"mul_scalar_backward", mul_scalar_bwd},
      {"gelu", act_fwd}, {"relu", act_fwd}, {"sigmoid", act_fwd}, {"tanh", act_fwd},
      {"gelu_backward", act_bwd}, {"relu_backward", act_bwd}, {"sigmoid_backward", act_bwd}, {"tanh_backward", act_bwd},
      {"silu", act_fwd}, {"exp", act_fwd}, {"log", act_fwd}, {"sqrt", act_fwd}, {"rsqrt", act_fwd}, {"abs", act_fwd},
      {"neg", act_fwd}, {"sin", act_fwd}, {"cos", act_fwd}, {"pow_scalar", act_fwd},
      {"silu_backward", act_bwd}, {"exp_backward", act_bwd}, {"log_backward", act_bwd}, {"sqrt_backward", act_bwd},
      {"rsqrt_backward", act_bwd}, {"abs_backward", act_bwd}, {"neg_backward", act_bwd}, {"sin_backward", act_bwd},
      {"cos_backward", act_bwd}, {"pow_scalar_backward", act_bwd},
      {"maximum", binary_fwd}, {"minimum", binary_fwd}, {"maximum_backward", binary_bwd}, {"minimum_backward", binary_bwd},
      {"eq", binary_fwd}, {"ne", binary_fwd}, {"lt", binary_fwd}, {"le", binary_fwd}, {"gt", binary_fwd}, {"ge", binary_fwd},
      {"where", where_fwd}, {"where_backward", where_bwd},
      {"dropout", dropout_fwd}, {"dropout_backward", dropout_bwd},
      {"softmax", softmax_fwd}, {"log_softmax", softmax_fwd}, {"softmax_backward", softmax_bwd}, {"log_softmax_backward", softmax_bwd},
      {"layer_norm", layer_norm_fwd}, {"layer_norm_backward", layer_norm_bwd},
      {"causal_mask", causal_mask_fwd}, {"causal_mask_backward", causal_mask_bwd},
      {"embedding", gather_fwd}, {"embedding_backward", gather_bwd}, {"index_select", gather_fwd}, {"index_select_backward", gather_bwd},
      {"sum", reduce_fwd}, {"mean", reduce_fwd}, {"sum_backward", reduce_bwd}, {"mean_backward", reduce_bwd},
      {"amax", extreme_fwd}, {"amin", extreme_fwd}, {"argmax", extreme_fwd}, {"amax_backward", extreme_bwd}, {"amin_backward", extreme_bwd},
      {"full", fill_value_fwd}, {"zeros_like", fill_value_fwd}, {"ones_like", fill_value_fwd}, {"arange", arange_fwd},
      {"reshape", reshape_fwd}, {"view", reshape_fwd}, {"reshape_backward", identity_bwd}, {"view_backward", identity_bwd},
      {"permute", permute_fwd}, {"transpose", permute_fwd}, {"permute_backward", permute_bwd}, {"transpose_backward", permute_bwd},
      {"roll", roll_fwd}, {"roll_backward", roll_bwd}, {"pad", pad_fwd}, {"pad_backward", pad_bwd},
      {"concat", concat_fwd}, {"concat_backward", concat_bwd}, {"split", split_fwd}, {"chunk", split_fwd},
      {"split_backward", split_bwd}, {"chunk_backward", split_bwd},
      {"conv2d", conv_fwd}, {"conv2d_bias", conv_fwd}, {"conv2d_backward", conv_bwd}, {"conv2d_bias_backward", conv_bwd},
      {"max_pool2d", max_pool_fwd}, {"max_pool2d_backward", max_pool_bwd}, {"avg_pool2d", avg_pool_fwd}, {"avg_pool2d_backward", avg_pool_bwd},
      {"cross_entropy", cross_entropy_fwd}, {"cross_entropy_backward", cross_entropy_bwd},
      {"mse", mse_fwd}, {"mse_backward", mse_bwd},
      {"swin_relative_index", swin_relative_index_fwd}, {"swin_shift_mask", swin_shift_mask_fwd},
      {"t5_relative_bucket", t5_relative_bucket_fwd}, {"detach", reshape_fwd},
      {"cumsum", cumsum_fwd}, {"cumsum_backward", cumsum_bwd}, {"topk", topk_fwd}, {"topk_backward", topk_bwd},
      {"gather", gather_dim_fwd}, {"gather_backward", gather_dim_bwd}, {"scatter_add", scatter_add_fwd},
      {"scatter_add_backward", scatter_add_bwd}, {"to_f32", to_f32_fwd}, {"to_f32_backward", identity_bwd}, {"to_i32", to_i32_fwd},
      {"fill", fill_fwd}, {"add_n", add_n_fwd},
  };
  return t;
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(bool reference) : reference_(reference) {}
  std::string name() const override { return reference_ ? "cpu-reference" : "cpu"; }

  // Freed blocks are kept by size and reused: a training step frees and
  // allocates the same sizes every step, and fresh pages cost page faults.
  void* allocate(size_t bytes) override {
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = nullptr;
    auto it = pool_.find(rounded);
    if (it != pool_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      p = std::aligned_alloc(64, rounded);
      if (!p) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
    std::memset(p, 0, rounded);
    track_alloc(static_cast<int64_t>(bytes));
    return p;
  }
  void release(void* p, size_t bytes) override {
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    pool_[rounded].push_back(p);
    track_free(static_cast<int64_t>(bytes));
  }
  ~CpuBackend() override {
    for (auto& [size, blocks] : pool_)
      for (void* p : blocks) std::free(p);
  }
  bool host_memory() const override { return true; }
  void copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale) override {
    host_copy_box(dst, src, box, add, scale);
  }
  void fill(void* dst, int64_t count, float value) override {
    float* d = static_cast<float*>(dst);
    std::fill(d, d + count, value);
  }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  bool has_kernel(const std::string& kind) const override { return table().count(kind) > 0; }
  void run_node(const sema::Graph&, const OpNode& n, const std::vector<TensorView>& in, const std::vector<TensorView>& out) override {
    auto it = table().find(n.kind);
    if (it == table().end()) throw RuntimeError("the CPU backend has no kernel for '" + n.kind + "' (node " + n.name + ")");
    it->second(Call{{n, in, out}, reference_, step(), precision()});
  }

  double sum_of_squares(const std::vector<TensorView>& grads) override {
    std::vector<const float*> ptrs;
    std::vector<int64_t> sizes;
    for (const TensorView& t : grads) { ptrs.push_back(t.f32()); sizes.push_back(t.numel()); }
    return cpu::ref::sum_of_squares(ptrs.data(), sizes.data(), static_cast<int>(ptrs.size()));
  }
  void scale(const TensorView& t, float alpha) override {
    if (alpha == 0.f) {  // zero-fill (backend.h): an inf left by a skipped fp16 step must not become NaN
      std::memset(t.data, 0, static_cast<size_t>(t.numel()) * sizeof(float));
      return;
    }
    cpu::fast::scale(t.f32(), t.f32(), t.numel(), alpha);
  }
  void axpy(const TensorView& y, const TensorView& x, float alpha) override {
    float* py = y.f32();
    const float* px = x.f32();
    for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] += alpha * px[i];
  }
  void sgd_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float momentum,
                  float weight_decay) override {
    float* buf = state.buffers.empty() ? nullptr : state.buffers[0].f32();
    if (reference_) cpu::ref::sgd_step(param.f32(), grad.f32(), buf, param.numel(), lr, momentum, weight_decay);
    else cpu::fast::sgd_step(param.f32(), grad.f32(), buf, param.numel(), lr, momentum, weight_decay);
  }
  void adamw_update(const TensorView& param, const TensorView& grad, OptimizerState& state, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t step) override {
    if (reference_)
      cpu::ref::adamw_step(param.f32(), grad.f32(), state.buffers[0].f32(), state.buffers[1].f32(), param.numel(), lr, beta1, beta2, eps,
                           weight_decay, step);
    else
      cpu::fast::adamw_step(param.f32(), grad.f32(), state.buffers[0].f32(), state.buffers[1].f32(), param.numel(), lr, beta1, beta2,
                            eps, weight_decay, step);
  }
  void set_threads(int n) override { cpu::set_threads(n); }

 protected:
  void upload(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { std::memcpy(host, src, bytes); }

 private:
  bool reference_;
  std::unordered_map<size_t, std::vector<void*>> pool_;
};

}  // namespace

bool parse_precision(const std::string& text, Precision& out) {
  if (text == "fp32") out = Precision::F32;
  else if (text == "bf16") out = Precision::BF16;
  else if (text == "fp16") out = Precision::F16;
  else return false;
  return true;
}

std::unique_ptr<Backend> make_cpu_backend(bool reference) { return std::make_unique<CpuBackend>(reference); }

}  // namespace nns::backend
