// Dnn without cuDNN: the host emulation, and a GPU build where CMake found
// no cuDNN. Every call declines, so the kernel wrappers run our own
// kernels (dnn.h).
//
// One exception, in the emulation only and only when asked for
// (make_cuda_emulation_backend(..., attention_model = true)): the attention
// calls run a host model of cuDNN's fused kernel, on the operands and in
// the layouts the kernel wrapper hands cuDNN (attention_cudnn_plan.h): bf16
// Q, the [t, e] copy of K, V; fp32 statistics; the probabilities rounded to
// bf16 before P V and dS / P^T before the backward products, as the fused
// kernel does; bf16 results. It is not cuDNN and says nothing about
// cuDNN's graphs (tests/cuda/dnn_sdpa_graph_test.cpp and a GPU do); what it
// lets the emulation test is the wrapper's side of the seam: which calls
// take the path, the bf16 operands, the K transpose and its way back, the
// GQA head layout, and the forward rerun that feeds the backward.
#include <cmath>
#include <vector>

#include "backend/runtime/cpu/half_bits.h"
#include "backend/runtime/cuda/dnn.h"

namespace nns::backend::NNS_DEV {

struct Dnn::Impl {
  bool attention_model = false;
  std::string attention_declined;
  size_t attention_calls = 0;
};

Dnn::Dnn(Stream, bool attention_model) : impl_(std::make_unique<Impl>()) {
#if defined(NNS_DNN_EMULATION)
  impl_->attention_model = attention_model;
#else
  (void)attention_model;  // a GPU build without cuDNN has no model to run
#endif
}
Dnn::~Dnn() = default;

bool Dnn::conv_forward(const ConvGeometry&, const float*, const float*, const float*, float*, Scratch&) {
  return false;
}
bool Dnn::conv_backward_data(const ConvGeometry&, const float*, const float*, float*, Scratch&) { return false; }
bool Dnn::conv_backward_filter(const ConvGeometry&, const float*, const float*, float*, Scratch&) { return false; }
bool Dnn::pool_forward(const PoolGeometry&, bool, const float*, float*) { return false; }
bool Dnn::pool_backward(const PoolGeometry&, bool, const float*, const float*, float*, Scratch&) { return false; }

namespace {

using cpu::bf16_bits;
using cpu::bf16_to_float;

// Element (b, h, s, x) of a tensor in the plan's layout; K/V heads are
// shared by h_q / h_k query heads.
int64_t at(const CudnnTensorLayout& l, int64_t b, int64_t h, int64_t s, int64_t x) {
  return b * l.strides[0] + h * l.strides[1] + s * l.strides[2] + x * l.strides[3];
}

// The scaled (plus the bias, with p.bias), masked scores of query row i of
// (b, h) against every key.
void scores(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* bias, int64_t b,
            int64_t h, int64_t i, std::vector<float>& s) {
  const int64_t hk = h / (p.h_q / p.h_k);
  s.assign(static_cast<size_t>(p.s_kv), -INFINITY);
  for (int64_t j = 0; j < p.s_kv; ++j) {
    if (p.causal && j > i) continue;
    float acc = 0;
    for (int64_t x = 0; x < p.d_qk; ++x)
      acc += bf16_to_float(q[at(p.q, b, h, i, x)]) * bf16_to_float(k[at(p.k, b, hk, j, x)]);
    s[static_cast<size_t>(j)] = acc * scale;
    if (p.bias) s[static_cast<size_t>(j)] += bf16_to_float(bias[at(p.bias_layout, 0, h, i, j)]);
  }
}

void model_forward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                   const uint16_t* bias, uint16_t* o, float* stats) {
  std::vector<float> s;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < p.h_q; ++h)
      for (int64_t i = 0; i < p.s_q; ++i) {
        scores(p, scale, q, k, bias, b, h, i, s);
        float m = -INFINITY, l = 0;
        for (float x : s) m = std::fmax(m, x);
        for (float x : s) l += std::exp(x - m);
        stats[at(p.stats, b, h, i, 0)] = m + std::log(l);
        const int64_t hk = h / (p.h_q / p.h_k);
        for (int64_t x = 0; x < p.d_v; ++x) {
          float acc = 0;
          for (int64_t j = 0; j < p.s_kv; ++j)
            acc += cpu::round_to_bf16(std::exp(s[static_cast<size_t>(j)] - m) / l) *
                   bf16_to_float(v[at(p.v, b, hk, j, x)]);
          o[at(p.o, b, h, i, x)] = bf16_bits(acc);
        }
      }
}

struct ModelGrads {
  uint16_t *dq, *dk, *dv, *dbias;  // dbias: p.bias only
};

void model_backward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                    const uint16_t* o, const uint16_t* d_o, const float* stats, const uint16_t* bias, ModelGrads g) {
  // dK, dV (and dBias) sum over query rows and heads (the batch): fp32
  // accumulators, bf16 at the end.
  std::vector<float> dk(static_cast<size_t>(p.k_elems())), dv(static_cast<size_t>(p.v_elems()));
  std::vector<float> dbias(p.bias ? static_cast<size_t>(p.bias_elems()) : 0);
  std::vector<float> s, ds(static_cast<size_t>(p.s_kv));
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < p.h_q; ++h)
      for (int64_t i = 0; i < p.s_q; ++i) {
        const int64_t hk = h / (p.h_q / p.h_k);
        scores(p, scale, q, k, bias, b, h, i, s);
        float d = 0;  // rowsum(dO * O)
        for (int64_t x = 0; x < p.d_v; ++x)
          d += bf16_to_float(d_o[at(p.o, b, h, i, x)]) * bf16_to_float(o[at(p.o, b, h, i, x)]);
        for (int64_t j = 0; j < p.s_kv; ++j) {
          const float pj = std::exp(s[static_cast<size_t>(j)] - stats[at(p.stats, b, h, i, 0)]);
          float dp = 0;
          for (int64_t x = 0; x < p.d_v; ++x) {
            const float dox = bf16_to_float(d_o[at(p.o, b, h, i, x)]);
            dp += dox * bf16_to_float(v[at(p.v, b, hk, j, x)]);
            dv[static_cast<size_t>(at(p.v, b, hk, j, x))] += cpu::round_to_bf16(pj) * dox;
          }
          const float ds_raw = pj * (dp - d);
          if (p.bias) dbias[static_cast<size_t>(at(p.bias_layout, 0, h, i, j))] += ds_raw;
          ds[static_cast<size_t>(j)] = ds_raw * scale;
        }
        for (int64_t x = 0; x < p.d_qk; ++x) {
          float acc = 0;
          for (int64_t j = 0; j < p.s_kv; ++j) {
            acc += ds[static_cast<size_t>(j)] * bf16_to_float(k[at(p.k, b, hk, j, x)]);
            dk[static_cast<size_t>(at(p.k, b, hk, j, x))] +=
                cpu::round_to_bf16(ds[static_cast<size_t>(j)]) * bf16_to_float(q[at(p.q, b, h, i, x)]);
          }
          g.dq[at(p.q, b, h, i, x)] = bf16_bits(acc);
        }
      }
  for (size_t i = 0; i < dk.size(); ++i) g.dk[i] = bf16_bits(dk[i]);
  for (size_t i = 0; i < dv.size(); ++i) g.dv[i] = bf16_bits(dv[i]);
  for (size_t i = 0; i < dbias.size(); ++i) g.dbias[i] = bf16_bits(dbias[i]);
}

}  // namespace

bool Dnn::sdpa_forward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                       uint16_t* o, float* stats, Scratch&, const uint16_t* bias) {
  if (!impl_->attention_model || !p.accepted) {
    impl_->attention_declined = !impl_->attention_model ? describe() : "shape not taken: " + p.reason;
    return false;
  }
  ++impl_->attention_calls;
  model_forward(p, scale, q, k, v, bias, o, stats);
  return true;
}

bool Dnn::sdpa_backward(const CudnnSdpaPlan& p, float scale, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                        const uint16_t* o, const uint16_t* d_o, const float* stats, uint16_t* dq, uint16_t* dk,
                        uint16_t* dv, Scratch&, const uint16_t* bias, uint16_t* dbias) {
  if (!impl_->attention_model || !p.accepted) {
    impl_->attention_declined = !impl_->attention_model ? describe() : "shape not taken: " + p.reason;
    return false;
  }
  ++impl_->attention_calls;
  model_backward(p, scale, q, k, v, o, d_o, stats, bias, ModelGrads{dq, dk, dv, dbias});
  return true;
}

std::string Dnn::attention_declined() const { return impl_->attention_declined; }
size_t Dnn::cached_attention_graphs() const { return 0; }

std::string dnn_library_version() {
#if defined(NNS_DNN_EMULATION)
  return "no cuDNN (emulation)";
#else
  return "no cuDNN (not found at configure time)";
#endif
}

std::string Dnn::describe() const {
#if defined(NNS_DNN_EMULATION)
  return impl_->attention_model ? "no cuDNN in the emulation: own kernels, and a host model of cuDNN's fused attention"
                                : "no cuDNN in the emulation: own kernels";
#else
  return "built without cuDNN: own kernels";
#endif
}
size_t Dnn::cached_algorithms() const { return 0; }
// In the emulation with the attention model, the attention calls run.
bool Dnn::active() const { return impl_->attention_model; }

}  // namespace nns::backend::NNS_DEV
