// The CUDA backend's tensor-math kernels (kernels_elementwise.cu,
// kernels_reduce.cu) where their device layout differs from the CPU's
// loops and the shared tables (tests/backend) do not reach: to_i32's range
// check, partitioned into lanes and groups of lanes, at sizes across those
// boundaries; broadcasts with empty dims, whose gradients sum nothing; the
// gradient of where's condition; casts of ints that floats round; and
// reductions along long and short dims of large tensors. Each against the
// CPU reference (node_conformance.h), on every tested backend.
#include <string>

#include "node_conformance.h"

namespace nns::backend::test {

namespace {

// What run_case(b, c) throws, or "" when it does not.
std::string error_of(Backend& b, const NodeCase& c) {
  try {
    run_case(b, c);
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("device: to_i32 range check across lanes and groups", "[cuda]") {
  uint32_t seed = 7000;
  // Below, at and past the 64 Ki lanes of the check and across its groups of 256 lanes.
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(65536), int64_t(70001), int64_t(300000)}) {
    std::string name = "n" + std::to_string(n);
    Buf x = random_buf(n, ++seed, -1e9f, 1e9f);
    NodeCase ok{"to_i32", {}, {f32({n}, x)}, {i32({n}, std::vector<int32_t>(size_t(n), 7))}};
    expect_node("to_i32", name, ok, {"y"}, 0);
    // Elements out of range: the error names the first (lowest index) one,
    // whichever lane finds it, with the reference's exact message.
    for (int64_t first : {n - 1, n / 3, int64_t(0)}) {
      NodeCase bad = ok;
      bad.inputs[0].f[size_t(first)] = 3e9f;
      if (first + 65536 < n) bad.inputs[0].f[size_t(first + 65536)] = NAN;  // the same lane, later
      if (first + 1 < n) bad.inputs[0].f[size_t(n - 1)] = -5e9f;            // another lane, later
      std::string want = error_of(reference_backend(), bad);
      REQUIRE(want.find("to_i32 of 3000000000.000000, which is outside the i32 range") != std::string::npos);
      for (Backend* b : tested_backends()) {
        INFO(b->name() << " " << name << " first bad " << first);
        CHECK(error_of(*b, bad) == want);
      }
    }
  }
}

TEST_CASE("device: broadcasts with empty dims", "[cuda]") {
  using Dims = std::vector<int64_t>;
  // (a, b): the output is empty, so a gradient of a non-empty operand is zeros.
  for (auto [ad, bd] : {std::pair<Dims, Dims>{{0, 3}, {3}}, {{4, 1}, {1, 0}}, {{2, 0, 5}, {2, 1, 5}}}) {
    int64_t out[cpu::kMaxRank];
    int rank = cpu::broadcast_shape(int(ad.size()), ad.data(), int(bd.size()), bd.data(), out);
    REQUIRE(rank >= 0);
    sema::Shape cd(out, out + rank);
    std::string name = dims_str(ad) + " " + dims_str(bd);
    for (const char* kind : {"add", "mul", "maximum"}) {
      NodeCase fwd{kind, {}, {f32(ad, random_buf(numel(ad), 1)), f32(bd, random_buf(numel(bd), 2))}, {f32_zeros(cd)}};
      std::vector<HostTensor> y = expect_node(kind, name, fwd, {"c"}, 0);
      NodeCase bwd = backward_case(fwd, y, {f32_zeros(cd)}, {1, 1});
      expect_node(std::string(kind) + "_backward", name, bwd, {"da", "db"}, 0, 0, {random_buf(numel(ad), 3), random_buf(numel(bd), 4)});
    }
    NodeCase w{"where", {}, {f32(ad, random_buf(numel(ad), 5)), f32(bd, random_buf(numel(bd), 6)), f32({1}, {2.0f})}, {f32_zeros(cd)}};
    std::vector<HostTensor> y = expect_node("where", name, w, {"y"}, 0);
    expect_node("where_backward", name, backward_case(w, y, {f32_zeros(cd)}, {0, 1, 1}), {"da", "db"}, 0, 0,
                {random_buf(numel(bd), 7), {5.0f}});
  }
}

TEST_CASE("device: where's condition gets a zero gradient", "[cuda]") {
  Buf cond = {1, 0, 0, 1, 1, 0};
  NodeCase fwd{"where", {}, {f32({2, 3}, cond), f32({3}, random_buf(3, 8)), f32({2, 1}, random_buf(2, 9))}, {f32_zeros({2, 3})}};
  std::vector<HostTensor> y = expect_node("where", "[2,3] ? [3] : [2,1]", fwd, {"y"}, 0);
  NodeCase bwd = backward_case(fwd, y, {f32({2, 3}, random_buf(6, 10))}, {1, 1, 1});
  // Garbage in every gradient buffer, the condition's included: all overwritten.
  std::vector<HostTensor> g =
      expect_node("where_backward", "[2,3] ? [3] : [2,1] all", bwd, {"dcond", "da", "db"}, 0, 0, {random_buf(6, 11), random_buf(3, 12), random_buf(2, 13)});
  CHECK(g[0].f == Buf(6, 0.0f));
}

TEST_CASE("device: to_f32 of ints a float rounds", "[cuda]") {
  // Past 2^24 floats are spaced 2 and more apart: each int rounds to nearest-even, as the reference does.
  std::vector<int32_t> ints = {16777217, -16777217, 16777219, 2147483647, -2147483647 - 1, 123456789, -987654321, 0};
  NodeCase c{"to_f32", {}, {i32({int64_t(ints.size())}, ints)}, {f32_zeros({int64_t(ints.size())})}};
  std::vector<HostTensor> y = expect_node("to_f32", "large ints", c, {"y"}, 0, 0, {random_buf(int64_t(ints.size()), 14)});
  CHECK(y[0].f[0] == 16777216.0f);
  CHECK(y[0].f[2] == 16777220.0f);
}

TEST_CASE("device: reductions along long and short dims", "[cuda]") {
  struct Case {
    std::vector<int64_t> dims;
    int64_t dim;
  };
  uint32_t seed = 7100;
  // A long reduced dim (one index loops 100000 terms), many short ones, and a negative dim.
  for (const Case& c : {Case{{100000}, 0}, Case{{3, 20000, 2}, 1}, Case{{20000, 3}, -1}, Case{{2, 3, 4, 5}, 2}}) {
    int64_t n = numel(c.dims), d = c.dim < 0 ? c.dim + int64_t(c.dims.size()) : c.dim;
    std::vector<int64_t> yd;
    for (size_t i = 0; i < c.dims.size(); ++i)
      if (int64_t(i) != d) yd.push_back(c.dims[i]);
    std::string name = dims_str(c.dims) + " dim" + std::to_string(c.dim);
    Buf x = random_buf(n, ++seed), dy = random_buf(numel(yd), ++seed);
    std::map<std::string, sema::Attr> attrs{{"dim", c.dim}, {"keepdim", false}};
    for (const char* kind : {"sum", "mean", "amax", "amin"}) {
      NodeCase fwd{kind, attrs, {f32(c.dims, x)}, {f32_zeros(yd)}};
      // Both sum in double in the same order: bit-identical.
      std::vector<HostTensor> y = expect_node(kind, name, fwd, {"y"}, 0);
      expect_node(std::string(kind) + "_backward", name, backward_case(fwd, y, {f32(yd, dy)}, {1}), {"dx"}, 0, 0, {random_buf(n, 15)});
    }
    NodeCase arg{"argmax", attrs, {f32(c.dims, x)}, {i32(yd, std::vector<int32_t>(size_t(numel(yd)), -1))}};
    expect_node("argmax", name, arg, {"index"}, 0);
  }
}

}  // namespace nns::backend::test
