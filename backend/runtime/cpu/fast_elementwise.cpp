// Fast broadcasting binaries, scale and reductions: plain single-threaded
// loops shaped so that the compiler vectorises the innermost one. These ops
// do one flop per element or less, so they are bound by memory bandwidth;
// the work is in never touching an element twice and in contiguous inner
// loops, not in threads (the runtime parallelises across ranks).
#include <cassert>
#include <cstring>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

namespace {

// Output of a broadcast binary as a loop nest over collapsed dims: dims of
// size 1 are dropped, and neighbours that are contiguous for both operands
// merge, so e.g. [8,16,32] + [32] becomes [128, 32] with b strides {0, 1}.
// The innermost dim always has stride 1 or 0 for each operand.
struct BroadcastLoop {
  int rank = 0;
  int64_t dims[kMaxRank];
  int64_t sa[kMaxRank], sb[kMaxRank];  // element strides of a and b (0: broadcast)
  int64_t numel = 1, a_numel = 1, b_numel = 1;

  BroadcastLoop(int a_rank, const int64_t* a_dims, int b_rank, const int64_t* b_dims) {
    int64_t out[kMaxRank];
    int r = broadcast_shape(a_rank, a_dims, b_rank, b_dims, out);
    assert(r >= 0);
    int64_t stride_a = 1, stride_b = 1;
    // Walk from the innermost dim out, computing each operand's contiguous strides.
    int64_t tmp_d[kMaxRank], tmp_a[kMaxRank], tmp_b[kMaxRank];
    int n = 0;
    for (int i = r - 1; i >= 0; --i) {
      int ia = i - (r - a_rank), ib = i - (r - b_rank);
      int64_t da = ia >= 0 ? a_dims[ia] : 1, db = ib >= 0 ? b_dims[ib] : 1;
      numel *= out[i];
      a_numel *= da;
      b_numel *= db;
      if (out[i] == 1) continue;
      int64_t s_a = da == 1 ? 0 : stride_a, s_b = db == 1 ? 0 : stride_b;
      stride_a *= da;
      stride_b *= db;
      if (n > 0 && s_a == tmp_a[n - 1] * tmp_d[n - 1] && s_b == tmp_b[n - 1] * tmp_d[n - 1]) {
        tmp_d[n - 1] *= out[i];  // contiguous with the inner neighbour for both: merge
        continue;
      }
      tmp_d[n] = out[i];
      tmp_a[n] = s_a;
      tmp_b[n] = s_b;
      ++n;
    }
    if (n == 0) {  // all dims 1: one element
      tmp_d[0] = 1;
      tmp_a[0] = tmp_b[0] = 1;
      n = 1;
    }
    rank = n;
    for (int i = 0; i < n; ++i) {  // back to outermost-first order
      dims[i] = tmp_d[n - 1 - i];
      sa[i] = tmp_a[n - 1 - i];
      sb[i] = tmp_b[n - 1 - i];
    }
  }

  // Calls row(a_offset, b_offset, out_offset) for each innermost row, in
  // output order; rows have dims[rank-1] elements and strides sa/sb[rank-1].
  template <class Row>
  void for_each_row(Row row) const {
    if (numel == 0) return;
    int64_t len = dims[rank - 1];
    int64_t idx[kMaxRank] = {0};
    int64_t oa = 0, ob = 0;
    for (int64_t out = 0; out < numel; out += len) {
      row(oa, ob, out);
      for (int d = rank - 2; d >= 0; --d) {  // odometer over the outer dims
        oa += sa[d];
        ob += sb[d];
        if (++idx[d] < dims[d]) break;
        oa -= sa[d] * dims[d];
        ob -= sb[d] * dims[d];
        idx[d] = 0;
      }
    }
  }
};

// c[i] = f(a[i * sa], b[i * sb]) for strides in {0, 1}: four tight loops.
template <class F>
inline void binary_row(F f, const float* a, int64_t sa, const float* b, int64_t sb, float* c,
                       int64_t len) {
  if (sa && sb) {
    for (int64_t i = 0; i < len; ++i) c[i] = f(a[i], b[i]);
  } else if (sa) {
    float bv = b[0];
    for (int64_t i = 0; i < len; ++i) c[i] = f(a[i], bv);
  } else if (sb) {
    float av = a[0];
    for (int64_t i = 0; i < len; ++i) c[i] = f(av, b[i]);
  } else {
    float v = f(a[0], b[0]);
    for (int64_t i = 0; i < len; ++i) c[i] = v;
  }
}

template <class F>
void binary_loop(const BroadcastLoop& loop, F f, const float* a, const float* b, float* c) {
  int64_t len = loop.dims[loop.rank - 1];
  int64_t sa = loop.sa[loop.rank - 1], sb = loop.sb[loop.rank - 1];
  loop.for_each_row([&](int64_t oa, int64_t ob, int64_t oc) {
    binary_row(f, a + oa, sa, b + ob, sb, c + oc, len);
  });
}

// d[i * sd] (+)= v(i) over a row; a broadcast operand (sd == 0) sums the row.
template <class V>
inline void grad_row(float* d, int64_t sd, bool overwrite, int64_t len, V v) {
  if (sd) {
    if (overwrite)
      for (int64_t i = 0; i < len; ++i) d[i] = v(i);
    else
      for (int64_t i = 0; i < len; ++i) d[i] += v(i);
  } else {
    float s = 0;
    for (int64_t i = 0; i < len; ++i) s += v(i);
    d[0] += s;
  }
}

// Gradient of one operand: `full` operands are written once per element,
// broadcast ones are zeroed and accumulated.
template <class V>
void grad_loop(const BroadcastLoop& loop, bool of_a, float* d, V v) {
  int64_t len = loop.dims[loop.rank - 1];
  bool full = (of_a ? loop.a_numel : loop.b_numel) == loop.numel;
  if (!full) std::memset(d, 0, sizeof(float) * size_t(of_a ? loop.a_numel : loop.b_numel));
  int64_t sd = of_a ? loop.sa[loop.rank - 1] : loop.sb[loop.rank - 1];
  loop.for_each_row([&](int64_t oa, int64_t ob, int64_t oc) {
    grad_row(d + (of_a ? oa : ob), sd, full, len, [&](int64_t i) { return v(oa, ob, oc, i); });
  });
}

}  // namespace

void binary(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims, const float* b,
            int b_rank, const int64_t* b_dims, float* c) {
  BroadcastLoop loop(a_rank, a_dims, b_rank, b_dims);
  switch (op) {
    case BinaryOp::add: binary_loop(loop, [](float x, float y) { return x + y; }, a, b, c); break;
    case BinaryOp::sub: binary_loop(loop, [](float x, float y) { return x - y; }, a, b, c); break;
    case BinaryOp::mul: binary_loop(loop, [](float x, float y) { return x * y; }, a, b, c); break;
    case BinaryOp::div: binary_loop(loop, [](float x, float y) { return x / y; }, a, b, c); break;
  }
}

void binary_backward(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims,
                     const float* b, int b_rank, const int64_t* b_dims, const float* dc, float* da,
                     float* db) {
  BroadcastLoop loop(a_rank, a_dims, b_rank, b_dims);
  int64_t sa = loop.sa[loop.rank - 1], sb = loop.sb[loop.rank - 1];
  // v(oa, ob, oc, i): the contribution of output element oc + i.
  auto A = [&](int64_t oa, int64_t i) { return a[oa + i * sa]; };
  auto B = [&](int64_t ob, int64_t i) { return b[ob + i * sb]; };
  auto G = [&](int64_t oc, int64_t i) { return dc[oc + i]; };
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::sub: {
      float sign = op == BinaryOp::add ? 1.0f : -1.0f;
      if (da) grad_loop(loop, true, da, [&](int64_t, int64_t, int64_t oc, int64_t i) { return G(oc, i); });
      if (db)
        grad_loop(loop, false, db,
                  [&](int64_t, int64_t, int64_t oc, int64_t i) { return sign * G(oc, i); });
      break;
    }
    case BinaryOp::mul:
      if (da)
        grad_loop(loop, true, da, [&](int64_t, int64_t ob, int64_t oc, int64_t i) {
          return G(oc, i) * B(ob, i);
        });
      if (db)
        grad_loop(loop, false, db, [&](int64_t oa, int64_t, int64_t oc, int64_t i) {
          return G(oc, i) * A(oa, i);
        });
      break;
    case BinaryOp::div:
      if (da)
        grad_loop(loop, true, da, [&](int64_t, int64_t ob, int64_t oc, int64_t i) {
          return G(oc, i) / B(ob, i);
        });
      if (db)
        grad_loop(loop, false, db, [&](int64_t oa, int64_t ob, int64_t oc, int64_t i) {
          float bv = B(ob, i);
          return -G(oc, i) * A(oa, i) / (bv * bv);
        });
      break;
  }
}

void scale(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

void scale_backward(const float* dy, float* dx, int64_t n, float alpha) { scale(dy, dx, n, alpha); }

void reduce(Reduction kind, const float* x, float* y, int64_t outer, int64_t len, int64_t inner) {
  float post = kind == Reduction::mean && len > 0 ? 1.0f / float(len) : 1.0f;
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * len * inner;
    float* yo = y + o * inner;
    if (inner == 1) {
      // A contiguous row: 8 independent partial sums let the loop vectorise
      // without reassociation flags (and are more accurate than one chain).
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t l = 0;
      for (; l + 8 <= len; l += 8)
        for (int j = 0; j < 8; ++j) part[j] += xo[l + j];
      float s = 0;
      for (; l < len; ++l) s += xo[l];
      for (int j = 0; j < 8; ++j) s += part[j];
      yo[0] = s * post;
      continue;
    }
    // Rows of `inner` floats added into the output row: unit-stride throughout.
    for (int64_t j = 0; j < inner; ++j) yo[j] = 0.0f;
    for (int64_t l = 0; l < len; ++l) {
      const float* row = xo + l * inner;
      for (int64_t j = 0; j < inner; ++j) yo[j] += row[j];
    }
    if (post != 1.0f)
      for (int64_t j = 0; j < inner; ++j) yo[j] *= post;
  }
}

void reduce_backward(Reduction kind, const float* dy, float* dx, int64_t outer, int64_t len,
                     int64_t inner) {
  float post = kind == Reduction::mean && len > 0 ? 1.0f / float(len) : 1.0f;
  for (int64_t o = 0; o < outer; ++o) {
    const float* g = dy + o * inner;
    for (int64_t l = 0; l < len; ++l) {
      float* row = dx + (o * len + l) * inner;
      for (int64_t j = 0; j < inner; ++j) row[j] = g[j] * post;
    }
  }
}

}  // namespace nns::backend::cpu::fast
