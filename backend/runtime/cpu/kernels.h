// The CPU kernel library of the backend: fp32, one device, free functions
// over raw contiguous row-major float buffers with explicit int64 sizes (no
// tensor or shape type, so the runtime can hand in any slice of its buffer
// plan and the kernels stay independent of the graph).
//
// Every kernel exists twice with the same signature:
//   nns::backend::cpu::ref   simple loops, double accumulators, obviously
//                            correct; the oracle of the conformance table;
//   nns::backend::cpu::fast  oneDNN 2.6 for matmul, linear, conv2d, softmax,
//                            log_softmax, cross_entropy, layer_norm and the
//                            elementwise functions it has (eltwise; not
//                            sin/cos) (multi-threaded, see set_threads);
//                            tight single-threaded C++ (no OpenMP) for the
//                            rest, which is memory-bound.
// A oneDNN call costs a few microseconds of fixed overhead (primitive cache
// lookup, memory objects, OpenMP fork/join), so for tiny shapes ref can be
// the faster of the two; the runtime should not care.
// The contracts are documented once, on the ref declarations; the fast ones
// promise the same within the tolerances of tests/backend/.
//
// Conventions shared by all kernels:
// - Buffers never alias unless a kernel says so (optimizer steps update in
//   place by design).
// - Backward kernels compute the gradient w.r.t. every float input from the
//   output gradient and OVERWRITE their outputs; a null gradient output is
//   skipped. The one exception is embedding_backward, which scatter-adds
//   (rows are shared between ids, and a vocab-sharded table is summed).
// - Elementwise-style kernels accept n == 0; every size is >= 0.
// - `fast` kernels are safe to call from several threads at once: oneDNN
//   engines, streams and primitive caches are per calling thread.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/runtime/cpu/half_bits.h"

namespace nns::backend::cpu {

// The bf16 and fp16 roundings (bf16_bits, fp16_bits, round_to_bf16, ...)
// are in half_bits.h, shared with the CUDA kernels.

constexpr int kMaxRank = 6;  // permute / roll / pad / binary broadcasting

// The kernels below keep per-dimension state in kMaxRank-slot arrays. The
// language refuses bigger ranks where shapes are made (sema::kMaxTensorRank);
// this guard keeps a shape that reached a kernel some other way from
// writing past those arrays. Throws RuntimeError (exit 70).
void require_rank(int rank, const char* kernel);

// Elementwise functions of one tensor (activations and math); pow takes
// its exponent as the kernels' `p` argument, the others ignore it.
enum class Activation { relu, gelu_tanh, gelu_erf, sigmoid, tanh, silu, exp, log, sqrt, rsqrt, abs, neg, sin, cos, pow };
// Broadcasting binaries; the comparisons give 1.0f where they hold, else 0.0f.
enum class BinaryOp { add, sub, mul, div, maximum, minimum, eq, ne, lt, le, gt, ge };
enum class Reduction { sum, mean };
enum class Extreme { max, min };

// Geometry of a 2-D convolution: x [n, c, h, w] (NCHW), weight [o, c, kh, kw]
// (OIHW), y [n, o, out_h(), out_w()]; symmetric zero padding, no dilation,
// no groups.
struct Conv2dDims {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t o = 1, kh = 1, kw = 1;       // weight
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t out_h() const { return (h + 2 * pad_h - kh) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad_w - kw) / stride_w + 1; }
};

// 2-d pooling over x [n, c, h, w] -> y [n, c, out_h(), out_w()]: a square
// kernel, one stride, symmetric padding. Max pooling treats padding as
// -inf; average pooling counts it as zeros and always divides by k * k
// (PyTorch's count_include_pad = True, without ceil mode).
struct Pool2dDims {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t k = 1, stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - k) / stride + 1; }
};

// Numpy broadcasting of two shapes (right-aligned; a dim of size 1 stretches).
// Writes the result dims to out_dims (room for kMaxRank) and returns the
// result rank, or -1 when the shapes are incompatible or a rank > kMaxRank.
int broadcast_shape(int a_rank, const int64_t* a_dims, int b_rank, const int64_t* b_dims,
                    int64_t* out_dims);

// Number of threads the fast kernels may use from the calling thread.
// Debian's libdnnl 2.6 is built with the OpenMP runtime (libgomp; see
// dnnl_config.h: DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP), which has no oneDNN
// API for the thread count: set_threads calls omp_set_num_threads, which
// sets the OpenMP ICV of the CALLING thread only — a runtime that runs
// kernels from several threads calls it on each. n <= 0 restores the
// default (OMP_NUM_THREADS or the core count). The plain-C++ fast kernels
// are single-threaded and unaffected. Cached oneDNN primitives are keyed by
// the thread count, so changing it is always safe. Several threads calling
// oneDNN kernels at once each start their own OpenMP team: give each a
// share of the cores (N ranks on one machine: set_threads(cores / N)).
// With a oneDNN built on another runtime this is a no-op.
void set_threads(int n);
int get_threads();

// The dropout random stream: Philox-4x32-10 keyed by the seed, counter =
// element_index / 4, lane = element_index % 4; mapped to [0, 1) with 24
// bits. A pure function of (seed, index): no state, no thread dependence.
float dropout_uniform(uint64_t seed, uint64_t element_index);

namespace ref {

// ---- linear algebra ---------------------------------------------------------

// c[i] = op(a[i]) · op(b[i or 0]) + beta * c[i] for i in [0, batch), where
// op(a) is [m, k] (a stored [k, m] when trans_a), op(b) is [k, n] (b stored
// [n, k] when trans_b), c is [batch, m, n]. b_batch is batch, or 1 to use one
// b for every batch entry. beta 0 overwrites c (its old contents are never
// read), 1 accumulates.
void matmul(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
            int64_t k, int64_t n, bool trans_a, bool trans_b, float beta);
// Gradients of matmul (beta 0) w.r.t. a (same layout as a) and b (same
// layout as b; summed over batch when b_batch == 1).
void matmul_backward(const float* a, const float* b, const float* dc, float* da, float* db,
                     int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                     bool trans_b);

// y[rows, n] = x[rows, k] · w[n, k]^T + bias[n] (bias may be null).
void linear(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
            int64_t n);
// dx[rows, k], dw[n, k], dbias[n] from dy[rows, n].
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int64_t rows, int64_t k, int64_t n);
// The same with x and w row-strided (row r of x at x + r * ldx, of w at
// w + r * ldw; ldx, ldw >= k): columns of larger buffers read in place
// (TensorView::row_stride). fp32 only. y may be row-strided too (row r at
// y + r * ldy; 0: packed), written in place into a rank buffer's columns,
// and with `accumulate` the product is added to what y holds (y += x w^T:
// a partial sum collected in place; no bias then). The backward's dy may
// be row-strided (lddy; 0: packed): a gradient's columns read in place;
// with accumulate_dx, dx += dy w (an earlier kernel's partial sum of the
// same gradient, added to where its collect would).
void linear_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias, float* y, int64_t rows,
                    int64_t k, int64_t n, int64_t ldy = 0, bool accumulate = false);
void linear_backward_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* dy, float* dx,
                             float* dw, float* dbias, int64_t rows, int64_t k, int64_t n, int64_t lddy = 0,
                             bool accumulate_dx = false);

// bf16 autocast of the matrix products (train setting precision = "bf16"):
// the same contracts with every float operand first rounded to bfloat16
// (round_to_bf16); products and sums in fp32 (ref: double) and fp32
// outputs, as a tensor core's bf16 inputs with fp32 accumulation. Biases
// and bias gradients stay fp32.
void matmul_bf16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta);
void matmul_backward_bf16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b);
void linear_bf16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n);
void linear_backward_bf16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n);

// fp16 autocast (precision = "fp16"): the same contracts with every float
// operand rounded to IEEE binary16 (round_to_fp16: an operand past 65504
// becomes inf, as a half would); products and sums in fp32 (ref: double),
// fp32 outputs. Biases and bias gradients stay fp32. Two halves multiply
// exactly in fp32 (11 + 11 significant bits), so the fast path is oneDNN's
// fp32 matmul on rounded copies (made with F16C's conversions where the CPU
// has them): oneDNN 2.6 has no f16 matmul for a CPU without AVX512-FP16
// (this one has AVX512-BF16 only).
void matmul_fp16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta);
void matmul_backward_fp16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b);
void linear_fp16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n);
void linear_backward_fp16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n);

// y = conv2d(x, w) + bias[o] (bias may be null); see Conv2dDims for layouts.
void conv2d(const float* x, const float* w, const float* bias, float* y, const Conv2dDims& d);
// dx from dy and the weight.
void conv2d_backward_data(const float* dy, const float* w, float* dx, const Conv2dDims& d);
// dw from x and dy; dbias[o] = sum of dy over n, out_h, out_w (either may be null).
void conv2d_backward_weights(const float* x, const float* dy, float* dw, float* dbias,
                             const Conv2dDims& d);

// ---- pooling (see Pool2dDims) -------------------------------------------------
void max_pool2d(const float* x, float* y, const Pool2dDims& d);
// dx (overwritten): each dy goes to the first maximum of its window in
// row-major order (PyTorch's rule on ties).
void max_pool2d_backward(const float* x, const float* dy, float* dx, const Pool2dDims& d);
void avg_pool2d(const float* x, float* y, const Pool2dDims& d);
// dx (overwritten): dy / (k * k) to every real element of the window.
void avg_pool2d_backward(const float* dy, float* dx, const Pool2dDims& d);

// ---- normalisation ----------------------------------------------------------

// Softmax over the last dim of x [rows, cols].
void softmax(const float* x, float* y, int64_t rows, int64_t cols);
// dx = y * (dy - sum(dy * y)) per row, from the forward OUTPUT y.
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);
// y = x - logsumexp(x) over the last dim.
void log_softmax(const float* x, float* y, int64_t rows, int64_t cols);
// dx = dy - exp(y) * sum(dy) per row, from the forward OUTPUT y.
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                          int64_t cols);

// Layer norm over the last dim: y = (x - mean) * rstd * gamma + beta with
// rstd = 1 / sqrt(var + eps) (biased variance). gamma/beta [cols] may be
// null (1 / 0). mean and rstd [rows] receive the statistics the backward
// needs; both may be null (inference).
void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                float* rstd, int64_t rows, int64_t cols, float eps);
// dx, dgamma, dbeta from x, the saved mean/rstd and dy; eps must be the
// forward's (oneDNN keeps the variance, not rstd).
void layer_norm_backward(const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta, int64_t rows, int64_t cols, float eps);

// ---- elementwise --------------------------------------------------------------

// y = act(x) over n elements. gelu_tanh is the tanh approximation
// 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), gelu_erf the exact
// 0.5x(1 + erf(x/sqrt 2)); silu x * sigmoid(x); rsqrt 1/sqrt(x); neg -x;
// pow x^p (p: the exponent; NaN for a negative x and a non-integer p, as
// in PyTorch). relu'(0) and abs'(0) are taken as 0.
void activation(Activation act, const float* x, float* y, int64_t n, float p = 0.0f);
// dx = dy * act'(x), from the forward INPUT x.
void activation_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n,
                         float p = 0.0f);

// c = a op b with numpy broadcasting; c has the broadcast shape
// (broadcast_shape). Ranks <= kMaxRank. maximum/minimum give NaN when
// either operand is NaN (PyTorch); comparisons follow IEEE (NaN compares
// unequal to everything).
void binary(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims, const float* b,
            int b_rank, const int64_t* b_dims, float* c);
// da (shape of a) and db (shape of b) from dc, summed over the dims each
// operand was broadcast along. a and b may be null for add/sub.
// maximum/minimum: dc goes to the larger/smaller operand; on a tie each
// gets dc / 2 (PyTorch's rule). Comparisons are steps: zero gradients.
void binary_backward(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims,
                     const float* b, int b_rank, const int64_t* b_dims, const float* dc, float* da,
                     float* db);

// y = cond != 0 ? a : b, numpy broadcasting over all three operands; y has
// their common broadcast shape. Ranks <= kMaxRank.
void where(const float* cond, int c_rank, const int64_t* c_dims, const float* a, int a_rank,
           const int64_t* a_dims, const float* b, int b_rank, const int64_t* b_dims, float* y);
// da = dy where cond holds, db = dy elsewhere, each summed over the dims
// its operand was broadcast along (either may be null; cond gets none).
void where_backward(const float* cond, int c_rank, const int64_t* c_dims, int a_rank,
                    const int64_t* a_dims, int b_rank, const int64_t* b_dims, const float* dy,
                    float* da, float* db);

// y = alpha * x. In place (y == x) allowed.
void scale(const float* x, float* y, int64_t n, float alpha);
// dx = alpha * dy.
void scale_backward(const float* dy, float* dx, int64_t n, float alpha);

// Sum or mean of x viewed as [outer, len, inner] over the middle dim:
// y [outer, inner]. (Keepdim only changes the shape, not the buffer.)
void reduce(Reduction kind, const float* x, float* y, int64_t outer, int64_t len, int64_t inner);
// dx [outer, len, inner] = dy broadcast along len (divided by len for mean).
void reduce_backward(Reduction kind, const float* dy, float* dx, int64_t outer, int64_t len,
                     int64_t inner);

// Max or min of x viewed as [outer, len, inner] over the middle dim (len >=
// 1): `values` [outer, inner] and `indices` [outer, inner], the position
// along len of the first extreme element (argmax/argmin); either may be
// null. NaN counts as the extreme (PyTorch: amax is NaN, argmax points at
// the first NaN).
void reduce_extreme(Extreme kind, const float* x, float* values, int32_t* indices, int64_t outer,
                    int64_t len, int64_t inner);
// dx [outer, len, inner]: dy shared equally by the elements of x equal to
// their extreme `values` (PyTorch's amax/amin backward), 0 elsewhere.
void reduce_extreme_backward(const float* x, const float* values, const float* dy, float* dx,
                             int64_t outer, int64_t len, int64_t inner);

// ---- constants ------------------------------------------------------------------

// y[i] = value for i in [0, n).
void fill(float* y, int64_t n, float value);
// y[i] = i for i in [0, n) (exact up to 2^24).
void arange(float* y, int64_t n);

// ---- layout -------------------------------------------------------------------

// y = x.permute(perm): y dim i is x dim perm[i]; x has x_dims.
void permute(const float* x, float* y, int rank, const int64_t* x_dims, const int* perm);
// dx = dy permuted by the inverse of perm (x_dims are the forward input's).
void permute_backward(const float* dy, float* dx, int rank, const int64_t* x_dims,
                      const int* perm);

// torch.roll: y[.., (i + shift) mod size, ..] = x[.., i, ..] along each of
// roll_dims[0..num_shifts) by shifts[j] (any sign, any magnitude).
void roll(const float* x, float* y, int rank, const int64_t* dims, int num_shifts,
          const int64_t* shifts, const int* roll_dims);
// dx = dy rolled by the negated shifts.
void roll_backward(const float* dy, float* dx, int rank, const int64_t* dims, int num_shifts,
                   const int64_t* shifts, const int* roll_dims);

// Constant-zero padding: y dim i = x_dims[i] + before[i] + after[i] (all >= 0).
void pad(const float* x, float* y, int rank, const int64_t* x_dims, const int64_t* before,
         const int64_t* after);
// dx = the x-shaped window of dy.
void pad_backward(const float* dy, float* dx, int rank, const int64_t* x_dims,
                  const int64_t* before, const int64_t* after);

// Concatenation along a dim: input j is [outer, sizes[j], inner], y is
// [outer, sum(sizes), inner].
void concat(const float* const* inputs, int num_inputs, const int64_t* sizes, int64_t outer,
            int64_t inner, float* y);
// The inverse of concat: x [outer, sum(sizes), inner] into outputs j.
void split(const float* x, float* const* outputs, int num_outputs, const int64_t* sizes,
           int64_t outer, int64_t inner);
// concat's backward is split of dy; split's backward is concat of the dys.
void concat_backward(const float* dy, float* const* dinputs, int num_inputs,
                     const int64_t* sizes, int64_t outer, int64_t inner);
void split_backward(const float* const* doutputs, int num_outputs, const int64_t* sizes,
                    int64_t outer, int64_t inner, float* dx);

// Row gather (embedding / index_select on dim 0): y[i, :] = table[ids[i] -
// vocab_offset, :] for a table of `vocab` rows of `dim` floats; an id
// outside [vocab_offset, vocab_offset + vocab) gives a zero row (the rows a
// vocab-sharded table does not hold; the shards' outputs are then summed).
void embedding(const float* table, const int32_t* ids, float* y, int64_t num_ids, int64_t vocab,
               int64_t dim, int64_t vocab_offset);
// dtable[ids[i] - vocab_offset, :] += dy[i, :] for ids this shard holds.
// ACCUMULATES into dtable (zero it first for a plain gradient).
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num_ids,
                        int64_t vocab, int64_t dim, int64_t vocab_offset);

// ---- losses -------------------------------------------------------------------

// Mean over rows of -log_softmax(logits[r])[targets[r]]; logits [rows,
// classes], targets in [0, classes). Returns the loss.
float cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t classes);
// dlogits = dloss / rows * (softmax(logits) - onehot(targets)).
void cross_entropy_backward(const float* logits, const int32_t* targets, float dloss,
                            float* dlogits, int64_t rows, int64_t classes);
// mean((pred - target)^2) over n elements.
float mse(const float* pred, const float* target, int64_t n);
// dpred = 2 dloss (pred - target) / n, dtarget = -dpred (either may be null).
void mse_backward(const float* pred, const float* target, float dloss, float* dpred,
                  float* dtarget, int64_t n);

// ---- dropout ------------------------------------------------------------------

// y[i] = x[i] * keep(i) / (1 - p), keep(i) = dropout_uniform(seed, offset + i)
// >= p. `offset` is the global index of x[0] in the full tensor, so any slice
// of a partitioned tensor gets exactly the elements of the full mask.
// Dropped elements are x * 0 (a NaN stays NaN, as in PyTorch). p <= 0
// copies, p >= 1 writes zeros.
void dropout(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset);
// dx = dy * keep(i) / (1 - p): the mask is recomputed, never stored.
void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t offset);

// ---- scans, selection, indexed access, casts ---------------------------------
// x viewed as [outer, len, inner], the op's dim in the middle (as reduce).

// Inclusive prefix sum along len: y[o, l, j] = sum of x[o, 0..l, j].
void cumsum(const float* x, float* y, int64_t outer, int64_t len, int64_t inner);
// dx[o, l, j] = sum of dy[o, l..len-1, j] (the suffix sum).
void cumsum_backward(const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner);
// The k (1 <= k <= len) largest along len in descending order: values and
// indices [outer, k, inner]; equal values in order of position; NaN counts
// as larger than every number (PyTorch).
void topk(const float* x, float* values, int32_t* indices, int64_t outer, int64_t len,
          int64_t inner, int64_t k);
// dx [outer, len, inner]: dvalues [outer, k, inner] at the positions
// `indices` picked, 0 elsewhere.
void topk_backward(const int32_t* indices, const float* dvalues, float* dx, int64_t outer,
                   int64_t len, int64_t inner, int64_t k);
// torch.gather along the middle dim: x [outer, len, inner], index and y
// [outer, m, inner]; y[o, i, j] = x[o, index[o, i, j], j]. Every index is in
// [0, len) (the caller checks).
void gather(const float* x, const int32_t* index, float* y, int64_t outer, int64_t len,
            int64_t inner, int64_t m);
// dx [outer, len, inner] = 0, then dx[o, index[o, i, j], j] += dy[o, i, j].
void gather_backward(const int32_t* index, const float* dy, float* dx, int64_t outer, int64_t len,
                     int64_t inner, int64_t m);
// torch.scatter_add: y = x, then y[o, index[o, i, j], j] += src[o, i, j];
// x and y [outer, len, inner], index and src [outer, m, inner].
void scatter_add(const float* x, const int32_t* index, const float* src, float* y, int64_t outer,
                 int64_t len, int64_t inner, int64_t m);
// dx = dy; dsrc[o, i, j] = dy[o, index[o, i, j], j] (either may be null).
void scatter_add_backward(const int32_t* index, const float* dy, float* dx, float* dsrc,
                          int64_t outer, int64_t len, int64_t inner, int64_t m);
// i32 -> f32 (exact up to 2^24) and f32 -> i32 rounding toward zero (every
// value finite and inside the i32 range; the caller checks).
void cast_to_f32(const int32_t* x, float* y, int64_t n);
void cast_to_i32(const float* x, int32_t* y, int64_t n);

// ---- optimizer ----------------------------------------------------------------

// SGD (PyTorch semantics, dampening 0, no Nesterov), in place:
// g = grad + weight_decay * param; buf = momentum * buf + g; param -= lr * buf.
// momentum_buf starts zeroed; it may be null when momentum == 0 (then
// param -= lr * g).
void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
              float momentum, float weight_decay);
// AdamW (decoupled weight decay, bias correction), in place; step counts
// from 1: param *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// param -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps).
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step);
// Sum of squares over a list of buffers (double): the per-rank partial of a
// global gradient norm, to be allreduced before the sqrt.
double sum_of_squares(const float* const* bufs, const int64_t* sizes, int count);
// sqrt(sum_of_squares(...)): the global L2 norm of buffers held locally.
float global_l2_norm(const float* const* bufs, const int64_t* sizes, int count);

}  // namespace ref

// Same contracts as ref:: above (declarations kept in the same order).
namespace fast {

void matmul(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
            int64_t k, int64_t n, bool trans_a, bool trans_b, float beta);
void matmul_backward(const float* a, const float* b, const float* dc, float* da, float* db,
                     int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                     bool trans_b);
void linear(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
            int64_t n);
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int64_t rows, int64_t k, int64_t n);
void linear_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias, float* y, int64_t rows,
                    int64_t k, int64_t n, int64_t ldy = 0, bool accumulate = false);
void linear_backward_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* dy, float* dx,
                             float* dw, float* dbias, int64_t rows, int64_t k, int64_t n, int64_t lddy = 0,
                             bool accumulate_dx = false);

// Which bf16 path the fast products take, decided once per process: the
// native one (oneDNN's bf16 matmul, where this CPU's oneDNN creates one:
// AVX-512 and up) or the emulated one (fp32 products of bf16-rounded
// operands, on every x86-64). NNS_CPU_BF16=emulate forces the emulated path
// (so a machine with AVX-512 BF16 tests both); 'auto' or unset detects.
// The two give the same products and differ only in the order of fp32 sums:
// not bitwise equal (tests/backend/conformance_bf16_test.cpp measures it).
bool bf16_emulated();
bool bf16_emulation_requested();  // NNS_CPU_BF16=emulate
// A message when NNS_CPU_BF16 holds something other than auto or emulate.
const char* check_bf16_env();
// Tests: -1 back to detection, 0 native (emulated where there is none), 1 emulated.
void force_bf16_path(int mode);

void matmul_bf16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta);
void matmul_backward_bf16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b);
void linear_bf16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n);
void linear_backward_bf16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n);
void matmul_fp16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta);
void matmul_backward_fp16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b);
void linear_fp16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n);
void linear_backward_fp16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n);
void conv2d(const float* x, const float* w, const float* bias, float* y, const Conv2dDims& d);
void conv2d_backward_data(const float* dy, const float* w, float* dx, const Conv2dDims& d);
void conv2d_backward_weights(const float* x, const float* dy, float* dw, float* dbias,
                             const Conv2dDims& d);

void max_pool2d(const float* x, float* y, const Pool2dDims& d);
void max_pool2d_backward(const float* x, const float* dy, float* dx, const Pool2dDims& d);
void avg_pool2d(const float* x, float* y, const Pool2dDims& d);
void avg_pool2d_backward(const float* dy, float* dx, const Pool2dDims& d);

void softmax(const float* x, float* y, int64_t rows, int64_t cols);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);
void log_softmax(const float* x, float* y, int64_t rows, int64_t cols);
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                          int64_t cols);
void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                float* rstd, int64_t rows, int64_t cols, float eps);
void layer_norm_backward(const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta, int64_t rows, int64_t cols, float eps);

void activation(Activation act, const float* x, float* y, int64_t n, float p = 0.0f);
void activation_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n,
                         float p = 0.0f);
void binary(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims, const float* b,
            int b_rank, const int64_t* b_dims, float* c);
void binary_backward(BinaryOp op, const float* a, int a_rank, const int64_t* a_dims,
                     const float* b, int b_rank, const int64_t* b_dims, const float* dc, float* da,
                     float* db);
void where(const float* cond, int c_rank, const int64_t* c_dims, const float* a, int a_rank,
           const int64_t* a_dims, const float* b, int b_rank, const int64_t* b_dims, float* y);
void where_backward(const float* cond, int c_rank, const int64_t* c_dims, int a_rank,
                    const int64_t* a_dims, int b_rank, const int64_t* b_dims, const float* dy,
                    float* da, float* db);
void scale(const float* x, float* y, int64_t n, float alpha);
void scale_backward(const float* dy, float* dx, int64_t n, float alpha);
void axpy(float* y, const float* x, int64_t n, float alpha);  // y += alpha * x (no overlap)
void reduce(Reduction kind, const float* x, float* y, int64_t outer, int64_t len, int64_t inner);
void reduce_backward(Reduction kind, const float* dy, float* dx, int64_t outer, int64_t len,
                     int64_t inner);
void reduce_extreme(Extreme kind, const float* x, float* values, int32_t* indices, int64_t outer,
                    int64_t len, int64_t inner);
void reduce_extreme_backward(const float* x, const float* values, const float* dy, float* dx,
                             int64_t outer, int64_t len, int64_t inner);
void fill(float* y, int64_t n, float value);
void arange(float* y, int64_t n);

void permute(const float* x, float* y, int rank, const int64_t* x_dims, const int* perm);
void permute_backward(const float* dy, float* dx, int rank, const int64_t* x_dims,
                      const int* perm);
void roll(const float* x, float* y, int rank, const int64_t* dims, int num_shifts,
          const int64_t* shifts, const int* roll_dims);
void roll_backward(const float* dy, float* dx, int rank, const int64_t* dims, int num_shifts,
                   const int64_t* shifts, const int* roll_dims);
void pad(const float* x, float* y, int rank, const int64_t* x_dims, const int64_t* before,
         const int64_t* after);
void pad_backward(const float* dy, float* dx, int rank, const int64_t* x_dims,
                  const int64_t* before, const int64_t* after);
void concat(const float* const* inputs, int num_inputs, const int64_t* sizes, int64_t outer,
            int64_t inner, float* y);
void split(const float* x, float* const* outputs, int num_outputs, const int64_t* sizes,
           int64_t outer, int64_t inner);
void concat_backward(const float* dy, float* const* dinputs, int num_inputs,
                     const int64_t* sizes, int64_t outer, int64_t inner);
void split_backward(const float* const* doutputs, int num_outputs, const int64_t* sizes,
                    int64_t outer, int64_t inner, float* dx);
void embedding(const float* table, const int32_t* ids, float* y, int64_t num_ids, int64_t vocab,
               int64_t dim, int64_t vocab_offset);
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num_ids,
                        int64_t vocab, int64_t dim, int64_t vocab_offset);

float cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t classes);
void cross_entropy_backward(const float* logits, const int32_t* targets, float dloss,
                            float* dlogits, int64_t rows, int64_t classes);
float mse(const float* pred, const float* target, int64_t n);
void mse_backward(const float* pred, const float* target, float dloss, float* dpred,
                  float* dtarget, int64_t n);
void dropout(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset);
void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t offset);

void cumsum(const float* x, float* y, int64_t outer, int64_t len, int64_t inner);
void cumsum_backward(const float* dy, float* dx, int64_t outer, int64_t len, int64_t inner);
void topk(const float* x, float* values, int32_t* indices, int64_t outer, int64_t len,
          int64_t inner, int64_t k);
void topk_backward(const int32_t* indices, const float* dvalues, float* dx, int64_t outer,
                   int64_t len, int64_t inner, int64_t k);
void gather(const float* x, const int32_t* index, float* y, int64_t outer, int64_t len,
            int64_t inner, int64_t m);
void gather_backward(const int32_t* index, const float* dy, float* dx, int64_t outer, int64_t len,
                     int64_t inner, int64_t m);
void scatter_add(const float* x, const int32_t* index, const float* src, float* y, int64_t outer,
                 int64_t len, int64_t inner, int64_t m);
void scatter_add_backward(const int32_t* index, const float* dy, float* dx, float* dsrc,
                          int64_t outer, int64_t len, int64_t inner, int64_t m);
void cast_to_f32(const int32_t* x, float* y, int64_t n);
void cast_to_i32(const float* x, int32_t* y, int64_t n);

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
              float momentum, float weight_decay);
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step);
double sum_of_squares(const float* const* bufs, const int64_t* sizes, int count);
float global_l2_norm(const float* const* bufs, const int64_t* sizes, int count);

}  // namespace fast

}  // namespace nns::backend::cpu
