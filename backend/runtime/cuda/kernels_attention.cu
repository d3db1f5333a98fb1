// sdpa on the device: softmax(causal_mask(q kt * scale)) v as one node, by
// the same steps as the CPU node (cpu/ops_attention.cpp) and the unfused
// ops it replaces: batched products on cuBLASLt, the scale, the mask and the
// row softmax as our own kernels (kernels_nn.cu), the probabilities
// recomputed in the backward instead of saved.
//
// Under bf16 storage, when q, kt and v (and the backward's dy) are stored in
// bf16, the node runs on cuDNN's fused attention instead (dnn_sdpa.cpp):
// their bf16 bits are exactly the f32 values the own kernels would read, so
// only the accumulation order differs. fp32 runs keep the own kernels, equal
// bit for bit with the CPU backend. Where cuDNN declines (the shape, the
// library, NNS_CUDNN=0) the own kernels run; Dnn::attention_declined says why.
//
// sdpa_bias adds its bias (input 3, broadcast over the leading dims) to the
// scaled scores before the mask with the add node's kernel, and sums dbias
// with add's backward (kernels_elementwise.cu): the CPU node's steps. It
// takes cuDNN's path like sdpa when the bias is stored in bf16 too and
// plan_cudnn_sdpa_bias takes its shape (a [1, H, S, T] bias; dbias comes
// back in bf16, summed by cuDNN); otherwise the own kernels run.
#include <cmath>
#include <initializer_list>

#include "backend/runtime/attention_cudnn_plan.h"
#include "backend/runtime/attention_dims.h"
#include "backend/runtime/cpu/half_bits.h"
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"
#include "backend/runtime/cuda/launch.h"

namespace nns::backend::NNS_DEV {

namespace nn {  // kernels_nn.cu
void softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log_form, double* scratch, Stream s);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, bool log_form,
                      double* row_sum, Stream s);
void causal_mask(const float* x, float* y, int64_t n, int64_t rows, int64_t cols, bool backward, Stream s);
}  // namespace nn

// kernels_elementwise.cu: the add node's broadcast and its gradient.
void add_broadcast(const Call& c, const float* x, const sema::Shape& xs, const float* bias, const sema::Shape& bs,
                   float* y);
void add_broadcast_grad(const Call& c, const sema::Shape& xs, const sema::Shape& bs, const float* dy, float* dbias);

namespace {

// Row-major c[i] = op(a[i]) op(b[i]) over the batch (gemm.h).
RowMajorProduct product(const Call& call, const float* a, const float* b, float* c, const AttentionDims& d, int64_t m,
                        int64_t k, int64_t n, bool trans_a, bool trans_b) {
  RowMajorProduct p;
  p.input = call.products;
  p.a = a, p.b = b, p.c = c;
  p.a_batch = p.b_batch = d.batch;
  p.m = m, p.k = k, p.n = n;
  p.trans_a = trans_a, p.trans_b = trans_b;
  return p;
}

// Rows per causal mask (attention_dims.h mask_period): the mask kernel
// takes row i of a [rows, cols] matrix as (k / cols) % rows.
int64_t mask_rows(const Call& c, const AttentionDims& d) { return mask_period(c, d); }

// p = softmax(mask(q kt * scale)) into `p`; `scaled` is the scores' scratch.
// With a bias (sdpa_bias), it is added to the scaled scores before the mask.
void probabilities(const Call& c, const float* q, const float* kt, const AttentionDims& d, bool causal, float scale,
                   float* scaled, float* p, const TensorView* bias) {
  const int64_t n = d.scores(), rows = d.batch * d.s;
  float* raw = c.scratch.get<float>(n);
  c.gemm.run(product(c, q, kt, raw, d, d.s, d.e, d.t, false, false), c.scratch);
  kernels::scale(scaled, raw, n, scale, c.stream);
  float* scores = scaled;
  if (bias) {  // add(scaled, bias) into raw's scratch, which the mask and softmax then read
    add_broadcast(c, scaled, scores_shape(c.x(0).shape, d), bias->f32(), bias->shape, raw);
    scores = raw;
  }
  // Rows of the mask: the period (grouped-query attention's stacked
  // queries), not s. In place: each index reads and writes its own element.
  if (causal) nn::causal_mask(scores, scores, n, mask_rows(c, d), d.t, false, c.stream);
  nn::softmax(scores, p, rows, d.t, false, c.scratch.get<double>(2 * rows), c.stream);
}

// kt [batch, e, t] as stored (bf16) -> k [batch, t, e], the D-innermost
// layout cuDNN's fused kernels read: a transpose of the bits.
void kt_to_k_bf16(const uint16_t* kt, uint16_t* k, const AttentionDims& d, Stream s) {
  const int64_t e = d.e, t = d.t;
  for_each(
      d.batch * t * e, s, NNS_KERNEL(int64_t i) {
        const int64_t b = i / (t * e), r = i % (t * e), j = r / e, x = r % e;
        k[i] = kt[(b * e + x) * t + j];
      });
}

// dk [batch, t, e] (bf16) -> dkt [batch, e, t] (f32, exact).
void dk_bf16_to_dkt(const uint16_t* dk, float* dkt, const AttentionDims& d, Stream s) {
  const int64_t e = d.e, t = d.t;
  for_each(
      d.batch * e * t, s, NNS_KERNEL(int64_t i) {
        const int64_t b = i / (e * t), r = i % (e * t), x = r / t, j = r % t;
        dkt[i] = cpu::bf16_to_float(dk[(b * t + j) * e + x]);
      });
}

// The forward on cuDNN into bf16 o and fp32 stats (scratch); false when it
// declines. q and v are read as stored; k is the [t, e] copy of kt's bits.
struct CudnnForward {
  uint16_t* o = nullptr;
  float* stats = nullptr;
  const uint16_t* k = nullptr;
};
bool cudnn_forward(const Call& c, const CudnnSdpaPlan& p, float scale, CudnnForward& f) {
  if (!p.accepted || !c.dnn.active())  // records the reason, touches no data
    return c.dnn.sdpa_forward(p, scale, nullptr, nullptr, nullptr, nullptr, nullptr, c.scratch);
  const AttentionDims d = attention_dims(c.in[0].shape, c.in[1].shape, c.in[2].shape);
  uint16_t* k = c.scratch.get<uint16_t>(p.k_elems());
  kt_to_k_bf16(c.bf16_input(1), k, d, c.stream);
  f.k = k;
  f.o = c.scratch.get<uint16_t>(p.o_elems());
  f.stats = c.scratch.get<float>(p.stats_elems());
  return c.dnn.sdpa_forward(p, scale, c.bf16_input(0), k, c.bf16_input(2), f.o, f.stats, c.scratch,
                            p.bias ? c.bf16_input(3) : nullptr);
}

// `bias`: sdpa_bias's input 3 (null for sdpa).
CudnnSdpaPlan cudnn_plan(const Call& c, const AttentionDims& d, const TensorView* bias) {
  const bool causal = c.attr_flag("causal");
  const int64_t period = c.attr_int_or("period", 0);
  if (!bias) return plan_cudnn_sdpa(d, causal, period);
  return plan_cudnn_sdpa_bias(c.x(0).shape, d, causal, period, bias->shape);
}

bool stored_bf16(const Call& c, std::initializer_list<size_t> inputs) {
  for (size_t i : inputs)
    if (!c.stored_bf16(i)) return false;
  return true;
}

bool sdpa_fwd_cudnn(const Call& c, const AttentionDims& d, const TensorView* bias) {
  if (!stored_bf16(c, {0, 1, 2}) || (bias && !c.stored_bf16(3))) return false;
  CudnnForward f;
  if (!cudnn_forward(c, cudnn_plan(c, d, bias), static_cast<float>(c.attr_float("scale", 1)), f)) return false;
  kernels::from_bf16(f.o, c.out[0].f32(), c.out[0].numel(), c.stream);
  return true;
}

// The backward on cuDNN: the forward graph recomputes o and the statistics
// (the node keeps only q, kt, v), then the backward graph gives dq, dk, dv
// (and dbias).
bool sdpa_bwd_cudnn(const Call& c, const AttentionDims& d, float* dq, float* dkt, float* dv, const TensorView* bias,
                    float* dbias) {
  const size_t dy_index = c.fwd_inputs() + c.fwd_outputs();
  if (!stored_bf16(c, {0, 1, 2, dy_index}) || (bias && !c.stored_bf16(3))) return false;
  const CudnnSdpaPlan p = cudnn_plan(c, d, bias);
  const float scale = static_cast<float>(c.attr_float("scale", 1));
  CudnnForward f;
  if (!cudnn_forward(c, p, scale, f)) return false;
  uint16_t* dq16 = c.scratch.get<uint16_t>(p.q_elems());
  uint16_t* dk16 = c.scratch.get<uint16_t>(p.k_elems());
  uint16_t* dv16 = c.scratch.get<uint16_t>(p.v_elems());
  uint16_t* dbias16 = p.bias ? c.scratch.get<uint16_t>(p.bias_elems()) : nullptr;
  if (!c.dnn.sdpa_backward(p, scale, c.bf16_input(0), f.k, c.bf16_input(2), f.o, c.bf16_input(dy_index), f.stats, dq16,
                           dk16, dv16, c.scratch, p.bias ? c.bf16_input(3) : nullptr, dbias16))
    return false;
  if (dbias) kernels::from_bf16(dbias16, dbias, p.bias_elems(), c.stream);
  if (dq) kernels::from_bf16(dq16, dq, p.q_elems(), c.stream);
  if (dkt) dk_bf16_to_dkt(dk16, dkt, d, c.stream);
  if (dv) kernels::from_bf16(dv16, dv, p.v_elems(), c.stream);
  return true;
}

void sdpa_fwd(const Call& c) {
  const AttentionDims d = attention_dims(c.in[0].shape, c.in[1].shape, c.in[2].shape);
  if (d.scores() == 0 || d.f == 0) return;
  const TensorView* bias = c.in.size() > 3 ? &c.in[3] : nullptr;
  if (sdpa_fwd_cudnn(c, d, bias)) return;
  float* scaled = c.scratch.get<float>(d.scores());
  float* p = c.scratch.get<float>(d.scores());
  probabilities(c, c.in[0].f32(), c.in[1].f32(), d, c.attr_flag("causal"), static_cast<float>(c.attr_float("scale", 1)),
                scaled, p, bias);
  c.gemm.run(product(c, p, c.in[2].f32(), c.out[0].f32(), d, d.s, d.t, d.f, false, false), c.scratch);
}

// The unfused backward in reverse: matmul(p, v), softmax, mask, scale, matmul(q, kt).
void sdpa_bwd(const Call& c) {
  const AttentionDims d = attention_dims(c.x(0).shape, c.x(1).shape, c.x(2).shape);
  const TensorView* bias = c.fwd_inputs() > 3 ? &c.x(3) : nullptr;
  float *dq = c.dx(0), *dkt = c.dx(1), *dv = c.dx(2), *dbias = bias ? c.dx(3) : nullptr;
  if ((!dq && !dkt && !dv && !dbias) || d.scores() == 0) {
    if (dbias) kernels::fill(dbias, bias->numel(), 0.0f, c.stream);  // no scores: nothing to sum
    return;
  }
  if (sdpa_bwd_cudnn(c, d, dq, dkt, dv, bias, dbias)) return;
  const bool causal = c.attr_flag("causal");
  const float scale = static_cast<float>(c.attr_float("scale", 1));
  const int64_t n = d.scores(), rows = d.batch * d.s;
  float* scaled = c.scratch.get<float>(n);
  float* p = c.scratch.get<float>(n);
  probabilities(c, c.x(0).f32(), c.x(1).f32(), d, causal, scale, scaled, p, bias);
  const float* dy = c.dy(0).f32();
  if (dv) c.gemm.run(product(c, p, dy, dv, d, d.t, d.s, d.f, true, false), c.scratch);  // dv = p^T dy
  if (!dq && !dkt && !dbias) return;
  float* dp = c.scratch.get<float>(n);
  c.gemm.run(product(c, dy, c.x(2).f32(), dp, d, d.s, d.f, d.t, false, true), c.scratch);  // dp = dy v^T
  float* dmasked = c.scratch.get<float>(n);
  nn::softmax_backward(p, dp, dmasked, rows, d.t, false, c.scratch.get<double>(rows), c.stream);
  if (causal) nn::causal_mask(dmasked, dmasked, n, mask_rows(c, d), d.t, true, c.stream);
  if (dbias) add_broadcast_grad(c, scores_shape(c.x(0).shape, d), bias->shape, dmasked, dbias);
  kernels::scale(scaled, dmasked, n, scale, c.stream);  // the scores' gradient, into the free scratch
  if (dq) c.gemm.run(product(c, scaled, c.x(1).f32(), dq, d, d.s, d.t, d.e, false, true), c.scratch);    // dq = ds kt^T
  if (dkt) c.gemm.run(product(c, c.x(0).f32(), scaled, dkt, d, d.e, d.s, d.t, true, false), c.scratch);  // dkt = q^T ds
}

}  // namespace

void register_attention_kernels(KernelTable& t) {
  t["sdpa"] = sdpa_fwd;
  t["sdpa_backward"] = sdpa_bwd;
  t["sdpa_bias"] = sdpa_fwd;  // the bias is input 3
  t["sdpa_bias_backward"] = sdpa_bwd;
}

}  // namespace nns::backend::NNS_DEV
