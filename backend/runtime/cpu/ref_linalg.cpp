// Reference matmul, linear and conv2d: the textbook sums, accumulated in
// double, one output element at a time. Slow on purpose; they define what
// the fast kernels must compute.
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::ref {

namespace {

// Element (i, p) of op(a) for batch entry bi, and (p, j) of op(b).
struct MatmulView {
  const float* a;
  const float* b;
  int64_t b_batch, m, k, n;
  bool trans_a, trans_b;
  int64_t a_index(int64_t bi, int64_t i, int64_t p) const {
    return bi * m * k + (trans_a ? p * m + i : i * k + p);
  }
  int64_t b_index(int64_t bi, int64_t p, int64_t j) const {
    int64_t base = (b_batch == 1 ? 0 : bi) * k * n;
    return base + (trans_b ? j * k + p : p * n + j);
  }
};

}  // namespace

void matmul(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
            int64_t k, int64_t n, bool trans_a, bool trans_b, float beta) {
  MatmulView v{a, b, b_batch, m, k, n, trans_a, trans_b};
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += double(a[v.a_index(bi, i, p)]) * b[v.b_index(bi, p, j)];
        float* out = &c[(bi * m + i) * n + j];
        *out = beta == 0.0f ? float(acc) : float(acc + double(beta) * *out);
      }
}

void matmul_backward(const float* a, const float* b, const float* dc, float* da, float* db,
                     int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                     bool trans_b) {
  MatmulView v{a, b, b_batch, m, k, n, trans_a, trans_b};
  if (da) {
    // dop(a)(i, p) = sum_j dc(i, j) * op(b)(p, j), stored where a(i, p) lives.
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j)
            acc += double(dc[(bi * m + i) * n + j]) * b[v.b_index(bi, p, j)];
          da[v.a_index(bi, i, p)] = float(acc);
        }
  }
  if (db) {
    // dop(b)(p, j) = sum_i op(a)(i, p) * dc(i, j), also over batch if b is shared.
    std::vector<double> acc(size_t(b_batch * k * n), 0.0);
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t i = 0; i < m; ++i)
            s += double(a[v.a_index(bi, i, p)]) * dc[(bi * m + i) * n + j];
          acc[size_t(v.b_index(bi, p, j))] += s;
        }
    for (size_t e = 0; e < acc.size(); ++e) db[e] = float(acc[e]);
  }
}

void linear(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
            int64_t n) {
  linear_strided(x, k, w, k, bias, y, rows, k, n);
}

void linear_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias, float* y, int64_t rows,
                    int64_t k, int64_t n, int64_t ldy, bool accumulate) {
  if (accumulate && bias) throw std::logic_error("internal: an accumulating linear with a bias");
  const int64_t ly = ldy > 0 ? ldy : n;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[r * ldx + p]) * w[j * ldw + p];
      // Accumulating: the product rounded first, then added, as a copy
      // collected with += would be.
      float& out = y[r * ly + j];
      out = accumulate ? out + float(acc) : float(acc);
    }
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int64_t rows, int64_t k, int64_t n) {
  linear_backward_strided(x, k, w, k, dy, dx, dw, dbias, rows, k, n);
}

void linear_backward_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* dy, float* dx,
                             float* dw, float* dbias, int64_t rows, int64_t k, int64_t n, int64_t lddy,
                             bool accumulate_dx) {
  const int64_t ld = lddy > 0 ? lddy : n;
  if (dx)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t p = 0; p < k; ++p) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += double(dy[r * ld + j]) * w[j * ldw + p];
        dx[r * k + p] = accumulate_dx ? dx[r * k + p] + float(acc) : float(acc);
      }
  if (dw)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += double(dy[r * ld + j]) * x[r * ldx + p];
        dw[j * k + p] = float(acc);
      }
  if (dbias)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t r = 0; r < rows; ++r) acc += dy[r * ld + j];
      dbias[j] = float(acc);
    }
}

// ---- conv2d: y[b,o,i,j] = bias[o] + sum_{c,u,v} x[b,c,i*s-p+u,j*s-p+v] w[o,c,u,v]

namespace {

struct ConvIndex {
  const Conv2dDims& d;
  int64_t oh, ow;
  explicit ConvIndex(const Conv2dDims& dims) : d(dims), oh(dims.out_h()), ow(dims.out_w()) {}
  int64_t x(int64_t b, int64_t c, int64_t h, int64_t w) const {
    return ((b * d.c + c) * d.h + h) * d.w + w;
  }
  int64_t w(int64_t o, int64_t c, int64_t u, int64_t v) const {
    return ((o * d.c + c) * d.kh + u) * d.kw + v;
  }
  int64_t y(int64_t b, int64_t o, int64_t i, int64_t j) const {
    return ((b * d.o + o) * oh + i) * ow + j;
  }
  // Input row/col read by output (i, j) at kernel tap (u, v); may be padding.
  int64_t in_h(int64_t i, int64_t u) const { return i * d.stride_h - d.pad_h + u; }
  int64_t in_w(int64_t j, int64_t v) const { return j * d.stride_w - d.pad_w + v; }
  bool inside(int64_t h, int64_t w) const { return h >= 0 && h < d.h && w >= 0 && w < d.w; }
};

}  // namespace

void conv2d(const float* x, const float* w, const float* bias, float* y, const Conv2dDims& d) {
  ConvIndex ix(d);
  for (int64_t b = 0; b < d.n; ++b)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t i = 0; i < ix.oh; ++i)
        for (int64_t j = 0; j < ix.ow; ++j) {
          double acc = bias ? bias[o] : 0.0;
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t u = 0; u < d.kh; ++u)
              for (int64_t v = 0; v < d.kw; ++v) {
                int64_t h = ix.in_h(i, u), ww = ix.in_w(j, v);
                if (ix.inside(h, ww)) acc += double(x[ix.x(b, c, h, ww)]) * w[ix.w(o, c, u, v)];
              }
          y[ix.y(b, o, i, j)] = float(acc);
        }
}

void conv2d_backward_data(const float* dy, const float* w, float* dx, const Conv2dDims& d) {
  ConvIndex ix(d);
  std::vector<double> acc(size_t(d.n * d.c * d.h * d.w), 0.0);
  // Scatter each output gradient to the inputs it read.
  for (int64_t b = 0; b < d.n; ++b)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t i = 0; i < ix.oh; ++i)
        for (int64_t j = 0; j < ix.ow; ++j) {
          double g = dy[ix.y(b, o, i, j)];
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t u = 0; u < d.kh; ++u)
              for (int64_t v = 0; v < d.kw; ++v) {
                int64_t h = ix.in_h(i, u), ww = ix.in_w(j, v);
                if (ix.inside(h, ww)) acc[size_t(ix.x(b, c, h, ww))] += g * w[ix.w(o, c, u, v)];
              }
        }
  for (size_t e = 0; e < acc.size(); ++e) dx[e] = float(acc[e]);
}

void conv2d_backward_weights(const float* x, const float* dy, float* dw, float* dbias,
                             const Conv2dDims& d) {
  ConvIndex ix(d);
  if (dw)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t u = 0; u < d.kh; ++u)
          for (int64_t v = 0; v < d.kw; ++v) {
            double acc = 0;
            for (int64_t b = 0; b < d.n; ++b)
              for (int64_t i = 0; i < ix.oh; ++i)
                for (int64_t j = 0; j < ix.ow; ++j) {
                  int64_t h = ix.in_h(i, u), ww = ix.in_w(j, v);
                  if (ix.inside(h, ww)) acc += double(dy[ix.y(b, o, i, j)]) * x[ix.x(b, c, h, ww)];
                }
            dw[ix.w(o, c, u, v)] = float(acc);
          }
  if (dbias)
    for (int64_t o = 0; o < d.o; ++o) {
      double acc = 0;
      for (int64_t b = 0; b < d.n; ++b)
        for (int64_t i = 0; i < ix.oh; ++i)
          for (int64_t j = 0; j < ix.ow; ++j) acc += dy[ix.y(b, o, i, j)];
      dbias[o] = float(acc);
    }
}

// ---- bf16 / fp16 autocast: the fp32 reference on rounded copies of the operands ----

namespace {
using Rounding = float (*)(float);

std::vector<float> rounded(const float* p, int64_t n, Rounding round) {
  std::vector<float> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = round(p[i]);
  return r;
}

void matmul_rounded(Rounding round, const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m, int64_t k,
                    int64_t n, bool trans_a, bool trans_b, float beta) {
  std::vector<float> ra = rounded(a, batch * m * k, round), rb = rounded(b, b_batch * k * n, round);
  matmul(ra.data(), rb.data(), c, batch, b_batch, m, k, n, trans_a, trans_b, beta);
}

void matmul_backward_rounded(Rounding round, const float* a, const float* b, const float* dc, float* da, float* db, int64_t batch,
                             int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a, bool trans_b) {
  std::vector<float> ra = rounded(a, batch * m * k, round), rb = rounded(b, b_batch * k * n, round),
                     rdc = rounded(dc, batch * m * n, round);
  matmul_backward(ra.data(), rb.data(), rdc.data(), da, db, batch, b_batch, m, k, n, trans_a, trans_b);
}

void linear_rounded(Rounding round, const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k, int64_t n) {
  std::vector<float> rx = rounded(x, rows * k, round), rw = rounded(w, n * k, round);
  linear(rx.data(), rw.data(), bias, y, rows, k, n);
}

void linear_backward_rounded(Rounding round, const float* x, const float* w, const float* dy, float* dx, float* dw, float* dbias,
                             int64_t rows, int64_t k, int64_t n) {
  std::vector<float> rx = rounded(x, rows * k, round), rw = rounded(w, n * k, round), rdy = rounded(dy, rows * n, round);
  linear_backward(rx.data(), rw.data(), rdy.data(), dx, dw, nullptr, rows, k, n);
  // The bias gradient is a sum, not a product: of the fp32 gradient.
  if (dbias) linear_backward(x, w, dy, nullptr, nullptr, dbias, rows, k, n);
}
}  // namespace

void matmul_bf16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta) {
  matmul_rounded(round_to_bf16, a, b, c, batch, b_batch, m, k, n, trans_a, trans_b, beta);
}

void matmul_backward_bf16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b) {
  matmul_backward_rounded(round_to_bf16, a, b, dc, da, db, batch, b_batch, m, k, n, trans_a, trans_b);
}

void linear_bf16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n) {
  linear_rounded(round_to_bf16, x, w, bias, y, rows, k, n);
}

void linear_backward_bf16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n) {
  linear_backward_rounded(round_to_bf16, x, w, dy, dx, dw, dbias, rows, k, n);
}

void matmul_fp16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta) {
  matmul_rounded(round_to_fp16, a, b, c, batch, b_batch, m, k, n, trans_a, trans_b, beta);
}

void matmul_backward_fp16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b) {
  matmul_backward_rounded(round_to_fp16, a, b, dc, da, db, batch, b_batch, m, k, n, trans_a, trans_b);
}

void linear_fp16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n) {
  linear_rounded(round_to_fp16, x, w, bias, y, rows, k, n);
}

void linear_backward_fp16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n) {
  linear_backward_rounded(round_to_fp16, x, w, dy, dx, dw, dbias, rows, k, n);
}

}  // namespace nns::backend::cpu::ref
