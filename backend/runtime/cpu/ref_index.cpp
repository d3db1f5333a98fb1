// Reference scans, selection, indexed access and casts: straight from the
// definitions (a running sum in double, top-k by repeated selection of the
// largest element not yet taken, one element at a time).
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::ref {

namespace {

int64_t at(int64_t o, int64_t l, int64_t j, int64_t len, int64_t inner) { return (o * len + l) * inner + j; }

// a ranks before b in top-k order: NaN above every number, larger values
// first, equal values (and NaNs) by position.
bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

}  // namespace

void cumsum(const float* x, float* y, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double run = 0;
      for (int64_t l = 0; l < len; ++l) {
        run += x[at(o, l, j, len, inner)];
        y[at(o, l, j, len, inner)] = float(run);
      }
    }
}

void cumsum_backward(const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double run = 0;
      for (int64_t l = len - 1; l >= 0; --l) {
        run += dy[at(o, l, j, len, inner)];
        dx[at(o, l, j, len, inner)] = float(run);
      }
    }
}

void topk(const float* x, float* values, int32_t* indices, int64_t outer, int64_t len, int64_t inner, int64_t k) {
  std::vector<bool> taken(static_cast<size_t>(len));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      taken.assign(static_cast<size_t>(len), false);
      for (int64_t r = 0; r < k; ++r) {
        int64_t best = -1;
        for (int64_t l = 0; l < len; ++l) {
          if (taken[l]) continue;
          if (best < 0 || ranks_before(x[at(o, l, j, len, inner)], l, x[at(o, best, j, len, inner)], best)) best = l;
        }
        taken[best] = true;
        values[at(o, r, j, k, inner)] = x[at(o, best, j, len, inner)];
        indices[at(o, r, j, k, inner)] = int32_t(best);
      }
    }
}

void topk_backward(const int32_t* indices, const float* dvalues, float* dx, int64_t outer, int64_t len, int64_t inner, int64_t k) {
  for (int64_t i = 0; i < outer * len * inner; ++i) dx[i] = 0.0f;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < k; ++r)
      for (int64_t j = 0; j < inner; ++j) dx[at(o, indices[at(o, r, j, k, inner)], j, len, inner)] = dvalues[at(o, r, j, k, inner)];
}

void gather(const float* x, const int32_t* index, float* y, int64_t outer, int64_t len, int64_t inner, int64_t m) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < inner; ++j) y[at(o, i, j, m, inner)] = x[at(o, index[at(o, i, j, m, inner)], j, len, inner)];
}

void gather_backward(const int32_t* index, const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner, int64_t m) {
  std::vector<double> acc(static_cast<size_t>(outer * len * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < inner; ++j) acc[at(o, index[at(o, i, j, m, inner)], j, len, inner)] += dy[at(o, i, j, m, inner)];
  for (size_t e = 0; e < acc.size(); ++e) dx[e] = float(acc[e]);
}

void scatter_add(const float* x, const int32_t* index, const float* src, float* y, int64_t outer, int64_t len, int64_t inner,
                 int64_t m) {
  std::vector<double> acc(x, x + outer * len * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < inner; ++j) acc[at(o, index[at(o, i, j, m, inner)], j, len, inner)] += src[at(o, i, j, m, inner)];
  for (size_t e = 0; e < acc.size(); ++e) y[e] = float(acc[e]);
}

void scatter_add_backward(const int32_t* index, const float* dy, float* dx, float* dsrc, int64_t outer, int64_t len, int64_t inner,
                          int64_t m) {
  if (dx)
    for (int64_t e = 0; e < outer * len * inner; ++e) dx[e] = dy[e];
  if (dsrc) gather(dy, index, dsrc, outer, len, inner, m);
}

void cast_to_f32(const int32_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(x[i]));
}

void cast_to_i32(const float* x, int32_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = int32_t(std::trunc(double(x[i])));
}

}  // namespace nns::backend::cpu::ref
