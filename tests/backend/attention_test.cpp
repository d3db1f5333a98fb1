// sdpa (fused scaled dot-product attention, backend/runtime/cpu/
// ops_attention.cpp): the conformance rows (forward and backward through
// Backend::run_node, tested backends vs the reference kernels), equality bit
// for bit with the five ops it fuses run as separate nodes, and finite
// differences of the reference node's backward.
#include <sstream>

#include "backend_test_util.h"
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

struct AttentionCase {
  sema::Shape lead;  // leading dims (batch, heads, windows...)
  int64_t s, e, t, f;
  bool causal;
  int64_t period = 0;  // causal rows are queries i mod period (grouped-query attention); 0: s
};

const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases = {
      {{2, 3}, 5, 4, 5, 4, true},      // decoder self-attention: GPT's layout
      {{2, 3}, 5, 4, 5, 4, false},     // encoder
      {{3}, 4, 8, 7, 6, false},        // cross-attention: t != s, f != e
      {{1, 2, 2}, 6, 3, 6, 5, true},   // three leading dims
      {{2}, 1, 4, 1, 4, true},         // one position
      {{2, 2}, 12, 4, 4, 4, true, 4},  // grouped-query: 3 query heads of 4 positions stacked over one K/V head
  };
  return cases;
}

sema::Shape with(const sema::Shape& lead, int64_t a, int64_t b) {
  sema::Shape s = lead;
  s.push_back(a);
  s.push_back(b);
  return s;
}

std::map<std::string, sema::Attr> attrs(const AttentionCase& c, double scale) {
  return {{"scale", scale}, {"causal", c.causal}, {"period", c.period}};
}

std::string label(const AttentionCase& c) {
  std::ostringstream s;
  s << "lead" << dims_str(c.lead) << " s" << c.s << " e" << c.e << " t" << c.t << " f" << c.f
    << (c.causal ? " causal" : "");
  return s.str();
}

// One node of `kind` on the CPU fast backend (the first tested backend of
// the CPU binary; the reference when that is the one tested).
std::vector<HostTensor> run1(const std::string& kind, std::map<std::string, sema::Attr> a, std::vector<HostTensor> in,
                             std::vector<HostTensor> out) {
  return run_tested(NodeCase{kind, std::move(a), std::move(in), std::move(out)});
}

}  // namespace

TEST_CASE("conformance: sdpa forward and backward", "[backend][conformance]") {
  uint32_t seed = 7100;
  for (const AttentionCase& c : attention_cases()) {
    const sema::Shape qs = with(c.lead, c.s, c.e), ks = with(c.lead, c.e, c.t), vs = with(c.lead, c.t, c.f),
                      ys = with(c.lead, c.s, c.f);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
    NodeCase fwd{"sdpa",
                 attrs(c, scale),
                 {f32(qs, random_buf(sema::numel(qs), ++seed)), f32(ks, random_buf(sema::numel(ks), ++seed)),
                  f32(vs, random_buf(sema::numel(vs), ++seed))},
                 {f32_zeros(ys)}};
    std::vector<HostTensor> y = expect_node("sdpa", label(c), fwd, {"out"}, 1e-5);
    NodeCase bwd = backward_case(fwd, y, {f32(ys, random_buf(sema::numel(ys), ++seed))}, {1, 1, 1});
    expect_node(bwd.kind, label(c), bwd, {"dq", "dkt", "dv"}, 1e-5);
    NodeCase only_v = backward_case(fwd, y, {bwd.inputs.back()}, {0, 0, 1});  // dv alone
    expect_node(only_v.kind, label(c) + " dv only", only_v, {"dv"}, 1e-5);
  }
}

// The fused node runs the kernels the unfused ops run, in their order, on
// the same values: outputs and gradients are equal bit for bit.
TEST_CASE("sdpa equals matmul, mul_scalar, causal_mask, softmax, matmul bit for bit", "[backend][conformance]") {
  uint32_t seed = 7200;
  for (const AttentionCase& c : attention_cases()) {
    INFO(label(c));
    const sema::Shape qs = with(c.lead, c.s, c.e), ks = with(c.lead, c.e, c.t), vs = with(c.lead, c.t, c.f),
                      ss = with(c.lead, c.s, c.t), ys = with(c.lead, c.s, c.f);
    const double scale = 0.37;
    HostTensor q = f32(qs, random_buf(sema::numel(qs), ++seed)), k = f32(ks, random_buf(sema::numel(ks), ++seed)),
               v = f32(vs, random_buf(sema::numel(vs), ++seed)), dy = f32(ys, random_buf(sema::numel(ys), ++seed));
    // Unfused forward.
    HostTensor raw = run1("matmul", {}, {q, k}, {f32_zeros(ss)})[0];
    HostTensor scaled = run1("mul_scalar", {{"s", scale}}, {raw}, {f32_zeros(ss)})[0];
    // With a period, the unfused mask sees [..., s / period, period, t] (gqa_attention's 5-D view).
    sema::Shape mask_shape = ss;
    if (c.period) {
      mask_shape.pop_back();
      mask_shape.pop_back();
      mask_shape.push_back(c.s / c.period);
      mask_shape.push_back(c.period);
      mask_shape.push_back(c.t);
    }
    auto as = [](HostTensor t, const sema::Shape& shape) {
      t.shape = shape;
      return t;
    };
    HostTensor masked =
        c.causal ? as(run1("causal_mask", {}, {as(scaled, mask_shape)}, {f32_zeros(mask_shape)})[0], ss) : scaled;
    HostTensor p = run1("softmax", {}, {masked}, {f32_zeros(ss)})[0];
    HostTensor y = run1("matmul", {}, {p, v}, {f32_zeros(ys)})[0];
    // Unfused backward, in reverse.
    NodeCase pv{"matmul", {}, {p, v}, {f32_zeros(ys)}};
    std::vector<HostTensor> g_pv = run_tested(backward_case(pv, {y}, {dy}, {1, 1}));
    NodeCase sm{"softmax", {}, {masked}, {f32_zeros(ss)}};
    HostTensor d_masked = run_tested(backward_case(sm, {p}, {g_pv[0]}, {1}))[0];
    HostTensor d_scaled = d_masked;
    if (c.causal) {
      NodeCase cm{"causal_mask", {}, {as(scaled, mask_shape)}, {f32_zeros(mask_shape)}};
      d_scaled = as(run_tested(backward_case(cm, {as(masked, mask_shape)}, {as(d_masked, mask_shape)}, {1}))[0], ss);
    }
    NodeCase ms{"mul_scalar", {{"s", scale}}, {raw}, {f32_zeros(ss)}};
    HostTensor d_raw = run_tested(backward_case(ms, {scaled}, {d_scaled}, {1}))[0];
    NodeCase qk{"matmul", {}, {q, k}, {f32_zeros(ss)}};
    std::vector<HostTensor> g_qk = run_tested(backward_case(qk, {raw}, {d_raw}, {1, 1}));
    // Fused.
    NodeCase fused{"sdpa", attrs(c, scale), {q, k, v}, {f32_zeros(ys)}};
    std::vector<HostTensor> fy = run_tested(fused);
    std::vector<HostTensor> fg = run_tested(backward_case(fused, fy, {dy}, {1, 1, 1}));
    CHECK(fy[0].f == y.f);
    CHECK(fg[0].f == g_qk[0].f);
    CHECK(fg[1].f == g_qk[1].f);
    CHECK(fg[2].f == g_pv[1].f);
  }
}

TEST_CASE("gradcheck: sdpa (reference node)", "[backend][gradcheck]") {
  uint32_t seed = 7300;
  for (const AttentionCase& c : {AttentionCase{{2}, 3, 4, 5, 2, false}, AttentionCase{{2}, 4, 3, 4, 3, true}}) {
    const sema::Shape qs = with(c.lead, c.s, c.e), ks = with(c.lead, c.e, c.t), vs = with(c.lead, c.t, c.f),
                      ys = with(c.lead, c.s, c.f);
    Buf q = random_buf(sema::numel(qs), ++seed), k = random_buf(sema::numel(ks), ++seed),
        v = random_buf(sema::numel(vs), ++seed);
    Buf w = random_buf(sema::numel(ys), ++seed);
    const double scale = 0.8;
    auto loss = [&]() {
      NodeCase fwd{"sdpa", attrs(c, scale), {f32(qs, q), f32(ks, k), f32(vs, v)}, {f32_zeros(ys)}};
      return weighted_sum(run_case(reference_backend(), fwd)[0].f, w);
    };
    NodeCase fwd{"sdpa", attrs(c, scale), {f32(qs, q), f32(ks, k), f32(vs, v)}, {f32_zeros(ys)}};
    std::vector<HostTensor> y = run_case(reference_backend(), fwd);
    std::vector<HostTensor> g = run_case(reference_backend(), backward_case(fwd, y, {f32(ys, w)}, {1, 1, 1}));
    grad_check("sdpa", label(c), "q", q, g[0].f, loss);
    grad_check("sdpa", label(c), "kt", k, g[1].f, loss);
    grad_check("sdpa", label(c), "v", v, g[2].f, loss);
  }
}

}  // namespace nns::backend::test

// ---- sdpa_bias: an additive bias on the scaled scores, broadcast over the leading dims ----

namespace nns::backend::test {

namespace {

struct BiasCase {
  AttentionCase a;
  sema::Shape bias_lead;  // the bias's leading dims (numpy broadcasting against a.lead)
};

const std::vector<BiasCase>& bias_cases() {
  static const std::vector<BiasCase> cases = {
      {{{2, 3}, 5, 4, 5, 4, true}, {3}},         // T5 decoder: [h, s, s] over [b, h, s, s]
      {{{2, 3}, 5, 4, 5, 4, false}, {3}},        // T5 encoder
      {{{2, 2, 3}, 4, 3, 4, 5, false}, {2, 3}},  // Swin shifted: [nw, h, n, n] over [b, nw, h, n, n]
      {{{2, 3}, 4, 3, 6, 2, false}, {2, 1}},     // a per-batch bias, shared by the heads; t != s
      {{{2, 3}, 3, 4, 3, 4, true}, {2, 3}},      // a full-shaped bias
      {{{3}, 4, 8, 7, 6, false}, {}},            // [s, t] over every leading dim
      {{{2, 2}, 12, 4, 4, 4, true, 4}, {1, 2}},  // grouped-query rows, the bias with a leading 1
  };
  return cases;
}

std::string label(const BiasCase& c) { return label(c.a) + " bias" + dims_str(with(c.bias_lead, c.a.s, c.a.t)); }

}  // namespace

TEST_CASE("conformance: sdpa_bias forward and backward", "[backend][conformance]") {
  uint32_t seed = 7400;
  for (const BiasCase& b : bias_cases()) {
    const AttentionCase& c = b.a;
    const sema::Shape qs = with(c.lead, c.s, c.e), ks = with(c.lead, c.e, c.t), vs = with(c.lead, c.t, c.f),
                      bs = with(b.bias_lead, c.s, c.t), ys = with(c.lead, c.s, c.f);
    NodeCase fwd{"sdpa_bias",
                 attrs(c, 1.0 / std::sqrt(static_cast<double>(c.e))),
                 {f32(qs, random_buf(sema::numel(qs), ++seed)), f32(ks, random_buf(sema::numel(ks), ++seed)),
                  f32(vs, random_buf(sema::numel(vs), ++seed)), f32(bs, random_buf(sema::numel(bs), ++seed))},
                 {f32_zeros(ys)}};
    std::vector<HostTensor> y = expect_node("sdpa_bias", label(b), fwd, {"out"}, 1e-5);
    NodeCase bwd = backward_case(fwd, y, {f32(ys, random_buf(sema::numel(ys), ++seed))}, {1, 1, 1, 1});
    expect_node(bwd.kind, label(b), bwd, {"dq", "dkt", "dv", "dbias"}, 1e-5);
    NodeCase only_bias = backward_case(fwd, y, {bwd.inputs.back()}, {0, 0, 0, 1});  // dbias alone
    expect_node(only_bias.kind, label(b) + " dbias only", only_bias, {"dbias"}, 1e-5);
  }
}

// matmul, mul_scalar, add (the broadcast bias), causal_mask, softmax, matmul
// as separate nodes and their backwards in reverse: the fused node's outputs
// and gradients equal theirs bit for bit.
TEST_CASE("sdpa_bias equals matmul, mul_scalar, add, causal_mask, softmax, matmul bit for bit",
          "[backend][conformance]") {
  uint32_t seed = 7500;
  for (const BiasCase& b : bias_cases()) {
    const AttentionCase& c = b.a;
    if (c.period) continue;  // the unfused mask of stacked queries is covered by the sdpa case above
    INFO(label(b));
    const sema::Shape qs = with(c.lead, c.s, c.e), ks = with(c.lead, c.e, c.t), vs = with(c.lead, c.t, c.f),
                      bs = with(b.bias_lead, c.s, c.t), ss = with(c.lead, c.s, c.t), ys = with(c.lead, c.s, c.f);
    const double scale = 0.37;
    HostTensor q = f32(qs, random_buf(sema::numel(qs), ++seed)), k = f32(ks, random_buf(sema::numel(ks), ++seed)),
               v = f32(vs, random_buf(sema::numel(vs), ++seed)), bias = f32(bs, random_buf(sema::numel(bs), ++seed)),
               dy = f32(ys, random_buf(sema::numel(ys), ++seed));
    HostTensor raw = run1("matmul", {}, {q, k}, {f32_zeros(ss)})[0];
    HostTensor scaled = run1("mul_scalar", {{"s", scale}}, {raw}, {f32_zeros(ss)})[0];
    HostTensor added = run1("add", {}, {scaled, bias}, {f32_zeros(ss)})[0];
    HostTensor masked = c.causal ? run1("causal_mask", {}, {added}, {f32_zeros(ss)})[0] : added;
    HostTensor p = run1("softmax", {}, {masked}, {f32_zeros(ss)})[0];
    HostTensor y = run1("matmul", {}, {p, v}, {f32_zeros(ys)})[0];
    NodeCase pv{"matmul", {}, {p, v}, {f32_zeros(ys)}};
    std::vector<HostTensor> g_pv = run_tested(backward_case(pv, {y}, {dy}, {1, 1}));
    NodeCase sm{"softmax", {}, {masked}, {f32_zeros(ss)}};
    HostTensor d_added = run_tested(backward_case(sm, {p}, {g_pv[0]}, {1}))[0];
    if (c.causal) {
      NodeCase cm{"causal_mask", {}, {added}, {f32_zeros(ss)}};
      d_added = run_tested(backward_case(cm, {masked}, {d_added}, {1}))[0];
    }
    NodeCase ad{"add", {}, {scaled, bias}, {f32_zeros(ss)}};
    std::vector<HostTensor> g_add = run_tested(backward_case(ad, {added}, {d_added}, {1, 1}));
    NodeCase ms{"mul_scalar", {{"s", scale}}, {raw}, {f32_zeros(ss)}};
    HostTensor d_raw = run_tested(backward_case(ms, {scaled}, {g_add[0]}, {1}))[0];
    NodeCase qk{"matmul", {}, {q, k}, {f32_zeros(ss)}};
    std::vector<HostTensor> g_qk = run_tested(backward_case(qk, {raw}, {d_raw}, {1, 1}));
    NodeCase fused{"sdpa_bias", attrs(c, scale), {q, k, v, bias}, {f32_zeros(ys)}};
    std::vector<HostTensor> fy = run_tested(fused);
    std::vector<HostTensor> fg = run_tested(backward_case(fused, fy, {dy}, {1, 1, 1, 1}));
    CHECK(fy[0].f == y.f);
    CHECK(fg[0].f == g_qk[0].f);
    CHECK(fg[1].f == g_qk[1].f);
    CHECK(fg[2].f == g_pv[1].f);
    CHECK(fg[3].f == g_add[1].f);
  }
}

TEST_CASE("gradcheck: sdpa_bias (reference node)", "[backend][gradcheck]") {
  uint32_t seed = 7600;
  for (const BiasCase& b : {BiasCase{{{2, 2}, 3, 4, 5, 2, false}, {2}}, BiasCase{{{2}, 4, 3, 4, 3, true}, {}}}) {
    const AttentionCase& c = b.a;
    const sema::Shape qs = with(c.lead, c.s, c.e), ks = with(c.lead, c.e, c.t), vs = with(c.lead, c.t, c.f),
                      bs = with(b.bias_lead, c.s, c.t), ys = with(c.lead, c.s, c.f);
    Buf q = random_buf(sema::numel(qs), ++seed), k = random_buf(sema::numel(ks), ++seed),
        v = random_buf(sema::numel(vs), ++seed), bias = random_buf(sema::numel(bs), ++seed);
    Buf w = random_buf(sema::numel(ys), ++seed);
    const double scale = 0.8;
    auto fwd = [&]() {
      return NodeCase{
          "sdpa_bias", attrs(c, scale), {f32(qs, q), f32(ks, k), f32(vs, v), f32(bs, bias)}, {f32_zeros(ys)}};
    };
    auto loss = [&]() { return weighted_sum(run_case(reference_backend(), fwd())[0].f, w); };
    std::vector<HostTensor> y = run_case(reference_backend(), fwd());
    std::vector<HostTensor> g = run_case(reference_backend(), backward_case(fwd(), y, {f32(ys, w)}, {1, 1, 1, 1}));
    grad_check("sdpa_bias", label(b), "q", q, g[0].f, loss);
    grad_check("sdpa_bias", label(b), "kt", k, g[1].f, loss);
    grad_check("sdpa_bias", label(b), "v", v, g[2].f, loss);
    grad_check("sdpa_bias", label(b), "bias", bias, g[3].f, loss);
  }
}

}  // namespace nns::backend::test
