// Indexing rows on the device: index_select (lookup.h's row gather),
// cumsum, topk, gather, scatter_add, forward and backward, and the constant
// tables swin_relative_index, swin_shift_mask and t5_relative_bucket
// (forward only), with the contracts of the CPU backend's node wrappers
// (cpu_backend.cpp) and cpu::ref. Tensors are viewed as [outer, len, inner]
// around attr `dim`. Scans are one index per (outer, inner) column looping
// over len; every scatter of the reference is a gather here, one index per
// destination element scanning its sources in the reference's order.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/launch.h"
#include "backend/runtime/cuda/lookup.h"

namespace nns::backend::NNS_DEV {

namespace indexing {

constexpr int64_t kCheckLanes = 65536, kCheckGroup = 256;

// Lane l: the first position i = l, l + lanes, ... whose id is outside
// [0, bound) (n when none); group g: the least of its lanes' positions.
void first_out_of_range(const int32_t* ids, int64_t n, int64_t bound, int64_t lanes, int64_t* lane_first, int64_t* group_first,
                        Stream s) {
  for_each(lanes, s, NNS_KERNEL(int64_t l) {
    int64_t first = n;
    for (int64_t i = l; i < n; i += lanes)
      if (ids[i] < 0 || ids[i] >= bound) {
        first = i;
        break;
      }
    lane_first[l] = first;
  });
  const int64_t groups = (lanes + kCheckGroup - 1) / kCheckGroup;
  for_each(groups, s, NNS_KERNEL(int64_t g) {
    int64_t end = (g + 1) * kCheckGroup < lanes ? (g + 1) * kCheckGroup : lanes, first = n;
    for (int64_t l = g * kCheckGroup; l < end; ++l) first = lane_first[l] < first ? lane_first[l] : first;
    group_first[g] = first;
  });
}

// (o, l, j) of [outer, len, inner] as a flat index.
inline NNS_HD int64_t at(int64_t o, int64_t l, int64_t j, int64_t len, int64_t inner) { return (o * len + l) * inner + j; }

// Running sums along len in double (forward: from the start, backward:
// from the end), one index per (outer, inner) column.
void cumsum(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, bool reverse, Stream s) {
  for_each(outer * inner, s, NNS_KERNEL(int64_t col) {
    int64_t o = col / inner, j = col % inner;
    double run = 0;
    for (int64_t step = 0; step < len; ++step) {
      int64_t l = reverse ? len - 1 - step : step;
      run += x[at(o, l, j, len, inner)];
      y[at(o, l, j, len, inner)] = float(run);
    }
  });
}

// a ranks before b in top-k order: NaN above every number, larger values
// first, equal values (and NaNs) by position (ref's ranks_before).
inline NNS_HD bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  bool na = a != a, nb = b != b;
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// Element l of a column has rank = the number of elements ranking before
// it; ranks are distinct (a total order), so the elements of rank < k
// write the k output slots, each exactly once: one index per input element
// (len comparisons each), the same selection as ref's repeated maximum.
void topk(const float* x, float* values, int32_t* indices, int64_t outer, int64_t len, int64_t inner, int64_t k, Stream s) {
  for_each(outer * len * inner, s, NNS_KERNEL(int64_t e) {
    int64_t o = e / (len * inner), l = (e / inner) % len, j = e % inner;
    float v = x[e];
    int64_t rank = 0;
    for (int64_t m = 0; m < len; ++m)
      if (m != l && ranks_before(x[at(o, m, j, len, inner)], m, v, l)) ++rank;
    if (rank < k) {
      values[at(o, rank, j, k, inner)] = v;
      indices[at(o, rank, j, k, inner)] = int32_t(l);
    }
  });
}

// dx[o, l, j] = dvalues[o, r, j] for the r whose index is l (the last such
// r, as ref's scatter writes in r order), else 0.
void topk_backward(const int32_t* indices, const float* dvalues, float* dx, int64_t outer, int64_t len, int64_t inner, int64_t k,
                   Stream s) {
  for_each(outer * len * inner, s, NNS_KERNEL(int64_t e) {
    int64_t o = e / (len * inner), l = (e / inner) % len, j = e % inner;
    float g = 0.0f;
    for (int64_t r = 0; r < k; ++r)
      if (indices[at(o, r, j, k, inner)] == l) g = dvalues[at(o, r, j, k, inner)];
    dx[e] = g;
  });
}

// y[o, i, j] = x[o, index[o, i, j], j].
void gather(const float* x, const int32_t* index, float* y, int64_t outer, int64_t len, int64_t inner, int64_t m, Stream s) {
  for_each(outer * m * inner, s, NNS_KERNEL(int64_t e) {
    int64_t o = e / (m * inner), j = e % inner;
    y[e] = x[at(o, index[e], j, len, inner)];
  });
}

// out[o, l, j] = base[o, l, j] (or 0) + the sum, in i order and in double,
// of src[o, i, j] over the i with index[o, i, j] == l: gather's backward
// (no base) and scatter_add (base x), as ref accumulates them.
void scatter_sum(const float* base, const int32_t* index, const float* src, float* out, int64_t outer, int64_t len, int64_t inner,
                 int64_t m, Stream s) {
  for_each(outer * len * inner, s, NNS_KERNEL(int64_t e) {
    int64_t o = e / (len * inner), l = (e / inner) % len, j = e % inner;
    double acc = base ? double(base[e]) : 0.0;
    for (int64_t i = 0; i < m; ++i)
      if (index[at(o, i, j, m, inner)] == l) acc += src[at(o, i, j, m, inner)];
    out[e] = float(acc);
  });
}

void copy(const float* x, float* y, int64_t n, Stream s) {
  for_each(n, s, NNS_KERNEL(int64_t i) { y[i] = x[i]; });
}

// Swin's relative_position_index: (dh + w - 1) (2w - 1) + (dw + w - 1).
void swin_relative_index(int32_t* out, int64_t w, Stream s) {
  const int64_t n = w * w;
  for_each(n * n, s, NNS_KERNEL(int64_t e) {
    int64_t i = e / n, j = e % n;
    int64_t dh = i / w - j / w + w - 1, dw = i % w - j % w + w - 1;
    out[e] = int32_t(dh * (2 * w - 1) + dw);
  });
}

// Region label of coordinate p in a map of `size` after the shift.
inline NNS_HD int64_t shift_region(int64_t p, int64_t size, int64_t win, int64_t shift) {
  return p < size - win ? 0 : (p < size - shift ? 1 : 2);
}

// Swin's shifted-window mask [windows, n, n]: 0 within a region, -100 across.
void swin_shift_mask(float* out, int64_t H, int64_t W, int64_t win, int64_t shift, Stream s) {
  const int64_t gw = W / win, n = win * win, nw = (H / win) * gw;
  for_each(nw * n * n, s, NNS_KERNEL(int64_t e) {
    int64_t w = e / (n * n), i = (e / n) % n, j = e % n;
    int64_t hi = (w / gw) * win + i / win, xi = (w % gw) * win + i % win;
    int64_t hj = (w / gw) * win + j / win, xj = (w % gw) * win + j % win;
    int64_t li = shift_region(hi, H, win, shift) * 3 + shift_region(xi, W, win, shift);
    int64_t lj = shift_region(hj, H, win, shift) * 3 + shift_region(xj, W, win, shift);
    out[e] = li == lj ? 0.0f : -100.0f;
  });
}

// The distances at which T5's logarithmic buckets begin: bucket exact + t
// starts at distance first[t - 1] (t = 1 .. count). Passed by value.
constexpr int kMaxLogBuckets = 126;
struct LogThresholds {
  int count = 0;
  int64_t first[kMaxLogBuckets] = {};
};

// out[i, j]: T5's bucket of relative position j - i (see the CPU backend's
// t5_relative_bucket_fwd); the logarithmic part is the count of thresholds
// the distance reaches, so the device evaluates no logarithm.
void t5_relative_bucket(int32_t* out, int64_t q, int64_t k, bool bidirectional, int64_t per_side, int64_t exact,
                        LogThresholds th, Stream s) {
  for_each(q * k, s, NNS_KERNEL(int64_t e) {
    int64_t i = e / k, j = e % k, rel = j - i, base = 0, n;
    if (bidirectional) {
      if (rel > 0) base = per_side;
      n = rel < 0 ? -rel : rel;
    } else {
      n = rel < 0 ? -rel : 0;
    }
    int64_t b = n;
    if (n >= exact) {
      b = exact;
      for (int t = 0; t < th.count; ++t) b += n >= th.first[t] ? 1 : 0;
    }
    out[e] = int32_t(base + b);
  });
}

}  // namespace indexing

bool find_out_of_range(const int32_t* ids, int64_t n, int64_t bound, Scratch& scratch, Stream s, int32_t* bad) {
  if (n <= 0) return false;
  const int64_t lanes = n < indexing::kCheckLanes ? n : indexing::kCheckLanes;
  const int64_t groups = (lanes + indexing::kCheckGroup - 1) / indexing::kCheckGroup;
  int64_t* lane_first = scratch.get<int64_t>(lanes);
  int64_t* group_first = scratch.get<int64_t>(groups);
  indexing::first_out_of_range(ids, n, bound, lanes, lane_first, group_first, s);
  std::vector<int64_t> host(static_cast<size_t>(groups));
  copy_to_host(host.data(), group_first, sizeof(int64_t) * host.size(), s);
  int64_t first = n;
  for (int64_t g : host) first = g < first ? g : first;
  if (first >= n) return false;
  copy_to_host(bad, ids + first, sizeof(int32_t), s);
  return true;
}

namespace {


// [outer, len, inner] of shape x around attr `dim`.
void dims_around(const Call& c, const sema::Shape& x, int64_t& outer, int64_t& len, int64_t& inner) {
  int64_t d = norm_axis(c.attr_int("dim"), x.size());
  outer = 1;
  inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x[k];
  for (size_t k = static_cast<size_t>(d) + 1; k < x.size(); ++k) inner *= x[k];
  len = x[d];
}

void cumsum_fwd(const Call& c) {
  int64_t outer, len, inner;
  dims_around(c, c.in[0].shape, outer, len, inner);
  indexing::cumsum(c.in[0].f32(), c.out[0].f32(), outer, len, inner, false, c.stream);
}
void cumsum_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  dims_around(c, c.x(0).shape, outer, len, inner);
  indexing::cumsum(c.dy(0).f32(), dx, outer, len, inner, true, c.stream);
}

void topk_fwd(const Call& c) {
  int64_t outer, len, inner;
  dims_around(c, c.in[0].shape, outer, len, inner);
  indexing::topk(c.in[0].f32(), c.out[0].f32(), c.out[1].i32(), outer, len, inner, c.attr_int("k"), c.stream);
}
void topk_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  dims_around(c, c.x(0).shape, outer, len, inner);
  indexing::topk_backward(c.y(1).i32(), c.dy(0).f32(), dx, outer, len, inner, c.attr_int("k"), c.stream);
}

// gather / scatter_add read positions the program computed: one outside
// [0, size of dim) is the user's error, reported, not followed.
void check_positions(const Call& c, const TensorView& index, int64_t size) {
  int32_t bad = 0;
  if (find_out_of_range(index.i32(), index.numel(), size, c.scratch, c.stream, &bad))
    throw RuntimeError("node " + c.node.name + ": index " + std::to_string(bad) + " out of range [0, " + std::to_string(size) +
                       ") along dim " + std::to_string(c.attr_int("dim")));
}
int64_t index_len(const Call& c, const TensorView& x, const TensorView& index) {
  return index.shape[norm_axis(c.attr_int("dim"), x.shape.size())];
}
void gather_fwd(const Call& c) {
  int64_t outer, len, inner;
  dims_around(c, c.in[0].shape, outer, len, inner);
  check_positions(c, c.in[1], len);
  indexing::gather(c.in[0].f32(), c.in[1].i32(), c.out[0].f32(), outer, len, inner, index_len(c, c.in[0], c.in[1]), c.stream);
}
void gather_bwd(const Call& c) {
  float* dx = c.dx(0);
  if (!dx) return;
  int64_t outer, len, inner;
  dims_around(c, c.x(0).shape, outer, len, inner);
  indexing::scatter_sum(nullptr, c.x(1).i32(), c.dy(0).f32(), dx, outer, len, inner, index_len(c, c.x(0), c.x(1)), c.stream);
}
void scatter_add_fwd(const Call& c) {
  int64_t outer, len, inner;
  dims_around(c, c.in[0].shape, outer, len, inner);
  check_positions(c, c.in[1], len);
  indexing::scatter_sum(c.in[0].f32(), c.in[1].i32(), c.in[2].f32(), c.out[0].f32(), outer, len, inner,
                        index_len(c, c.in[0], c.in[1]), c.stream);
}
void scatter_add_bwd(const Call& c) {
  int64_t outer, len, inner;
  dims_around(c, c.x(0).shape, outer, len, inner);
  if (float* dx = c.dx(0)) indexing::copy(c.dy(0).f32(), dx, c.x(0).numel(), c.stream);
  if (float* dsrc = c.dx(2))
    indexing::gather(c.dy(0).f32(), c.x(1).i32(), dsrc, outer, len, inner, index_len(c, c.x(0), c.x(1)), c.stream);
}

void swin_relative_index_fwd(const Call& c) { indexing::swin_relative_index(c.out[0].i32(), c.attr_int("window"), c.stream); }
void swin_shift_mask_fwd(const Call& c) {
  indexing::swin_shift_mask(c.out[0].f32(), c.attr_int("height"), c.attr_int("width"), c.attr_int("window"), c.attr_int("shift"),
                            c.stream);
}

// T5's logarithmic bucket of distance n >= exact, exactly as the CPU
// backend computes it (double, the host's log): the thresholds below come
// from this function, so the device reproduces the CPU's table bit for bit
// without depending on how its own log rounds.
int64_t t5_log_bucket(int64_t n, int64_t exact, int64_t per_side, int64_t dist) {
  double scaled = std::log(static_cast<double>(n) / exact) / std::log(static_cast<double>(dist) / exact) * (per_side - exact);
  return std::min<int64_t>(exact + static_cast<int64_t>(scaled), per_side - 1);
}
void t5_relative_bucket_fwd(const Call& c) {
  int64_t q = c.attr_int("qlen"), k = c.attr_int("klen");
  int64_t buckets = c.attr_int_or("buckets", 32), dist = c.attr_int_or("max_distance", 128);
  auto bi = c.node.attrs.find("bidirectional");
  bool bidirectional = bi == c.node.attrs.end() ||
                       (std::holds_alternative<bool>(bi->second) ? std::get<bool>(bi->second) : c.attr_int("bidirectional") != 0);
  int64_t per_side = bidirectional ? buckets / 2 : buckets, exact = per_side / 2;
  indexing::LogThresholds th;
  if (exact > 0 && per_side - 1 > exact) {
    if (per_side - 1 - exact > indexing::kMaxLogBuckets)
      throw RuntimeError("node " + c.node.name + ": t5_relative_bucket with " + std::to_string(buckets) +
                         " buckets has more logarithmic buckets per direction than the CUDA kernel's " +
                         std::to_string(indexing::kMaxLogBuckets));
    // The bucket is non-decreasing in the distance, and the largest
    // distance a table holds is max(q, k): binary search, per bucket, for
    // the first distance reaching it (none inside the table: never reached).
    int64_t far = std::max<int64_t>(q, k) + 1;
    for (int64_t b = exact + 1; b <= per_side - 1; ++b) {
      int64_t lo = exact, hi = far;  // the answer lies in (lo, hi]; hi = far means "beyond the table"
      if (t5_log_bucket(lo, exact, per_side, dist) >= b) hi = lo;
      else
        while (hi - lo > 1) {
          int64_t mid = lo + (hi - lo) / 2;
          if (t5_log_bucket(mid, exact, per_side, dist) >= b) hi = mid;
          else lo = mid;
        }
      th.first[th.count++] = hi;
    }
  }
  indexing::t5_relative_bucket(c.out[0].i32(), q, k, bidirectional, per_side, exact, th, c.stream);
}

}  // namespace

void register_index_kernels(KernelTable& t) {
  t["index_select"] = lookup_fwd;
  t["index_select_backward"] = lookup_bwd;
  t["cumsum"] = cumsum_fwd;
  t["cumsum_backward"] = cumsum_bwd;
  t["topk"] = topk_fwd;
  t["topk_backward"] = topk_bwd;
  t["gather"] = gather_fwd;
  t["gather_backward"] = gather_bwd;
  t["scatter_add"] = scatter_add_fwd;
  t["scatter_add_backward"] = scatter_add_bwd;
  t["swin_relative_index"] = swin_relative_index_fwd;
  t["swin_shift_mask"] = swin_shift_mask_fwd;
  t["t5_relative_bucket"] = t5_relative_bucket_fwd;
}

}  // namespace nns::backend::NNS_DEV
