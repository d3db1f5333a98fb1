// sdpa: scaled dot-product attention as one node,
//   out = softmax(causal_mask(matmul(q, kt) * scale)) v,
// q [..., s, e], kt [..., e, t] (keys already transposed, as the stdlib's
// attention lays them out), v [..., t, f]. It runs the same kernels, in the
// same order and on the same values, as the unfused composition of those
// five ops, so its output and gradients equal theirs bit for bit; what it
// changes is memory: the node keeps only q, kt and v for its backward and
// recomputes the probabilities there (flash attention's trade), instead of
// the graph saving the scores, the masked scores and the probabilities of
// every micro-batch. The scratch lives for the node's call only.
//
// sdpa_bias adds a bias (input 3, broadcast over the leading dims) to the
// scaled scores before the mask, by the broadcasting add's own kernel, and
// its backward gives dbias by that add's backward: the steps of
// `matmul(q, kt) * scale + bias` written out, in their order.
#include <cmath>
#include <vector>

#include "backend/runtime/attention_dims.h"
#include "backend/runtime/cpu/call.h"

namespace nns::backend::cpu_ops {

namespace {

// The probabilities p [batch, s, t] of q, kt: the forward's first three
// ops (and the mask) into `p`, with `scaled` as the scores' scratch.
void probabilities(const Call& c, const float* q, const float* kt, const AttentionDims& d, bool causal, float scale,
                   std::vector<float>& scaled, std::vector<float>& p, const TensorView* bias = nullptr) {
  const int64_t n = d.batch * d.s * d.t;
  std::vector<float> raw(static_cast<size_t>(n));
  scaled.resize(static_cast<size_t>(n));
  p.resize(static_cast<size_t>(n));
  MATMUL_KERNEL(matmul)(q, kt, raw.data(), d.batch, d.batch, d.s, d.e, d.t, false, false, 0.f);
  KERNEL(scale)(raw.data(), scaled.data(), n, scale);
  if (bias) {  // add(scaled, bias): numpy broadcasting over the scores' leading dims
    const Shape scores = scores_shape(c.in[0].shape, d);
    KERNEL(binary)
    (cpu::BinaryOp::add, scaled.data(), static_cast<int>(scores.size()), scores.data(), bias->f32(),
     static_cast<int>(bias->shape.size()), bias->shape.data(), raw.data());
    scaled.swap(raw);
  }
  if (causal) {  // causal_mask: -inf where j > i
    const int64_t period = mask_period(c, d);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int64_t i = 0; i < d.s; ++i)
        for (int64_t j = i % period + 1; j < d.t; ++j) scaled[static_cast<size_t>((b * d.s + i) * d.t + j)] = -INFINITY;
  }
  KERNEL(softmax)(scaled.data(), p.data(), d.batch * d.s, d.t);
}

void sdpa_fwd(const Call& c) {
  const AttentionDims d = attention_dims(c.in[0].shape, c.in[1].shape, c.in[2].shape);
  std::vector<float> scaled, p;
  probabilities(c, c.in[0].f32(), c.in[1].f32(), d, c.attr_flag("causal"), static_cast<float>(c.attr_float("scale", 1)),
                scaled, p, c.in.size() > 3 ? &c.in[3] : nullptr);
  MATMUL_KERNEL(matmul)(p.data(), c.in[2].f32(), c.out[0].f32(), d.batch, d.batch, d.s, d.t, d.f, false, false, 0.f);
}

// The unfused backward, op by op in reverse: matmul(p, v), softmax,
// causal_mask, the scale, matmul(q, kt).
void sdpa_bwd(const Call& c) {
  const AttentionDims d = attention_dims(c.x(0).shape, c.x(1).shape, c.x(2).shape);
  const bool causal = c.attr_flag("causal");
  const float scale = static_cast<float>(c.attr_float("scale", 1));
  const bool has_bias = c.fwd_inputs() > 3;
  float *dq = c.dx(0), *dkt = c.dx(1), *dv = c.dx(2), *dbias = has_bias ? c.dx(3) : nullptr;
  if (!dq && !dkt && !dv && !dbias) return;
  std::vector<float> scaled, p;
  probabilities(c, c.x(0).f32(), c.x(1).f32(), d, causal, scale, scaled, p, has_bias ? &c.x(3) : nullptr);
  const int64_t n = d.batch * d.s * d.t;
  std::vector<float> dp(static_cast<size_t>(n));
  MATMUL_KERNEL(matmul_backward)
  (p.data(), c.x(2).f32(), c.dy(0).f32(), dp.data(), dv, d.batch, d.batch, d.s, d.t, d.f, false, false);
  if (!dq && !dkt && !dbias) return;
  std::vector<float> dmasked(static_cast<size_t>(n));
  KERNEL(softmax_backward)(p.data(), dp.data(), dmasked.data(), d.batch * d.s, d.t);
  if (causal) {  // causal_mask's backward: no gradient where it wrote -inf
    const int64_t period = mask_period(c, d);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int64_t i = 0; i < d.s; ++i)
        for (int64_t j = i % period + 1; j < d.t; ++j) dmasked[static_cast<size_t>((b * d.s + i) * d.t + j)] = 0.f;
  }
  if (dbias) {  // add's backward: the scores' gradient summed over the dims the bias was broadcast along
    const Shape scores = scores_shape(c.x(0).shape, d);
    const Shape& bs = c.x(3).shape;
    KERNEL(binary_backward)
    (cpu::BinaryOp::add, nullptr, static_cast<int>(scores.size()), scores.data(), nullptr, static_cast<int>(bs.size()),
     bs.data(), dmasked.data(), nullptr, dbias);
  }
  if (!dq && !dkt) return;
  std::vector<float>& draw = scaled;  // the scores' scratch is free again
  KERNEL(scale_backward)(dmasked.data(), draw.data(), n, scale);
  MATMUL_KERNEL(matmul_backward)
  (c.x(0).f32(), c.x(1).f32(), draw.data(), dq, dkt, d.batch, d.batch, d.s, d.e, d.t, false, false);
}

}  // namespace

void register_attention_kernels(KernelTable& t) {
  t["sdpa"] = sdpa_fwd;
  t["sdpa_backward"] = sdpa_bwd;
  t["sdpa_bias"] = sdpa_fwd;  // the same steps with the bias added (input 3)
  t["sdpa_bias_backward"] = sdpa_bwd;
}

}  // namespace nns::backend::cpu_ops
