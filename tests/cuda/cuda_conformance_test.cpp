// The CUDA backend against the CPU reference kernels (ggml's
// test-backend-ops in spirit): every node kind it claims (has_kernel),
// forward and backward, on random operands, and its optimizer arithmetic.
// Tolerance 1e-4 as the CPU table's (fp32 with CUBLAS_COMPUTE_32F: cuBLAS
// sums in float in its own order, the reference in double).
// No GPU: prints why and exits 77, which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>

#include "backend/runtime/cuda/cuda_backend.h"
#include "node_conformance.h"
#include "semantics/op_registry.h"

namespace nns::backend::test {
namespace {

constexpr double kTol = 1e-4;

Backend& cuda_backend() {
  static std::unique_ptr<Backend> b = [] {
    std::string why;
    std::unique_ptr<Backend> made = make_cuda_backend(0, why);
    if (!made) FAIL("no CUDA backend: " << why);
    return made;
  }();
  return *b;
}

// Runs `c` on the reference and on the CUDA backend; compares every output.
std::vector<HostTensor> expect_cuda(const std::string& name, const NodeCase& c, const std::vector<std::string>& names) {
  std::vector<HostTensor> want = run_case(reference_backend(), c);
  std::vector<HostTensor> got = run_case(cuda_backend(), c);
  for (size_t k = 0; k < names.size(); ++k) expect_close("cuda " + c.kind, name, names[k], as_floats(got[k]), as_floats(want[k]), kTol);
  return want;
}

std::set<std::string> tested;  // the kinds the cases below ran

}  // namespace

TEST_CASE("cuda: matmul / bmm forward and backward", "[cuda]") {
  struct Case { int64_t batch, m, k, n; };
  uint32_t seed = 1;
  for (Case c : {Case{1, 1, 1, 1}, Case{1, 7, 13, 5}, Case{1, 64, 128, 48}, Case{3, 16, 33, 9}, Case{2, 128, 256, 64}}) {
    bool batched = c.batch > 1;
    auto shape = [&](int64_t r, int64_t k) { return batched ? sema::Shape{c.batch, r, k} : sema::Shape{r, k}; };
    Buf a = random_buf(c.batch * c.m * c.k, ++seed), b = random_buf(c.batch * c.k * c.n, ++seed);
    Buf dc = random_buf(c.batch * c.m * c.n, ++seed);
    NodeCase fwd{batched ? "bmm" : "matmul", {}, {f32(shape(c.m, c.k), a), f32(shape(c.k, c.n), b)}, {f32_zeros(shape(c.m, c.n))}};
    std::string name = "b" + std::to_string(c.batch) + " m" + std::to_string(c.m) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n);
    std::vector<HostTensor> y = expect_cuda(name, fwd, {"c"});
    expect_cuda(name, backward_case(fwd, y, {f32(shape(c.m, c.n), dc)}, {1, 1}), {"da", "db"});
    expect_cuda(name + " da only", backward_case(fwd, y, {f32(shape(c.m, c.n), dc)}, {1, 0}), {"da"});
    tested.insert(fwd.kind);
    tested.insert(fwd.kind + "_backward");
  }
}

TEST_CASE("cuda: linear and linear_bias forward and backward", "[cuda]") {
  struct Case { int64_t rows, k, n; bool bias; };
  uint32_t seed = 100;
  for (Case c : {Case{1, 1, 1, true}, Case{5, 7, 3, true}, Case{33, 64, 17, false}, Case{128, 256, 96, true}}) {
    Buf x = random_buf(c.rows * c.k, ++seed), w = random_buf(c.n * c.k, ++seed), bias = random_buf(c.n, ++seed);
    Buf dy = random_buf(c.rows * c.n, ++seed);
    NodeCase fwd{c.bias ? "linear_bias" : "linear", {}, {f32({c.rows, c.k}, x), f32({c.n, c.k}, w)}, {f32_zeros({c.rows, c.n})}};
    if (c.bias) fwd.inputs.push_back(f32({c.n}, bias));
    std::string name = "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n);
    std::vector<HostTensor> y = expect_cuda(name, fwd, {"y"});
    if (c.bias) expect_cuda(name, backward_case(fwd, y, {f32({c.rows, c.n}, dy)}, {1, 1, 1}), {"dx", "dw", "dbias"});
    else expect_cuda(name, backward_case(fwd, y, {f32({c.rows, c.n}, dy)}, {1, 1}), {"dx", "dw"});
    tested.insert(fwd.kind);
    tested.insert(fwd.kind + "_backward");
  }
}

TEST_CASE("cuda: fill and add_n", "[cuda]") {
  NodeCase fill{"fill", {{"value", 2.5}}, {}, {f32_zeros({3, 5})}};
  expect_cuda("3x5", fill, {"y"});
  Buf a = random_buf(1000, 7), b = random_buf(1000, 8), c = random_buf(1000, 9);
  NodeCase add{"add_n", {}, {f32({1000}, a), f32({1000}, b), f32({1000}, c)}, {f32_zeros({1000})}};
  expect_cuda("3 x 1000", add, {"y"});
  tested.insert("fill");
  tested.insert("add_n");
}

TEST_CASE("cuda: optimizer arithmetic against the CPU reference", "[cuda]") {
  Backend& ref = reference_backend();
  Backend& gpu = cuda_backend();
  const int64_t n = 4099;
  Buf p0 = random_buf(n, 21), g = random_buf(n, 22), m0 = random_buf(n, 23), v0 = random_buf(n, 24, 0.0f, 1.0f);
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
  // AdamW, two steps.
  std::vector<Buf> results[2];
  Backend* backends[2] = {&ref, &gpu};
  for (int i = 0; i < 2; ++i) {
    Backend& b = *backends[i];
    TensorView p = upload(b, p0), gr = upload(b, g);
    OptimizerState st;
    st.buffers = {upload(b, m0), upload(b, v0)};
    for (int64_t step = 1; step <= 2; ++step) b.adamw_update(p, gr, st, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    b.scale(gr, 0.5f);
    b.axpy(p, gr, -0.25f);
    results[i] = {download(b, p), download(b, st.buffers[0]), download(b, st.buffers[1])};
  }
  expect_close("cuda adamw+scale+axpy", "n4099", "param", results[1][0], results[0][0], 1e-6);
  expect_close("cuda adamw", "n4099", "m", results[1][1], results[0][1], 1e-6);
  expect_close("cuda adamw", "n4099", "v", results[1][2], results[0][2], 1e-6);
  // Sum of squares of the same values on both.
  TensorView gr_ref = upload(ref, g), gr_gpu = upload(gpu, g);
  double want = ref.sum_of_squares({gr_ref}), got = gpu.sum_of_squares({gr_gpu});
  CHECK(std::fabs(got - want) <= 1e-12 * want);
}

TEST_CASE("cuda: every kernel the backend claims was tested above", "[cuda]") {
  // Keeps has_kernel honest: a kind added to the CUDA table without a case
  // here fails this test. Runs last (Catch2 declaration order).
  std::vector<std::string> kinds = {"matmul", "matmul_backward", "bmm", "bmm_backward", "linear", "linear_backward",
                                    "linear_bias", "linear_bias_backward", "fill", "add_n"};
  for (const std::string& k : kinds) {
    INFO(k);
    CHECK(cuda_backend().has_kernel(k));
    CHECK(tested.count(k) == 1);
  }
  size_t claimed = 0;
  for (const std::string& k : sema::op_row_names()) {
    if (cuda_backend().has_kernel(k)) ++claimed;
    if (cuda_backend().has_kernel(k + "_backward")) ++claimed;
  }
  WARN("the CUDA backend has " << claimed << " of the registry's forward/backward kinds so far");
}

}  // namespace nns::backend::test

int main(int argc, char** argv) {
  int devices = nns::backend::cuda_device_count();
  if (devices == 0) {
    std::printf("SKIPPED: no CUDA device visible; the CUDA conformance table needs a GPU\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
