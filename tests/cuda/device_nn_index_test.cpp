// The CUDA backend's nn and indexing kernels where the shared tables
// (tests/backend) do not reach: dropout at a step other than 0 (the step
// keys the Philox stream, and reaches the kernel through Call), the
// device-side index checks (the first bad position in element order,
// across the lanes of the scan) and their messages, and sizes past the
// lane and group boundaries of the ordered sums, the id scan of the
// embedding backward and the rank selection of topk.
#include "node_conformance.h"
#include "pending_kernels.h"

namespace nns::backend::test {

namespace {

// Sets the step of the reference and every tested backend for one scope
// (the backends are shared by all test cases).
struct AtStep {
  explicit AtStep(int64_t step) {
    reference_backend().set_step(step);
    for (Backend* b : tested_backends()) b->set_step(step);
  }
  ~AtStep() {
    reference_backend().set_step(0);
    for (Backend* b : tested_backends()) b->set_step(0);
  }
};

}  // namespace

TEST_CASE("device: dropout masks follow the step, bit for bit with the CPU", "[cuda]") {
  const int64_t n = 4099;
  Buf x = random_buf(n, 11);
  NodeCase fwd{"dropout", {{"p", 0.3}, {"seed", int64_t{77}}, {"element_offset", int64_t{5}}}, {f32({n}, x)}, {f32_zeros({n})}};
  std::vector<Buf> per_step;
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{123456789}}) {
    AtStep at(step);
    std::string name = "step " + std::to_string(step);
    std::vector<HostTensor> y = expect_node("dropout", name, fwd, {"y"}, 0);
    NodeCase bwd = backward_case(fwd, y, {f32({n}, x)}, {1});
    expect_node("dropout_backward", name, bwd, {"dx"}, 0);
    per_step.push_back(y[0].f);
  }
  // The step changes the mask (otherwise the cases above would not show
  // that the kernels see it).
  CHECK(per_step[0] != per_step[1]);
  CHECK(per_step[1] != per_step[2]);
}

TEST_CASE("device: index checks report the first bad position, as the CPU backend", "[cuda]") {
  // 70001 positions: the scan's 65536 lanes each take one or two of them.
  const int64_t n = 70001, len = 50;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7) % len);
  HostTensor x = f32({len, 1}, random_buf(len, 12));
  auto gather_of = [&](std::vector<int32_t> index) {
    return NodeCase{"gather", {{"dim", int64_t{0}}}, {x, i32({n, 1}, std::move(index))}, {f32_zeros({n, 1})}};
  };
  // All in range: the same values as the reference.
  expect_node("gather", "70001 positions", gather_of(ids), {"y"}, 0);
  for (Backend* b : tested_backends()) {
    INFO(b->name());
    // Position 5 (lane 5) comes before position 65537 (lane 1): element
    // order, not lane order, decides which one is reported.
    std::vector<int32_t> bad = ids;
    bad[65537] = -3;
    bad[5] = 61;
    CHECK_THROWS_WITH(run_case(*b, gather_of(bad)), Catch::Contains("index 61 out of range [0, 50)"));
    bad = ids;
    bad[70000] = 50;  // the last position, in a lane's second element
    CHECK_THROWS_WITH(run_case(*b, gather_of(bad)), Catch::Contains("index 50 out of range [0, 50)"));

    NodeCase emb{"embedding", {}, {i32({3}, {0, 13, 2}), f32({13, 4}, random_buf(52, 13))}, {f32_zeros({3, 4})}};
    CHECK_THROWS_WITH(run_case(*b, emb), Catch::Contains("index 13 out of range [0, 13)"));
    NodeCase sel{"index_select", {}, {f32({13, 4}, random_buf(52, 13)), i32({2}, {1, -1})}, {f32_zeros({2, 4})}};
    CHECK_THROWS_WITH(run_case(*b, sel), Catch::Contains("index -1 out of range [0, 13)"));
    NodeCase ce{"cross_entropy", {}, {f32({2, 5}, random_buf(10, 14)), i32({2}, {4, 5})}, {f32_zeros({1})}};
    CHECK_THROWS_WITH(run_case(*b, ce), Catch::Contains("cross_entropy: target 5 out of range [0, 5)"));
  }
}

TEST_CASE("device: nn and indexing rows past the lane and group boundaries", "[cuda]") {
  // mse over more elements than the 65536 lanes (each lane sums several).
  const int64_t n = 200003;
  Buf p = random_buf(n, 21), t = random_buf(n, 22);
  NodeCase mse{"mse", {}, {f32({n}, p), f32({n}, t)}, {f32_zeros({1})}};
  std::vector<HostTensor> loss = expect_node("mse", "n200003", mse, {"loss"}, 1e-5);
  expect_node("mse_backward", "n200003", backward_case(mse, loss, {f32({1}, {0.5f})}, {1, 1}), {"dpred", "dtarget"}, 1e-5);

  // cross_entropy over more rows than one group of the ordered sum.
  const int64_t rows = 1000, classes = 10;
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = int32_t((r * 3) % classes);
  NodeCase ce{"cross_entropy", {}, {f32({rows, classes}, random_buf(rows * classes, 23, -4, 4)), i32({rows}, targets)},
              {f32_zeros({1})}};
  std::vector<HostTensor> ce_loss = expect_node("cross_entropy", "rows1000", ce, {"loss"}, 1e-5, 1.0);
  expect_node("cross_entropy_backward", "rows1000", backward_case(ce, ce_loss, {f32({1}, {1.0f})}, {1, 0}), {"dlogits"}, 1e-5);

  // Embedding backward with many repeated ids: each row adds its ids'
  // gradients in id order, in float, as the reference: bit-identical.
  const int64_t vocab = 97, dim = 33, num = 2000;
  std::vector<int32_t> tokens(static_cast<size_t>(num));
  for (int64_t i = 0; i < num; ++i) tokens[size_t(i)] = int32_t((i * i + 3 * i) % vocab);
  NodeCase emb{"embedding", {}, {i32({num}, tokens), f32({vocab, dim}, random_buf(vocab * dim, 24))}, {f32_zeros({num, dim})}};
  std::vector<HostTensor> y = expect_node("embedding", "2000 ids", emb, {"y"}, 0);
  expect_node("embedding_backward", "2000 ids", backward_case(emb, y, {f32({num, dim}, random_buf(num * dim, 25))}, {0, 1}),
              {"dtable"}, 0, 0, {random_buf(vocab * dim, 26)});

  // softmax / layer_norm rows of a GPT-sized width.
  const int64_t r2 = 6, c2 = 3072;
  Buf xs = random_buf(r2 * c2, 27, -8, 8);
  NodeCase sm{"softmax", {}, {f32({r2, c2}, xs)}, {f32_zeros({r2, c2})}};
  std::vector<HostTensor> ys = expect_node("softmax", "6x3072", sm, {"y"}, 1e-5);
  expect_node("softmax_backward", "6x3072", backward_case(sm, ys, {f32({r2, c2}, random_buf(r2 * c2, 28))}, {1}), {"dx"}, 1e-5);
  NodeCase ln{"layer_norm", {{"eps", 1e-5}}, {f32({r2, c2}, xs), f32({c2}, random_buf(c2, 29, 0.5f, 1.5f)), f32({c2}, random_buf(c2, 30))},
              {f32_zeros({r2, c2})}};
  std::vector<HostTensor> yl = expect_node("layer_norm", "6x3072", ln, {"y"}, 1e-4);
  expect_node("layer_norm_backward", "6x3072 dx only",
              backward_case(ln, yl, {f32({r2, c2}, random_buf(r2 * c2, 31))}, {1, 0, 0}), {"dx"}, 1e-4);
  expect_node("layer_norm_backward", "6x3072 params only",
              backward_case(ln, yl, {f32({r2, c2}, random_buf(r2 * c2, 31))}, {0, 1, 1}), {"dgamma", "dbeta"}, 1e-4);
}

}  // namespace nns::backend::test
