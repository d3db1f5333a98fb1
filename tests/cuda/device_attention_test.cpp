// sdpa under bf16 storage: the shapes of GPT (causal and not), Llama's
// grouped-query causal attention, cross-attention, and shapes cuDNN's fused
// attention must decline. On a GPU the backend as nns runs it sends the
// taken shapes to cuDNN (dnn_sdpa.cpp) and the case checks
//   - cuDNN against the CPU reference (fp32 on the same bf16 inputs);
//   - the own kernels (cuDNN off) against the same reference;
//   - that cuDNN ran where it should (its result differs from the own
//     kernels': it rounds the probabilities to bf16 before P V and sums in
//     its own order) and did not where it must decline (bit for bit equal);
//   - that a second run repeats the first bit for bit (deterministic
//     engines only).
// In the emulation (no cuDNN) the own kernels' bf16-storage path is checked
// against the reference, and so is the kernel wrapper's cuDNN path with a
// host model of the fused kernel in cuDNN's place (dnn_none.cpp), with the
// same take / decline checks against the plain emulation. Without a GPU the
// GPU binary reports itself skipped (tested_cuda.cpp), never passed.
//
// Tolerances (error_stats: |got - want| / (|want| + mean |want|)): the
// inputs are bf16 values, so the reference sees exactly what cuDNN reads;
// the differences are cuDNN's bf16 roundings inside the fused kernel (unit
// roundoff 2^-9 ~ 0.002 each): P before P V, dS and P^T before the backward
// products, and the bf16 outputs. A forward output is a convex combination
// of v rows, its error at most 2^-9 max|v| ~ 10 x 2^-9 of the mean |out|
// for these inputs: 2e-2. Gradients go through dS = P (dP - rowsum(dO O)),
// whose cancellation loses a few more bits relative to the mean: 5e-2.
// These are first estimates that the first GPU run confirms or corrects;
// the own kernels' rows carry the same bounds (they only round outputs:
// measured at most 3.5e-3). The host model of the fused kernel
// (dnn_none.cpp), which rounds where flash attention rounds, measured at
// most 1.15e-2 forward and 2.7e-2 for gradients (GPT causal dq) on these
// cases: NNS_BACKEND_TABLE=1 nns_cuda_emu_tests "[cudnn]".
#include <cmath>
#include <sstream>

#include "backend_test_util.h"
#include "cudnn_twin.h"
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

constexpr double kForwardTol = 2e-2, kBackwardTol = 5e-2;

struct FusedCase {
  const char* name;
  sema::Shape lead;
  int64_t s, e, t, f;
  bool causal;
  int64_t period;  // grouped-query attention: query rows stacked per head (0: none)
  bool taken;      // whether cuDNN must take it (attention_cudnn_plan.h)
};

const std::vector<FusedCase>& fused_cases() {
  static const std::vector<FusedCase> cases = {
      {"GPT causal", {2, 4}, 64, 64, 64, 64, true, 0, true},
      {"GPT encoder", {2, 4}, 64, 64, 64, 64, false, 0, true},
      // qg [batch 2, kv 2, rep 4 * seq 32, hd 64], kt [2, 2, 64, 32].
      {"Llama GQA causal", {2, 2}, 4 * 32, 64, 32, 64, true, 32, true},
      {"cross-attention", {3}, 40, 32, 24, 32, false, 0, true},
      {"head dim 20 (not a multiple of 8)", {2, 2}, 16, 20, 16, 20, true, 0, false},
      {"head dim 160 (over 128)", {1}, 8, 160, 8, 160, true, 0, false},
      {"d_qk 32 != d_v 16", {2}, 16, 32, 16, 16, false, 0, false},
  };
  return cases;
}

sema::Shape with(const sema::Shape& lead, int64_t a, int64_t b) {
  sema::Shape s = lead;
  s.push_back(a);
  s.push_back(b);
  return s;
}

// Random values that bf16 holds exactly: bf16 storage then rounds nothing
// and the fp32 reference reads the same inputs.
HostTensor bf16_exact(const sema::Shape& shape, uint32_t seed) {
  Buf v = random_buf(sema::numel(shape), seed);
  for (float& x : v) x = cpu::round_to_bf16(x);
  return f32(shape, std::move(v));
}

bool bitwise_equal(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].f.size() != b[k].f.size()) return false;
    for (size_t i = 0; i < a[k].f.size(); ++i)
      if (cpu::f32_bits(a[k].f[i]) != cpu::f32_bits(b[k].f[i])) return false;
  }
  return true;
}

// `c` on every tested backend under bf16 storage against the reference
// outputs `want`, and against the cuDNN-off twin where there is one.
void check_fused(const FusedCase& fc, const std::string& what, const NodeCase& c, const std::vector<HostTensor>& want,
                 const std::vector<std::string>& names, double tol) {
  for (Backend* b : attention_backends()) {
    const std::vector<HostTensor> got = run_case(*b, c, true);
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k)
      expect_close(b->name() + " " + c.kind + " bf16", std::string(fc.name) + " " + what, names[k], got[k].f, want[k].f,
                   tol);
    if (Backend* own = cudnn_off_twin(*b)) {
      // Deterministic engines only (dnn_sdpa.cpp): a second run repeats the first bit for bit.
      CHECK(bitwise_equal(got, run_case(*b, c, true)));
      const std::vector<HostTensor> own_got = run_case(*own, c, true);
      INFO(fc.name << " " << what << ": cuDNN must " << (fc.taken ? "take" : "decline") << " this shape");
      if (fc.taken)
        CHECK_FALSE(bitwise_equal(got, own_got));  // equal: cuDNN declined (NNS_CUDNN_TRACE=1 says why)
      else
        CHECK(bitwise_equal(got, own_got));
    }
  }
}

}  // namespace

TEST_CASE("device: sdpa under bf16 storage, cuDNN fused attention where a GPU has it", "[cuda][bf16][cudnn]") {
  uint32_t seed = 7300;
  for (const FusedCase& fc : fused_cases()) {
    const sema::Shape qs = with(fc.lead, fc.s, fc.e), ks = with(fc.lead, fc.e, fc.t), vs = with(fc.lead, fc.t, fc.f),
                      ys = with(fc.lead, fc.s, fc.f);
    const double scale = 1.0 / std::sqrt(static_cast<double>(fc.e));
    NodeCase fwd{"sdpa",
                 {{"scale", scale}, {"causal", fc.causal}, {"period", fc.period}},
                 {bf16_exact(qs, ++seed), bf16_exact(ks, ++seed), bf16_exact(vs, ++seed)},
                 {f32_zeros(ys)}};
    const std::vector<HostTensor> y = run_case(reference_backend(), fwd);
    check_fused(fc, "forward", fwd, y, {"out"}, kForwardTol);
    // The backward's y input as bf16 storage holds it.
    HostTensor y16 = y[0];
    for (float& v : y16.f) v = cpu::round_to_bf16(v);
    NodeCase bwd = backward_case(fwd, {y16}, {bf16_exact(ys, ++seed)}, {1, 1, 1});
    check_fused(fc, "backward", bwd, run_case(reference_backend(), bwd), {"dq", "dkt", "dv"}, kBackwardTol);
    NodeCase only_dkt = backward_case(fwd, {y16}, {bwd.inputs.back()}, {0, 1, 0});
    check_fused(fc, "backward dkt only", only_dkt, run_case(reference_backend(), only_dkt), {"dkt"}, kBackwardTol);
  }
}

// sdpa_bias under bf16 storage: the bias a [1, H, S, T] graph input and
// dbias cuDNN's reduction over B (plan_cudnn_sdpa_bias) where the bias is
// broadcast along the leading dims in front of those it shares (T5's heads;
// Swin's windows and heads); a bias shared in front of a dim it is broadcast
// along ([B, 1, S, T]) is declined and runs the own kernels. The same
// checks as above: against the reference within its bounds, taken (differs
// from the cuDNN-off twin) or declined (equal to it bit for bit). The host
// model measured at most 2.47e-2 (T5's dbias); the own kernels at most
// 3.4e-3.
TEST_CASE("device: sdpa_bias under bf16 storage, the bias on cuDNN where its shape is [1, H, S, T]",
          "[cuda][bf16][cudnn]") {
  struct BiasCase {
    FusedCase fc;
    sema::Shape bias_lead;
  };
  const BiasCase cases[] = {
      {{"T5 bias [h, s, s], causal", {2, 4}, 64, 64, 64, 64, true, 0, true}, {4}},
      {{"Swin bias + mask [nw, h, n, n]", {2, 2, 2}, 16, 32, 16, 32, false, 0, true}, {2, 2}},
      {{"a per-sequence bias [b, 1, s, t] (declined)", {2, 4}, 32, 32, 32, 32, false, 0, false}, {2, 1}},
  };
  uint32_t seed = 7700;
  for (const BiasCase& bc : cases) {
    const FusedCase& fc = bc.fc;
    const sema::Shape qs = with(fc.lead, fc.s, fc.e), ks = with(fc.lead, fc.e, fc.t), vs = with(fc.lead, fc.t, fc.f),
                      bs = with(bc.bias_lead, fc.s, fc.t), ys = with(fc.lead, fc.s, fc.f);
    NodeCase fwd{"sdpa_bias",
                 {{"scale", 1.0 / std::sqrt(static_cast<double>(fc.e))}, {"causal", fc.causal}, {"period", fc.period}},
                 {bf16_exact(qs, ++seed), bf16_exact(ks, ++seed), bf16_exact(vs, ++seed), bf16_exact(bs, ++seed)},
                 {f32_zeros(ys)}};
    const std::vector<HostTensor> y = run_case(reference_backend(), fwd);
    check_fused(fc, "forward", fwd, y, {"out"}, kForwardTol);
    HostTensor y16 = y[0];
    for (float& v : y16.f) v = cpu::round_to_bf16(v);
    NodeCase bwd = backward_case(fwd, {y16}, {bf16_exact(ys, ++seed)}, {1, 1, 1, 1});
    check_fused(fc, "backward", bwd, run_case(reference_backend(), bwd), {"dq", "dkt", "dv", "dbias"}, kBackwardTol);
  }
}

}  // namespace nns::backend::test
