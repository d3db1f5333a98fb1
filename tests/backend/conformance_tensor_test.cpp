// Conformance table, broadcasting binaries, reductions and layout ops:
// forward and backward nodes through Backend::run_node on the reference and
// the tested backends (node_conformance.h), and the rows no other table
// covers. Checked on the CPU kernels directly (cpu::fast vs cpu::ref),
// because no graph node reaches them: broadcast_shape's refusal of
// incompatible shapes, and embedding_backward accumulating into a filled
// table (the node zeroes its gradient first).
//
// Tolerances (error measure: backend_test_util.h):
// - layout ops (permute, roll, pad, concat, split, embedding) and their
//   backwards 0: they only move floats, so results must be bit-identical
//   (embedding_backward adds in the same id order in both).
// - binary forward 0: ref computes in double and rounds once; for + - * /
//   of two floats that equals the correctly rounded float result fast gets;
//   maximum, minimum and the comparisons are exact in both.
// - scale 0: one float multiply in both.
// - binary backward, reduce 1e-5: fast sums broadcast gradients in float
//   (8 partial sums), ref in double; sums here have at most 1000 terms.
#include <array>
#include <cmath>

#include "node_conformance.h"

namespace nns::backend::test {

namespace {

const std::pair<cpu::BinaryOp, const char*> kBinaryOps[] = {
    {cpu::BinaryOp::add, "add"}, {cpu::BinaryOp::sub, "sub"}, {cpu::BinaryOp::mul, "mul"},
    {cpu::BinaryOp::div, "div"}, {cpu::BinaryOp::maximum, "maximum"}, {cpu::BinaryOp::minimum, "minimum"},
    {cpu::BinaryOp::eq, "eq"}, {cpu::BinaryOp::ne, "ne"}, {cpu::BinaryOp::lt, "lt"},
    {cpu::BinaryOp::le, "le"}, {cpu::BinaryOp::gt, "gt"}, {cpu::BinaryOp::ge, "ge"}};

// Comparisons have no backward node: no gradient flows through them.
bool has_backward(cpu::BinaryOp op) { return int(op) <= int(cpu::BinaryOp::minimum); }

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
  uint32_t seed = 1000;
  for (const auto& [ad, bd] : cases) {
    int64_t out_dims[cpu::kMaxRank];
    int rank = cpu::broadcast_shape(int(ad.size()), ad.data(), int(bd.size()), bd.data(), out_dims);
    REQUIRE(rank >= 0);
    int64_t nc = numel(Dims(out_dims, out_dims + rank));
    Buf a = random_buf(numel(ad), ++seed);
    Buf b = random_away_from_zero(numel(bd), ++seed, 0.5f, 1.5f);  // safe divisors
    Buf dc = random_buf(nc, ++seed);
    // Values in {-1, 0, 1}: ties everywhere, for maximum/minimum's tie rule and the comparisons.
    Buf ta = random_buf(numel(ad), ++seed, -1.5f, 1.5f), tb = random_buf(numel(bd), ++seed, -1.5f, 1.5f);
    for (float& v : ta) v = std::round(v);
    for (float& v : tb) v = std::round(v);
    for (const auto& [op, op_name] : kBinaryOps) {
      for (bool ties : {false, true}) {
        if (ties && int(op) < int(cpu::BinaryOp::maximum)) continue;
        std::string name = dims_str(ad) + " " + op_name + " " + dims_str(bd) + (ties ? " ties" : "");
        sema::Shape cd(out_dims, out_dims + rank);
        NodeCase fwd{op_name, {}, {f32(ad, ties ? ta : a), f32(bd, ties ? tb : b)}, {f32_zeros(cd)}};
        std::vector<HostTensor> c = expect_node("binary", name, fwd, {"c"}, 0);
        if (!has_backward(op)) continue;
        NodeCase bwd = backward_case(fwd, c, {f32(cd, dc)}, {1, 1});
        // The tested backend's gradient buffers start as garbage: overwritten, not accumulated.
        expect_node("binary_backward", name, bwd, {"da", "db"}, 1e-5, 0, {random_buf(numel(ad), 1), random_buf(numel(bd), 2)});
      }
    }
  }
  // Incompatible shapes are reported, not guessed.
  int64_t a3[] = {3}, b4[] = {4}, out[cpu::kMaxRank];
  CHECK(cpu::broadcast_shape(1, a3, 1, b4, out) == -1);
}

TEST_CASE("conformance: scale and reductions", "[backend][conformance]") {
  uint32_t seed = 1100;
  for (int64_t n : {0, 1, 1001}) {
    Buf x = random_buf(n, ++seed);
    NodeCase fwd{"mul_scalar", {{"s", double(-0.37f)}}, {f32({n}, x)}, {f32_zeros({n})}};
    std::vector<HostTensor> y = expect_node("scale", "n" + std::to_string(n), fwd, {"y"}, 0);
    NodeCase bwd = backward_case(fwd, y, {f32({n}, x)}, {1});
    expect_node("scale_backward", "n" + std::to_string(n), bwd, {"dx"}, 0);
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
      NodeCase fwd{kname, {{"dim", int64_t{1}}, {"keepdim", false}}, {f32({c.outer, c.len, c.inner}, x)}, {f32_zeros({c.outer, c.inner})}};
      std::vector<HostTensor> y = expect_node("reduce", name, fwd, {"y"}, 1e-5);
      NodeCase bwd = backward_case(fwd, y, {f32({c.outer, c.inner}, dy)}, {1});
      expect_node("reduce_backward", name, bwd, {"dx"}, 1e-6);
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
    int64_t n = numel(c.dims);
    Buf x = random_buf(n, ++seed);
    std::string name = dims_str(c.dims) + " perm" + dims_str(std::vector<int64_t>(c.perm.begin(), c.perm.end()));
    sema::Shape ys;
    for (int p : c.perm) ys.push_back(c.dims[size_t(p)]);
    NodeCase fwd{"permute", {{"dims", std::vector<int64_t>(c.perm.begin(), c.perm.end())}}, {f32(c.dims, x)}, {f32_zeros(ys)}};
    std::vector<HostTensor> y = expect_node("permute", name, fwd, {"y"}, 0);
    NodeCase bwd = backward_case(fwd, y, {y[0]}, {1});
    expect_node("permute_backward", name, bwd, {"dx"}, 0);
    expect_close("permute_backward", name, "roundtrip", run_tested(bwd)[0].f, x, 0);
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
    int64_t n = numel(c.dims);
    Buf x = random_buf(n, ++seed);
    std::string name = dims_str(c.dims) + " by" + dims_str(c.shifts);
    NodeCase fwd{"roll", {{"shifts", c.shifts}, {"dims", std::vector<int64_t>(c.roll_dims.begin(), c.roll_dims.end())}},
                 {f32(c.dims, x)}, {f32_zeros(c.dims)}};
    std::vector<HostTensor> y = expect_node("roll", name, fwd, {"y"}, 0);
    NodeCase bwd = backward_case(fwd, y, {y[0]}, {1});
    expect_node("roll_backward", name, bwd, {"dx"}, 0);
    expect_close("roll_backward", name, "roundtrip", run_tested(bwd)[0].f, x, 0);
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
    std::vector<int64_t> yd(c.dims.size()), pads_attr;
    for (size_t i = 0; i < yd.size(); ++i) {
      yd[i] = c.dims[i] + c.before[i] + c.after[i];
      pads_attr.push_back(c.before[i]);
      pads_attr.push_back(c.after[i]);
    }
    int64_t nx = numel(c.dims), ny = numel(yd);
    Buf x = random_buf(nx, ++seed), dy = random_buf(ny, ++seed);
    std::string name = dims_str(c.dims) + " " + dims_str(c.before) + dims_str(c.after);
    NodeCase fwd{"pad", {{"pads", pads_attr}}, {f32(c.dims, x)}, {f32_zeros(yd)}};
    // The tested backend must write the zeros itself.
    std::vector<HostTensor> y = expect_node("pad", name, fwd, {"y"}, 0, 0, {random_buf(ny, 3)});
    NodeCase bwd = backward_case(fwd, y, {f32(yd, dy)}, {1});
    expect_node("pad_backward", name, bwd, {"dx"}, 0);
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
    for (int64_t s : c.sizes) parts.push_back(random_buf(c.outer * s * c.inner, ++seed));
    sema::Shape ys{c.outer, total, c.inner};
    std::string name = "sizes" + dims_str(c.sizes) + " outer" + std::to_string(c.outer) + " inner" +
                       std::to_string(c.inner);
    NodeCase cat{"concat", {{"dim", int64_t{1}}}, {}, {f32_zeros(ys)}};
    for (int j = 0; j < k; ++j) cat.inputs.push_back(f32({c.outer, c.sizes[size_t(j)], c.inner}, parts[size_t(j)]));
    std::vector<HostTensor> y = expect_node("concat", name, cat, {"y"}, 0);
    NodeCase split{"split", {{"dim", int64_t{1}}, {"sizes", c.sizes}}, {y[0]}, {}};
    std::vector<std::string> outs, grads;
    for (int j = 0; j < k; ++j) {
      split.outputs.push_back(f32_zeros({c.outer, c.sizes[size_t(j)], c.inner}));
      outs.push_back("out" + std::to_string(j));
      grads.push_back("d" + std::to_string(j));
    }
    std::vector<HostTensor> pieces = expect_node("split", name, split, outs, 0);
    std::vector<HostTensor> got = run_tested(split);
    for (int j = 0; j < k; ++j) expect_close("split", name, "roundtrip" + std::to_string(j), got[size_t(j)].f, parts[size_t(j)], 0);
    // The backwards are the duals: concat_backward == split, split_backward == concat.
    NodeCase cat_bwd = backward_case(cat, y, {y[0]}, std::vector<int64_t>(size_t(k), 1));
    expect_node("concat_backward", name, cat_bwd, grads, 0);
    got = run_tested(cat_bwd);
    for (int j = 0; j < k; ++j) expect_close("concat_backward", name, "split" + std::to_string(j), got[size_t(j)].f, pieces[size_t(j)].f, 0);
    NodeCase split_bwd = backward_case(split, pieces, pieces, {1});
    expect_node("split_backward", name, split_bwd, {"dx"}, 0);
    expect_close("split_backward", name, "concat", run_tested(split_bwd)[0].f, y[0].f, 0);
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
    std::string name = "vocab" + std::to_string(c.vocab) + " dim" + std::to_string(c.dim) +
                       " off" + std::to_string(c.offset) + " ids" + std::to_string(ni);
    // embedding(ids, table) and index_select(table, ids): the same gather.
    std::map<std::string, sema::Attr> shard;
    if (c.offset > 0) shard = {{"vocab_offset", c.offset}, {"vocab_size", int64_t{13}}};
    for (bool emb : {true, false}) {
      const char* kind = emb ? "embedding" : "index_select";
      NodeCase fwd{kind, shard, {}, {f32_zeros({ni, c.dim})}};
      fwd.inputs = emb ? std::vector<HostTensor>{i32({ni}, c.ids), f32({c.vocab, c.dim}, table)}
                       : std::vector<HostTensor>{f32({c.vocab, c.dim}, table), i32({ni}, c.ids)};
      // Ids the shard does not hold: the tested backend must write the zero rows itself.
      std::vector<HostTensor> y = expect_node(kind, name, fwd, {"y"}, 0, 0, {random_buf(ni * c.dim, 4)});
      NodeCase bwd = backward_case(fwd, y, {f32({ni, c.dim}, dy)}, emb ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{1, 0});
      expect_node(bwd.kind, name, bwd, {"dtable"}, 0);
    }
    // Kernel level: the kernel accumulates into the table gradient.
    Buf dt_ref = random_buf(c.vocab * c.dim, 5), dt_fast = dt_ref;  // accumulates
    cpu::ref::embedding_backward(c.ids.data(), dy.data(), dt_ref.data(), ni, c.vocab, c.dim, c.offset);
    cpu::fast::embedding_backward(c.ids.data(), dy.data(), dt_fast.data(), ni, c.vocab, c.dim, c.offset);
    expect_close("embedding_backward", name, "dtable", dt_fast, dt_ref, 0);
  }
}

// Rows the tables above do not reach, and the nodes autograd adds: each
// once, forward and backward, so that every registry row runs on every
// tested backend. All of them move, add or compare floats only: bit-identical.
TEST_CASE("conformance: the remaining rows", "[backend][conformance]") {
  uint32_t seed = 1500;
  auto fwd_bwd = [](const NodeCase& fwd, const std::string& name, std::vector<HostTensor> dys, std::vector<int64_t> mask) {
    std::vector<std::string> outs, grads;
    for (size_t j = 0; j < fwd.outputs.size(); ++j) outs.push_back("y" + std::to_string(j));
    for (int64_t m : mask)
      if (m) grads.push_back("dx" + std::to_string(grads.size()));
    std::vector<HostTensor> y = expect_node(fwd.kind, name, fwd, outs, 0);
    NodeCase bwd = backward_case(fwd, y, std::move(dys), mask);
    expect_node(bwd.kind, name, bwd, grads, 0);
  };
  Buf x = random_buf(24, ++seed), dy = random_buf(24, ++seed);
  fwd_bwd({"add_scalar", {{"s", 0.25}}, {f32({4, 6}, x)}, {f32_zeros({4, 6})}}, "[4,6] + 0.25", {f32({4, 6}, dy)}, {1});
  fwd_bwd({"causal_mask", {}, {f32({2, 3, 4}, x)}, {f32_zeros({2, 3, 4})}}, "[2,3,4]", {f32({2, 3, 4}, dy)}, {1});
  fwd_bwd({"causal_mask", {}, {f32({1, 4, 6}, x)}, {f32_zeros({1, 4, 6})}}, "[1,4,6]", {f32({1, 4, 6}, dy)}, {1});
  for (const char* kind : {"reshape", "view"})
    fwd_bwd({kind, {{"shape", std::vector<int64_t>{6, 4}}}, {f32({2, 3, 4}, x)}, {f32_zeros({6, 4})}}, "[2,3,4] -> [6,4]",
            {f32({6, 4}, dy)}, {1});
  fwd_bwd({"transpose", {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}}, {f32({2, 3, 4}, x)}, {f32_zeros({4, 3, 2})}}, "[2,3,4] 0<->-1",
          {f32({4, 3, 2}, dy)}, {1});
  Buf d0 = random_buf(8, ++seed), d1 = random_buf(8, ++seed), d2 = random_buf(8, ++seed);
  fwd_bwd({"chunk", {{"chunks", int64_t{3}}, {"dim", int64_t{1}}}, {f32({4, 6}, x)}, {f32_zeros({4, 2}), f32_zeros({4, 2}), f32_zeros({4, 2})}},
          "[4,6] 3 chunks dim1", {f32({4, 2}, d0), f32({4, 2}, d1), f32({4, 2}, d2)}, {1});

  // Constant generators and autograd's helpers: forward only.
  for (int64_t w : {1, 2, 7}) {
    int64_t n = w * w * w * w;
    NodeCase idx{"swin_relative_index", {{"window", w}}, {}, {i32({n}, std::vector<int32_t>(size_t(n), 0))}};
    expect_node("swin_relative_index", "window" + std::to_string(w), idx, {"index"}, 0);
  }
  for (auto [h, w, win, shift] : {std::array<int64_t, 4>{8, 8, 4, 2}, {14, 7, 7, 3}, {4, 4, 4, 0}}) {
    int64_t nw = (h / win) * (w / win), n = win * win;
    NodeCase mask{"swin_shift_mask", {{"height", h}, {"width", w}, {"window", win}, {"shift", shift}}, {}, {f32_zeros({nw, n, n})}};
    expect_node("swin_shift_mask", std::to_string(h) + "x" + std::to_string(w) + " win" + std::to_string(win) + " shift" + std::to_string(shift),
                mask, {"mask"}, 0, 0, {random_buf(nw * n * n, 6)});
  }
  // T5 relative buckets: both directions and both table sizes, tested
  // backend vs reference, then known values (32 buckets, max distance 128).
  for (auto [q, k, buckets, dist, bidir] : {std::array<int64_t, 5>{16, 16, 32, 128, 1}, {16, 16, 32, 128, 0}, {7, 300, 32, 128, 1},
                                            {300, 5, 8, 20, 0}}) {
    NodeCase bucket{"t5_relative_bucket",
                    {{"qlen", q}, {"klen", k}, {"buckets", buckets}, {"max_distance", dist}, {"bidirectional", bidir != 0}},
                    {},
                    {i32({q, k}, std::vector<int32_t>(size_t(q * k), -1))}};
    expect_node("t5_relative_bucket", std::to_string(q) + "x" + std::to_string(k) + (bidir ? " bidirectional" : " causal"), bucket,
                {"bucket"}, 0);
  }
  {
    // query 0 against keys 0..299 (relative = key), and query 299 against
    // the same keys (relative = key - 299): exact up to 7, log-spaced
    // 8..15, 15 from distance 128 on; keys after the query add 16.
    auto buckets_of = [](int64_t q, bool bidir) {
      NodeCase c{"t5_relative_bucket", {{"qlen", q}, {"klen", int64_t{300}}, {"buckets", int64_t{32}}, {"max_distance", int64_t{128}},
                                        {"bidirectional", bidir}}, {}, {i32({q, 300}, std::vector<int32_t>(size_t(q * 300), -1))}};
      return run_tested(c)[0].i;
    };
    std::vector<int32_t> bi = buckets_of(1, true);
    CHECK(bi[0] == 0);
    CHECK(bi[1] == 17);     // one key ahead: exact bucket 1 of the "after" half
    CHECK(bi[7] == 23);
    CHECK(bi[8] == 24);     // first logarithmic bucket: 8 + floor(log(8/8)/log(16)*8)
    CHECK(bi[12] == 25);    // 8 + floor(log(1.5)/log(16)*8) = 8 + 1
    CHECK(bi[32] == 28);    // 8 + floor(log(4)/log(16)*8) = 8 + 4
    CHECK(bi[127] == 31);   // 8 + floor(7.98) = 15
    CHECK(bi[299] == 31);   // clipped to the last bucket
    std::vector<int32_t> causal = buckets_of(300, false);
    auto at = [&](int64_t q, int64_t k) { return causal[size_t(q * 300 + k)]; };
    CHECK(at(299, 299) == 0);
    CHECK(at(5, 9) == 0);      // keys after the query share bucket 0 in a decoder
    CHECK(at(299, 298) == 1);
    CHECK(at(299, 284) == 15);  // distance 15: exact
    CHECK(at(299, 283) == 16);  // distance 16: 16 + floor(log(1)/log(8)*16)
    CHECK(at(299, 267) == 21);  // distance 32: 16 + floor(log(2)/log(8)*16) = 16 + 5
    CHECK(at(299, 171) == 31);  // distance 128: clipped
  }
  // detach: a copy in forward (it has no backward kernel: autograd never
  // differentiates through it).
  expect_node("detach", "[4,6]", {"detach", {}, {f32({4, 6}, x)}, {f32_zeros({4, 6})}}, {"y"}, 0, 0, {random_buf(24, 9)});
  CHECK(run_tested({"detach", {}, {f32({4, 6}, x)}, {f32_zeros({4, 6})}})[0].f == x);
  expect_node("fill", "[3,5] 0.5", {"fill", {{"value", 0.5}}, {}, {f32_zeros({3, 5})}}, {"y"}, 0, 0, {random_buf(15, 7)});
  Buf a = random_buf(35, ++seed), b = random_buf(35, ++seed), c = random_buf(35, ++seed);
  expect_node("add_n", "3 x [5,7]", {"add_n", {}, {f32({5, 7}, a), f32({5, 7}, b), f32({5, 7}, c)}, {f32_zeros({5, 7})}}, {"y"}, 0, 0,
              {random_buf(35, 8)});
}

}  // namespace nns::backend::test
