// The CUDA backend's own rows of the conformance table (node_conformance.h:
// tested backends vs the CPU reference kernels): the matrix products on
// cuBLASLt (through gemm.h's row-major to column-major mapping), fill,
// add_n, the optimizer arithmetic the update methods do not cover
// (sum of squares over the lane/group partition, scale, axpy), and the
// registry coverage with the exact list of rows still pending.
// Tolerance of the products 1e-4, as the CPU table's (fp32 with
// CUBLAS_COMPUTE_32F: cuBLAS sums in float in its own order, the reference
// in double; the emulation sums in double).
#include <cmath>

#include "node_conformance.h"
#include "pending_kernels.h"
#include "rows_without_backward.h"
#include "semantics/op_registry.h"

namespace nns::backend::test {

namespace {
constexpr double kProductTol = 1e-4;
}

TEST_CASE("device: matmul / bmm forward and backward", "[cuda]") {
  struct Case { int64_t batch, m, k, n; };
  uint32_t seed = 1;
  for (Case c : {Case{1, 1, 1, 1}, Case{1, 7, 13, 5}, Case{1, 64, 128, 48}, Case{3, 16, 33, 9}, Case{2, 128, 256, 64}}) {
    bool batched = c.batch > 1;
    auto shape = [&](int64_t r, int64_t k) { return batched ? sema::Shape{c.batch, r, k} : sema::Shape{r, k}; };
    Buf a = random_buf(c.batch * c.m * c.k, ++seed), b = random_buf(c.batch * c.k * c.n, ++seed);
    Buf dc = random_buf(c.batch * c.m * c.n, ++seed);
    std::string kind = batched ? "bmm" : "matmul";
    NodeCase fwd{kind, {}, {f32(shape(c.m, c.k), a), f32(shape(c.k, c.n), b)}, {f32_zeros(shape(c.m, c.n))}};
    std::string name = "b" + std::to_string(c.batch) + " m" + std::to_string(c.m) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n);
    std::vector<HostTensor> y = expect_node(kind, name, fwd, {"c"}, kProductTol);
    expect_node(kind + "_backward", name, backward_case(fwd, y, {f32(shape(c.m, c.n), dc)}, {1, 1}), {"da", "db"}, kProductTol);
    expect_node(kind + "_backward", name + " da only", backward_case(fwd, y, {f32(shape(c.m, c.n), dc)}, {1, 0}), {"da"},
                kProductTol);
  }
}

TEST_CASE("device: linear and linear_bias forward and backward", "[cuda]") {
  struct Case { int64_t rows, k, n; bool bias; };
  uint32_t seed = 100;
  for (Case c : {Case{1, 1, 1, true}, Case{5, 7, 3, true}, Case{33, 64, 17, false}, Case{128, 256, 96, true}}) {
    Buf x = random_buf(c.rows * c.k, ++seed), w = random_buf(c.n * c.k, ++seed), bias = random_buf(c.n, ++seed);
    Buf dy = random_buf(c.rows * c.n, ++seed);
    std::string kind = c.bias ? "linear_bias" : "linear";
    NodeCase fwd{kind, {}, {f32({c.rows, c.k}, x), f32({c.n, c.k}, w)}, {f32_zeros({c.rows, c.n})}};
    if (c.bias) fwd.inputs.push_back(f32({c.n}, bias));
    std::string name = "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n);
    std::vector<HostTensor> y = expect_node(kind, name, fwd, {"y"}, kProductTol);
    if (c.bias)
      expect_node(kind + "_backward", name, backward_case(fwd, y, {f32({c.rows, c.n}, dy)}, {1, 1, 1}), {"dx", "dw", "dbias"},
                  kProductTol);
    else
      expect_node(kind + "_backward", name, backward_case(fwd, y, {f32({c.rows, c.n}, dy)}, {1, 1}), {"dx", "dw"}, kProductTol);
  }
}

TEST_CASE("device: bf16 and fp16 autocast of the products against the reference's", "[cuda][bf16][fp16]") {
  for (Precision precision : {Precision::BF16, Precision::F16}) {
  const std::string label = precision == Precision::BF16 ? " bf16" : " fp16";
  // Both sides round every operand to bf16 / fp16 and accumulate in fp32 (the
  // reference in double): the bound is the fp32 products' (their rounding
  // is the same bits); the fp32 result must differ (the rounding happened).
  std::unique_ptr<Backend> ref = make_cpu_backend(true);
  ref->set_precision(precision);
  struct Restore {
    ~Restore() {
      for (Backend* b : tested_backends()) b->set_precision(Precision::F32);
    }
  } restore;
  for (Backend* b : tested_backends()) b->set_precision(precision);
  uint32_t seed = 700;
  for (bool batched : {false, true}) {
    int64_t batch = batched ? 3 : 1, m = 33, k = 70, n = 21;
    auto shape = [&](int64_t r, int64_t c) { return batched ? sema::Shape{batch, r, c} : sema::Shape{r, c}; };
    Buf a = random_buf(batch * m * k, ++seed), bm = random_buf(batch * k * n, ++seed), dc = random_buf(batch * m * n, ++seed);
    std::string kind = batched ? "bmm" : "matmul";
    NodeCase fwd{kind, {}, {f32(shape(m, k), a), f32(shape(k, n), bm)}, {f32_zeros(shape(m, n))}};
    std::vector<HostTensor> want = run_case(*ref, fwd);
    std::vector<HostTensor> want32 = run_case(reference_backend(), fwd);
    NodeCase bwd = backward_case(fwd, want, {f32(shape(m, n), dc)}, {1, 1});
    std::vector<HostTensor> want_b = run_case(*ref, bwd);
    for (Backend* b : tested_backends()) {
      std::vector<HostTensor> got = run_case(*b, fwd);
      expect_close(b->name() + " " + kind + label, "m33 k70 n21", "c", got[0].f, want[0].f, kProductTol);
      CHECK(got[0].f != want32[0].f);
      std::vector<HostTensor> got_b = run_case(*b, bwd);
      expect_close(b->name() + " " + kind + "_backward" + label, "m33 k70 n21", "da", got_b[0].f, want_b[0].f, kProductTol);
      expect_close(b->name() + " " + kind + "_backward" + label, "m33 k70 n21", "db", got_b[1].f, want_b[1].f, kProductTol);
    }
  }
  int64_t rows = 40, k = 64, n = 24;
  Buf x = random_buf(rows * k, ++seed), w = random_buf(n * k, ++seed), bias = random_buf(n, ++seed), dy = random_buf(rows * n, ++seed);
  NodeCase fwd{"linear_bias", {}, {f32({rows, k}, x), f32({n, k}, w), f32({n}, bias)}, {f32_zeros({rows, n})}};
  std::vector<HostTensor> want = run_case(*ref, fwd);
  NodeCase bwd = backward_case(fwd, want, {f32({rows, n}, dy)}, {1, 1, 1});
  std::vector<HostTensor> want_b = run_case(*ref, bwd);
  for (Backend* b : tested_backends()) {
    expect_close(b->name() + " linear_bias" + label, "rows40 k64 n24", "y", run_case(*b, fwd)[0].f, want[0].f, kProductTol);
    std::vector<HostTensor> got_b = run_case(*b, bwd);
    for (size_t i = 0; i < 3; ++i)
      expect_close(b->name() + " linear_bias_backward" + label, "rows40 k64 n24", i == 0 ? "dx" : i == 1 ? "dw" : "dbias", got_b[i].f,
                   want_b[i].f, kProductTol);
  }
}
}

TEST_CASE("device: fill and add_n", "[cuda]") {
  NodeCase fill{"fill", {{"value", 2.5}}, {}, {f32_zeros({3, 5})}};
  expect_node("fill", "3x5", fill, {"y"}, 0);
  Buf a = random_buf(1000, 7), b = random_buf(1000, 8), c = random_buf(1000, 9);
  NodeCase add{"add_n", {}, {f32({1000}, a), f32({1000}, b), f32({1000}, c)}, {f32_zeros({1000})}};
  expect_node("add_n", "3 x 1000", add, {"y"}, 1e-6);
}

TEST_CASE("device: sum of squares, scale and axpy against the reference", "[cuda]") {
  Backend& ref = reference_backend();
  auto upload = [](Backend& b, const Buf& host) {
    TensorView t;
    t.shape = {static_cast<int64_t>(host.size())};
    t.data = b.allocate(host.size() * sizeof(float));
    b.copy_from_host(t.data, host.data(), host.size() * sizeof(float));
    return t;
  };
  auto download = [](Backend& b, const TensorView& t) {
    Buf host(static_cast<size_t>(t.numel()));
    b.copy_to_host(host.data(), t.data, host.size() * sizeof(float));
    return host;
  };
  auto release = [](Backend& b, const TensorView& t) { b.release(t.data, static_cast<size_t>(t.numel()) * sizeof(float)); };
  uint32_t seed = 30;
  // Sizes below, at and past the 64 Ki lanes and across group boundaries.
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(4099), int64_t(65536), int64_t(70001), int64_t(300000)}) {
    Buf g = random_buf(n, ++seed), y0 = random_buf(n, ++seed);
    TensorView gr = upload(ref, g), yr = upload(ref, y0);
    double want = ref.sum_of_squares({gr, yr});
    ref.scale(gr, 0.5f);
    ref.axpy(yr, gr, -0.25f);
    Buf want_y = download(ref, yr);
    std::vector<double> sums;
    for (Backend* b : tested_backends()) {
      INFO(b->name() << " n " << n);
      TensorView gt = upload(*b, g), yt = upload(*b, y0);
      double got = b->sum_of_squares({gt, yt});
      CHECK(std::fabs(got - want) <= 1e-12 * want);
      sums.push_back(got);
      b->scale(gt, 0.5f);
      b->axpy(yt, gt, -0.25f);
      expect_close(b->name() + " scale+axpy", "n" + std::to_string(n), "y", download(*b, yt), want_y, 1e-6);
      release(*b, gt);
      release(*b, yt);
    }
    for (double s : sums) CHECK(s == sums[0]);  // a fixed order: the same bits on every tested backend run
    release(ref, gr);
    release(ref, yr);
  }
}

TEST_CASE("device: registry coverage, with the exact list of pending rows", "[cuda]") {
  std::set<std::string> rows;
  for (const std::string& op : sema::op_row_names()) rows.insert(op);
  for (const std::string& p : pending_cuda_rows()) {
    INFO("pending row " << p << " is not a registry row (renamed?)");
    CHECK(rows.count(p) == 1);
  }
  for (Backend* b : tested_backends()) {
    INFO("backend " << b->name());
    size_t done = 0;
    for (const std::string& op : rows) {
      INFO("op " << op);
      bool has_backward = rows_without_backward().count(op) == 0;
      if (pending_cuda_rows().count(op)) {
        // Pending means neither kernel: a row that gained one leaves the list.
        CHECK_FALSE(b->has_kernel(op));
        CHECK_FALSE(b->has_kernel(op + "_backward"));
        continue;
      }
      CHECK(b->has_kernel(op));
      CHECK(b->has_kernel(op + "_backward") == has_backward);
      ++done;
    }
    CHECK(b->has_kernel("fill"));
    CHECK(b->has_kernel("add_n"));
    CHECK_FALSE(b->has_kernel("no_such_op"));
    WARN(b->name() << ": " << done << " of " << rows.size() << " registry rows have kernels; " << pending_cuda_rows().size()
                   << " pending");
  }
}

}  // namespace nns::backend::test
