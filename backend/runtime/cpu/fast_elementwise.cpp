// Fast broadcasting binaries, where, scale, reductions and constants: plain single-threaded
// loops shaped so that the compiler vectorises the innermost one. These ops
// do one flop per element or less, so they are bound by memory bandwidth;
// the work is in never touching an element twice and in contiguous inner
// loops, not in threads (the runtime parallelises across ranks).
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

namespace {

// Output of a broadcast elementwise op over K operands as a loop nest over
// collapsed dims: dims of size 1 are dropped, and neighbours that are
// contiguous for every operand merge, so e.g. [8,16,32] + [32] becomes
// [128, 32] with b strides {0, 1}. The innermost dim always has stride 1 or
// 0 for each operand.
template <int K>
struct BroadcastLoop {
  int rank = 0;
  int64_t dims[kMaxRank];
  int64_t s[K][kMaxRank];  // element strides of each operand (0: broadcast)
  int64_t numel = 1, operand_numel[K];

  BroadcastLoop(const int* ranks, const int64_t* const* operand_dims) {
    for (int k = 0; k < K; ++k) require_rank(ranks[k], "broadcast");
    int64_t out[kMaxRank];
    int r = ranks[0];
    for (int k = 0; k < r; ++k) out[k] = operand_dims[0][k];
    for (int k = 1; k < K; ++k) {
      int64_t next[kMaxRank];
      r = broadcast_shape(r, out, ranks[k], operand_dims[k], next);
      assert(r >= 0);
      for (int i = 0; i < r; ++i) out[i] = next[i];
    }
    int64_t stride[K], tmp_d[kMaxRank], tmp_s[K][kMaxRank];
    for (int k = 0; k < K; ++k) stride[k] = operand_numel[k] = 1;
    // Walk from the innermost dim out, computing each operand's contiguous strides.
    int n = 0;
    for (int i = r - 1; i >= 0; --i) {
      numel *= out[i];
      int64_t d[K], st[K];
      for (int k = 0; k < K; ++k) {
        int ik = i - (r - ranks[k]);
        d[k] = ik >= 0 ? operand_dims[k][ik] : 1;
        operand_numel[k] *= d[k];
      }
      if (out[i] == 1) continue;
      bool merge = n > 0;
      for (int k = 0; k < K; ++k) {
        st[k] = d[k] == 1 ? 0 : stride[k];
        stride[k] *= d[k];
        merge = merge && st[k] == tmp_s[k][n - 1] * tmp_d[n - 1];
      }
      if (merge) {
        tmp_d[n - 1] *= out[i];  // contiguous with the inner neighbour for all: merge
        continue;
      }
      tmp_d[n] = out[i];
      for (int k = 0; k < K; ++k) tmp_s[k][n] = st[k];
      ++n;
    }
    if (n == 0) {  // all dims 1: one element
      tmp_d[0] = 1;
      for (int k = 0; k < K; ++k) tmp_s[k][0] = 1;
      n = 1;
    }
    rank = n;
    for (int i = 0; i < n; ++i) {  // back to outermost-first order
      dims[i] = tmp_d[n - 1 - i];
      for (int k = 0; k < K; ++k) s[k][i] = tmp_s[k][n - 1 - i];
    }
  }

  int64_t inner_len() const { return dims[rank - 1]; }
  int64_t inner_stride(int k) const { return s[k][rank - 1]; }

  // Calls row(offsets, out_offset) for each innermost row, in output order;
  // offsets[k] is operand k's offset; rows have inner_len() elements and
  // strides inner_stride(k).
  template <class Row>
  void for_each_row(Row row) const {
    if (numel == 0) return;
    int64_t len = dims[rank - 1];
    int64_t idx[kMaxRank] = {0};
    int64_t o[K] = {0};
    for (int64_t out = 0; out < numel; out += len) {
      row(static_cast<const int64_t*>(o), out);
      for (int d = rank - 2; d >= 0; --d) {  // odometer over the outer dims
        for (int k = 0; k < K; ++k) o[k] += s[k][d];
        if (++idx[d] < dims[d]) break;
        for (int k = 0; k < K; ++k) o[k] -= s[k][d] * dims[d];
        idx[d] = 0;
      }
    }
  }
};

BroadcastLoop<2> binary_loop_of(int a_rank, const int64_t* a_dims, int b_rank, const int64_t* b_dims) {
  const int ranks[] = {a_rank, b_rank};
  const int64_t* dims[] = {a_dims, b_dims};
  return BroadcastLoop<2>(ranks, dims);
}

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
void binary_loop(const BroadcastLoop<2>& loop, F f, const float* a, const float* b, float* c) {
  int64_t len = loop.inner_len(), sa = loop.inner_stride(0), sb = loop.inner_stride(1);
  loop.for_each_row([&](const int64_t* o, int64_t oc) {
    binary_row(f, a + o[0], sa, b + o[1], sb, c + oc, len);
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

// Gradient of operand k: `full` operands are written once per element,
// broadcast ones are zeroed and accumulated. v(offsets, out_offset, i) is
// the contribution of output element out_offset + i.
template <int K, class V>
void grad_loop(const BroadcastLoop<K>& loop, int k, float* d, V v) {
  bool full = loop.operand_numel[k] == loop.numel;
  if (!full) std::memset(d, 0, sizeof(float) * size_t(loop.operand_numel[k]));
  int64_t len = loop.inner_len(), sd = loop.inner_stride(k);
  loop.for_each_row([&](const int64_t* o, int64_t oc) {
    grad_row(d + o[k], sd, full, len, [&](int64_t i) { return v(o, oc, i); });
  });
}

// maximum/minimum with NaN propagation (std::max would drop a NaN in b).
inline float max_nan(float x, float y) { return x != x || y != y ? x + y : (x > y ? x : y); }
inline float min_nan(float x, float y) { return x != x || y != y ? x + y : (x < y ? x : y); }

}  // namespace

void binary(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims, const float* b,
            int b_rank, const int64_t* b_dims, float* c) {
  BroadcastLoop<2> loop = binary_loop_of(a_rank, a_dims, b_rank, b_dims);
  switch (op) {
    case BinaryOp::add: binary_loop(loop, [](float x, float y) { return x + y; }, a, b, c); break;
    case BinaryOp::sub: binary_loop(loop, [](float x, float y) { return x - y; }, a, b, c); break;
    case BinaryOp::mul: binary_loop(loop, [](float x, float y) { return x * y; }, a, b, c); break;
    case BinaryOp::div: binary_loop(loop, [](float x, float y) { return x / y; }, a, b, c); break;
    case BinaryOp::maximum: binary_loop(loop, max_nan, a, b, c); break;
    case BinaryOp::minimum: binary_loop(loop, min_nan, a, b, c); break;
    case BinaryOp::eq: binary_loop(loop, [](float x, float y) { return float(x == y); }, a, b, c); break;
    case BinaryOp::ne: binary_loop(loop, [](float x, float y) { return float(x != y); }, a, b, c); break;
    case BinaryOp::lt: binary_loop(loop, [](float x, float y) { return float(x < y); }, a, b, c); break;
    case BinaryOp::le: binary_loop(loop, [](float x, float y) { return float(x <= y); }, a, b, c); break;
    case BinaryOp::gt: binary_loop(loop, [](float x, float y) { return float(x > y); }, a, b, c); break;
    case BinaryOp::ge: binary_loop(loop, [](float x, float y) { return float(x >= y); }, a, b, c); break;
  }
}

void binary_backward(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims,
                     const float* b, int b_rank, const int64_t* b_dims, const float* dc, float* da,
                     float* db) {
  BroadcastLoop<2> loop = binary_loop_of(a_rank, a_dims, b_rank, b_dims);
  int64_t sa = loop.inner_stride(0), sb = loop.inner_stride(1);
  // v(o, oc, i): the contribution of output element oc + i (o: operand offsets).
  auto A = [&](const int64_t* o, int64_t i) { return a[o[0] + i * sa]; };
  auto B = [&](const int64_t* o, int64_t i) { return b[o[1] + i * sb]; };
  auto G = [&](int64_t oc, int64_t i) { return dc[oc + i]; };
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::sub: {
      float sign = op == BinaryOp::add ? 1.0f : -1.0f;
      if (da) grad_loop(loop, 0, da, [&](const int64_t*, int64_t oc, int64_t i) { return G(oc, i); });
      if (db) grad_loop(loop, 1, db, [&](const int64_t*, int64_t oc, int64_t i) { return sign * G(oc, i); });
      break;
    }
    case BinaryOp::mul:
      if (da) grad_loop(loop, 0, da, [&](const int64_t* o, int64_t oc, int64_t i) { return G(oc, i) * B(o, i); });
      if (db) grad_loop(loop, 1, db, [&](const int64_t* o, int64_t oc, int64_t i) { return G(oc, i) * A(o, i); });
      break;
    case BinaryOp::div:
      if (da) grad_loop(loop, 0, da, [&](const int64_t* o, int64_t oc, int64_t i) { return G(oc, i) / B(o, i); });
      if (db)
        grad_loop(loop, 1, db, [&](const int64_t* o, int64_t oc, int64_t i) {
          float bv = B(o, i);
          return -G(oc, i) * A(o, i) / (bv * bv);
        });
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      // The chosen operand takes dc, a tie gives each half (PyTorch).
      bool mx = op == BinaryOp::maximum;
      auto share = [mx](float x, float y) { return x == y ? 0.5f : ((mx ? x > y : x < y) ? 1.0f : 0.0f); };
      if (da) grad_loop(loop, 0, da, [&](const int64_t* o, int64_t oc, int64_t i) { return G(oc, i) * share(A(o, i), B(o, i)); });
      if (db) grad_loop(loop, 1, db, [&](const int64_t* o, int64_t oc, int64_t i) { return G(oc, i) * share(B(o, i), A(o, i)); });
      break;
    }
    default:  // comparisons: steps, zero gradients
      if (da) std::memset(da, 0, sizeof(float) * size_t(loop.operand_numel[0]));
      if (db) std::memset(db, 0, sizeof(float) * size_t(loop.operand_numel[1]));
      break;
  }
}

namespace {
BroadcastLoop<3> where_loop_of(int c_rank, const int64_t* c_dims, int a_rank, const int64_t* a_dims, int b_rank,
                               const int64_t* b_dims) {
  const int ranks[] = {c_rank, a_rank, b_rank};
  const int64_t* dims[] = {c_dims, a_dims, b_dims};
  return BroadcastLoop<3>(ranks, dims);
}
}  // namespace

void where(const float* cond, int c_rank, const int64_t* c_dims, const float* a, int a_rank,
           const int64_t* a_dims, const float* b, int b_rank, const int64_t* b_dims, float* y) {
  BroadcastLoop<3> loop = where_loop_of(c_rank, c_dims, a_rank, a_dims, b_rank, b_dims);
  int64_t len = loop.inner_len(), sc = loop.inner_stride(0), sa = loop.inner_stride(1), sb = loop.inner_stride(2);
  loop.for_each_row([&](const int64_t* o, int64_t oy) {
    const float *c = cond + o[0], *ar = a + o[1], *br = b + o[2];
    float* yr = y + oy;
    for (int64_t i = 0; i < len; ++i) yr[i] = c[i * sc] != 0 ? ar[i * sa] : br[i * sb];
  });
}

void where_backward(const float* cond, int c_rank, const int64_t* c_dims, int a_rank,
                    const int64_t* a_dims, int b_rank, const int64_t* b_dims, const float* dy,
                    float* da, float* db) {
  BroadcastLoop<3> loop = where_loop_of(c_rank, c_dims, a_rank, a_dims, b_rank, b_dims);
  int64_t sc = loop.inner_stride(0);
  auto taken = [&](bool want, const int64_t* o, int64_t oy, int64_t i) {
    return (cond[o[0] + i * sc] != 0) == want ? dy[oy + i] : 0.0f;
  };
  if (da) grad_loop(loop, 1, da, [&](const int64_t* o, int64_t oy, int64_t i) { return taken(true, o, oy, i); });
  if (db) grad_loop(loop, 2, db, [&](const int64_t* o, int64_t oy, int64_t i) { return taken(false, o, oy, i); });
}

void scale(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

void scale_backward(const float* dy, float* dx, int64_t n, float alpha) { scale(dy, dx, n, alpha); }

// y += alpha * x, the executor's gradient accumulation: y and x never
// overlap, which __restrict tells the vectoriser (one multiply and one add
// per element, in that order: the values of the scalar loop).
void axpy(float* __restrict y, const float* __restrict x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

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

void reduce_extreme(Extreme kind, const float* x, float* values, int32_t* indices, int64_t outer,
                    int64_t len, int64_t inner) {
  // Row by row along len, keeping the best value and its index per column
  // of `inner` (unit stride throughout); a NaN, once found, stays.
  std::vector<float> best(static_cast<size_t>(inner));
  std::vector<int32_t> at(static_cast<size_t>(inner));
  bool mx = kind == Extreme::max;
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * len * inner;
    std::memcpy(best.data(), xo, sizeof(float) * size_t(inner));
    std::fill(at.begin(), at.end(), 0);
    for (int64_t l = 1; l < len; ++l) {
      const float* row = xo + l * inner;
      for (int64_t j = 0; j < inner; ++j) {
        float v = row[j], b = best[size_t(j)];
        bool take = b == b && (v != v || (mx ? v > b : v < b));
        if (take) {
          best[size_t(j)] = v;
          at[size_t(j)] = int32_t(l);
        }
      }
    }
    if (values) std::memcpy(values + o * inner, best.data(), sizeof(float) * size_t(inner));
    if (indices) std::memcpy(indices + o * inner, at.data(), sizeof(int32_t) * size_t(inner));
  }
}

void reduce_extreme_backward(const float* x, const float* values, const float* dy, float* dx,
                             int64_t outer, int64_t len, int64_t inner) {
  std::vector<float> ties(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * len * inner;
    const float* v = values + o * inner;
    const float* g = dy + o * inner;
    float* dxo = dx + o * len * inner;
    std::fill(ties.begin(), ties.end(), 0.0f);
    for (int64_t l = 0; l < len; ++l)
      for (int64_t j = 0; j < inner; ++j) ties[size_t(j)] += xo[l * inner + j] == v[j] ? 1.0f : 0.0f;
    for (int64_t j = 0; j < inner; ++j) ties[size_t(j)] = ties[size_t(j)] > 0 ? g[j] / ties[size_t(j)] : 0.0f;
    for (int64_t l = 0; l < len; ++l)
      for (int64_t j = 0; j < inner; ++j) dxo[l * inner + j] = xo[l * inner + j] == v[j] ? ties[size_t(j)] : 0.0f;
  }
}

void fill(float* y, int64_t n, float value) { std::fill(y, y + n, value); }

void arange(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(i);
}

}  // namespace nns::backend::cpu::fast
