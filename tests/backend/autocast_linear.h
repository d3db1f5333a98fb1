// The linear nodes under bf16 / fp16 autocast, checked alike for both
// precisions (conformance_bf16_test.cpp, conformance_fp16_test.cpp): the
// fast kernels against the reference ones, the bias gradient equal to
// fp32's (a sum, not a product), and a linear node run by each backend at
// that precision equal to its kernel bit for bit (run_node dispatches by
// the precision).
#pragma once

#include "node_conformance.h"

namespace nns::backend::test {

struct LinearKernels {
  void (*forward)(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k, int64_t n);
  void (*backward)(const float* x, const float* w, const float* dy, float* dx, float* dw, float* dbias, int64_t rows, int64_t k,
                   int64_t n);
};

// `name` is the kernels' suffix ("bf16"); seeds start after `seed`.
inline void check_linear_autocast(Precision precision, const std::string& name, LinearKernels ref_k, LinearKernels fast_k,
                                  uint32_t seed, double tol) {
  struct Case {
    int64_t rows, k, n;
    bool bias;
  };
  std::vector<Case> cases = {{1, 1, 1, true}, {5, 7, 3, true}, {33, 64, 17, false}, {128, 256, 96, true}};
  auto ref = make_cpu_backend(true), fast = make_cpu_backend(false);
  ref->set_precision(precision);
  fast->set_precision(precision);
  const std::string fwd_op = "linear_" + name, bwd_op = "linear_backward_" + name;
  for (const Case& c : cases) {
    Buf x = random_buf(c.rows * c.k, ++seed), w = random_buf(c.n * c.k, ++seed), bias = random_buf(c.n, ++seed);
    Buf dy = random_buf(c.rows * c.n, ++seed);
    const std::string label = "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n);
    Buf y_ref(dy.size()), y_fast(dy.size());
    ref_k.forward(x.data(), w.data(), c.bias ? bias.data() : nullptr, y_ref.data(), c.rows, c.k, c.n);
    fast_k.forward(x.data(), w.data(), c.bias ? bias.data() : nullptr, y_fast.data(), c.rows, c.k, c.n);
    expect_close(fwd_op, label, "y", y_fast, y_ref, tol);
    Buf dx_ref(x.size()), dw_ref(w.size()), db_ref(bias.size()), dx_fast(x.size()), dw_fast(w.size()), db_fast(bias.size());
    ref_k.backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data(), c.rows, c.k, c.n);
    fast_k.backward(x.data(), w.data(), dy.data(), dx_fast.data(), dw_fast.data(), db_fast.data(), c.rows, c.k, c.n);
    expect_close(bwd_op, label, "dx", dx_fast, dx_ref, tol);
    expect_close(bwd_op, label, "dw", dw_fast, dw_ref, tol);
    expect_close(bwd_op, label, "dbias", db_fast, db_ref, tol);
    Buf db_f32(bias.size());
    cpu::ref::linear_backward(x.data(), w.data(), dy.data(), nullptr, nullptr, db_f32.data(), c.rows, c.k, c.n);
    CHECK(db_ref == db_f32);  // the bias gradient is a sum of the fp32 gradient

    std::vector<HostTensor> in = {f32({c.rows, c.k}, x), f32({c.n, c.k}, w)};
    if (c.bias) in.push_back(f32({c.n}, bias));
    NodeCase fwd{c.bias ? "linear_bias" : "linear", {}, in, {f32_zeros({c.rows, c.n})}};
    std::vector<HostTensor> got_ref = run_case(*ref, fwd), got_fast = run_case(*fast, fwd);
    CHECK(got_ref[0].f == y_ref);
    CHECK(got_fast[0].f == y_fast);
  }
}

}  // namespace nns::backend::test
