// Reference broadcasting binaries, reductions and layout ops: every output
// element's coordinates are unravelled and mapped back to the input, which
// is slow and leaves little room for mistakes.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <vector>

#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::ref {

namespace {

int64_t numel(int rank, const int64_t* dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

// Row-major coordinates of flat index `index` in a tensor of `dims`.
void unravel(int64_t index, int rank, const int64_t* dims, int64_t* coord) {
  for (int i = rank - 1; i >= 0; --i) {
    coord[i] = index % dims[i];
    index /= dims[i];
  }
}

int64_t ravel(int rank, const int64_t* dims, const int64_t* coord) {
  int64_t index = 0;
  for (int i = 0; i < rank; ++i) index = index * dims[i] + coord[i];
  return index;
}

// Flat index in a (right-aligned, broadcast) operand of the output element at
// out_coord: dims of size 1 are read at 0.
int64_t operand_index(const int64_t* out_coord, int out_rank, int rank, const int64_t* dims) {
  int64_t index = 0;
  for (int i = 0; i < rank; ++i) {
    int64_t c = dims[i] == 1 ? 0 : out_coord[i + out_rank - rank];
    index = index * dims[i] + c;
  }
  return index;
}

double apply(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::maximum: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case BinaryOp::minimum: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case BinaryOp::eq: return a == b;
    case BinaryOp::ne: return a != b;
    case BinaryOp::lt: return a < b;
    case BinaryOp::le: return a <= b;
    case BinaryOp::gt: return a > b;
    case BinaryOp::ge: return a >= b;
  }
  return 0;
}

// The share of dc that maximum/minimum pass to a (b gets the rest): the
// chosen operand takes all of it, a tie splits it in half (PyTorch).
double extreme_share_of_a(BinaryOp op, double a, double b) {
  if (a == b) return 0.5;
  bool a_wins = op == BinaryOp::maximum ? a > b : a < b;
  return a_wins ? 1.0 : 0.0;
}

}  // namespace

void binary(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims, const float* b,
            int b_rank, const int64_t* b_dims, float* c) {
  int64_t out_dims[kMaxRank], coord[kMaxRank];
  int rank = broadcast_shape(a_rank, a_dims, b_rank, b_dims, out_dims);
  assert(rank >= 0);
  int64_t n = numel(rank, out_dims);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, rank, out_dims, coord);
    double av = a[operand_index(coord, rank, a_rank, a_dims)];
    double bv = b[operand_index(coord, rank, b_rank, b_dims)];
    c[i] = float(apply(op, av, bv));
  }
}

void binary_backward(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims,
                     const float* b, int b_rank, const int64_t* b_dims, const float* dc, float* da,
                     float* db) {
  int64_t out_dims[kMaxRank], coord[kMaxRank];
  int rank = broadcast_shape(a_rank, a_dims, b_rank, b_dims, out_dims);
  assert(rank >= 0);
  std::vector<double> ga(size_t(numel(a_rank, a_dims)), 0.0);
  std::vector<double> gb(size_t(numel(b_rank, b_dims)), 0.0);
  int64_t n = numel(rank, out_dims);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, rank, out_dims, coord);
    int64_t ia = operand_index(coord, rank, a_rank, a_dims);
    int64_t ib = operand_index(coord, rank, b_rank, b_dims);
    double g = dc[i];
    switch (op) {
      case BinaryOp::add: ga[ia] += g; gb[ib] += g; break;
      case BinaryOp::sub: ga[ia] += g; gb[ib] -= g; break;
      case BinaryOp::mul: ga[ia] += g * b[ib]; gb[ib] += g * a[ia]; break;
      case BinaryOp::div: {
        double bv = b[ib];
        ga[ia] += g / bv;
        gb[ib] -= g * a[ia] / (bv * bv);
        break;
      }
      case BinaryOp::maximum:
      case BinaryOp::minimum: {
        double share = extreme_share_of_a(op, a[ia], b[ib]);
        ga[ia] += g * share;
        gb[ib] += g * (1 - share);
        break;
      }
      default: break;  // comparisons: zero
    }
  }
  if (da)
    for (size_t e = 0; e < ga.size(); ++e) da[e] = float(ga[e]);
  if (db)
    for (size_t e = 0; e < gb.size(); ++e) db[e] = float(gb[e]);
}

void where(const float* cond, int c_rank, const int64_t* c_dims, const float* a, int a_rank,
           const int64_t* a_dims, const float* b, int b_rank, const int64_t* b_dims, float* y) {
  int64_t ab_dims[kMaxRank], out_dims[kMaxRank], coord[kMaxRank];
  int ab_rank = broadcast_shape(a_rank, a_dims, b_rank, b_dims, ab_dims);
  int rank = broadcast_shape(c_rank, c_dims, ab_rank, ab_dims, out_dims);
  assert(ab_rank >= 0 && rank >= 0);
  int64_t n = numel(rank, out_dims);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, rank, out_dims, coord);
    bool take_a = cond[operand_index(coord, rank, c_rank, c_dims)] != 0;
    y[i] = take_a ? a[operand_index(coord, rank, a_rank, a_dims)] : b[operand_index(coord, rank, b_rank, b_dims)];
  }
}

void where_backward(const float* cond, int c_rank, const int64_t* c_dims, int a_rank,
                    const int64_t* a_dims, int b_rank, const int64_t* b_dims, const float* dy,
                    float* da, float* db) {
  int64_t ab_dims[kMaxRank], out_dims[kMaxRank], coord[kMaxRank];
  int ab_rank = broadcast_shape(a_rank, a_dims, b_rank, b_dims, ab_dims);
  int rank = broadcast_shape(c_rank, c_dims, ab_rank, ab_dims, out_dims);
  assert(ab_rank >= 0 && rank >= 0);
  std::vector<double> ga(size_t(numel(a_rank, a_dims)), 0.0);
  std::vector<double> gb(size_t(numel(b_rank, b_dims)), 0.0);
  int64_t n = numel(rank, out_dims);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, rank, out_dims, coord);
    if (cond[operand_index(coord, rank, c_rank, c_dims)] != 0) ga[operand_index(coord, rank, a_rank, a_dims)] += dy[i];
    else gb[operand_index(coord, rank, b_rank, b_dims)] += dy[i];
  }
  if (da)
    for (size_t e = 0; e < ga.size(); ++e) da[e] = float(ga[e]);
  if (db)
    for (size_t e = 0; e < gb.size(); ++e) db[e] = float(gb[e]);
}

void scale(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

void scale_backward(const float* dy, float* dx, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) dx[i] = alpha * dy[i];
}

void reduce(Reduction kind, const float* x, float* y, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < len; ++l) acc += x[(o * len + l) * inner + j];
      if (kind == Reduction::mean) acc /= double(len);
      y[o * inner + j] = float(acc);
    }
}

void reduce_backward(Reduction kind, const float* dy, float* dx, int64_t outer, int64_t len,
                     int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t l = 0; l < len; ++l)
      for (int64_t j = 0; j < inner; ++j) {
        double g = dy[o * inner + j];
        if (kind == Reduction::mean) g /= double(len);
        dx[(o * len + l) * inner + j] = float(g);
      }
}

void reduce_extreme(Extreme kind, const float* x, float* values, int32_t* indices, int64_t outer,
                    int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      double best_v = x[o * len * inner + j];
      for (int64_t l = 1; l < len && !std::isnan(best_v); ++l) {
        double v = x[(o * len + l) * inner + j];
        bool better = std::isnan(v) || (kind == Extreme::max ? v > best_v : v < best_v);
        if (better) { best = l; best_v = v; }
      }
      if (values) values[o * inner + j] = float(best_v);
      if (indices) indices[o * inner + j] = int32_t(best);
    }
}

void reduce_extreme_backward(const float* x, const float* values, const float* dy, float* dx,
                             int64_t outer, int64_t len, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      float v = values[o * inner + j];
      int64_t ties = 0;
      for (int64_t l = 0; l < len; ++l) ties += x[(o * len + l) * inner + j] == v;
      double share = ties > 0 ? double(dy[o * inner + j]) / double(ties) : 0.0;
      for (int64_t l = 0; l < len; ++l) {
        int64_t k = (o * len + l) * inner + j;
        dx[k] = x[k] == v ? float(share) : 0.0f;
      }
    }
}

void fill(float* y, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

void arange(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(i));
}

void permute(const float* x, float* y, int rank, const int64_t* x_dims, const int* perm) {
  int64_t y_dims[kMaxRank], y_coord[kMaxRank], x_coord[kMaxRank];
  for (int i = 0; i < rank; ++i) y_dims[i] = x_dims[perm[i]];
  int64_t n = numel(rank, x_dims);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, rank, y_dims, y_coord);
    for (int d = 0; d < rank; ++d) x_coord[perm[d]] = y_coord[d];
    y[i] = x[ravel(rank, x_dims, x_coord)];
  }
}

void permute_backward(const float* dy, float* dx, int rank, const int64_t* x_dims,
                      const int* perm) {
  int64_t y_dims[kMaxRank];
  int inverse[kMaxRank];
  for (int i = 0; i < rank; ++i) {
    y_dims[i] = x_dims[perm[i]];
    inverse[perm[i]] = i;
  }
  permute(dy, dx, rank, y_dims, inverse);
}

void roll(const float* x, float* y, int rank, const int64_t* dims, int num_shifts,
          const int64_t* shifts, const int* roll_dims) {
  int64_t coord[kMaxRank];
  int64_t n = numel(rank, dims);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, rank, dims, coord);
    for (int s = 0; s < num_shifts; ++s) {
      int64_t size = dims[roll_dims[s]];
      int64_t& c = coord[roll_dims[s]];
      c = ((c + shifts[s]) % size + size) % size;
    }
    y[ravel(rank, dims, coord)] = x[i];
  }
}

void roll_backward(const float* dy, float* dx, int rank, const int64_t* dims, int num_shifts,
                   const int64_t* shifts, const int* roll_dims) {
  std::vector<int64_t> negated(shifts, shifts + num_shifts);
  for (int64_t& s : negated) s = -s;
  roll(dy, dx, rank, dims, num_shifts, negated.data(), roll_dims);
}

void pad(const float* x, float* y, int rank, const int64_t* x_dims, const int64_t* before,
         const int64_t* after) {
  int64_t y_dims[kMaxRank], coord[kMaxRank];
  for (int i = 0; i < rank; ++i) y_dims[i] = x_dims[i] + before[i] + after[i];
  int64_t ny = numel(rank, y_dims);
  for (int64_t i = 0; i < ny; ++i) y[i] = 0.0f;
  int64_t nx = numel(rank, x_dims);
  for (int64_t i = 0; i < nx; ++i) {
    unravel(i, rank, x_dims, coord);
    for (int d = 0; d < rank; ++d) coord[d] += before[d];
    y[ravel(rank, y_dims, coord)] = x[i];
  }
}

void pad_backward(const float* dy, float* dx, int rank, const int64_t* x_dims,
                  const int64_t* before, const int64_t* after) {
  int64_t y_dims[kMaxRank], coord[kMaxRank];
  for (int i = 0; i < rank; ++i) y_dims[i] = x_dims[i] + before[i] + after[i];
  int64_t nx = numel(rank, x_dims);
  for (int64_t i = 0; i < nx; ++i) {
    unravel(i, rank, x_dims, coord);
    for (int d = 0; d < rank; ++d) coord[d] += before[d];
    dx[i] = dy[ravel(rank, y_dims, coord)];
  }
}

void concat(const float* const* inputs, int num_inputs, const int64_t* sizes, int64_t outer,
            int64_t inner, float* y) {
  int64_t total = 0;
  for (int j = 0; j < num_inputs; ++j) total += sizes[j];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t start = 0;
    for (int j = 0; j < num_inputs; ++j) {
      for (int64_t l = 0; l < sizes[j]; ++l)
        for (int64_t i = 0; i < inner; ++i)
          y[(o * total + start + l) * inner + i] = inputs[j][(o * sizes[j] + l) * inner + i];
      start += sizes[j];
    }
  }
}

void split(const float* x, float* const* outputs, int num_outputs, const int64_t* sizes,
           int64_t outer, int64_t inner) {
  int64_t total = 0;
  for (int j = 0; j < num_outputs; ++j) total += sizes[j];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t start = 0;
    for (int j = 0; j < num_outputs; ++j) {
      for (int64_t l = 0; l < sizes[j]; ++l)
        for (int64_t i = 0; i < inner; ++i)
          outputs[j][(o * sizes[j] + l) * inner + i] = x[(o * total + start + l) * inner + i];
      start += sizes[j];
    }
  }
}

void concat_backward(const float* dy, float* const* dinputs, int num_inputs,
                     const int64_t* sizes, int64_t outer, int64_t inner) {
  split(dy, dinputs, num_inputs, sizes, outer, inner);
}

void split_backward(const float* const* doutputs, int num_outputs, const int64_t* sizes,
                    int64_t outer, int64_t inner, float* dx) {
  concat(doutputs, num_outputs, sizes, outer, inner, dx);
}

void embedding(const float* table, const int32_t* ids, float* y, int64_t num_ids, int64_t vocab,
               int64_t dim, int64_t vocab_offset) {
  for (int64_t i = 0; i < num_ids; ++i) {
    int64_t row = int64_t(ids[i]) - vocab_offset;
    bool held = row >= 0 && row < vocab;
    for (int64_t d = 0; d < dim; ++d) y[i * dim + d] = held ? table[row * dim + d] : 0.0f;
  }
}

void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num_ids,
                        int64_t vocab, int64_t dim, int64_t vocab_offset) {
  for (int64_t i = 0; i < num_ids; ++i) {
    int64_t row = int64_t(ids[i]) - vocab_offset;
    if (row < 0 || row >= vocab) continue;
    for (int64_t d = 0; d < dim; ++d) dtable[row * dim + d] += dy[i * dim + d];
  }
}

}  // namespace nns::backend::cpu::ref
