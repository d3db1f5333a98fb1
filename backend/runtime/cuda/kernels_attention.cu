// sdpa on the device: softmax(causal_mask(q kt * scale)) v as one node, by
// the same steps as the CPU node (cpu/ops_attention.cpp) and the unfused
// ops it replaces: batched products on cuBLASLt, the scale, the mask and the
// row softmax as our own kernels (kernels_nn.cu), the probabilities
// recomputed in the backward instead of saved. A fused cuDNN SDPA kernel
// is the next step where a GPU can check it against this path.
#include <cmath>

#include "backend/runtime/attention_dims.h"
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"

namespace nns::backend::NNS_DEV {

namespace nn {  // kernels_nn.cu
void softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log_form, double* scratch, Stream s);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, bool log_form,
                      double* row_sum, Stream s);
void causal_mask(const float* x, float* y, int64_t n, int64_t rows, int64_t cols, bool backward, Stream s);
}  // namespace nn

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
void probabilities(const Call& c, const float* q, const float* kt, const AttentionDims& d, bool causal, float scale,
                   float* scaled, float* p) {
  const int64_t n = d.scores(), rows = d.batch * d.s;
  float* raw = c.scratch.get<float>(n);
  c.gemm.run(product(c, q, kt, raw, d, d.s, d.e, d.t, false, false), c.scratch);
  kernels::scale(scaled, raw, n, scale, c.stream);
  if (causal)
    nn::causal_mask(scaled, scaled, n, d.s, d.t, false, c.stream);  // each index reads and writes its own element
  nn::softmax(scaled, p, rows, d.t, false, c.scratch.get<double>(2 * rows), c.stream);
}

void sdpa_fwd(const Call& c) {
  const AttentionDims d = attention_dims(c.in[0].shape, c.in[1].shape, c.in[2].shape);
  if (d.scores() == 0 || d.f == 0) return;
  float* scaled = c.scratch.get<float>(d.scores());
  float* p = c.scratch.get<float>(d.scores());
  probabilities(c, c.in[0].f32(), c.in[1].f32(), d, c.attr_flag("causal"), static_cast<float>(c.attr_float("scale", 1)),
                scaled, p);
  c.gemm.run(product(c, p, c.in[2].f32(), c.out[0].f32(), d, d.s, d.t, d.f, false, false), c.scratch);
}

// The unfused backward in reverse: matmul(p, v), softmax, mask, scale, matmul(q, kt).
void sdpa_bwd(const Call& c) {
  const AttentionDims d = attention_dims(c.x(0).shape, c.x(1).shape, c.x(2).shape);
  float *dq = c.dx(0), *dkt = c.dx(1), *dv = c.dx(2);
  if ((!dq && !dkt && !dv) || d.scores() == 0) return;
  const bool causal = c.attr_flag("causal");
  const float scale = static_cast<float>(c.attr_float("scale", 1));
  const int64_t n = d.scores(), rows = d.batch * d.s;
  float* scaled = c.scratch.get<float>(n);
  float* p = c.scratch.get<float>(n);
  probabilities(c, c.x(0).f32(), c.x(1).f32(), d, causal, scale, scaled, p);
  const float* dy = c.dy(0).f32();
  if (dv) c.gemm.run(product(c, p, dy, dv, d, d.t, d.s, d.f, true, false), c.scratch);  // dv = p^T dy
  if (!dq && !dkt) return;
  float* dp = c.scratch.get<float>(n);
  c.gemm.run(product(c, dy, c.x(2).f32(), dp, d, d.s, d.f, d.t, false, true), c.scratch);  // dp = dy v^T
  float* dmasked = c.scratch.get<float>(n);
  nn::softmax_backward(p, dp, dmasked, rows, d.t, false, c.scratch.get<double>(rows), c.stream);
  if (causal) nn::causal_mask(dmasked, dmasked, n, mask_rows(c, d), d.t, true, c.stream);
  kernels::scale(scaled, dmasked, n, scale, c.stream);  // the scores' gradient, into the free scratch
  if (dq) c.gemm.run(product(c, scaled, c.x(1).f32(), dq, d, d.s, d.t, d.e, false, true), c.scratch);    // dq = ds kt^T
  if (dkt) c.gemm.run(product(c, c.x(0).f32(), scaled, dkt, d, d.e, d.s, d.t, true, false), c.scratch);  // dkt = q^T ds
}

}  // namespace

void register_attention_kernels(KernelTable& t) {
  t["sdpa"] = sdpa_fwd;
  t["sdpa_backward"] = sdpa_bwd;
}

}  // namespace nns::backend::NNS_DEV
