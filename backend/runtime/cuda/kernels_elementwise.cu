// Elementwise node kinds of the CUDA backend: the unary functions
// (activations and math, add_scalar, mul_scalar, detach), the broadcasting
// binaries and comparisons, where, and the casts to_f32 / to_i32. Forward
// kernels run one index per output element; a broadcast gradient runs one
// index per gradient element, which loops over the output elements that
// were broadcast from it, in output order. The arithmetic is cpu::ref's
// (ref_nn.cpp, ref_tensor.cpp, ref_index.cpp): each value in double,
// rounded to float once, and gradients summed in double in the order ref
// sums them, so the two agree within the conformance tolerances (mostly
// bit for bit).
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/runtime/cpu/kernels.h"  // Activation, BinaryOp, broadcast_shape: the CPU backend's op and shape rules
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"
#include "backend/runtime/cuda/launch.h"

// Kernel launchers live in a named namespace: nvcc's extended lambdas
// (NNS_KERNEL) may not sit in functions with internal linkage.
namespace nns::backend::NNS_DEV::elementwise {

using cpu::Activation;
using cpu::BinaryOp;

constexpr int kMaxRank = cpu::kMaxRank;
// Slot 0 is the broadcast output (or its gradient), slots 1..3 the operands.
constexpr int kSlots = 4;

// How the indices of one tensor (the "target": the output, or an operand
// whose gradient is summed) walk a broadcast: the output dims the target
// spans ("kept": unravelled from the target's flat index) and those it was
// broadcast along ("reduced": looped over for each target element, in
// row-major order, which is the order of the output's flat index). For each
// dim, the element stride of every slot (0 where that slot broadcasts).
// Dims of extent 1 in the output are left out: they move no index.
struct BroadcastWalk {
  int kept = 0, reduced = 0;
  int64_t kept_ext[kMaxRank] = {}, red_ext[kMaxRank] = {};
  int64_t kept_stride[kMaxRank][kSlots] = {}, red_stride[kMaxRank][kSlots] = {};
  int64_t count = 1;  // elements of the target (the kernel's index space)
  int64_t terms = 1;  // output elements per target element (0 for an empty output)

  // Offsets in every slot of the first output element target element e reads.
  NNS_HD void base(int64_t e, int64_t* off) const {
    for (int s = 0; s < kSlots; ++s) off[s] = 0;
    for (int d = kept - 1; d >= 0; --d) {
      int64_t c = e % kept_ext[d];
      e /= kept_ext[d];
      for (int s = 0; s < kSlots; ++s) off[s] += c * kept_stride[d][s];
    }
  }
  // Offsets of term j (0 <= j < terms) of the element whose base is `b`.
  NNS_HD void term(const int64_t* b, int64_t j, int64_t* off) const {
    for (int s = 0; s < kSlots; ++s) off[s] = b[s];
    for (int d = reduced - 1; d >= 0; --d) {
      int64_t c = j % red_ext[d];
      j /= red_ext[d];
      for (int s = 0; s < kSlots; ++s) off[s] += c * red_stride[d][s];
    }
  }
};

// The walk of `target` (0: the output; k: operand k - 1) over the
// broadcast of `operands` (numpy rules, cpu::broadcast_shape). Throws for
// incompatible shapes or a rank above kMaxRank (the CPU backend asserts).
BroadcastWalk broadcast_walk(const std::string& node, const std::vector<const sema::Shape*>& operands, int target) {
  int64_t out[kMaxRank] = {};
  int rank = 0;
  for (const sema::Shape* s : operands) {
    int64_t next[kMaxRank];
    rank = cpu::broadcast_shape(rank, out, static_cast<int>(s->size()), s->data(), next);
    if (rank < 0) throw RuntimeError("node " + node + ": operand shapes do not broadcast (or rank > " + std::to_string(kMaxRank) + ")");
    for (int d = 0; d < rank; ++d) out[d] = next[d];
  }
  // Per slot and output dim: the element stride (0 where it broadcasts) and the extent.
  int64_t stride[kSlots][kMaxRank] = {}, extent[kSlots][kMaxRank] = {};
  int64_t step = 1;
  for (int d = rank - 1; d >= 0; --d) {
    stride[0][d] = step;
    extent[0][d] = out[d];
    step *= out[d];
  }
  for (size_t k = 0; k < operands.size(); ++k) {
    const sema::Shape& s = *operands[k];
    int offset = rank - static_cast<int>(s.size());
    int64_t st = 1;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t e = d >= offset ? s[static_cast<size_t>(d - offset)] : 1;
      extent[k + 1][d] = e;
      stride[k + 1][d] = e == 1 ? 0 : st;
      st *= e;
    }
  }
  BroadcastWalk w;
  for (int d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool keep = extent[target][d] != 1;  // equal to out[d] (0 included): the target spans this dim
    int& i = keep ? w.kept : w.reduced;
    (keep ? w.kept_ext : w.red_ext)[i] = out[d];
    for (int s = 0; s < kSlots; ++s) (keep ? w.kept_stride : w.red_stride)[i][s] = stride[s][d];
    (keep ? w.count : w.terms) *= out[d];
    ++i;
  }
  return w;
}

// ---- the functions, as cpu::ref defines them (ref_nn.cpp) ----------------------------------------------
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

NNS_HD inline double act_value(Activation act, double x, double p) {
  switch (act) {
    case Activation::relu: return x > 0 ? x : 0.0;
    case Activation::gelu_tanh: return 0.5 * x * (1 + tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
    case Activation::gelu_erf: return 0.5 * x * (1 + erf(x * kInvSqrt2));
    case Activation::sigmoid: return 1 / (1 + exp(-x));
    case Activation::tanh: return tanh(x);
    case Activation::silu: return x / (1 + exp(-x));
    case Activation::exp: return exp(x);
    case Activation::log: return log(x);
    case Activation::sqrt: return sqrt(x);
    case Activation::rsqrt: return 1 / sqrt(x);
    case Activation::abs: return fabs(x);
    case Activation::neg: return -x;
    case Activation::sin: return sin(x);
    case Activation::cos: return cos(x);
    case Activation::pow: return pow(x, p);
  }
  return 0;
}

NNS_HD inline double act_derivative(Activation act, double x, double p) {
  switch (act) {
    case Activation::relu: return x > 0 ? 1.0 : 0.0;
    case Activation::gelu_tanh: {
      double t = tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
      double du = kSqrt2OverPi * (1 + 3 * kGeluCubic * x * x);
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
    }
    case Activation::gelu_erf: return 0.5 * (1 + erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * exp(-0.5 * x * x);
    case Activation::sigmoid: {
      double s = 1 / (1 + exp(-x));
      return s * (1 - s);
    }
    case Activation::tanh: {
      double t = tanh(x);
      return 1 - t * t;
    }
    case Activation::silu: {
      double s = 1 / (1 + exp(-x));
      return s * (1 + x * (1 - s));
    }
    case Activation::exp: return exp(x);
    case Activation::log: return 1 / x;
    case Activation::sqrt: return 0.5 / sqrt(x);
    case Activation::rsqrt: return -0.5 / (x * sqrt(x));
    case Activation::abs: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case Activation::neg: return -1;
    case Activation::sin: return cos(x);
    case Activation::cos: return -sin(x);
    case Activation::pow: return p == 0 ? 0.0 : p * pow(x, p - 1);
  }
  return 0;
}

NNS_HD inline bool is_nan(double v) { return v != v; }

// a op b as ref_tensor.cpp's apply: comparisons give 1 or 0; maximum and
// minimum propagate NaN.
NNS_HD inline double binary_value(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::maximum: return is_nan(a) || is_nan(b) ? NAN : (a < b ? b : a);
    case BinaryOp::minimum: return is_nan(a) || is_nan(b) ? NAN : (b < a ? b : a);
    case BinaryOp::eq: return a == b;
    case BinaryOp::ne: return a != b;
    case BinaryOp::lt: return a < b;
    case BinaryOp::le: return a <= b;
    case BinaryOp::gt: return a > b;
    case BinaryOp::ge: return a >= b;
  }
  return 0;
}

// The share of dc that maximum / minimum pass to a (b gets the rest): all
// of it to the chosen operand, half each on a tie (PyTorch).
NNS_HD inline double extreme_share_of_a(BinaryOp op, double a, double b) {
  if (a == b) return 0.5;
  bool a_wins = op == BinaryOp::maximum ? a > b : a < b;
  return a_wins ? 1.0 : 0.0;
}

// The term dc contributes to the gradient of operand `which` (0: a, 1: b),
// the same expression ref_tensor.cpp's binary_backward adds (comparisons: 0).
NNS_HD inline double binary_grad_term(BinaryOp op, int which, double g, const float* a, int64_t ia, const float* b, int64_t ib) {
  switch (op) {
    case BinaryOp::add: return g;
    case BinaryOp::sub: return which == 0 ? g : -g;
    case BinaryOp::mul: return which == 0 ? g * b[ib] : g * a[ia];
    case BinaryOp::div: {
      double bv = b[ib];
      return which == 0 ? g / bv : -(g * a[ia] / (bv * bv));
    }
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      double share = extreme_share_of_a(op, a[ia], b[ib]);
      return which == 0 ? g * share : g * (1 - share);
    }
    default: return 0;
  }
}

// ---- launchers --------------------------------------------------------------------------------------------
void unary(Activation act, const float* x, float* y, int64_t n, double p, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = float(act_value(act, x[i], p)); });
}

void unary_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n, double p, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { dx[i] = float(dy[i] * act_derivative(act, x[i], p)); });
}

void add_scalar(const float* x, float* y, int64_t n, float v, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = x[i] + v; });
}

// c = a op b over walk w of the output (target 0).
void binary(BinaryOp op, const float* a, const float* b, float* c, BroadcastWalk w, Stream s) {
  for_each(w.count, s, NNS_KERNEL(int64_t i) {
    int64_t off[kSlots];
    w.base(i, off);
    c[i] = float(binary_value(op, a[off[1]], b[off[2]]));
  });
}

// The gradient of operand `which` (0: a, 1: b) from dc, over the walk whose
// target is that operand: the sum of its terms, in double, in output order.
void binary_backward(BinaryOp op, int which, const float* a, const float* b, const float* dc, float* grad, BroadcastWalk w,
                     Stream s) {
  for_each(w.count, s, NNS_KERNEL(int64_t e) {
    int64_t b0[kSlots], off[kSlots];
    w.base(e, b0);
    double acc = 0;
    for (int64_t j = 0; j < w.terms; ++j) {
      w.term(b0, j, off);
      acc += binary_grad_term(op, which, dc[off[0]], a, off[1], b, off[2]);
    }
    grad[e] = float(acc);
  });
}

// y = cond != 0 ? a : b over walk w of the output (slots: y, cond, a, b).
void where(const float* cond, const float* a, const float* b, float* y, BroadcastWalk w, Stream s) {
  for_each(w.count, s, NNS_KERNEL(int64_t i) {
    int64_t off[kSlots];
    w.base(i, off);
    y[i] = cond[off[1]] != 0 ? a[off[2]] : b[off[3]];
  });
}

// The gradient of a (take_a) or b: the dy of the output elements that
// took it, summed in double in output order.
void where_backward(bool take_a, const float* cond, const float* dy, float* grad, BroadcastWalk w, Stream s) {
  for_each(w.count, s, NNS_KERNEL(int64_t e) {
    int64_t b0[kSlots], off[kSlots];
    w.base(e, b0);
    double acc = 0;
    for (int64_t j = 0; j < w.terms; ++j) {
      w.term(b0, j, off);
      if ((cond[off[1]] != 0) == take_a) acc += dy[off[0]];
    }
    grad[e] = float(acc);
  });
}

void cast_to_f32(const int32_t* x, float* y, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = float(double(x[i])); });
}

// What the range check of to_i32 leaves in scratch memory: the first
// element outside the i32 range (-1: none) and its value.
struct FirstOutOfRange {
  int64_t index;
  float value;
};

// NaN fails both comparisons; floats this large are integers, so -2^31
// and 2^31 bound the range (cpu_backend.cpp's to_i32 check).
NNS_HD inline bool fits_i32(float v) { return v >= -2147483648.0f && v < 2147483648.0f; }

// Lanes of the range check: each scans a strided slice for its first bad
// element; groups of lanes, then one index, keep the smallest. The minimum
// is the same whatever order the indices run in.
constexpr int64_t kCheckLanes = 65536, kLanesPerGroup = 256;

void find_out_of_range(const float* x, int64_t n, int64_t* lanes_first, FirstOutOfRange* result, Stream s) {
  const int64_t lanes = n < kCheckLanes ? (n > 0 ? n : 1) : kCheckLanes;
  const int64_t groups = (lanes + kLanesPerGroup - 1) / kLanesPerGroup;
  int64_t* group_first = lanes_first + lanes;
  for_each(lanes, s, NNS_KERNEL(int64_t l) {
    int64_t first = -1;
    for (int64_t i = l; i < n; i += lanes)
      if (!fits_i32(x[i])) {
        first = i;
        break;
      }
    lanes_first[l] = first;
  });
  for_each(groups, s, NNS_KERNEL(int64_t g) {
    int64_t first = -1;
    int64_t end = (g + 1) * kLanesPerGroup < lanes ? (g + 1) * kLanesPerGroup : lanes;
    for (int64_t l = g * kLanesPerGroup; l < end; ++l)
      if (lanes_first[l] >= 0 && (first < 0 || lanes_first[l] < first)) first = lanes_first[l];
    group_first[g] = first;
  });
  for_each(1, s, NNS_KERNEL(int64_t) {
    int64_t first = -1;
    for (int64_t g = 0; g < groups; ++g)
      if (group_first[g] >= 0 && (first < 0 || group_first[g] < first)) first = group_first[g];
    result->index = first;
    result->value = first >= 0 ? x[first] : 0.0f;
  });
}
int64_t out_of_range_scratch(int64_t n) {
  const int64_t lanes = n < kCheckLanes ? (n > 0 ? n : 1) : kCheckLanes;
  return lanes + (lanes + kLanesPerGroup - 1) / kLanesPerGroup;
}

// Toward zero, as torch's .to(torch.int32). Elements outside the range
// (the node then fails) are written as 0, never converted (undefined in C++).
void cast_to_i32(const float* x, int32_t* y, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = fits_i32(x[i]) ? int32_t(trunc(double(x[i]))) : 0; });
}

}  // namespace nns::backend::NNS_DEV::elementwise

namespace nns::backend::NNS_DEV {

namespace {

namespace ew = elementwise;
using cpu::Activation;
using cpu::BinaryOp;

// ---- unary --------------------------------------------------------------------------------------------
Activation act_kind(const std::string& k) {
  static const std::unordered_map<std::string, Activation> kinds = {
      {"gelu", Activation::gelu_erf},        // PyTorch's nn.GELU default (exact), as the CPU backend
      {"gelu_tanh", Activation::gelu_tanh},  // GPT-2's "gelu_new"
      {"relu", Activation::relu},
      {"sigmoid", Activation::sigmoid},
      {"tanh", Activation::tanh},
      {"silu", Activation::silu},
      {"exp", Activation::exp},
      {"log", Activation::log},
      {"sqrt", Activation::sqrt},
      {"rsqrt", Activation::rsqrt},
      {"abs", Activation::abs},
      {"neg", Activation::neg},
      {"sin", Activation::sin},
      {"cos", Activation::cos},
      {"pow_scalar", Activation::pow}};
  return kinds.at(k);
}

// pow_scalar's exponent is its attr `p` (taken as a float, as the CPU
// backend does); the other functions ignore it.
double exponent(const Call& c) { return static_cast<float>(c.attr_float("p", 0)); }

void act_fwd(const Call& c) {
  ew::unary(act_kind(c.node.kind), c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), exponent(c), c.stream);
}
void act_bwd(const Call& c) {
  if (float* dx = c.dx(0))
    ew::unary_backward(act_kind(c.base_kind()), c.x(0).f32(), c.dy(0).f32(), dx, c.x(0).numel(), exponent(c), c.stream);
}

void add_scalar_fwd(const Call& c) {
  ew::add_scalar(c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("s", 0)), c.stream);
}
void mul_scalar_fwd(const Call& c) {
  kernels::scale(c.out[0].f32(), c.in[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("s", 1)), c.stream);
}
void mul_scalar_bwd(const Call& c) {
  if (float* dx = c.dx(0)) kernels::scale(dx, c.dy(0).f32(), c.dy(0).numel(), static_cast<float>(c.attr_float("s", 1)), c.stream);
}
// add_scalar and to_f32 (f32 -> f32) pass their gradient through.
void identity_bwd(const Call& c) {
  if (float* dx = c.dx(0)) copy_device_async(dx, c.dy(0).f32(), sizeof(float) * static_cast<size_t>(c.dy(0).numel()), c.stream);
}
// detach: a copy (it has no backward: autograd never differentiates through it).
void detach_fwd(const Call& c) {
  copy_device_async(c.out[0].data, c.in[0].data, static_cast<size_t>(c.in[0].numel() * sema::dtype_bytes(c.in[0].dtype)), c.stream);
}

// The walk of `target` (broadcast_walk) over `operands`, checked against
// the tensor its indices write (the output, or the operand's gradient).
ew::BroadcastWalk walk(const Call& c, const std::vector<const sema::Shape*>& operands, int target, const TensorView& written) {
  ew::BroadcastWalk w = ew::broadcast_walk(c.node.name, operands, target);
  if (w.count != written.numel())
    throw RuntimeError("node " + c.node.name + ": a tensor of " + std::to_string(written.numel()) + " elements where the broadcast gives " +
                       std::to_string(w.count));
  return w;
}

// ---- broadcasting binaries ----------------------------------------------------------------------------------
BinaryOp binary_kind(const std::string& k) {
  static const std::unordered_map<std::string, BinaryOp> kinds = {
      {"add", BinaryOp::add}, {"sub", BinaryOp::sub}, {"mul", BinaryOp::mul}, {"div", BinaryOp::div},
      {"maximum", BinaryOp::maximum}, {"minimum", BinaryOp::minimum}, {"eq", BinaryOp::eq}, {"ne", BinaryOp::ne},
      {"lt", BinaryOp::lt}, {"le", BinaryOp::le}, {"gt", BinaryOp::gt}, {"ge", BinaryOp::ge}};
  return kinds.at(k);
}

void binary_fwd(const Call& c) {
  std::vector<const sema::Shape*> shapes{&c.in[0].shape, &c.in[1].shape};
  ew::binary(binary_kind(c.node.kind), c.in[0].f32(), c.in[1].f32(), c.out[0].f32(), walk(c, shapes, 0, c.out[0]), c.stream);
}
void binary_bwd(const Call& c) {
  BinaryOp op = binary_kind(c.base_kind());
  std::vector<const sema::Shape*> shapes{&c.x(0).shape, &c.x(1).shape};
  for (int which = 0; which < 2; ++which)
    if (float* grad = c.dx(static_cast<size_t>(which)))
      ew::binary_backward(op, which, c.x(0).f32(), c.x(1).f32(), c.dy(0).f32(), grad,
                          walk(c, shapes, which + 1, c.x(static_cast<size_t>(which))), c.stream);
}

// where(cond, a, b): three broadcast operands; cond gets no gradient (a zero one when asked).
void where_fwd(const Call& c) {
  std::vector<const sema::Shape*> shapes{&c.in[0].shape, &c.in[1].shape, &c.in[2].shape};
  ew::where(c.in[0].f32(), c.in[1].f32(), c.in[2].f32(), c.out[0].f32(), walk(c, shapes, 0, c.out[0]), c.stream);
}
void where_bwd(const Call& c) {
  std::vector<const sema::Shape*> shapes{&c.x(0).shape, &c.x(1).shape, &c.x(2).shape};
  if (float* dcond = c.dx(0)) kernels::fill(dcond, c.x(0).numel(), 0.0f, c.stream);
  for (size_t k = 1; k <= 2; ++k)
    if (float* grad = c.dx(k))
      ew::where_backward(k == 1, c.x(0).f32(), c.dy(0).f32(), grad, walk(c, shapes, static_cast<int>(k) + 1, c.x(k)), c.stream);
}

// ---- casts: a copy when the operand already has the dtype ---------------------------------------------------
void to_f32_fwd(const Call& c) {
  if (c.in[0].dtype == sema::DType::F32) return detach_fwd(c);
  ew::cast_to_f32(c.in[0].i32(), c.out[0].f32(), c.in[0].numel(), c.stream);
}
void to_i32_fwd(const Call& c) {
  if (c.in[0].dtype == sema::DType::I32) return detach_fwd(c);
  const float* x = c.in[0].f32();
  int64_t n = c.in[0].numel();
  if (n == 0) return;
  int64_t* lanes = c.scratch.get<int64_t>(ew::out_of_range_scratch(n));
  ew::FirstOutOfRange* found = c.scratch.get<ew::FirstOutOfRange>(1);
  ew::find_out_of_range(x, n, lanes, found, c.stream);
  ew::cast_to_i32(x, c.out[0].i32(), n, c.stream);
  // The one host read of this backend's node kernels: the CPU backend fails
  // the node when an element does not fit, so the device's verdict (one
  // small struct) comes back and the same RuntimeError is raised here. It
  // waits for the stream; a node that converts floats to ints is rare
  // (indices from arithmetic), never in a training step's hot path.
  ew::FirstOutOfRange host{};
  NNS_DEV::copy_to_host(&host, found, sizeof host, c.stream);
  if (host.index >= 0)
    throw RuntimeError("node " + c.node.name + ": to_i32 of " + std::to_string(host.value) + ", which is outside the i32 range");
}

}  // namespace

// The add node's kernels for a fused node's bias (kernels_attention.cu's
// sdpa_bias): y = x + bias with bias broadcast to x's shape, and dbias, dy
// summed over the dims bias was broadcast along, as add's backward sums it.
void add_broadcast(const Call& c, const float* x, const sema::Shape& xs, const float* bias, const sema::Shape& bs,
                   float* y) {
  ew::binary(BinaryOp::add, x, bias, y, ew::broadcast_walk(c.node.name, {&xs, &bs}, 0), c.stream);
}
void add_broadcast_grad(const Call& c, const sema::Shape& xs, const sema::Shape& bs, const float* dy, float* dbias) {
  ew::binary_backward(BinaryOp::add, 1, nullptr, nullptr, dy, dbias, ew::broadcast_walk(c.node.name, {&xs, &bs}, 2),
                      c.stream);
}

void register_elementwise_kernels(KernelTable& t) {
  for (const char* k : {"gelu", "gelu_tanh", "relu", "sigmoid", "tanh", "silu", "exp", "log", "sqrt", "rsqrt", "abs",
                        "neg", "sin", "cos", "pow_scalar"}) {
    t[k] = act_fwd;
    t[std::string(k) + "_backward"] = act_bwd;
  }
  t["add_scalar"] = add_scalar_fwd;
  t["add_scalar_backward"] = identity_bwd;
  t["mul_scalar"] = mul_scalar_fwd;
  t["mul_scalar_backward"] = mul_scalar_bwd;
  t["detach"] = detach_fwd;
  for (const char* k : {"add", "sub", "mul", "div", "maximum", "minimum"}) {
    t[k] = binary_fwd;
    t[std::string(k) + "_backward"] = binary_bwd;
  }
  for (const char* k : {"eq", "ne", "lt", "le", "gt", "ge"}) t[k] = binary_fwd;
  t["where"] = where_fwd;
  t["where_backward"] = where_bwd;
  t["to_f32"] = to_f32_fwd;
  t["to_f32_backward"] = identity_bwd;
  t["to_i32"] = to_i32_fwd;
}

}  // namespace nns::backend::NNS_DEV
