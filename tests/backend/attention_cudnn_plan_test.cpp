// plan_cudnn_sdpa (backend/runtime/attention_cudnn_plan.h): which sdpa
// shapes go to cuDNN's fused attention and the [B, H, S, D] dims and strides
// it is handed. Pure host code: runs without a GPU. The strides are checked
// by walking them: element (b, h, s, d) of each cuDNN view must be the
// element the sdpa node's row-major operand holds there.
#include <catch2/catch.hpp>

#include "backend/runtime/attention_cudnn_plan.h"

namespace nns::backend {

namespace {

AttentionDims dims(int64_t batch, int64_t s, int64_t e, int64_t t, int64_t f) {
  AttentionDims d;
  d.batch = batch, d.s = s, d.e = e, d.t = t, d.f = f;
  return d;
}

int64_t at(const CudnnTensorLayout& l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * l.strides[0] + h * l.strides[1] + s * l.strides[2] + d * l.strides[3];
}

}  // namespace

TEST_CASE("cuDNN sdpa plan: GPT-like multi-head attention, causal and not", "[cudnn_plan]") {
  for (bool causal : {true, false}) {
    // 2 sequences x 12 heads folded into the batch, 64 positions, head dim 64.
    const CudnnSdpaPlan p = plan_cudnn_sdpa(dims(24, 64, 64, 64, 64), causal, 0);
    REQUIRE(p.accepted);
    CHECK(p.reason.empty());
    CHECK(p.causal == causal);
    CHECK(p.b == 24);
    CHECK(p.h_q == 1);
    CHECK(p.h_k == 1);
    CHECK(p.s_q == 64);
    CHECK(p.s_kv == 64);
    CHECK(p.d_qk == 64);
    CHECK(p.q.dims == std::array<int64_t, 4>{24, 1, 64, 64});
    CHECK(p.q.strides == std::array<int64_t, 4>{64 * 64, 64 * 64, 64, 1});
    CHECK(p.k.strides == std::array<int64_t, 4>{64 * 64, 64 * 64, 64, 1});
    CHECK(p.stats.dims == std::array<int64_t, 4>{24, 1, 64, 1});
    CHECK(p.o_elems() == 24 * 64 * 64);
  }
}

TEST_CASE("cuDNN sdpa plan: Llama grouped-query attention maps stacked queries to heads", "[cudnn_plan]") {
  // qg [batch 2, kv 4, rep 3 * seq 16, hd 64] with period = seq: 3 query
  // heads of 16 positions share each K/V head.
  const int64_t batch = 2 * 4, rep = 3, seq = 16, hd = 64;
  const CudnnSdpaPlan p = plan_cudnn_sdpa(dims(batch, rep * seq, hd, seq, hd), true, seq);
  REQUIRE(p.accepted);
  CHECK(p.b == batch);
  CHECK(p.h_q == rep);
  CHECK(p.h_k == 1);
  CHECK(p.s_q == seq);
  CHECK(p.s_kv == seq);
  // Query head h, position i of batch entry b is row h * seq + i of q.
  for (int64_t b : {0L, batch - 1})
    for (int64_t h = 0; h < rep; ++h)
      for (int64_t i : {0L, seq - 1})
        for (int64_t d : {0L, hd - 1}) {
          CHECK(at(p.q, b, h, i, d) == (b * rep * seq + h * seq + i) * hd + d);
          CHECK(at(p.o, b, h, i, d) == (b * rep * seq + h * seq + i) * hd + d);
        }
  // K (the [t, e] copy) and V: one head per batch entry.
  CHECK(at(p.k, 1, 0, 5, 7) == (1 * seq + 5) * hd + 7);
  CHECK(at(p.v, 1, 0, 5, 7) == (1 * seq + 5) * hd + 7);
  CHECK(at(p.stats, 1, 2, 5, 0) == (1 * rep + 2) * seq + 5);
  // A period equal to s is no grouping.
  const CudnnSdpaPlan flat = plan_cudnn_sdpa(dims(batch, seq, hd, seq, hd), true, seq);
  REQUIRE(flat.accepted);
  CHECK(flat.h_q == 1);
  CHECK(flat.s_q == seq);
}

TEST_CASE("cuDNN sdpa plan: cross-attention lengths are taken", "[cudnn_plan]") {
  const CudnnSdpaPlan p = plan_cudnn_sdpa(dims(3, 10, 32, 7, 32), false, 0);
  REQUIRE(p.accepted);
  CHECK(p.s_q == 10);
  CHECK(p.s_kv == 7);
  CHECK(at(p.k, 2, 0, 6, 31) == (2 * 7 + 6) * 32 + 31);
  CHECK(at(p.o, 2, 0, 9, 31) == (2 * 10 + 9) * 32 + 31);
}

TEST_CASE("cuDNN sdpa plan: shapes cuDNN does not take are declined with a reason", "[cudnn_plan]") {
  struct Case {
    AttentionDims d;
    int64_t period;
    const char* why;
  };
  for (const Case& c :
       {Case{dims(2, 5, 4, 5, 4), 0, "multiple of 8"},  // the conformance table's tiny heads
        Case{dims(2, 16, 36, 16, 36), 0, "multiple of 8"}, Case{dims(2, 16, 256, 16, 256), 0, "over 128"},
        Case{dims(2, 16, 64, 16, 32), 0, "differs"},         // d_qk != d_v
        Case{dims(2, 12, 64, 5, 64), 5, "does not divide"},  // 12 rows, period 5
        Case{dims(0, 16, 64, 16, 64), 0, "empty"}, Case{dims(2, 0, 64, 16, 64), 0, "empty"},
        Case{dims(int64_t(1) << 20, 4096, 64, 4096, 64), 0, "2^31"}}) {
    const CudnnSdpaPlan p = plan_cudnn_sdpa(c.d, true, c.period);
    INFO("s " << c.d.s << " e " << c.d.e << " f " << c.d.f << ": " << p.reason);
    CHECK_FALSE(p.accepted);
    CHECK(p.reason.find(c.why) != std::string::npos);
  }
}

// sdpa_bias: the leading dims the bias is broadcast along become B, those it
// shares H; the bias is [1, H, S, T], read where the node's bias holds it.
TEST_CASE("cuDNN sdpa_bias plan: the bias's shared dims are the heads", "[cudnn_plan]") {
  const int64_t batch = 2, heads = 4, s = 16, e = 64;
  // T5: q [2, 4, 16, 64], bias [4, 16, 16].
  const CudnnSdpaPlan p =
      plan_cudnn_sdpa_bias({batch, heads, s, e}, dims(batch * heads, s, e, s, e), true, 0, {heads, s, s});
  REQUIRE(p.accepted);
  CHECK(p.bias);
  CHECK(p.b == batch);
  CHECK(p.h_q == heads);
  CHECK(p.h_k == heads);
  CHECK(p.bias_layout.dims == std::array<int64_t, 4>{1, heads, s, s});
  CHECK(p.bias_elems() == heads * s * s);
  for (int64_t b : {0L, batch - 1})
    for (int64_t h : {0L, heads - 1}) {
      // Element (b, h, i, x) of each view is the node's element at [b, h, i, x].
      CHECK(at(p.q, b, h, 3, 5) == ((b * heads + h) * s + 3) * e + 5);
      CHECK(at(p.k, b, h, 3, 5) == ((b * heads + h) * s + 3) * e + 5);
      CHECK(at(p.o, b, h, 3, 5) == ((b * heads + h) * s + 3) * e + 5);
      CHECK(at(p.stats, b, h, 3, 0) == (b * heads + h) * s + 3);
      CHECK(at(p.bias_layout, 0, h, 3, 7) == (h * s + 3) * s + 7);
    }
  // Swin: q [b 2, nw 3, h 4, n, d], bias [3, 4, n, n] (with a leading 1): H = 12.
  const CudnnSdpaPlan w = plan_cudnn_sdpa_bias({2, 3, 4, s, e}, dims(24, s, e, s, e), false, 0, {1, 3, 4, s, s});
  REQUIRE(w.accepted);
  CHECK(w.b == 2);
  CHECK(w.h_q == 12);
  // A bias of q's whole shape: B = 1, every leading dim a head.
  const CudnnSdpaPlan full = plan_cudnn_sdpa_bias({2, 4, s, e}, dims(8, s, e, s, e), false, 0, {2, 4, s, s});
  REQUIRE(full.accepted);
  CHECK(full.b == 1);
  CHECK(full.h_q == 8);
  // [s, t] only: H = 1, every leading dim in B.
  const CudnnSdpaPlan shared = plan_cudnn_sdpa_bias({2, 4, s, e}, dims(8, s, e, s, e), false, 0, {s, s});
  REQUIRE(shared.accepted);
  CHECK(shared.b == 8);
  CHECK(shared.h_q == 1);
}

TEST_CASE("cuDNN sdpa_bias plan: biases that are not [1, H, S, T] are declined with a reason", "[cudnn_plan]") {
  const int64_t s = 16, e = 64;
  // Per sequence, shared by the heads: [B, 1, S, T].
  CudnnSdpaPlan p = plan_cudnn_sdpa_bias({2, 4, s, e}, dims(8, s, e, s, e), false, 0, {2, 1, s, s});
  CHECK_FALSE(p.accepted);
  CHECK(p.reason.find("[B, 1, S, T]") != std::string::npos);
  // Grouped-query rows.
  p = plan_cudnn_sdpa_bias({8, 3 * s, e}, dims(8, 3 * s, e, s, e), true, s, {3 * s, s});
  CHECK_FALSE(p.accepted);
  CHECK(p.reason.find("grouped-query") != std::string::npos);
  // What sdpa declines, sdpa_bias declines for the same reason.
  p = plan_cudnn_sdpa_bias({2, 4, s, 20}, dims(8, s, 20, s, 20), false, 0, {4, s, s});
  CHECK_FALSE(p.accepted);
  CHECK(p.reason.find("multiple of 8") != std::string::npos);
}

}  // namespace nns::backend
