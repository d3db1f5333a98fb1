// Dnn::sdpa_forward / sdpa_backward: scaled-dot-product attention as one
// fused cuDNN kernel, built through the graph API (dnn_graph.h) as the
// composite operation graph that cuDNN's runtime fusion engine recognises as
// flash attention — the form cudnn-frontend lowers its SDPA node to:
//
//   forward:  S = Q K^T (fp32) * scale [+ bias]; causal: where(row >= col, S, -inf);
//             M = rowmax S, E = exp(S - M), L = rowsum E;
//             stats = M + log L; O = (E / L) V
//   backward: D = rowsum(dO * O); P = exp(mask(Q K^T * scale) - stats);
//             dV = P^T dO; dS = P * (dO V^T - D) * scale;
//             dK = dS^T Q; dQ = dS K
//             [dBias = sum over B of P * (dO V^T - D)]
//
// sdpa_bias's bias is a [1, H, S, T] bf16 input added after the scale
// (plan_cudnn_sdpa_bias), its gradient a reduction of the unscaled dS over
// the batch into a [1, H, S, T] bf16 output. Neither has run on a GPU.
//
// cuDNN 9.19's single-operation SDPA descriptors (SDPA_FWD/BWD) have no
// causal attribute (cudnn_graph.h: Q, K, V, O, stats, scale, block mask,
// page tables, sequence lengths), so the composite graph is used. The
// causal mask is index generation + compare + select, top-left aligned:
// query i sees keys j <= i, the CPU causal_mask (with grouped queries the
// row index is the position inside its head, i mod period).
//
// Grouped-query attention: Q has h_q heads over h_k = 1 K/V head; the
// products broadcast K and V over the heads, and the backward sums dK and
// dV over them with a reduction.
//
// Determinism: the backward writes dQ straight from the dS K product (the
// dP-workspace form cudnn-frontend uses when asked for a deterministic
// algorithm on Hopper) instead of accumulating it in fp32 with atomics, and
// engine configurations that cuDNN notes non-deterministic are skipped.
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "backend/runtime/comm/env_vars.h"
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/dnn.h"
#include "backend/runtime/cuda/dnn_cudnn_impl.h"
#include "backend/runtime/cuda/dnn_graph.h"
#include "backend/runtime/cuda/dnn_sdpa_graph.h"

namespace nns::backend::NNS_DEV {

using dnn_graph::Dims;
using dnn_graph::Graph;
using dnn_graph::Tensor;

namespace {

enum class Pass { Forward = 10, Backward = 11 };

ShapeKey attention_key(Pass pass, const CudnnSdpaPlan& p) {
  return {static_cast<int>(pass), p.b, p.h_q, p.h_k, p.s_q, p.s_kv, p.d_qk, p.d_v, p.causal ? 1 : 0, p.bias ? 1 : 0};
}

Dims dims_of(const CudnnTensorLayout& l) { return {l.dims[0], l.dims[1], l.dims[2], l.dims[3]}; }
Dims strides_of(const CudnnTensorLayout& l) { return {l.strides[0], l.strides[1], l.strides[2], l.strides[3]}; }

Tensor bf16_tensor(Graph& g, const CudnnTensorLayout& l) {
  return g.tensor(dims_of(l), strides_of(l), CUDNN_DATA_BFLOAT16);
}

// The [B, H, D, T] view of a [B, H, T, D] tensor (stride swap, no copy):
// K^T for Q K^T, V^T for dO V^T.
Tensor transposed_bf16(Graph& g, const CudnnTensorLayout& l) {
  return g.tensor({l.dims[0], l.dims[1], l.dims[3], l.dims[2]},
                  {l.strides[0], l.strides[1], l.strides[3], l.strides[2]}, CUDNN_DATA_BFLOAT16);
}

// The [B, H, Sq, T] scores, scaled, plus the bias (its uid into r.bias),
// and causally masked when asked.
Tensor scaled_scores(Graph& g, const CudnnSdpaPlan& p, const Tensor& q, const Tensor& kt, const Tensor& scale,
                     SdpaGraph& r) {
  const Dims sdims{p.b, p.h_q, p.s_q, p.s_kv};
  Tensor s = g.virtual_tensor(sdims);
  g.matmul(q, kt, s);
  Tensor scaled = g.pointwise(CUDNN_POINTWISE_MUL, s, &scale);
  if (p.bias) {
    const Tensor bias = bf16_tensor(g, p.bias_layout);
    scaled = g.pointwise(CUDNN_POINTWISE_ADD, scaled, &bias);
    r.bias = bias.uid;
  }
  if (!p.causal) return scaled;
  Tensor row = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, CUDNN_DATA_INT32, 2);
  Tensor col = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, CUDNN_DATA_INT32, 3);
  Tensor keep = g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, CUDNN_DATA_BOOLEAN, -1, CUDNN_DATA_BOOLEAN);
  Tensor minus_inf = g.constant(-std::numeric_limits<float>::infinity());
  Tensor masked = g.virtual_tensor(sdims);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, &minus_inf, &keep, masked);
  return masked;
}

}  // namespace

void add_forward_ops(Graph& g, const CudnnSdpaPlan& p, SdpaGraph& r) {
  const Tensor q = bf16_tensor(g, p.q), kt = transposed_bf16(g, p.k), v = bf16_tensor(g, p.v);
  const Tensor scale = g.scalar_input();
  const Tensor s = scaled_scores(g, p, q, kt, scale, r);
  // Softmax with its statistics (log-sum-exp per row), for the backward.
  const Dims rows{p.b, p.h_q, p.s_q, 1};
  Tensor max = g.virtual_tensor(rows);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  Tensor shifted = g.pointwise(CUDNN_POINTWISE_SUB, s, &max);
  Tensor e = g.pointwise(CUDNN_POINTWISE_EXP, shifted);
  Tensor sum = g.virtual_tensor(rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  Tensor log_sum = g.pointwise(CUDNN_POINTWISE_LOG, sum);
  Tensor stats = g.tensor(dims_of(p.stats), strides_of(p.stats), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_ADD, max, &log_sum, nullptr, stats);
  // P in bf16 for the second product, as flash attention rounds it.
  Tensor probs = g.pointwise(CUDNN_POINTWISE_DIV, e, &sum, CUDNN_DATA_BFLOAT16);
  Tensor o = bf16_tensor(g, p.o);
  g.matmul(probs, v, o);
  r.q = q.uid, r.k = kt.uid, r.v = v.uid, r.scale = scale.uid, r.stats = stats.uid, r.o = o.uid;
}

namespace {

// y = x summed over the query heads into the one K/V head (GQA), or the
// product written straight into y when there is one query head.
void product_into(Graph& g, const CudnnSdpaPlan& p, const Tensor& a, const Tensor& b, const Tensor& y, int64_t cols) {
  if (p.h_q == p.h_k) return g.matmul(a, b, y);
  Tensor full = g.virtual_tensor({p.b, p.h_q, p.s_kv, cols}, CUDNN_DATA_BFLOAT16);
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, y);
}

}  // namespace

void add_backward_ops(Graph& g, const CudnnSdpaPlan& p, SdpaGraph& r) {
  const Tensor q = bf16_tensor(g, p.q), kt = transposed_bf16(g, p.k), vt = transposed_bf16(g, p.v);
  const Tensor o = bf16_tensor(g, p.o), d_o = bf16_tensor(g, p.o);
  const Tensor stats = g.tensor(dims_of(p.stats), strides_of(p.stats), CUDNN_DATA_FLOAT);
  const Tensor scale = g.scalar_input();
  // D = rowsum(dO * O), into scratch (the engine reads it per tile).
  const Dims rows{p.b, p.h_q, p.s_q, 1};
  Tensor d_o_o = g.pointwise(CUDNN_POINTWISE_MUL, d_o, &o);
  Tensor d_raw = g.virtual_tensor(rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, d_raw);
  Tensor one = g.constant(1.f);  // the dropout-scale slot of the pattern, without dropout
  Tensor row_sum = g.tensor(rows, dnn_graph::packed(rows), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, d_raw, &one, nullptr, row_sum);
  // P recomputed from the statistics.
  Tensor s = scaled_scores(g, p, q, kt, scale, r);
  Tensor shifted = g.pointwise(CUDNN_POINTWISE_SUB, s, &stats);
  Tensor probs = g.pointwise(CUDNN_POINTWISE_EXP, shifted);
  const Dims transposed{p.b, p.h_q, p.s_kv, p.s_q};
  const Dims transposed_strides{p.h_q * p.s_q * p.s_kv, p.s_q * p.s_kv, 1, p.s_kv};
  Tensor probs_t = g.virtual_tensor(transposed, transposed_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(probs, probs_t);
  Tensor dv = bf16_tensor(g, p.v);
  product_into(g, p, probs_t, d_o, dv, p.d_v);  // dV = P^T dO
  // dS = P * (dO V^T - D) * scale.
  Tensor dp = g.virtual_tensor({p.b, p.h_q, p.s_q, p.s_kv});
  g.matmul(d_o, vt, dp);
  Tensor centred = g.pointwise(CUDNN_POINTWISE_SUB, dp, &row_sum);
  Tensor ds_raw = g.pointwise(CUDNN_POINTWISE_MUL, centred, &probs);
  if (p.bias) {  // dBias: the unscaled dS summed over the batch
    const Tensor dbias = bf16_tensor(g, p.bias_layout);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, ds_raw, dbias);
    r.dbias = dbias.uid;
  }
  Tensor ds = g.pointwise(CUDNN_POINTWISE_MUL, ds_raw, &scale);
  Tensor ds_t = g.virtual_tensor(transposed, transposed_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, ds_t);
  Tensor dk = bf16_tensor(g, p.k);
  product_into(g, p, ds_t, q, dk, p.d_qk);  // dK = dS^T Q
  Tensor k = g.virtual_tensor(dims_of(p.k), strides_of(p.k), CUDNN_DATA_BFLOAT16);
  g.reshape(kt, k);
  Tensor dq = bf16_tensor(g, p.q);
  g.matmul(ds, k, dq);  // dQ = dS K, written directly: no fp32 atomics
  r.q = q.uid, r.k = kt.uid, r.v = vt.uid, r.o = o.uid, r.d_o = d_o.uid, r.stats = stats.uid;
  r.scale = scale.uid, r.dq = dq.uid, r.dk = dk.uid, r.dv = dv.uid, r.row_sum = row_sum.uid;
}

namespace {

// The graph of one pass and shape with its execution plan, on an engine
// cuDNN does not note non-deterministic (both passes: a run repeats bit for
// bit, as with the convolutions' algorithms).
std::shared_ptr<SdpaGraph> build_graph(cudnnHandle_t handle, Pass pass, const CudnnSdpaPlan& p) {
  auto r = std::make_shared<SdpaGraph>();
  r->graph = std::make_unique<Graph>(handle);
  Graph& g = *r->graph;
  if (pass == Pass::Forward)
    add_forward_ops(g, p, *r);
  else
    add_backward_ops(g, p, *r);
  r->usable = g.ok() && g.build(/*deterministic=*/true);
  if (!r->usable) r->why = std::string(pass == Pass::Forward ? "forward" : "backward") + " graph: " + g.error();
  return r;
}

const char* pass_name(Pass pass) { return pass == Pass::Forward ? "forward" : "backward"; }

std::string shape_text(const CudnnSdpaPlan& p) {
  return "b " + std::to_string(p.b) + " h_q " + std::to_string(p.h_q) + " s_q " + std::to_string(p.s_q) + " s_kv " +
         std::to_string(p.s_kv) + " d " + std::to_string(p.d_qk) + (p.causal ? " causal" : "") +
         (p.bias ? " bias" : "");
}

// Records why a call declined; NNS_CUDNN_TRACE=1 also prints each new
// reason (the GPU check's logs show which shapes ran where).
void declined(Dnn::Impl& impl, Pass pass, const std::string& why) {
  if (why != impl.attention_declined && nns_env_int("NNS_CUDNN_TRACE", 0) != 0)
    std::fprintf(stderr, "nns: sdpa %s on own kernels: %s\n", pass_name(pass), why.c_str());
  impl.attention_declined = why;
}

// The cached graph of (pass, shape), built the first time; null when the
// call declines (the reason is kept in impl.attention_declined).
std::shared_ptr<SdpaGraph> attention_graph(Dnn::Impl& impl, Pass pass, const CudnnSdpaPlan& p) {
  std::lock_guard<std::mutex> lock(impl.mutex);
  if (!impl.handle) {
    declined(impl, pass, impl.off_reason);
    return nullptr;
  }
  if (!p.accepted) {
    declined(impl, pass, "shape not taken: " + p.reason);
    return nullptr;
  }
  std::shared_ptr<SdpaGraph>& slot = impl.attention[attention_key(pass, p)];
  if (!slot) {
    slot = build_graph(impl.handle, pass, p);
    if (slot->usable && nns_env_int("NNS_CUDNN_TRACE", 0) != 0)
      std::fprintf(stderr, "nns: sdpa %s on cuDNN (%s): workspace %lld bytes\n", pass_name(pass), shape_text(p).c_str(),
                   static_cast<long long>(slot->graph->workspace_bytes()));
  }
  if (!slot->usable) {
    declined(impl, pass, slot->why + " (" + shape_text(p) + ")");
    return nullptr;
  }
  return slot;
}

bool run(Dnn::Impl& impl, Pass pass, SdpaGraph& sg, const std::vector<std::pair<int64_t, void*>>& data,
         Scratch& scratch) {
  void* ws = sg.graph->workspace_bytes() > 0 ? scratch.get<char>(sg.graph->workspace_bytes()) : nullptr;
  std::lock_guard<std::mutex> lock(impl.mutex);
  if (sg.graph->execute(data, ws)) return true;
  // A refusal at execution: decline this call (the own kernel runs) and
  // every later one of the shape.
  sg.usable = false;
  sg.why = "execute: " + sg.graph->error();
  declined(impl, pass, sg.why);
  return false;
}

void* mut(const void* p) { return const_cast<void*>(p); }

}  // namespace

bool Dnn::sdpa_forward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                       uint16_t* o, float* stats, Scratch& scratch, const uint16_t* bias) {
  std::shared_ptr<SdpaGraph> sg = attention_graph(*impl_, Pass::Forward, p);
  if (!sg) return false;
  std::vector<std::pair<int64_t, void*>> data = {{sg->q, mut(q)}, {sg->k, mut(k)},    {sg->v, mut(v)},
                                                 {sg->o, o},      {sg->stats, stats}, {sg->scale, &scale}};
  if (p.bias) data.push_back({sg->bias, mut(bias)});
  return run(*impl_, Pass::Forward, *sg, data, scratch);
}

bool Dnn::sdpa_backward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                        const uint16_t* o, const uint16_t* d_o, const float* stats, uint16_t* dq, uint16_t* dk,
                        uint16_t* dv, Scratch& scratch, const uint16_t* bias, uint16_t* dbias) {
  std::shared_ptr<SdpaGraph> sg = attention_graph(*impl_, Pass::Backward, p);
  if (!sg) return false;
  float* row_sum = scratch.get<float>(p.stats_elems());
  std::vector<std::pair<int64_t, void*>> data = {{sg->q, mut(q)},     {sg->k, mut(k)},       {sg->v, mut(v)},
                                                 {sg->o, mut(o)},     {sg->d_o, mut(d_o)},   {sg->stats, mut(stats)},
                                                 {sg->scale, &scale}, {sg->dq, dq},          {sg->dk, dk},
                                                 {sg->dv, dv},        {sg->row_sum, row_sum}};
  if (p.bias) {
    data.push_back({sg->bias, mut(bias)});
    data.push_back({sg->dbias, dbias});
  }
  return run(*impl_, Pass::Backward, *sg, data, scratch);
}

std::string Dnn::attention_declined() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->attention_declined;
}

size_t Dnn::cached_attention_graphs() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->attention.size();
}

}  // namespace nns::backend::NNS_DEV
