// Conformance table, broadcasting binaries, reductions and layout ops: fast
// (plain C++) vs ref, forward and backward.
//
// Tolerances (error measure: backend_test_util.h):
// - layout ops (permute, roll, pad, concat, split, embedding) and their
//   backwards 0: they only move floats, so results must be bit-identical
//   (embedding_backward adds in the same id order in both).
// - binary forward 0: ref computes in double and rounds once; for + - * /
//   of two floats that equals the correctly rounded float result fast gets.
// - scale 0: one float multiply in both.
// - binary backward, reduce 1e-5: fast sums broadcast gradients in float
//   (8 partial sums), ref in double; sums here have at most 1000 terms.
#include "backend_test_util.h"

namespace nns::backend::test {

namespace {

const char* op_name(cpu::BinaryOp op) {
  switch (op) {
    case cpu::BinaryOp::add: return "add";
    case cpu::BinaryOp::sub: return "sub";
    case cpu::BinaryOp::mul: return "mul";
    case cpu::BinaryOp::div: return "div";
  }
  return "?";
}

}  // namespace

TEST_CASE("conformance: binary broadcasting", "[backend][conformance]") {
  using Dims = std::vector<int64_t>;
  std::vector<std::pair<Dims, Dims>> cases = {
      {{3, 4}, {3, 4}},         {{3, 4}, {4}},          {{3, 4}, {3, 1}},
      {{4, 1}, {1, 5}},         {{2, 3, 4, 5}, {3, 1, 5}}, {{1}, {2, 3}},
      {{}, {2, 3}},             {{5}, {}},              {{1, 1}, {1}},
      {{8, 16, 32}, {32}},      {{8, 1, 32}, {8, 16, 1}},  {{2, 1, 3, 1, 2, 1}, {1, 4, 1, 5, 1, 3}},
      {{7, 1000}, {7, 1}},      {{1, 1000}, {7, 1000}},
  };
  const cpu::BinaryOp ops[] = {cpu::BinaryOp::add, cpu::BinaryOp::sub, cpu::BinaryOp::mul,
                               cpu::BinaryOp::div};
  uint32_t seed = 1000;
  for (const auto& [ad, bd] : cases) {
    int64_t out_dims[cpu::kMaxRank];
    int rank = cpu::broadcast_shape(int(ad.size()), ad.data(), int(bd.size()), bd.data(), out_dims);
    REQUIRE(rank >= 0);
    int64_t nc = numel(Dims(out_dims, out_dims + rank));
    Buf a = random_buf(numel(ad), ++seed);
    Buf b = random_away_from_zero(numel(bd), ++seed, 0.5f, 1.5f);  // safe divisors
    Buf dc = random_buf(nc, ++seed);
    for (cpu::BinaryOp op : ops) {
      std::string name = dims_str(ad) + " " + op_name(op) + " " + dims_str(bd);
      Buf c_ref = zeros(nc), c_fast = zeros(nc);
      cpu::ref::binary(op, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()), bd.data(),
                       c_ref.data());
      cpu::fast::binary(op, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()),
                        bd.data(), c_fast.data());
      expect_close("binary", name, "c", c_fast, c_ref, 0);
      Buf da_ref = zeros(numel(ad)), db_ref = zeros(numel(bd));
      Buf da_fast = random_buf(numel(ad), 1), db_fast = random_buf(numel(bd), 2);  // overwritten
      cpu::ref::binary_backward(op, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()),
                                bd.data(), dc.data(), da_ref.data(), db_ref.data());
      cpu::fast::binary_backward(op, a.data(), int(ad.size()), ad.data(), b.data(), int(bd.size()),
                                 bd.data(), dc.data(), da_fast.data(), db_fast.data());
      expect_close("binary_backward", name, "da", da_fast, da_ref, 1e-5);
      expect_close("binary_backward", name, "db", db_fast, db_ref, 1e-5);
    }
  }
  // Incompatible shapes are reported, not guessed.
  int64_t a3[] = {3}, b4[] = {4}, out[cpu::kMaxRank];
  CHECK(cpu::broadcast_shape(1, a3, 1, b4, out) == -1);
}

TEST_CASE("conformance: scale and reductions", "[backend][conformance]") {
  uint32_t seed = 1100;
  for (int64_t n : {0, 1, 1001}) {
    Buf x = random_buf(n, ++seed), y_ref = zeros(n), y_fast = zeros(n);
    cpu::ref::scale(x.data(), y_ref.data(), n, -0.37f);
    cpu::fast::scale(x.data(), y_fast.data(), n, -0.37f);
    expect_close("scale", "n" + std::to_string(n), "y", y_fast, y_ref, 0);
    cpu::ref::scale_backward(x.data(), y_ref.data(), n, -0.37f);
    cpu::fast::scale_backward(x.data(), y_fast.data(), n, -0.37f);
    expect_close("scale_backward", "n" + std::to_string(n), "dx", y_fast, y_ref, 0);
  }
  struct Case {
    int64_t outer, len, inner;
  };
  std::vector<Case> cases = {{1, 1, 1}, {3, 7, 1}, {2, 5, 9}, {1, 1000, 1}, {4, 3, 257}, {5, 1, 3}};
  for (const Case& c : cases)
    for (cpu::Reduction kind : {cpu::Reduction::sum, cpu::Reduction::mean}) {
      const char* kname = kind == cpu::Reduction::sum ? "sum" : "mean";
      std::string name = std::string(kname) + " [" + std::to_string(c.outer) + "," +
                         std::to_string(c.len) + "," + std::to_string(c.inner) + "] dim1";
      int64_t nx = c.outer * c.len * c.inner, ny = c.outer * c.inner;
      Buf x = random_buf(nx, ++seed), dy = random_buf(ny, ++seed);
      Buf y_ref = zeros(ny), y_fast = zeros(ny), dx_ref = zeros(nx), dx_fast = zeros(nx);
      cpu::ref::reduce(kind, x.data(), y_ref.data(), c.outer, c.len, c.inner);
      cpu::fast::reduce(kind, x.data(), y_fast.data(), c.outer, c.len, c.inner);
      expect_close("reduce", name, "y", y_fast, y_ref, 1e-5);
      cpu::ref::reduce_backward(kind, dy.data(), dx_ref.data(), c.outer, c.len, c.inner);
      cpu::fast::reduce_backward(kind, dy.data(), dx_fast.data(), c.outer, c.len, c.inner);
      expect_close("reduce_backward", name, "dx", dx_fast, dx_ref, 1e-6);
    }
}

TEST_CASE("conformance: permute", "[backend][conformance]") {
  struct Case {
    std::vector<int64_t> dims;
    std::vector<int> perm;
  };
  std::vector<Case> cases = {
      {{2, 3}, {1, 0}},
      {{2, 3, 4}, {0, 2, 1}},
      {{2, 3, 4}, {2, 0, 1}},
      {{2, 3, 4}, {0, 1, 2}},
      {{5, 1, 7, 3}, {3, 2, 1, 0}},
      {{1, 1, 6}, {2, 0, 1}},
      {{2, 3, 4, 5, 6, 2}, {5, 3, 1, 0, 2, 4}},
      {{64, 48}, {1, 0}},
      {{3, 40, 35}, {0, 2, 1}},
      {{2, 4, 7, 4, 7, 3}, {0, 1, 3, 2, 4, 5}},  // Swin window partition
      {{4, 9, 2, 16}, {0, 2, 1, 3}},             // attention heads
  };
  uint32_t seed = 1200;
  for (const Case& c : cases) {
    int rank = int(c.dims.size());
    int64_t n = numel(c.dims);
    Buf x = random_buf(n, ++seed), y_ref = zeros(n), y_fast = zeros(n);
    std::string name = dims_str(c.dims) + " perm" + dims_str(std::vector<int64_t>(c.perm.begin(), c.perm.end()));
    cpu::ref::permute(x.data(), y_ref.data(), rank, c.dims.data(), c.perm.data());
    cpu::fast::permute(x.data(), y_fast.data(), rank, c.dims.data(), c.perm.data());
    expect_close("permute", name, "y", y_fast, y_ref, 0);
    Buf dx_ref = zeros(n), dx_fast = zeros(n);
    cpu::ref::permute_backward(y_ref.data(), dx_ref.data(), rank, c.dims.data(), c.perm.data());
    cpu::fast::permute_backward(y_ref.data(), dx_fast.data(), rank, c.dims.data(), c.perm.data());
    expect_close("permute_backward", name, "dx", dx_fast, dx_ref, 0);
    expect_close("permute_backward", name, "roundtrip", dx_fast, x, 0);
  }
}

TEST_CASE("conformance: roll and pad", "[backend][conformance]") {
  struct RollCase {
    std::vector<int64_t> dims, shifts;
    std::vector<int> roll_dims;
  };
  std::vector<RollCase> rolls = {
      {{5}, {2}, {0}},
      {{4, 6}, {1, -2}, {0, 1}},
      {{2, 7, 8, 3}, {3, -9}, {1, 2}},  // Swin shifted windows on [B, H, W, C]
      {{3, 4}, {5, -1}, {0, 0}},        // the same dim twice: shifts add
      {{3, 4}, {0}, {1}},
      {{1, 6, 1}, {4}, {1}},
      {{2, 3, 4}, {-1}, {2}},
  };
  uint32_t seed = 1300;
  for (const RollCase& c : rolls) {
    int rank = int(c.dims.size()), ns = int(c.shifts.size());
    int64_t n = numel(c.dims);
    Buf x = random_buf(n, ++seed), y_ref = zeros(n), y_fast = zeros(n);
    std::string name = dims_str(c.dims) + " by" + dims_str(c.shifts);
    cpu::ref::roll(x.data(), y_ref.data(), rank, c.dims.data(), ns, c.shifts.data(), c.roll_dims.data());
    cpu::fast::roll(x.data(), y_fast.data(), rank, c.dims.data(), ns, c.shifts.data(), c.roll_dims.data());
    expect_close("roll", name, "y", y_fast, y_ref, 0);
    Buf dx_ref = zeros(n), dx_fast = zeros(n);
    cpu::ref::roll_backward(y_ref.data(), dx_ref.data(), rank, c.dims.data(), ns, c.shifts.data(),
                            c.roll_dims.data());
    cpu::fast::roll_backward(y_ref.data(), dx_fast.data(), rank, c.dims.data(), ns, c.shifts.data(),
                             c.roll_dims.data());
    expect_close("roll_backward", name, "dx", dx_fast, dx_ref, 0);
    expect_close("roll_backward", name, "roundtrip", dx_fast, x, 0);
  }
  struct PadCase {
    std::vector<int64_t> dims, before, after;
  };
  std::vector<PadCase> pads = {
      {{3}, {1}, {2}},
      {{2, 3, 4}, {0, 1, 0}, {0, 2, 0}},
      {{2, 5, 6, 3}, {0, 1, 2, 0}, {0, 1, 0, 0}},  // Swin: pad H, W to the window size
      {{2, 3}, {0, 0}, {0, 3}},
      {{2, 3}, {0, 0}, {0, 0}},
      {{1, 1}, {2, 1}, {1, 2}},
  };
  for (const PadCase& c : pads) {
    int rank = int(c.dims.size());
    std::vector<int64_t> yd(c.dims.size());
    for (size_t i = 0; i < yd.size(); ++i) yd[i] = c.dims[i] + c.before[i] + c.after[i];
    int64_t nx = numel(c.dims), ny = numel(yd);
    Buf x = random_buf(nx, ++seed), dy = random_buf(ny, ++seed);
    Buf y_ref = zeros(ny), y_fast = random_buf(ny, 3);  // fast must write the zeros itself
    std::string name = dims_str(c.dims) + " " + dims_str(c.before) + dims_str(c.after);
    cpu::ref::pad(x.data(), y_ref.data(), rank, c.dims.data(), c.before.data(), c.after.data());
    cpu::fast::pad(x.data(), y_fast.data(), rank, c.dims.data(), c.before.data(), c.after.data());
    expect_close("pad", name, "y", y_fast, y_ref, 0);
    Buf dx_ref = zeros(nx), dx_fast = zeros(nx);
    cpu::ref::pad_backward(dy.data(), dx_ref.data(), rank, c.dims.data(), c.before.data(), c.after.data());
    cpu::fast::pad_backward(dy.data(), dx_fast.data(), rank, c.dims.data(), c.before.data(), c.after.data());
    expect_close("pad_backward", name, "dx", dx_fast, dx_ref, 0);
  }
}

TEST_CASE("conformance: concat / split / embedding", "[backend][conformance]") {
  struct Case {
    std::vector<int64_t> sizes;
    int64_t outer, inner;
  };
  std::vector<Case> cases = {{{2, 3, 1}, 4, 5}, {{1}, 3, 3}, {{0, 3}, 2, 2}, {{5, 7}, 1, 1}, {{2, 2}, 6, 1}};
  uint32_t seed = 1400;
  for (const Case& c : cases) {
    int k = int(c.sizes.size());
    int64_t total = 0;
    for (int64_t s : c.sizes) total += s;
    std::vector<Buf> parts;
    std::vector<const float*> ptrs;
    for (int64_t s : c.sizes) parts.push_back(random_buf(c.outer * s * c.inner, ++seed));
    for (const Buf& p : parts) ptrs.push_back(p.data());
    int64_t ny = c.outer * total * c.inner;
    Buf y_ref = zeros(ny), y_fast = zeros(ny);
    std::string name = "sizes" + dims_str(c.sizes) + " outer" + std::to_string(c.outer) + " inner" +
                       std::to_string(c.inner);
    cpu::ref::concat(ptrs.data(), k, c.sizes.data(), c.outer, c.inner, y_ref.data());
    cpu::fast::concat(ptrs.data(), k, c.sizes.data(), c.outer, c.inner, y_fast.data());
    expect_close("concat", name, "y", y_fast, y_ref, 0);
    std::vector<Buf> out_ref, out_fast;
    std::vector<float*> pr, pf;
    for (int64_t s : c.sizes) {
      out_ref.push_back(zeros(c.outer * s * c.inner));
      out_fast.push_back(zeros(c.outer * s * c.inner));
    }
    for (int j = 0; j < k; ++j) {
      pr.push_back(out_ref[size_t(j)].data());
      pf.push_back(out_fast[size_t(j)].data());
    }
    cpu::ref::split(y_ref.data(), pr.data(), k, c.sizes.data(), c.outer, c.inner);
    cpu::fast::split(y_ref.data(), pf.data(), k, c.sizes.data(), c.outer, c.inner);
    for (int j = 0; j < k; ++j) {
      expect_close("split", name, "out" + std::to_string(j), out_fast[size_t(j)], out_ref[size_t(j)], 0);
      expect_close("split", name, "roundtrip" + std::to_string(j), out_fast[size_t(j)], parts[size_t(j)], 0);
    }
    // The backwards are the duals: concat_backward == split, split_backward == concat.
    cpu::fast::concat_backward(y_ref.data(), pf.data(), k, c.sizes.data(), c.outer, c.inner);
    for (int j = 0; j < k; ++j)
      expect_close("concat_backward", name, "d" + std::to_string(j), out_fast[size_t(j)], out_ref[size_t(j)], 0);
    Buf dx_fast = zeros(ny);
    cpu::fast::split_backward(ptrs.data(), k, c.sizes.data(), c.outer, c.inner, dx_fast.data());
    expect_close("split_backward", name, "dx", dx_fast, y_ref, 0);
  }

  struct EmbCase {
    int64_t vocab, dim, offset;
    std::vector<int32_t> ids;
  };
  std::vector<EmbCase> embs = {
      {10, 4, 0, {3, 0, 9, 3, 3, 7}},
      {1, 1, 0, {0, 0}},
      {5, 6, 5, {3, 5, 9, 7, 12, 5}},  // shard holding rows 5..9 of a 13-row vocab
      {50, 33, 0, {}},
  };
  for (const EmbCase& c : embs) {
    int64_t ni = int64_t(c.ids.size());
    Buf table = random_buf(c.vocab * c.dim, ++seed), dy = random_buf(ni * c.dim, ++seed);
    Buf y_ref = zeros(ni * c.dim), y_fast = random_buf(ni * c.dim, 4);
    std::string name = "vocab" + std::to_string(c.vocab) + " dim" + std::to_string(c.dim) +
                       " off" + std::to_string(c.offset) + " ids" + std::to_string(ni);
    cpu::ref::embedding(table.data(), c.ids.data(), y_ref.data(), ni, c.vocab, c.dim, c.offset);
    cpu::fast::embedding(table.data(), c.ids.data(), y_fast.data(), ni, c.vocab, c.dim, c.offset);
    expect_close("embedding", name, "y", y_fast, y_ref, 0);
    Buf dt_ref = random_buf(c.vocab * c.dim, 5), dt_fast = dt_ref;  // accumulates
    cpu::ref::embedding_backward(c.ids.data(), dy.data(), dt_ref.data(), ni, c.vocab, c.dim, c.offset);
    cpu::fast::embedding_backward(c.ids.data(), dy.data(), dt_fast.data(), ni, c.vocab, c.dim, c.offset);
    expect_close("embedding_backward", name, "dtable", dt_fast, dt_ref, 0);
  }
}

}  // namespace nns::backend::test
