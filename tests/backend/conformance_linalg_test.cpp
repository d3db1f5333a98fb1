// Conformance table, linear algebra: matmul/bmm, linear and conv2d nodes,
// forward and every backward output, through Backend::run_node on the
// reference and the tested backends (node_conformance.h). Kernel options
// that no graph node uses (transposed operands, beta accumulation, a b
// shared by the batch, unequal padding) are checked on the CPU kernels
// directly (cpu::fast vs cpu::ref).
//
// Tolerance 1e-4 (error measure: backend_test_util.h): ref accumulates in
// double, oneDNN in float in a blocked order, so a dot product of length k
// is off by about sqrt(k) * 2^-24 relative to the output's typical size and
// by k * 2^-24 ~ 6e-5 at worst for the largest k = 1000 here (conv weight
// gradients sum n * out_h * out_w terms, at most 512 here).
#include "node_conformance.h"

namespace nns::backend::test {

namespace {

constexpr double kGemmTol = 1e-4;

struct MatmulCase {
  int64_t batch, b_batch, m, k, n;
  bool ta, tb;
  float beta;
};

std::string matmul_name(const MatmulCase& c) {
  std::ostringstream s;
  s << "b" << c.batch << "/" << c.b_batch << " m" << c.m << " k" << c.k << " n" << c.n
    << (c.ta ? " aT" : "") << (c.tb ? " bT" : "") << (c.beta != 0 ? " beta=1" : "");
  return s.str();
}

}  // namespace

TEST_CASE("conformance: matmul / bmm", "[backend][conformance]") {
  std::vector<MatmulCase> cases = {
      {1, 1, 1, 1, 1, false, false, 0}, {1, 1, 7, 13, 5, false, false, 0},
      {1, 1, 3, 0, 4, false, false, 0},  // empty contraction: zeros
      {2, 2, 64, 128, 48, false, false, 0}, {1, 1, 33, 1000, 17, false, true, 0},
      {2, 2, 5, 9, 6, false, false, 1.0f},  {3, 1, 16, 8, 4, false, false, 1.0f},
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({3, 3, 16, 33, 9, ta, tb, 0});
      cases.push_back({4, 1, 5, 7, 3, ta, tb, 0});  // b shared by the batch
      cases.push_back({1, 1, 1, 6, 1, ta, tb, 0});
    }
  uint32_t seed = 100;
  for (const MatmulCase& c : cases) {
    Buf a = random_buf(c.batch * c.m * c.k, ++seed);
    Buf b = random_buf(c.b_batch * c.k * c.n, ++seed);
    Buf c0 = random_buf(c.batch * c.m * c.n, ++seed);
    Buf dc = random_buf(c.batch * c.m * c.n, ++seed);
    std::string name = matmul_name(c);
    if (c.b_batch == c.batch && !c.ta && !c.tb && c.beta == 0) {
      // A graph node: matmul on matrices, bmm on batches of them.
      bool batched = c.batch > 1;
      auto shape = [&](int64_t r, int64_t k) { return batched ? sema::Shape{c.batch, r, k} : sema::Shape{r, k}; };
      NodeCase fwd{batched ? "bmm" : "matmul", {}, {f32(shape(c.m, c.k), a), f32(shape(c.k, c.n), b)}, {f32_zeros(shape(c.m, c.n))}};
      std::vector<HostTensor> y = expect_node(fwd.kind, name, fwd, {"c"}, kGemmTol);
      NodeCase bwd = backward_case(fwd, y, {f32(shape(c.m, c.n), dc)}, {1, 1});
      expect_node(bwd.kind, name, bwd, {"da", "db"}, kGemmTol);
      continue;
    }
    // Kernel options of the CPU library only (no graph node transposes,
    // accumulates or shares b across the batch).
    Buf c_ref = c0, c_fast = c0;
    cpu::ref::matmul(a.data(), b.data(), c_ref.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta,
                     c.tb, c.beta);
    cpu::fast::matmul(a.data(), b.data(), c_fast.data(), c.batch, c.b_batch, c.m, c.k, c.n, c.ta,
                      c.tb, c.beta);
    expect_close("matmul", name, "c", c_fast, c_ref, kGemmTol);
    if (c.beta != 0) continue;
    Buf da_ref(a.size()), db_ref(b.size()), da_fast(a.size()), db_fast(b.size());
    cpu::ref::matmul_backward(a.data(), b.data(), dc.data(), da_ref.data(), db_ref.data(), c.batch,
                              c.b_batch, c.m, c.k, c.n, c.ta, c.tb);
    cpu::fast::matmul_backward(a.data(), b.data(), dc.data(), da_fast.data(), db_fast.data(),
                               c.batch, c.b_batch, c.m, c.k, c.n, c.ta, c.tb);
    expect_close("matmul_backward", name, "da", da_fast, da_ref, kGemmTol);
    expect_close("matmul_backward", name, "db", db_fast, db_ref, kGemmTol);
  }
}

TEST_CASE("conformance: linear", "[backend][conformance]") {
  struct Case {
    int64_t rows, k, n;
    bool bias;
  };
  std::vector<Case> cases = {{1, 1, 1, true},     {5, 7, 3, true},      {33, 64, 17, false},
                             {33, 64, 17, true},  {128, 256, 96, true}, {2, 1, 9, true}};
  uint32_t seed = 200;
  for (const Case& c : cases) {
    Buf x = random_buf(c.rows * c.k, ++seed), w = random_buf(c.n * c.k, ++seed);
    Buf bias = random_buf(c.n, ++seed), dy = random_buf(c.rows * c.n, ++seed);
    std::string name = "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" +
                       std::to_string(c.n) + (c.bias ? " +bias" : "");
    NodeCase fwd{c.bias ? "linear_bias" : "linear", {}, {f32({c.rows, c.k}, x), f32({c.n, c.k}, w)}, {f32_zeros({c.rows, c.n})}};
    if (c.bias) fwd.inputs.push_back(f32({c.n}, bias));
    std::vector<HostTensor> y = expect_node(fwd.kind, name, fwd, {"y"}, kGemmTol);
    NodeCase bwd = backward_case(fwd, y, {f32({c.rows, c.n}, dy)}, c.bias ? std::vector<int64_t>{1, 1, 1} : std::vector<int64_t>{1, 1});
    if (c.bias) expect_node(bwd.kind, name, bwd, {"dx", "dw", "dbias"}, kGemmTol);
    else expect_node(bwd.kind, name, bwd, {"dx", "dw"}, kGemmTol);
  }
}

// Row-strided x and w (TensorView::row_stride: columns of larger buffers
// read in place, as the plan executor hands coshard's contraction-split
// linears their inputs): the strided kernels against the packed reference
// on copies of the same columns; the reference strided kernel exactly, the
// fast one within the gemm tolerance; and through run_node with strided
// views, the fp32 CPU backend's wrapper.
TEST_CASE("conformance: linear on row-strided x and w", "[backend][conformance]") {
  struct Case {
    int64_t rows, k, n, ldx, ldw, col;  // x, w: columns [col, col + k) of rows ldx, ldw long
    bool bias;
  };
  const std::vector<Case> cases = {
      {5, 7, 3, 16, 9, 2, true}, {33, 8, 17, 32, 32, 24, false}, {64, 16, 8, 64, 40, 16, true}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const Buf xs = random_buf(c.rows * c.ldx, ++seed), ws = random_buf(c.n * c.ldw, ++seed);
    const Buf bias = random_buf(c.n, ++seed), dy = random_buf(c.rows * c.n, ++seed);
    Buf x(static_cast<size_t>(c.rows * c.k)), w(static_cast<size_t>(c.n * c.k));
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t p = 0; p < c.k; ++p) x[size_t(r * c.k + p)] = xs[size_t(r * c.ldx + c.col + p)];
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t p = 0; p < c.k; ++p) w[size_t(j * c.k + p)] = ws[size_t(j * c.ldw + c.col + p)];
    const float* xv = xs.data() + c.col;
    const float* wv = ws.data() + c.col;
    const float* bp = c.bias ? bias.data() : nullptr;
    const std::string name = "rows" + std::to_string(c.rows) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n) +
                             " ldx" + std::to_string(c.ldx) + " ldw" + std::to_string(c.ldw);
    Buf y_ref(size_t(c.rows * c.n)), y_rs(y_ref.size()), y_fs(y_ref.size());
    cpu::ref::linear(x.data(), w.data(), bp, y_ref.data(), c.rows, c.k, c.n);
    cpu::ref::linear_strided(xv, c.ldx, wv, c.ldw, bp, y_rs.data(), c.rows, c.k, c.n);
    cpu::fast::linear_strided(xv, c.ldx, wv, c.ldw, bp, y_fs.data(), c.rows, c.k, c.n);
    expect_close("linear_strided(ref)", name, "y", y_rs, y_ref, 0);
    expect_close("linear_strided", name, "y", y_fs, y_ref, kGemmTol);
    Buf dx_ref(x.size()), dw_ref(w.size()), db_ref(size_t(c.n)), dx_fs(x.size()), dw_fs(w.size()), db_fs(size_t(c.n));
    Buf dx_rs(x.size()), dw_rs(w.size()), db_rs(size_t(c.n));
    cpu::ref::linear_backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data(), c.rows, c.k,
                              c.n);
    cpu::ref::linear_backward_strided(xv, c.ldx, wv, c.ldw, dy.data(), dx_rs.data(), dw_rs.data(), db_rs.data(), c.rows,
                                      c.k, c.n);
    cpu::fast::linear_backward_strided(xv, c.ldx, wv, c.ldw, dy.data(), dx_fs.data(), dw_fs.data(), db_fs.data(),
                                       c.rows, c.k, c.n);
    expect_close("linear_backward_strided(ref)", name, "dx", dx_rs, dx_ref, 0);
    expect_close("linear_backward_strided(ref)", name, "dw", dw_rs, dw_ref, 0);
    expect_close("linear_backward_strided", name, "dx", dx_fs, dx_ref, kGemmTol);
    expect_close("linear_backward_strided", name, "dw", dw_fs, dw_ref, kGemmTol);
    expect_close("linear_backward_strided", name, "dbias", db_fs, db_ref, kGemmTol);
    // The backend's wrapper: views with a row stride.
    auto be = make_cpu_backend(false);
    REQUIRE(be->precision() == Precision::F32);
    sema::Graph g;
    sema::OpNode node;
    node.kind = c.bias ? "linear_bias" : "linear";
    node.name = "strided";
    CHECK(be->reads_row_strided(node, 0));
    CHECK(be->reads_row_strided(node, 1));
    CHECK_FALSE(be->reads_row_strided(node, 2));
    Buf y_be(y_ref.size());
    std::vector<TensorView> in = {TensorView{const_cast<float*>(xv), sema::DType::F32, {c.rows, c.k}, c.ldx},
                                  TensorView{const_cast<float*>(wv), sema::DType::F32, {c.n, c.k}, c.ldw}};
    if (c.bias) in.push_back(TensorView{const_cast<float*>(bias.data()), sema::DType::F32, {c.n}});
    std::vector<TensorView> out = {TensorView{y_be.data(), sema::DType::F32, {c.rows, c.n}}};
    be->run_node(g, node, in, out);
    expect_close("linear (strided views)", name, "y", y_be, y_ref, kGemmTol);
    be->set_precision(Precision::BF16);
    CHECK_FALSE(be->reads_row_strided(node, 0));  // the bf16 products round packed copies: the executor packs
  }
}

TEST_CASE("conformance: conv2d", "[backend][conformance]") {
  auto dims = [](int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
                 int64_t s, int64_t ph, int64_t pw) {
    cpu::Conv2dDims d;
    d.n = n, d.c = c, d.h = h, d.w = w, d.o = o, d.kh = kh, d.kw = kw;
    d.stride_h = d.stride_w = s;
    d.pad_h = ph, d.pad_w = pw;
    return d;
  };
  std::vector<cpu::Conv2dDims> cases = {
      dims(1, 1, 5, 5, 1, 3, 3, 1, 1, 1),   dims(2, 3, 8, 7, 4, 3, 3, 1, 1, 1),
      dims(2, 3, 9, 9, 5, 3, 3, 2, 0, 0),   dims(1, 4, 6, 6, 8, 1, 1, 1, 0, 0),
      dims(2, 2, 11, 10, 3, 5, 3, 2, 2, 1), dims(2, 8, 16, 16, 16, 3, 3, 1, 1, 1),
      dims(1, 3, 16, 16, 8, 4, 4, 4, 0, 0),  // patch embedding
      dims(2, 16, 9, 9, 16, 3, 3, 1, 1, 1),  // >= 16 channels: blocked backward-data
      dims(1, 32, 7, 7, 24, 3, 3, 2, 1, 1),
  };
  uint32_t seed = 300;
  for (const cpu::Conv2dDims& d : cases) {
    for (bool with_bias : {true, false}) {
      Buf x = random_buf(d.n * d.c * d.h * d.w, ++seed);
      Buf w = random_buf(d.o * d.c * d.kh * d.kw, ++seed);
      Buf bias = random_buf(d.o, ++seed);
      int64_t ny = d.n * d.o * d.out_h() * d.out_w();
      Buf dy = random_buf(ny, ++seed);
      std::ostringstream s;
      s << "x" << dims_str({d.n, d.c, d.h, d.w}) << " w" << dims_str({d.o, d.c, d.kh, d.kw}) << " s"
        << d.stride_h << " p" << d.pad_h << d.pad_w << (with_bias ? " +b" : "");
      if (d.pad_h == d.pad_w && d.stride_h == d.stride_w) {
        // A graph node: conv2d / conv2d_bias (one stride, one padding).
        sema::Shape ys{d.n, d.o, d.out_h(), d.out_w()};
        NodeCase fwd{with_bias ? "conv2d_bias" : "conv2d",
                     {{"stride", d.stride_h}, {"padding", d.pad_h}},
                     {f32({d.n, d.c, d.h, d.w}, x), f32({d.o, d.c, d.kh, d.kw}, w)},
                     {f32_zeros(ys)}};
        if (with_bias) fwd.inputs.push_back(f32({d.o}, bias));
        std::vector<HostTensor> y = expect_node(fwd.kind, s.str(), fwd, {"y"}, kGemmTol);
        NodeCase bwd = backward_case(fwd, y, {f32(ys, dy)}, with_bias ? std::vector<int64_t>{1, 1, 1} : std::vector<int64_t>{1, 1});
        if (with_bias) expect_node(bwd.kind, s.str(), bwd, {"dx", "dw", "dbias"}, kGemmTol);
        else expect_node(bwd.kind, s.str(), bwd, {"dx", "dw"}, kGemmTol);
        continue;
      }
      // Unequal padding per axis: a kernel option no graph node uses.
      const float* bp = with_bias ? bias.data() : nullptr;
      Buf y_ref = zeros(ny), y_fast = zeros(ny);
      cpu::ref::conv2d(x.data(), w.data(), bp, y_ref.data(), d);
      cpu::fast::conv2d(x.data(), w.data(), bp, y_fast.data(), d);
      expect_close("conv2d", s.str(), "y", y_fast, y_ref, kGemmTol);
      Buf dx_ref(x.size()), dx_fast(x.size());
      cpu::ref::conv2d_backward_data(dy.data(), w.data(), dx_ref.data(), d);
      cpu::fast::conv2d_backward_data(dy.data(), w.data(), dx_fast.data(), d);
      expect_close("conv2d_backward_data", s.str(), "dx", dx_fast, dx_ref, kGemmTol);
      Buf dw_ref(w.size()), dw_fast(w.size()), db_ref(bias.size()), db_fast(bias.size());
      float* dbr = with_bias ? db_ref.data() : nullptr;
      float* dbf = with_bias ? db_fast.data() : nullptr;
      cpu::ref::conv2d_backward_weights(x.data(), dy.data(), dw_ref.data(), dbr, d);
      cpu::fast::conv2d_backward_weights(x.data(), dy.data(), dw_fast.data(), dbf, d);
      expect_close("conv2d_backward_weights", s.str(), "dw", dw_fast, dw_ref, kGemmTol);
      if (with_bias) expect_close("conv2d_backward_weights", s.str(), "dbias", db_fast, db_ref, kGemmTol);
    }
  }
}

}  // namespace nns::backend::test
