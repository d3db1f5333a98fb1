// CPU kernel wrappers: unary, binary, comparisons, where, dropout. Registered by node kind through register_elementwise_kernels (call.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// ---- elementwise ----------------------------------------------------------------------
cpu::BinaryOp binary_kind(const std::string& k) {
  static const std::unordered_map<std::string, cpu::BinaryOp> kinds = {
      {"add", cpu::BinaryOp::add}, {"sub", cpu::BinaryOp::sub}, {"mul", cpu::BinaryOp::mul}, {"div", cpu::BinaryOp::div},
      {"maximum", cpu::BinaryOp::maximum}, {"minimum", cpu::BinaryOp::minimum},
      {"eq", cpu::BinaryOp::eq}, {"ne", cpu::BinaryOp::ne}, {"lt", cpu::BinaryOp::lt},
      {"le", cpu::BinaryOp::le}, {"gt", cpu::BinaryOp::gt}, {"ge", cpu::BinaryOp::ge}};
  return kinds.at(k);
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
  KERNEL(binary_backward)(binary_kind(c.base_kind()), c.x(0).f32(), static_cast<int>(a.size()), a.data(), c.x(1).f32(),
                          static_cast<int>(b.size()), b.data(), c.dy(0).f32(), c.dx(0), c.dx(1));
}
void add_scalar_fwd(const Call& c) {
  float s = static_cast<float>(c.attr_float("s", 0));
  const float* x = c.in[0].f32();
  float* y = c.out[0].f32();
  for (int64_t i = 0, n = c.in[0].numel(); i < n; ++i) y[i] = x[i] + s;
}
void mul_scalar_fwd(const Call& c) {
  KERNEL(scale)(c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("s", 1)));
}
void mul_scalar_bwd(const Call& c) {
  if (float* dx = c.dx(0)) KERNEL(scale_backward)(c.dy(0).f32(), dx, c.dy(0).numel(), static_cast<float>(c.attr_float("s", 1)));
}
cpu::Activation act_kind(const std::string& k) {
  static const std::unordered_map<std::string, cpu::Activation> kinds = {
      {"gelu", cpu::Activation::gelu_erf},        // PyTorch's nn.GELU default (exact)
      {"gelu_tanh", cpu::Activation::gelu_tanh},  // GPT-2's "gelu_new", nn.GELU(approximate="tanh")
      {"relu", cpu::Activation::relu},
      {"sigmoid", cpu::Activation::sigmoid},
      {"tanh", cpu::Activation::tanh},
      {"silu", cpu::Activation::silu},
      {"exp", cpu::Activation::exp},
      {"log", cpu::Activation::log},
      {"sqrt", cpu::Activation::sqrt},
      {"rsqrt", cpu::Activation::rsqrt},
      {"abs", cpu::Activation::abs},
      {"neg", cpu::Activation::neg},
      {"sin", cpu::Activation::sin},
      {"cos", cpu::Activation::cos},
      {"pow_scalar", cpu::Activation::pow}};
  return kinds.at(k);
}
// pow_scalar's exponent is its attr `p`; the other functions take none.
void act_fwd(const Call& c) {
  KERNEL(activation)(act_kind(c.node.kind), c.in[0].f32(), c.out[0].f32(), c.in[0].numel(), static_cast<float>(c.attr_float("p", 0)));
}
void act_bwd(const Call& c) {
  if (float* dx = c.dx(0))
    KERNEL(activation_backward)(act_kind(c.base_kind()), c.x(0).f32(), c.dy(0).f32(), dx, c.x(0).numel(),
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

}  // namespace

void register_elementwise_kernels(KernelTable& table) {
  table.insert({
      {"add", binary_fwd},
      {"sub", binary_fwd},
      {"mul", binary_fwd},
      {"div", binary_fwd},
      {"add_backward", binary_bwd},
      {"sub_backward", binary_bwd},
      {"mul_backward", binary_bwd},
      {"div_backward", binary_bwd},
      {"add_scalar", add_scalar_fwd},
      {"mul_scalar", mul_scalar_fwd},
      {"mul_scalar_backward", mul_scalar_bwd},
      {"gelu", act_fwd},
      {"gelu_tanh", act_fwd},
      {"gelu_tanh_backward", act_bwd},
      {"relu", act_fwd},
      {"sigmoid", act_fwd},
      {"tanh", act_fwd},
      {"gelu_backward", act_bwd},
      {"relu_backward", act_bwd},
      {"sigmoid_backward", act_bwd},
      {"tanh_backward", act_bwd},
      {"silu", act_fwd},
      {"exp", act_fwd},
      {"log", act_fwd},
      {"sqrt", act_fwd},
      {"rsqrt", act_fwd},
      {"abs", act_fwd},
      {"neg", act_fwd},
      {"sin", act_fwd},
      {"cos", act_fwd},
      {"pow_scalar", act_fwd},
      {"silu_backward", act_bwd},
      {"exp_backward", act_bwd},
      {"log_backward", act_bwd},
      {"sqrt_backward", act_bwd},
      {"rsqrt_backward", act_bwd},
      {"abs_backward", act_bwd},
      {"neg_backward", act_bwd},
      {"sin_backward", act_bwd},
      {"cos_backward", act_bwd},
      {"pow_scalar_backward", act_bwd},
      {"maximum", binary_fwd},
      {"minimum", binary_fwd},
      {"maximum_backward", binary_bwd},
      {"minimum_backward", binary_bwd},
      {"eq", binary_fwd},
      {"ne", binary_fwd},
      {"lt", binary_fwd},
      {"le", binary_fwd},
      {"gt", binary_fwd},
      {"ge", binary_fwd},
      {"where", where_fwd},
      {"where_backward", where_bwd},
      {"dropout", dropout_fwd},
      {"dropout_backward", dropout_bwd},
  });
}

}  // namespace nns::backend::cpu_ops
