// Conformance table, scans / selection / indexed access / casts: cumsum,
// topk, gather, scatter_add, to_f32 and to_i32, forward and backward nodes
// through Backend::run_node on the reference and the tested backends
// (node_conformance.h), plus known values and the run-time index checks.
//
// Tolerances (error measure: backend_test_util.h):
// - cumsum 1e-5: fast sums in float along the dim, ref in double (up to
//   1000 terms of [-1, 1)).
// - topk, gather, to_f32, to_i32 forward 0 (they pick or convert elements);
//   topk and gather backward 0 / 1e-6 (gather's backward adds the gradients
//   of repeated indices, in float vs double).
// - scatter_add 1e-6 (sums of a few floats, float vs double).
#include <cmath>

#include "node_conformance.h"

namespace nns::backend::test {

namespace {

struct Geometry {
  int64_t outer, len, inner;
};

// [outer, len, inner] as the 3-D shape the node sees with dim = 1.
sema::Shape shape3(int64_t outer, int64_t len, int64_t inner) { return {outer, len, inner}; }

std::vector<int32_t> random_positions(int64_t n, int64_t bound, uint32_t seed) {
  Buf r = random_buf(n, seed, 0.0f, float(bound));
  std::vector<int32_t> out;
  for (float v : r) out.push_back(std::min<int32_t>(int32_t(v), int32_t(bound - 1)));
  return out;
}

std::string geo_name(const Geometry& g) { return dims_str({g.outer, g.len, g.inner}); }

}  // namespace

TEST_CASE("conformance: cumsum", "[backend][conformance]") {
  const Geometry cases[] = {{1, 1, 1}, {3, 7, 1}, {2, 5, 9}, {1, 1000, 1}, {4, 3, 257}};
  uint32_t seed = 6000;
  for (const Geometry& g : cases) {
    sema::Shape s = shape3(g.outer, g.len, g.inner);
    int64_t n = sema::numel(s);
    NodeCase fwd{"cumsum", {{"dim", int64_t(1)}}, {f32(s, random_buf(n, ++seed))}, {f32_zeros(s)}};
    std::vector<HostTensor> y = expect_node("cumsum", geo_name(g), fwd, {"y"}, 1e-5, 0, {random_buf(n, 1)});
    NodeCase bwd = backward_case(fwd, y, {f32(s, random_buf(n, ++seed))}, {1});
    expect_node("cumsum_backward", geo_name(g), bwd, {"dx"}, 1e-5, 0, {random_buf(n, 2)});
  }
  // Known values, over the last dim given as -1.
  NodeCase known{"cumsum", {{"dim", int64_t(-1)}}, {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {f32_zeros({2, 3})}};
  CHECK(run_tested(known)[0].f == Buf{1, 3, 6, 4, 9, 15});
  NodeCase kb = backward_case(known, run_tested(known), {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {1});
  CHECK(run_tested(kb)[0].f == Buf{6, 5, 3, 15, 11, 6});
}

TEST_CASE("conformance: topk", "[backend][conformance]") {
  const Geometry cases[] = {{1, 1, 1}, {3, 7, 1}, {2, 9, 5}, {1, 1000, 1}, {4, 6, 33}};
  uint32_t seed = 6100;
  for (const Geometry& g : cases)
    for (bool ties : {false, true})
      for (int64_t k : {int64_t(1), (g.len + 1) / 2, g.len}) {
        sema::Shape s = shape3(g.outer, g.len, g.inner), sk = shape3(g.outer, k, g.inner);
        Buf x = random_buf(sema::numel(s), ++seed, -3, 3);
        if (ties)
          for (float& v : x) v = std::round(v);  // seven values: many ties, ordered by position
        std::string name = geo_name(g) + " k=" + std::to_string(k) + (ties ? " ties" : "");
        NodeCase fwd{"topk", {{"dim", int64_t(1)}, {"k", k}}, {f32(s, x)}, {f32_zeros(sk), i32(sk, std::vector<int32_t>(size_t(sema::numel(sk))))}};
        std::vector<HostTensor> y = expect_node("topk", name, fwd, {"values", "indices"}, 0);
        NodeCase bwd = backward_case(fwd, y, {f32(sk, random_buf(sema::numel(sk), ++seed)), i32(sk, std::vector<int32_t>(size_t(sema::numel(sk))))}, {1});
        expect_node("topk_backward", name, bwd, {"dx"}, 0, 0, {random_buf(sema::numel(s), 3)});
      }
  // Descending, ties by position, NaN first; the gradient goes back to where each value came from.
  NodeCase known{"topk", {{"dim", int64_t(0)}, {"k", int64_t(3)}}, {f32({5}, {2, 7, NAN, 7, 1})}, {f32_zeros({3}), i32({3}, {0, 0, 0})}};
  std::vector<HostTensor> y = run_tested(known);
  CHECK(std::isnan(y[0].f[0]));
  CHECK(y[0].f[1] == 7);
  CHECK(y[0].f[2] == 7);
  CHECK(y[1].i == std::vector<int32_t>{2, 1, 3});
  NodeCase kb = backward_case(known, y, {f32({3}, {10, 20, 30}), i32({3}, {0, 0, 0})}, {1});
  CHECK(run_tested(kb)[0].f == Buf{0, 20, 10, 30, 0});
}

TEST_CASE("conformance: gather / scatter_add", "[backend][conformance]") {
  struct Case {
    Geometry g;
    int64_t m;  // index's size along the dim
  };
  const Case cases[] = {{{1, 1, 1}, 1}, {{3, 7, 1}, 4}, {{2, 5, 9}, 12}, {{1, 1000, 1}, 1000}, {{4, 3, 65}, 3}};
  uint32_t seed = 6200;
  for (const Case& c : cases) {
    const Geometry& g = c.g;
    sema::Shape sx = shape3(g.outer, g.len, g.inner), si = shape3(g.outer, c.m, g.inner);
    int64_t nx = sema::numel(sx), ni = sema::numel(si);
    HostTensor x = f32(sx, random_buf(nx, ++seed)), index = i32(si, random_positions(ni, g.len, ++seed));
    std::string name = geo_name(g) + " m=" + std::to_string(c.m);
    NodeCase gat{"gather", {{"dim", int64_t(1)}}, {x, index}, {f32_zeros(si)}};
    std::vector<HostTensor> y = expect_node("gather", name, gat, {"y"}, 0, 0, {random_buf(ni, 4)});
    // Repeated indices add up in dx; garbage in dx is overwritten.
    NodeCase gb = backward_case(gat, y, {f32(si, random_buf(ni, ++seed))}, {1, 0});
    expect_node("gather_backward", name, gb, {"dx"}, 1e-6, 0, {random_buf(nx, 5)});

    HostTensor src = f32(si, random_buf(ni, ++seed));
    NodeCase sc{"scatter_add", {{"dim", int64_t(1)}}, {x, index, src}, {f32_zeros(sx)}};
    std::vector<HostTensor> z = expect_node("scatter_add", name, sc, {"y"}, 1e-6, 0, {random_buf(nx, 6)});
    NodeCase sb = backward_case(sc, z, {f32(sx, random_buf(nx, ++seed))}, {1, 0, 1});
    expect_node("scatter_add_backward", name, sb, {"dx", "dsrc"}, 0, 0, {random_buf(nx, 7), random_buf(ni, 8)});
  }
  // Known values (torch.gather / scatter_add along dim 1 of a 2x3).
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor index = i32({2, 2}, {2, 0, 1, 1});
  NodeCase gat{"gather", {{"dim", int64_t(1)}}, {x, index}, {f32_zeros({2, 2})}};
  CHECK(run_tested(gat)[0].f == Buf{3, 1, 5, 5});
  NodeCase gb = backward_case(gat, run_tested(gat), {f32({2, 2}, {1, 2, 3, 4})}, {1, 0});
  CHECK(run_tested(gb)[0].f == Buf{2, 0, 1, 0, 7, 0});
  NodeCase sc{"scatter_add", {{"dim", int64_t(1)}}, {x, index, f32({2, 2}, {10, 20, 30, 40})}, {f32_zeros({2, 3})}};
  CHECK(run_tested(sc)[0].f == Buf{21, 2, 13, 4, 75, 6});
  // An index outside the dim is a run-time error naming it, not a wild read.
  NodeCase bad{"gather", {{"dim", int64_t(1)}}, {x, i32({2, 2}, {0, 3, 1, 1})}, {f32_zeros({2, 2})}};
  CHECK_THROWS_WITH(run_tested(bad), Catch::Contains("index 3 out of range [0, 3)"));
  NodeCase bad_sc{"scatter_add", {{"dim", int64_t(0)}}, {x, i32({2, 3}, {0, -1, 1, 1, 0, 0}), f32({2, 3}, {1, 1, 1, 1, 1, 1})},
                  {f32_zeros({2, 3})}};
  CHECK_THROWS_WITH(run_tested(bad_sc), Catch::Contains("index -1 out of range [0, 2)"));
}

TEST_CASE("conformance: to_f32 / to_i32", "[backend][conformance]") {
  uint32_t seed = 6300;
  for (int64_t n : {1, 7, 4099}) {
    std::string name = "n" + std::to_string(n);
    std::vector<int32_t> ints = random_positions(n, 1 << 20, ++seed);
    for (size_t i = 0; i < ints.size(); i += 2) ints[i] = -ints[i];
    NodeCase f{"to_f32", {}, {i32({n}, ints)}, {f32_zeros({n})}};
    std::vector<HostTensor> y = expect_node("to_f32", name, f, {"y"}, 0);
    for (int64_t i = 0; i < n; ++i) CHECK(y[0].f[size_t(i)] == float(ints[size_t(i)]));
    NodeCase t{"to_i32", {}, {f32({n}, random_buf(n, ++seed, -1e6f, 1e6f))}, {i32({n}, std::vector<int32_t>(size_t(n)))}};
    expect_node("to_i32", name, t, {"y"}, 0);
    // f32 -> f32 passes through, with its gradient.
    NodeCase same{"to_f32", {}, {f32({n}, random_buf(n, ++seed))}, {f32_zeros({n})}};
    std::vector<HostTensor> ys = expect_node("to_f32", name + " f32", same, {"y"}, 0);
    CHECK(ys[0].f == same.inputs[0].f);
    Buf dy = random_buf(n, ++seed);
    NodeCase sb = backward_case(same, ys, {f32({n}, dy)}, {1});
    CHECK(run_tested(sb)[0].f == dy);
  }
  // Toward zero, as torch's .to(torch.int32).
  NodeCase t{"to_i32", {}, {f32({6}, {2.9f, -2.9f, 0.5f, -0.5f, 3.0f, -2147483648.0f})}, {i32({6}, {0, 0, 0, 0, 0, 0})}};
  CHECK(run_tested(t)[0].i == std::vector<int32_t>{2, -2, 0, 0, 3, -2147483647 - 1});
  NodeCase nan{"to_i32", {}, {f32({2}, {1.0f, NAN})}, {i32({2}, {0, 0})}};
  CHECK_THROWS_WITH(run_tested(nan), Catch::Contains("outside the i32 range"));
  NodeCase big{"to_i32", {}, {f32({1}, {2147483648.0f})}, {i32({1}, {0})}};
  CHECK_THROWS_WITH(run_tested(big), Catch::Contains("outside the i32 range"));
}

}  // namespace nns::backend::test
