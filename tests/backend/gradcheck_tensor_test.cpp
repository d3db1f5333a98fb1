// Finite-difference gradient checks of the REFERENCE backward kernels of the
// broadcasting binaries, reductions and layout ops (same method and
// tolerance as gradcheck_nn_test.cpp). Layout ops are linear, so their
// differences are exact up to the rounding of L.
#include "backend_test_util.h"

namespace nns::backend::test {

TEST_CASE("gradcheck: binary broadcasting and scale", "[backend][gradcheck]") {
  using Dims = std::vector<int64_t>;
  const std::pair<Dims, Dims> shapes[] = {{{3, 1, 4}, {2, 4}}, {{2, 3}, {2, 3}}, {{}, {2, 2}}};
  const std::pair<cpu::BinaryOp, const char*> ops[] = {{cpu::BinaryOp::add, "add"},
                                                       {cpu::BinaryOp::sub, "sub"},
                                                       {cpu::BinaryOp::mul, "mul"},
                                                       {cpu::BinaryOp::div, "div"}};
  uint32_t seed = 3000;
  // Not a structured binding: C++17 lambdas (the loss below) cannot capture one.
  for (const auto& shape_pair : shapes) {
    const Dims& ad = shape_pair.first;
    const Dims& bd = shape_pair.second;
    int64_t out[cpu::kMaxRank];
    int rank = cpu::broadcast_shape(int(ad.size()), ad.data(), int(bd.size()), bd.data(), out);
    int64_t nc = numel(Dims(out, out + rank));
    for (const auto& [op, name] : ops) {
      cpu::BinaryOp o = op;
      Buf a = random_buf(numel(ad), ++seed), b = random_away_from_zero(numel(bd), ++seed, 0.5f, 1.5f);
      Buf w = random_buf(nc, ++seed), c = zeros(nc);
      auto loss = [&]() {
        cpu::ref::binary(o, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()), bd.data(),
                         c.data());
        return weighted_sum(c, w);
      };
      Buf da = zeros(numel(ad)), db = zeros(numel(bd));
      cpu::ref::binary_backward(o, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()),
                                bd.data(), w.data(), da.data(), db.data());
      std::string shape = dims_str(ad) + " " + name + " " + dims_str(bd);
      grad_check(name, shape, "a", a, da, loss);
      grad_check(name, shape, "b", b, db, loss);
    }
  }
  int64_t n = 7;
  Buf x = random_buf(n, ++seed), w = random_buf(n, ++seed), y = zeros(n), dx = zeros(n);
  auto loss = [&]() {
    cpu::ref::scale(x.data(), y.data(), n, 2.5f);
    return weighted_sum(y, w);
  };
  cpu::ref::scale_backward(w.data(), dx.data(), n, 2.5f);
  grad_check("scale", "n7", "x", x, dx, loss);
}

TEST_CASE("gradcheck: reductions", "[backend][gradcheck]") {
  uint32_t seed = 3100;
  for (cpu::Reduction kind : {cpu::Reduction::sum, cpu::Reduction::mean}) {
    int64_t outer = 2, len = 3, inner = 4;
    Buf x = random_buf(outer * len * inner, ++seed), w = random_buf(outer * inner, ++seed);
    Buf y = zeros(outer * inner), dx = zeros(outer * len * inner);
    auto loss = [&]() {
      cpu::ref::reduce(kind, x.data(), y.data(), outer, len, inner);
      return weighted_sum(y, w);
    };
    cpu::ref::reduce_backward(kind, w.data(), dx.data(), outer, len, inner);
    grad_check(kind == cpu::Reduction::sum ? "sum" : "mean", "[2,3,4] dim1", "x", x, dx, loss);
  }
}

TEST_CASE("gradcheck: layout ops", "[backend][gradcheck]") {
  uint32_t seed = 3200;
  {  // permute
    std::vector<int64_t> dims = {2, 3, 4};
    std::vector<int> perm = {2, 0, 1};
    Buf x = random_buf(24, ++seed), w = random_buf(24, ++seed), y = zeros(24), dx = zeros(24);
    auto loss = [&]() {
      cpu::ref::permute(x.data(), y.data(), 3, dims.data(), perm.data());
      return weighted_sum(y, w);
    };
    cpu::ref::permute_backward(w.data(), dx.data(), 3, dims.data(), perm.data());
    grad_check("permute", "[2,3,4] perm[2,0,1]", "x", x, dx, loss);
  }
  {  // roll
    std::vector<int64_t> dims = {3, 4}, shifts = {1, -3};
    std::vector<int> rdims = {0, 1};
    Buf x = random_buf(12, ++seed), w = random_buf(12, ++seed), y = zeros(12), dx = zeros(12);
    auto loss = [&]() {
      cpu::ref::roll(x.data(), y.data(), 2, dims.data(), 2, shifts.data(), rdims.data());
      return weighted_sum(y, w);
    };
    cpu::ref::roll_backward(w.data(), dx.data(), 2, dims.data(), 2, shifts.data(), rdims.data());
    grad_check("roll", "[3,4] by[1,-3]", "x", x, dx, loss);
  }
  {  // pad
    std::vector<int64_t> dims = {2, 3}, before = {1, 0}, after = {0, 2};
    Buf x = random_buf(6, ++seed), w = random_buf(15, ++seed), y = zeros(15), dx = zeros(6);
    auto loss = [&]() {
      cpu::ref::pad(x.data(), y.data(), 2, dims.data(), before.data(), after.data());
      return weighted_sum(y, w);
    };
    cpu::ref::pad_backward(w.data(), dx.data(), 2, dims.data(), before.data(), after.data());
    grad_check("pad", "[2,3] [1,0][0,2]", "x", x, dx, loss);
  }
  {  // concat / split: [2, s_j, 3] pieces along dim 1
    std::vector<int64_t> sizes = {1, 2};
    Buf p0 = random_buf(6, ++seed), p1 = random_buf(12, ++seed), w = random_buf(18, ++seed);
    Buf y = zeros(18);
    auto loss = [&]() {
      const float* in[] = {p0.data(), p1.data()};
      cpu::ref::concat(in, 2, sizes.data(), 2, 3, y.data());
      return weighted_sum(y, w);
    };
    Buf d0 = zeros(6), d1 = zeros(12);
    float* douts[] = {d0.data(), d1.data()};
    cpu::ref::concat_backward(w.data(), douts, 2, sizes.data(), 2, 3);
    grad_check("concat", "sizes[1,2] outer2 inner3", "in0", p0, d0, loss);
    grad_check("concat", "sizes[1,2] outer2 inner3", "in1", p1, d1, loss);

    Buf x = random_buf(18, ++seed), w0 = random_buf(6, ++seed), w1 = random_buf(12, ++seed);
    Buf o0 = zeros(6), o1 = zeros(12), dx = zeros(18);
    auto split_loss = [&]() {
      float* outs[] = {o0.data(), o1.data()};
      cpu::ref::split(x.data(), outs, 2, sizes.data(), 2, 3);
      return weighted_sum(o0, w0) + weighted_sum(o1, w1);
    };
    const float* dys[] = {w0.data(), w1.data()};
    cpu::ref::split_backward(dys, 2, sizes.data(), 2, 3, dx.data());
    grad_check("split", "sizes[1,2] outer2 inner3", "x", x, dx, split_loss);
  }
  {  // embedding: gradient w.r.t. the table, repeated ids, a sharded table
    std::vector<int32_t> ids = {4, 2, 4, 9, 3};
    int64_t vocab = 4, dim = 3, offset = 2;  // holds rows 2..5
    Buf table = random_buf(vocab * dim, ++seed), w = random_buf(5 * dim, ++seed), y = zeros(5 * dim);
    auto loss = [&]() {
      cpu::ref::embedding(table.data(), ids.data(), y.data(), 5, vocab, dim, offset);
      return weighted_sum(y, w);
    };
    Buf dtable = zeros(vocab * dim);
    cpu::ref::embedding_backward(ids.data(), w.data(), dtable.data(), 5, vocab, dim, offset);
    grad_check("embedding", "vocab4@2 dim3 ids5", "table", table, dtable, loss);
  }
}

}  // namespace nns::backend::test
