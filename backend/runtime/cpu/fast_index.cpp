// Fast scans, selection, indexed access and casts: plain single-threaded
// C++ with the inner dim innermost (contiguous, vectorisable), float
// running sums, and top-k by a partial sort of one line's positions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

void cumsum(const float* x, float* y, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * len * inner;
    float* yo = y + o * len * inner;
    if (len > 0) std::memcpy(yo, xo, sizeof(float) * inner);
    for (int64_t l = 1; l < len; ++l)
      for (int64_t j = 0; j < inner; ++j) yo[l * inner + j] = yo[(l - 1) * inner + j] + xo[l * inner + j];
  }
}

void cumsum_backward(const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    const float* g = dy + o * len * inner;
    float* d = dx + o * len * inner;
    if (len > 0) std::memcpy(d + (len - 1) * inner, g + (len - 1) * inner, sizeof(float) * inner);
    for (int64_t l = len - 2; l >= 0; --l)
      for (int64_t j = 0; j < inner; ++j) d[l * inner + j] = d[(l + 1) * inner + j] + g[l * inner + j];
  }
}

void topk(const float* x, float* values, int32_t* indices, int64_t outer, int64_t len, int64_t inner, int64_t k) {
  std::vector<float> line(static_cast<size_t>(len));
  std::vector<int32_t> pos(static_cast<size_t>(len));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      for (int64_t l = 0; l < len; ++l) {
        line[l] = x[(o * len + l) * inner + j];
        pos[l] = int32_t(l);
      }
      // NaN first, then larger values, ties by position: a strict weak order.
      auto before = [&](int32_t a, int32_t b) {
        bool na = std::isnan(line[a]), nb = std::isnan(line[b]);
        if (na != nb) return na;
        if (!na && line[a] != line[b]) return line[a] > line[b];
        return a < b;
      };
      std::partial_sort(pos.begin(), pos.begin() + k, pos.end(), before);
      for (int64_t r = 0; r < k; ++r) {
        values[(o * k + r) * inner + j] = line[pos[r]];
        indices[(o * k + r) * inner + j] = pos[r];
      }
    }
}

void topk_backward(const int32_t* indices, const float* dvalues, float* dx, int64_t outer, int64_t len, int64_t inner, int64_t k) {
  std::memset(dx, 0, sizeof(float) * outer * len * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < k; ++r) {
      const int32_t* ix = indices + (o * k + r) * inner;
      const float* g = dvalues + (o * k + r) * inner;
      float* d = dx + o * len * inner;
      for (int64_t j = 0; j < inner; ++j) d[ix[j] * inner + j] = g[j];
    }
}

void gather(const float* x, const int32_t* index, float* y, int64_t outer, int64_t len, int64_t inner, int64_t m) {
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * len * inner;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t* ix = index + (o * m + i) * inner;
      float* yo = y + (o * m + i) * inner;
      for (int64_t j = 0; j < inner; ++j) yo[j] = xo[ix[j] * inner + j];
    }
  }
}

void gather_backward(const int32_t* index, const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner, int64_t m) {
  std::memset(dx, 0, sizeof(float) * outer * len * inner);
  for (int64_t o = 0; o < outer; ++o) {
    float* d = dx + o * len * inner;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t* ix = index + (o * m + i) * inner;
      const float* g = dy + (o * m + i) * inner;
      for (int64_t j = 0; j < inner; ++j) d[ix[j] * inner + j] += g[j];
    }
  }
}

void scatter_add(const float* x, const int32_t* index, const float* src, float* y, int64_t outer, int64_t len, int64_t inner,
                 int64_t m) {
  std::memcpy(y, x, sizeof(float) * outer * len * inner);
  for (int64_t o = 0; o < outer; ++o) {
    float* yo = y + o * len * inner;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t* ix = index + (o * m + i) * inner;
      const float* s = src + (o * m + i) * inner;
      for (int64_t j = 0; j < inner; ++j) yo[ix[j] * inner + j] += s[j];
    }
  }
}

void scatter_add_backward(const int32_t* index, const float* dy, float* dx, float* dsrc, int64_t outer, int64_t len, int64_t inner,
                          int64_t m) {
  if (dx) std::memcpy(dx, dy, sizeof(float) * outer * len * inner);
  if (dsrc) gather(dy, index, dsrc, outer, len, inner, m);
}

void cast_to_f32(const int32_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

void cast_to_i32(const float* x, int32_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>(x[i]);  // C++ truncates toward zero
}

}  // namespace nns::backend::cpu::fast
