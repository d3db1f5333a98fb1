// Linear outputs written in place (TensorView::row_stride and ::accumulate
// on an output: the plan executor hands a kernel the columns of the rank
// buffer its CollectOut would copy into, or the whole buffer a partial sum
// is added to) and a row-strided dy read by the backward (a SliceGrad read
// in place). Each against the packed reference on copies of the same
// values: y written into columns of a larger buffer leaves the other
// columns as they were; an accumulating write equals the packed product
// added to the buffer's old values (the collect's `+=`); dx, dw and dbias
// from a strided dy equal those from a packed one.
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

constexpr double kGemmTol = 1e-4;

struct WriteCase {
  int64_t rows, k, n, ldy, col;  // y: columns [col, col + n) of rows ldy long (ldy == n: the whole buffer)
  bool bias, accumulate;
};

std::string case_name(const WriteCase& c) {
  return "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n) + " ldy" +
         std::to_string(c.ldy) + " col" + std::to_string(c.col) + (c.bias ? " bias" : "") + (c.accumulate ? " +=" : "");
}

// The buffer after the collect: `before` with y's region set to y (or, accumulating, added to).
Buf collected(const Buf& before, const Buf& y, const WriteCase& c) {
  Buf out = before;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.n; ++j) {
      float& o = out[size_t(r * c.ldy + c.col + j)];
      o = c.accumulate ? o + y[size_t(r * c.n + j)] : y[size_t(r * c.n + j)];
    }
  return out;
}

}  // namespace

TEST_CASE("linear writes y into columns of a buffer, and accumulates into it", "[backend][conformance]") {
  const std::vector<WriteCase> cases = {
      {5, 7, 3, 16, 2, true, false},     // stride != cols, with a bias
      {33, 8, 8, 32, 24, false, false},  // the last columns
      {64, 16, 8, 8, 0, false, true},    // the whole buffer, accumulated (a partial sum)
      {17, 9, 5, 12, 4, false, true},    // columns, accumulated
      {1, 3, 4, 4, 0, true, false}};
  uint32_t seed = 700;
  for (const WriteCase& c : cases) {
    const Buf x = random_buf(c.rows * c.k, ++seed), w = random_buf(c.n * c.k, ++seed), bias = random_buf(c.n, ++seed);
    const Buf before = random_buf(c.rows * c.ldy, ++seed);
    const float* bp = c.bias ? bias.data() : nullptr;
    Buf y_ref(size_t(c.rows * c.n));
    cpu::ref::linear(x.data(), w.data(), bp, y_ref.data(), c.rows, c.k, c.n);
    const Buf want = collected(before, y_ref, c);
    const std::string name = case_name(c);
    const int64_t ldy = c.ldy == c.n ? 0 : c.ldy;  // whole: packed
    Buf got_ref = before, got_fast = before;
    cpu::ref::linear_strided(x.data(), c.k, w.data(), c.k, bp, got_ref.data() + c.col, c.rows, c.k, c.n, ldy,
                             c.accumulate);
    cpu::fast::linear_strided(x.data(), c.k, w.data(), c.k, bp, got_fast.data() + c.col, c.rows, c.k, c.n, ldy,
                              c.accumulate);
    expect_close("linear_strided(ref) in place", name, "buffer", got_ref, want, 0);
    expect_close("linear_strided in place", name, "buffer", got_fast, want, kGemmTol);
    // The columns outside y's are untouched, exactly.
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.ldy; ++j)
        if (j < c.col || j >= c.col + c.n) REQUIRE(got_fast[size_t(r * c.ldy + j)] == before[size_t(r * c.ldy + j)]);
    // Through the backend: an output view with a row stride and the accumulate flag.
    auto be = make_cpu_backend(false);
    sema::OpNode node;
    node.kind = c.bias ? "linear_bias" : "linear";
    node.name = "in_place";
    CHECK(be->writes_in_place(node, 0, c.accumulate) == !(c.bias && c.accumulate));
    Buf got_be = before;
    std::vector<TensorView> in = {TensorView{const_cast<float*>(x.data()), sema::DType::F32, {c.rows, c.k}},
                                  TensorView{const_cast<float*>(w.data()), sema::DType::F32, {c.n, c.k}}};
    if (c.bias) in.push_back(TensorView{const_cast<float*>(bias.data()), sema::DType::F32, {c.n}});
    std::vector<TensorView> out = {
        TensorView{got_be.data() + c.col, sema::DType::F32, {c.rows, c.n}, ldy, c.accumulate}};
    sema::Graph g;
    be->run_node(g, node, in, out);
    expect_close("linear (in-place view)", name, "buffer", got_be, want, kGemmTol);
    be->set_precision(Precision::BF16);
    CHECK_FALSE(be->writes_in_place(node, 0, false));  // bf16 products: the executor copies
  }
  // A bias with accumulation would add the bias to every partial sum: refused.
  Buf x(6, 1.f), w(6, 1.f), b(2, 1.f), y(6, 0.f);
  CHECK_THROWS(cpu::ref::linear_strided(x.data(), 3, w.data(), 3, b.data(), y.data(), 2, 3, 2, 0, true));
  CHECK_THROWS(cpu::fast::linear_strided(x.data(), 3, w.data(), 3, b.data(), y.data(), 2, 3, 2, 0, true));
}

TEST_CASE("linear's backward reads a row-strided dy", "[backend][conformance]") {
  struct Case {
    int64_t rows, k, n, lddy, col;
  };
  const std::vector<Case> cases = {{5, 7, 3, 16, 2}, {33, 8, 8, 32, 24}, {64, 16, 8, 40, 16}};
  uint32_t seed = 800;
  for (const Case& c : cases) {
    const Buf x = random_buf(c.rows * c.k, ++seed), w = random_buf(c.n * c.k, ++seed);
    const Buf dys = random_buf(c.rows * c.lddy, ++seed);
    Buf dy(size_t(c.rows * c.n));
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.n; ++j) dy[size_t(r * c.n + j)] = dys[size_t(r * c.lddy + c.col + j)];
    const float* dyv = dys.data() + c.col;
    const std::string name = "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n) +
                             " lddy" + std::to_string(c.lddy);
    Buf dx_ref(x.size()), dw_ref(w.size()), db_ref(size_t(c.n));
    cpu::ref::linear_backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data(), c.rows, c.k,
                              c.n);
    for (bool fast : {false, true}) {
      Buf dx(x.size()), dw(w.size()), db(size_t(c.n));
      (fast ? cpu::fast::linear_backward_strided : cpu::ref::linear_backward_strided)(
          x.data(), c.k, w.data(), c.k, dyv, dx.data(), dw.data(), db.data(), c.rows, c.k, c.n, c.lddy, false);
      const std::string op = fast ? "linear_backward_strided (dy)" : "linear_backward_strided(ref) (dy)";
      const double tol = fast ? kGemmTol : 0;
      expect_close(op, name, "dx", dx, dx_ref, tol);
      expect_close(op, name, "dw", dw, dw_ref, tol);
      expect_close(op, name, "dbias", db, db_ref, tol);
    }
    // Through the backend: linear_bias_backward's dy (input 4: x, w, bias, y, dy) with a row stride.
    auto be = make_cpu_backend(false);
    sema::OpNode node;
    node.kind = "linear_bias_backward";
    node.name = "strided_dy";
    node.attrs["grad_mask"] = std::vector<int64_t>{1, 1, 1};
    CHECK(be->reads_row_strided(node, 4));
    CHECK_FALSE(be->reads_row_strided(node, 3));  // y: never read
    const Buf bias = random_buf(c.n, ++seed);
    Buf dx(x.size()), dw(w.size()), db(size_t(c.n));
    std::vector<TensorView> in = {TensorView{const_cast<float*>(x.data()), sema::DType::F32, {c.rows, c.k}},
                                  TensorView{const_cast<float*>(w.data()), sema::DType::F32, {c.n, c.k}},
                                  TensorView{const_cast<float*>(bias.data()), sema::DType::F32, {c.n}},
                                  TensorView{nullptr, sema::DType::F32, {c.rows, c.n}},
                                  TensorView{const_cast<float*>(dyv), sema::DType::F32, {c.rows, c.n}, c.lddy}};
    std::vector<TensorView> out = {TensorView{dx.data(), sema::DType::F32, {c.rows, c.k}},
                                   TensorView{dw.data(), sema::DType::F32, {c.n, c.k}},
                                   TensorView{db.data(), sema::DType::F32, {c.n}}};
    sema::Graph g;
    be->run_node(g, node, in, out);
    expect_close("linear_bias_backward (strided dy view)", name, "dx", dx, dx_ref, kGemmTol);
    expect_close("linear_bias_backward (strided dy view)", name, "dw", dw, dw_ref, kGemmTol);
    expect_close("linear_bias_backward (strided dy view)", name, "dbias", db, db_ref, kGemmTol);
  }
}

// A gradient chain (plan_executor_chains.cpp): a later kernel's backward
// adds its dx to an earlier kernel's block, as the collect would add it.
TEST_CASE("linear's backward adds dx to what its view holds", "[backend][conformance]") {
  const int64_t rows = 37, k = 12, n = 9;
  const Buf x = random_buf(rows * k, 901), w = random_buf(n * k, 902), dy = random_buf(rows * n, 903);
  const Buf held = random_buf(rows * k, 904);  // the earlier kernel's dx
  Buf dx_ref(size_t(rows * k)), dw_ref(size_t(n * k));
  cpu::ref::linear_backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), nullptr, rows, k, n);
  Buf want = held;
  for (size_t e = 0; e < want.size(); ++e) want[e] += dx_ref[e];
  for (bool fast : {false, true}) {
    Buf dx = held, dw(size_t(n * k));
    (fast ? cpu::fast::linear_backward_strided : cpu::ref::linear_backward_strided)(
        x.data(), k, w.data(), k, dy.data(), dx.data(), dw.data(), nullptr, rows, k, n, 0, true);
    expect_close(fast ? "linear_backward_strided +=" : "linear_backward_strided(ref) +=", "dx", "dx", dx, want,
                 fast ? kGemmTol : 0);
    expect_close(fast ? "linear_backward_strided +=" : "linear_backward_strided(ref) +=", "dw", "dw", dw, dw_ref,
                 fast ? kGemmTol : 0);  // dw is written, not added
  }
  // Through the backend: output 0 (dx) with the accumulate flag; only when
  // output 0 is dx (x's gradient wanted).
  auto be = make_cpu_backend(false);
  sema::OpNode node;
  node.kind = "linear_backward";
  node.name = "chain";
  node.attrs["grad_mask"] = std::vector<int64_t>{1, 1};
  CHECK(be->writes_in_place(node, 0, true));
  CHECK_FALSE(be->writes_in_place(node, 1, true));
  Buf dx = held, dw(size_t(n * k));
  std::vector<TensorView> in = {TensorView{const_cast<float*>(x.data()), sema::DType::F32, {rows, k}},
                                TensorView{const_cast<float*>(w.data()), sema::DType::F32, {n, k}},
                                TensorView{nullptr, sema::DType::F32, {rows, n}},
                                TensorView{const_cast<float*>(dy.data()), sema::DType::F32, {rows, n}}};
  std::vector<TensorView> out = {TensorView{dx.data(), sema::DType::F32, {rows, k}, 0, true},
                                 TensorView{dw.data(), sema::DType::F32, {n, k}}};
  sema::Graph g;
  be->run_node(g, node, in, out);
  expect_close("linear_backward (dx +=)", "chain", "dx", dx, want, kGemmTol);
  expect_close("linear_backward (dx +=)", "chain", "dw", dw, dw_ref, kGemmTol);
  node.attrs["grad_mask"] = std::vector<int64_t>{0, 1};  // output 0 is dw then: never added to
  CHECK_FALSE(be->writes_in_place(node, 0, true));
}

}  // namespace nns::backend::test
