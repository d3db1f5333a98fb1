// Conformance table, tensor math: the elementwise functions (exp ... silu,
// pow_scalar), where, amax / amin / argmax and the constructors (full,
// arange, zeros_like, ones_like), forward and backward nodes through
// Backend::run_node on the reference and the tested backends
// (node_conformance.h). maximum, minimum and the comparisons are rows of
// the binary broadcasting table (conformance_tensor_test.cpp).
//
// Tolerances (error measure: backend_test_util.h):
// - elementwise functions 1e-5: oneDNN's eltwise evaluates exp, log,
//   sqrt, pow and the sigmoid of silu with its own approximations (a few
//   ulp), ref in double through libm; sin and cos are libm in float vs
//   double.
// - where forward 0 (it copies floats); backward 1e-5 (fast sums broadcast
//   gradients in float, ref in double).
// - amax / amin / argmax forward 0 (they pick an element); backward 1e-6:
//   a gradient shared by k tied elements is dy / k, divided in float by
//   fast and in double by ref.
// - constructors 0.
#include <cmath>

#include "node_conformance.h"

namespace nns::backend::test {

namespace {

struct Unary {
  const char* kind;
  float lo, hi;     // input magnitudes
  bool positive;    // inputs in [lo, hi) only (log, sqrt, rsqrt; pow with a fractional p)
  double p = 0;     // pow_scalar's exponent
};

}  // namespace

TEST_CASE("conformance: elementwise math", "[backend][conformance]") {
  const Unary ops[] = {
      {"exp", 0.01f, 5.0f, false},  {"log", 0.01f, 50.0f, true},  {"sqrt", 0.01f, 50.0f, true},
      {"rsqrt", 0.01f, 50.0f, true}, {"abs", 0.01f, 5.0f, false}, {"neg", 0.01f, 5.0f, false},
      {"sin", 0.01f, 10.0f, false}, {"cos", 0.01f, 10.0f, false}, {"silu", 0.01f, 8.0f, false},
      {"pow_scalar", 0.01f, 3.0f, false, 2.0},  {"pow_scalar", 0.01f, 3.0f, false, 3.0},
      {"pow_scalar", 0.1f, 3.0f, false, -1.0},  {"pow_scalar", 0.01f, 3.0f, true, 0.5},
      {"pow_scalar", 0.1f, 3.0f, true, -1.5},   {"pow_scalar", 0.01f, 3.0f, false, 0.0},
  };
  uint32_t seed = 4000;
  for (int64_t n : {1, 7, 1000, 4099}) {
    Buf dy = random_buf(n, ++seed);
    for (const Unary& u : ops) {
      Buf x = u.positive ? random_buf(n, ++seed, u.lo, u.hi) : random_away_from_zero(n, ++seed, u.lo, u.hi);
      std::map<std::string, sema::Attr> attrs;
      std::string name = "n" + std::to_string(n);
      if (std::string(u.kind) == "pow_scalar") {
        attrs["p"] = u.p;
        char buf[32];
        std::snprintf(buf, sizeof buf, " p=%g", u.p);
        name += buf;
      }
      NodeCase fwd{u.kind, attrs, {f32({n}, x)}, {f32_zeros({n})}};
      std::vector<HostTensor> y = expect_node(u.kind, name, fwd, {"y"}, 1e-5);
      NodeCase bwd = backward_case(fwd, y, {f32({n}, dy)}, {1});
      expect_node(std::string(u.kind) + "_backward", name, bwd, {"dx"}, 1e-5);
    }
  }
  // Known values at the edges: abs'(0) = 0 and x ** 0 = 1 with a zero gradient (PyTorch).
  Buf zero = {0.0f, -2.0f, 3.0f}, ones3 = {1.0f, 1.0f, 1.0f};
  NodeCase abs_fwd{"abs", {}, {f32({3}, zero)}, {f32_zeros({3})}};
  NodeCase abs_bwd = backward_case(abs_fwd, {f32({3}, {0.0f, 2.0f, 3.0f})}, {f32({3}, ones3)}, {1});
  CHECK(run_tested(abs_bwd)[0].f == Buf{0.0f, -1.0f, 1.0f});
  NodeCase pow0{"pow_scalar", {{"p", 0.0}}, {f32({3}, zero)}, {f32_zeros({3})}};
  CHECK(run_tested(pow0)[0].f == ones3);
  CHECK(run_tested(backward_case(pow0, {f32({3}, ones3)}, {f32({3}, ones3)}, {1}))[0].f == Buf{0.0f, 0.0f, 0.0f});
}

TEST_CASE("conformance: where", "[backend][conformance]") {
  using Dims = std::vector<int64_t>;
  struct Case {
    Dims c, a, b;
  };
  const Case cases[] = {
      {{3, 4}, {3, 4}, {3, 4}},       {{3, 4}, {4}, {3, 1}},        {{1, 4}, {3, 4}, {1}},
      {{2, 3, 4}, {3, 1}, {2, 1, 4}}, {{5}, {}, {5}},               {{7, 1000}, {7, 1000}, {1000}},
      {{4, 1, 6}, {1, 5, 1}, {4, 5, 6}},
  };
  uint32_t seed = 4100;
  for (const Case& k : cases) {
    int64_t ab[cpu::kMaxRank], out[cpu::kMaxRank];
    int ab_rank = cpu::broadcast_shape(int(k.a.size()), k.a.data(), int(k.b.size()), k.b.data(), ab);
    int rank = cpu::broadcast_shape(int(k.c.size()), k.c.data(), ab_rank, ab, out);
    REQUIRE(rank >= 0);
    sema::Shape yd(out, out + rank);
    Buf cond = random_buf(numel(k.c), ++seed);
    for (float& v : cond) v = v > 0 ? 1.0f : 0.0f;
    Buf a = random_buf(numel(k.a), ++seed), b = random_buf(numel(k.b), ++seed), dy = random_buf(numel(yd), ++seed);
    std::string name = dims_str(k.c) + " ? " + dims_str(k.a) + " : " + dims_str(k.b);
    NodeCase fwd{"where", {}, {f32(k.c, cond), f32(k.a, a), f32(k.b, b)}, {f32_zeros(yd)}};
    std::vector<HostTensor> y = expect_node("where", name, fwd, {"y"}, 0, 0, {random_buf(numel(yd), 11)});
    NodeCase bwd = backward_case(fwd, y, {f32(yd, dy)}, {0, 1, 1});
    // Garbage in the gradient buffers: overwritten, not accumulated.
    expect_node("where_backward", name, bwd, {"da", "db"}, 1e-5, 0, {random_buf(numel(k.a), 12), random_buf(numel(k.b), 13)});
  }
  // Every element from the side its condition picks; the gradient follows.
  NodeCase pick{"where", {}, {f32({4}, {1, 0, 0, 1}), f32({4}, {1, 2, 3, 4}), f32({1}, {-1})}, {f32_zeros({4})}};
  CHECK(run_tested(pick)[0].f == Buf{1, -1, -1, 4});
  std::vector<HostTensor> g = run_tested(backward_case(pick, run_tested(pick), {f32({4}, {1, 2, 3, 4})}, {0, 1, 1}));
  CHECK(g[0].f == Buf{1, 0, 0, 4});
  CHECK(g[1].f == Buf{5});
}

TEST_CASE("conformance: amax / amin / argmax", "[backend][conformance]") {
  struct Case {
    int64_t outer, len, inner;
  };
  const Case cases[] = {{1, 1, 1}, {3, 7, 1}, {2, 5, 9}, {1, 1000, 1}, {4, 3, 257}, {5, 1, 3}};
  uint32_t seed = 4200;
  for (const Case& c : cases)
    for (bool ties : {false, true}) {
      int64_t nx = c.outer * c.len * c.inner, ny = c.outer * c.inner;
      Buf x = random_buf(nx, ++seed, -3, 3), dy = random_buf(ny, ++seed);
      if (ties)
        for (float& v : x) v = std::round(v);  // seven values: many tied extremes
      std::string name = "[" + std::to_string(c.outer) + "," + std::to_string(c.len) + "," + std::to_string(c.inner) + "] dim1" +
                         (ties ? " ties" : "");
      std::map<std::string, sema::Attr> attrs{{"dim", int64_t{1}}, {"keepdim", false}};
      for (const char* kind : {"amax", "amin"}) {
        NodeCase fwd{kind, attrs, {f32({c.outer, c.len, c.inner}, x)}, {f32_zeros({c.outer, c.inner})}};
        std::vector<HostTensor> y = expect_node(kind, name, fwd, {"y"}, 0);
        NodeCase bwd = backward_case(fwd, y, {f32({c.outer, c.inner}, dy)}, {1});
        expect_node(std::string(kind) + "_backward", name, bwd, {"dx"}, 1e-6, 0, {random_buf(nx, 14)});
      }
      NodeCase arg{"argmax", attrs, {f32({c.outer, c.len, c.inner}, x)}, {i32({c.outer, c.inner}, std::vector<int32_t>(size_t(ny), -1))}};
      expect_node("argmax", name, arg, {"index"}, 0);
    }
  // Ties: argmax is the first maximum; amax's gradient is shared by all of
  // them (PyTorch). NaN is the maximum: amax is NaN, argmax points at it,
  // and no element gets a gradient (NaN equals nothing).
  Buf row = {1, 3, 0, 3, 2};
  NodeCase arg{"argmax", {{"dim", int64_t{0}}, {"keepdim", false}}, {f32({5}, row)}, {i32({1}, {-1})}};
  CHECK(run_tested(arg)[0].i == std::vector<int32_t>{1});
  NodeCase mx{"amax", {{"dim", int64_t{0}}, {"keepdim", false}}, {f32({5}, row)}, {f32_zeros({1})}};
  CHECK(run_tested(mx)[0].f == Buf{3});
  CHECK(run_tested(backward_case(mx, {f32({1}, {3})}, {f32({1}, {1})}, {1}))[0].f == Buf{0, 0.5f, 0, 0.5f, 0});
  Buf nan_row = {1, NAN, 5, NAN};
  arg.inputs[0] = f32({4}, nan_row);
  CHECK(run_tested(arg)[0].i == std::vector<int32_t>{1});
  expect_node("argmax", "[4] NaN", arg, {"index"}, 0);
  mx.inputs[0] = f32({4}, nan_row);
  CHECK(std::isnan(run_tested(mx)[0].f[0]));
  NodeCase mn{"amin", {{"dim", int64_t{0}}, {"keepdim", false}}, {f32({4}, nan_row)}, {f32_zeros({1})}};
  expect_node("amin", "[4] NaN", mn, {"y"}, 0);
  CHECK(run_tested(backward_case(mx, {f32({1}, {NAN})}, {f32({1}, {1})}, {1}))[0].f == Buf{0, 0, 0, 0});
}

TEST_CASE("conformance: constructors", "[backend][conformance]") {
  // The tested backend's outputs start as garbage: every element is written.
  expect_node("full", "[3,5] 2.5", {"full", {{"shape", std::vector<int64_t>{3, 5}}, {"value", 2.5}}, {}, {f32_zeros({3, 5})}}, {"y"}, 0, 0,
              {random_buf(15, 15)});
  CHECK(run_tested({"full", {{"shape", std::vector<int64_t>{2}}, {"value", -1.0}}, {}, {f32_zeros({2})}})[0].f == Buf{-1, -1});
  expect_node("arange", "n1000", {"arange", {{"n", int64_t{1000}}}, {}, {f32_zeros({1000})}}, {"y"}, 0, 0, {random_buf(1000, 16)});
  CHECK(run_tested({"arange", {{"n", int64_t{4}}}, {}, {f32_zeros({4})}})[0].f == Buf{0, 1, 2, 3});
  Buf x = random_buf(12, 17);
  for (const char* kind : {"zeros_like", "ones_like"}) {
    NodeCase c{kind, {}, {f32({3, 4}, x)}, {f32_zeros({3, 4})}};
    expect_node(kind, "[3,4]", c, {"y"}, 0, 0, {random_buf(12, 18)});
    CHECK(run_tested(c)[0].f == Buf(12, std::string(kind) == "ones_like" ? 1.0f : 0.0f));
  }
}

}  // namespace nns::backend::test
