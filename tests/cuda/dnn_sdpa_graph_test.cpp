// The fused attention graphs (backend/runtime/cuda/dnn_sdpa_graph.h) built
// against the real cuDNN library on the host, without a GPU: cuDNN checks
// every descriptor's attributes, and each operation's tensors (matmul
// operand dims, pointwise broadcasts, reduction shapes, reshape sizes) when
// the operation is finalized, which needs no device. What this cannot
// check is the operation graph itself, the engine cuDNN picks, and the
// numbers: those need the GPU (device_attention_test.cpp).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <set>

#include "backend/runtime/cuda/dnn_sdpa_graph.h"

namespace nns::backend::NNS_DEV {

namespace {

AttentionDims dims(int64_t batch, int64_t s, int64_t e, int64_t t, int64_t f) {
  AttentionDims d;
  d.batch = batch, d.s = s, d.e = e, d.t = t, d.f = f;
  return d;
}

struct GraphCase {
  const char* name;
  AttentionDims d;
  bool causal;
  int64_t period;
};

const GraphCase kCases[] = {
    {"GPT causal", dims(8, 64, 64, 64, 64), true, 0},
    {"GPT encoder", dims(8, 64, 64, 64, 64), false, 0},
    {"Llama GQA causal", dims(4, 4 * 32, 64, 32, 64), true, 32},
    {"cross-attention", dims(3, 40, 32, 24, 32), false, 0},
};

}  // namespace

TEST_CASE("cuDNN attention graphs: every operation finalizes on the host", "[cudnn_graph]") {
  for (const GraphCase& c : kCases) {
    const CudnnSdpaPlan p = plan_cudnn_sdpa(c.d, c.causal, c.period);
    REQUIRE(p.accepted);
    for (bool backward : {false, true}) {
      INFO(c.name << (backward ? " backward" : " forward"));
      dnn_graph::Graph g(nullptr);  // no handle: operations only, no plan
      SdpaGraph r;
      if (backward)
        add_backward_ops(g, p, r);
      else
        add_forward_ops(g, p, r);
      INFO("cuDNN: " << g.error());
      CHECK(g.ok());
      // Forward: 2 matmuls, scale, 2 reductions, sub, exp, log, add, div
      // (10), plus 4 for the mask. Backward: mul, reduction, mul (3);
      // matmul, scale (2) + 4 for the mask; sub, exp, reshape, dV (4);
      // matmul, sub, mul, mul, reshape, dK (6); reshape, dQ (2); the GQA
      // form adds a reduction each to dV and dK.
      const size_t mask = c.causal ? 4 : 0, gqa = p.h_q > 1 ? 2 : 0;
      CHECK(g.operations() == (backward ? 17 + mask + gqa : 10 + mask));
      std::set<int64_t> uids =
          backward ? std::set<int64_t>{r.q, r.k, r.v, r.o, r.d_o, r.stats, r.scale, r.dq, r.dk, r.dv, r.row_sum}
                   : std::set<int64_t>{r.q, r.k, r.v, r.o, r.stats, r.scale};
      CHECK(uids.count(0) == 0);
      CHECK(uids.size() == (backward ? 11u : 6u));
    }
  }
}

// sdpa_bias: the bias added after the scale (one more operation in each
// direction) and, in the backward, dBias's reduction over the batch.
TEST_CASE("cuDNN attention graphs with a bias: every operation finalizes on the host", "[cudnn_graph]") {
  struct BiasCase {
    const char* name;
    sema::Shape q, bias;
    bool causal;
  };
  const BiasCase cases[] = {
      {"T5 causal", {2, 8, 64, 64}, {8, 64, 64}, true},
      {"Swin windows x heads", {2, 4, 3, 16, 32}, {4, 3, 16, 16}, false},
  };
  for (const BiasCase& c : cases) {
    const AttentionDims d = attention_dims(c.q, {c.q[0], c.q.back(), c.q[c.q.size() - 2]}, c.q);
    const CudnnSdpaPlan p = plan_cudnn_sdpa_bias(c.q, d, c.causal, 0, c.bias);
    REQUIRE(p.accepted);
    for (bool backward : {false, true}) {
      INFO(c.name << (backward ? " backward" : " forward"));
      dnn_graph::Graph g(nullptr);
      SdpaGraph r;
      if (backward)
        add_backward_ops(g, p, r);
      else
        add_forward_ops(g, p, r);
      INFO("cuDNN: " << g.error());
      CHECK(g.ok());
      const size_t mask = c.causal ? 4 : 0;
      CHECK(g.operations() == (backward ? 17 + mask + 2 : 10 + mask + 1));
      CHECK(r.bias != 0);
      CHECK((r.dbias != 0) == backward);
      if (backward) CHECK(r.dbias != r.bias);
    }
  }
}

// The check above can fail: an operation whose tensors do not fit is
// refused at its finalize, and the builder keeps the first refusal.
TEST_CASE("cuDNN attention graphs: a mismatched operation is refused with its reason", "[cudnn_graph]") {
  dnn_graph::Graph g(nullptr);
  const dnn_graph::Dims a{1, 1, 4, 8}, b{1, 1, 16, 4}, c{1, 1, 4, 4};
  const dnn_graph::Tensor ta = g.tensor(a, dnn_graph::packed(a), CUDNN_DATA_BFLOAT16);
  const dnn_graph::Tensor tb = g.tensor(b, dnn_graph::packed(b), CUDNN_DATA_BFLOAT16);
  const dnn_graph::Tensor tc = g.virtual_tensor(c);
  REQUIRE(g.ok());
  g.matmul(ta, tb, tc);  // [4, 8] x [16, 4]: inner dims differ
  CHECK_FALSE(g.ok());
  CHECK(g.error().find("matmul") != std::string::npos);
  // Later calls do nothing and keep the first reason.
  const std::string first = g.error();
  g.virtual_tensor(c);
  CHECK(g.error() == first);
}

}  // namespace nns::backend::NNS_DEV
