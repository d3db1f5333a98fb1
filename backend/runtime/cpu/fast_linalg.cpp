// Fast matmul, linear and conv2d on oneDNN primitives. Transposes are
// expressed as strides of the memory descriptors (no copies), a shared b is
// a batch dim of 1 (oneDNN broadcasts it), beta is a sum post-op.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "backend/runtime/cpu/dnnl_context.h"
#include "backend/runtime/cpu/kernels.h"

namespace nns::backend::cpu::fast {

using dnnl::memory;
using namespace dnnl_ctx;

namespace {

// Logical [batch, rows, cols], stored [batch, cols, rows] when trans. A
// stored row is `ld` elements long when ld > 0 (a row-strided view: columns
// of a larger buffer), else packed.
memory::desc matrix_md(int64_t batch, int64_t rows, int64_t cols, bool trans,
                       memory::data_type type = memory::data_type::f32, int64_t ld = 0) {
  const int64_t outer = trans ? cols : rows, l = ld > 0 ? ld : (trans ? rows : cols);
  memory::dims strides = trans ? memory::dims{outer * l, 1, l} : memory::dims{outer * l, l, 1};
  return memory::desc({batch, rows, cols}, type, strides);
}

// bf16 copies of operands (bf16_bits), in per-thread scratch reused across
// calls: slot 0 and 1 are a gemm's two operands.
const uint16_t* to_bf16(const float* p, int64_t n, int slot) {
  thread_local std::vector<uint16_t> scratch[2];
  std::vector<uint16_t>& buf = scratch[slot];
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  uint16_t* out = buf.data();
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(p[i]);
  return out;
}

// The emulated path's operands: bf16-rounded values held as floats, in their
// own per-thread scratch (slot 0 and 1, as to_bf16).
const float* to_bf16_values(const float* p, int64_t n, int slot) {
  thread_local std::vector<float> scratch[2];
  std::vector<float>& buf = scratch[slot];
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  float* out = buf.data();
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(p[i]);
  return out;
}

// Whether this CPU's oneDNN creates a bf16 matmul at all: oneDNN 2.6 has
// one from AVX-512 (native dot products with AVX512_BF16 or AMX, its own
// emulation on plain AVX512_CORE) and none on AVX2, where primitive creation
// throws. Asked once per process with a small problem.
bool onednn_has_bf16_matmul() {
  try {
    memory::desc a({1, 2, 2}, memory::data_type::bf16, memory::dims{4, 2, 1});
    memory::desc c({1, 2, 2}, memory::data_type::f32, memory::dims{4, 2, 1});
    dnnl::matmul::desc desc(a, a, c);
    dnnl::matmul::primitive_desc pd(desc, engine());
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::atomic<int> g_bf16_forced{-1};  // -1: as detected; else 0 native, 1 emulated (tests)

}  // namespace

bool bf16_emulated() {
  const int forced = g_bf16_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  static const bool emulated = bf16_emulation_requested() || !onednn_has_bf16_matmul();
  return emulated;
}

bool bf16_emulation_requested() {
  const char* v = std::getenv("NNS_CPU_BF16");
  return v && std::string(v) == "emulate";
}

const char* check_bf16_env() {
  const char* v = std::getenv("NNS_CPU_BF16");
  if (!v || !*v || std::string(v) == "auto" || std::string(v) == "emulate") return nullptr;
  return "NNS_CPU_BF16 must be 'auto' (the default: oneDNN's bf16 matmul where this CPU has one) or 'emulate' "
         "(fp32 products of bf16-rounded operands)";
}

void force_bf16_path(int mode) {
  if (mode == 0 && !onednn_has_bf16_matmul()) mode = 1;  // native cannot be forced where it does not exist
  g_bf16_forced.store(mode, std::memory_order_relaxed);
}

namespace {

// bf16: the operands are rounded to bfloat16. Natively (bf16_emulated()
// false) they are bf16 copies multiplied by oneDNN's bf16 matmul (AVX-512
// BF16 dot products or AMX tiles), fp32 accumulation and output. Emulated,
// they are rounded values held in fp32 copies and multiplied by the fp32
// matmul: two bf16 values (8-bit significands) multiply exactly in fp32,
// so this too is a bf16 product with fp32 accumulation; only the order of
// the fp32 sums differs from the native kernel's (docs/language.md,
// "Precision").
// lda, ldb, ldc: the stored row length of a row-strided operand or result (0: packed; fp32 only).
void gemm(const float* a, const float* b, float* c, int64_t a_batch, int64_t b_batch, int64_t m, int64_t k, int64_t n,
          bool trans_a, bool trans_b, float beta, bool bf16 = false, int64_t lda = 0, int64_t ldb = 0,
          int64_t ldc = 0) {
  int64_t batch = std::max(a_batch, b_batch);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {  // empty sum: oneDNN rejects zero-size inputs
    const int64_t lc = ldc > 0 ? ldc : n;
    for (int64_t r = 0; r < batch * m; ++r)
      for (int64_t j = 0; j < n; ++j) c[r * lc + j] = beta == 0.0f ? 0.0f : beta * c[r * lc + j];
    return;
  }
  if (a_batch > 1 && b_batch == 1 && !trans_a) {
    // A shared b: the batch folds into the rows, one large gemm instead of many.
    m *= a_batch;
    a_batch = batch = 1;
  }
  if (bf16 && (lda > 0 || ldb > 0 || ldc > 0)) throw std::logic_error("internal: a row-strided bf16 gemm");
  if (ldc > 0 && batch > 1) throw std::logic_error("internal: a row-strided batched gemm result");
  if (bf16 && bf16_emulated()) {
    a = to_bf16_values(a, a_batch * m * k, 0);
    b = to_bf16_values(b, b_batch * k * n, 1);
    bf16 = false;
  }
  const memory::data_type in_type = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  memory::desc a_md = matrix_md(a_batch, m, k, trans_a, in_type, lda),
               b_md = matrix_md(b_batch, k, n, trans_b, in_type, ldb);
  memory::desc c_md = matrix_md(batch, m, n, false, memory::data_type::f32, ldc);
  const void* a_data = a;
  const void* b_data = b;
  if (bf16) {
    a_data = to_bf16(a, a_batch * m * k, 0);
    b_data = to_bf16(b, b_batch * k * n, 1);
  }
  const dnnl::primitive& prim =
      cached(PrimKind::matmul, {a_batch, b_batch, m, k, n, trans_a, trans_b, float_bits(beta), bf16, lda, ldb, ldc},
             [&]() -> dnnl::primitive {
               dnnl::primitive_attr attr;
               if (beta != 0.0f) {  // c = ab + beta c: oneDNN's sum post-op
                 dnnl::post_ops ops;
                 ops.append_sum(beta);
                 attr.set_post_ops(ops);
               }
               dnnl::matmul::desc desc(a_md, b_md, c_md);
               return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine()));
             });
  execute(prim, {{DNNL_ARG_SRC, dnnl::memory(a_md, engine(), const_cast<void*>(a_data))},
                 {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, engine(), const_cast<void*>(b_data))},
                 {DNNL_ARG_DST, wrap(c_md, c)}});
}

}  // namespace

void matmul(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
            int64_t k, int64_t n, bool trans_a, bool trans_b, float beta) {
  gemm(a, b, c, batch, b_batch, m, k, n, trans_a, trans_b, beta);
}

namespace {

void matmul_backward_in(const float* a, const float* b, const float* dc, float* da, float* db,
                        int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                        bool trans_b, bool bf16) {
  // With A = op(a), B = op(b): dA = dC B^T and dB = A^T dC; a transposed
  // operand receives the transpose, which swaps the factors.
  if (da) {
    if (!trans_a)
      gemm(dc, b, da, batch, b_batch, m, n, k, false, !trans_b, 0.0f, bf16);
    else
      gemm(b, dc, da, b_batch, batch, k, n, m, trans_b, true, 0.0f, bf16);
  }
  if (db) {
    bool shared = b_batch == 1 && batch > 1;
    if (shared && !trans_a) {
      // Sum over the batch = one gemm whose contraction runs over batch * m rows.
      if (!trans_b)
        gemm(a, dc, db, 1, 1, k, batch * m, n, true, false, 0.0f, bf16);
      else
        gemm(dc, a, db, 1, 1, n, batch * m, k, true, false, 0.0f, bf16);
    } else if (shared) {
      // a stored [batch, k, m]: no flat view, accumulate batch by batch.
      for (int64_t bi = 0; bi < batch; ++bi) {
        const float* ai = a + bi * m * k;
        const float* dci = dc + bi * m * n;
        float beta = bi == 0 ? 0.0f : 1.0f;
        if (!trans_b)
          gemm(ai, dci, db, 1, 1, k, m, n, false, false, beta, bf16);
        else
          gemm(dci, ai, db, 1, 1, n, m, k, true, true, beta, bf16);
      }
    } else if (!trans_b) {
      gemm(a, dc, db, batch, batch, k, m, n, !trans_a, false, 0.0f, bf16);
    } else {
      gemm(dc, a, db, batch, batch, n, m, k, true, trans_a, 0.0f, bf16);
    }
  }
}

}  // namespace

void matmul_backward(const float* a, const float* b, const float* dc, float* da, float* db,
                     int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                     bool trans_b) {
  matmul_backward_in(a, b, dc, da, db, batch, b_batch, m, k, n, trans_a, trans_b, false);
}

void linear(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
            int64_t n) {
  if (rows == 0 || n == 0) return;
  if (k == 0 || !bias) {
    gemm(x, w, y, 1, 1, rows, k, n, false, true, 0.0f);
    if (bias)
      for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * n, bias, size_t(n) * sizeof(float));
    return;
  }
  memory::desc x_md = matrix_md(1, rows, k, false), w_md = matrix_md(1, k, n, true);
  memory::desc b_md = matrix_md(1, 1, n, false), y_md = matrix_md(1, rows, n, false);
  const dnnl::primitive& prim = cached(PrimKind::linear, {rows, k, n}, [&]() -> dnnl::primitive {
    dnnl::matmul::desc desc(x_md, w_md, b_md, y_md);
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, engine()));
  });
  execute(prim, {{DNNL_ARG_SRC, wrap(x_md, x)},
                 {DNNL_ARG_WEIGHTS, wrap(w_md, w)},
                 {DNNL_ARG_BIAS, wrap(b_md, bias)},
                 {DNNL_ARG_DST, wrap(y_md, y)}});
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int64_t rows, int64_t k, int64_t n) {
  if (dx) gemm(dy, w, dx, 1, 1, rows, n, k, false, false, 0.0f);
  if (dw) gemm(dy, x, dw, 1, 1, n, rows, k, true, false, 0.0f);
  // A column sum over every row: accumulated in double, so its rounding does
  // not depend on how many rows a (batch-split) sub-op sees.
  if (dbias) {
    std::vector<double> acc(size_t(n), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) acc[size_t(c)] += double(dy[r * n + c]);
    for (int64_t c = 0; c < n; ++c) dbias[c] = float(acc[size_t(c)]);
  }
}

// Row-strided x and w (columns of larger buffers, read in place): the
// products as gemm's strided operands; the bias as a first write that the
// product adds to. fp32.
void linear_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias, float* y, int64_t rows,
                    int64_t k, int64_t n, int64_t ldy, bool accumulate) {
  if (rows == 0 || n == 0) return;
  if (accumulate && bias) throw std::logic_error("internal: an accumulating linear with a bias");
  const int64_t ly = ldy > 0 ? ldy : n;
  if (bias)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * ly, bias, size_t(n) * sizeof(float));
  // Accumulating: oneDNN's sum post-op adds what y held to the product (a
  // copy collected with += adds the rounded product to it; the two agree to
  // the gemm's rounding, tests/backend/conformance_linalg_test.cpp).
  gemm(x, w, y, 1, 1, rows, k, n, false, true, bias || accumulate ? 1.0f : 0.0f, false, ldx, ldw, ldy);
}

void linear_backward_strided(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* dy, float* dx,
                             float* dw, float* dbias, int64_t rows, int64_t k, int64_t n, int64_t lddy,
                             bool accumulate_dx) {
  if (dx) gemm(dy, w, dx, 1, 1, rows, n, k, false, false, accumulate_dx ? 1.0f : 0.0f, false, lddy, ldw);
  if (dw) gemm(dy, x, dw, 1, 1, n, rows, k, true, false, 0.0f, false, lddy, ldx);
  if (dbias) {  // as linear_backward's: a column sum in double
    const int64_t ld = lddy > 0 ? lddy : n;
    std::vector<double> acc(size_t(n), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) acc[size_t(c)] += double(dy[r * ld + c]);
    for (int64_t c = 0; c < n; ++c) dbias[c] = float(acc[size_t(c)]);
  }
}

// ---- bf16 autocast --------------------------------------------------------------

void matmul_bf16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta) {
  gemm(a, b, c, batch, b_batch, m, k, n, trans_a, trans_b, beta, true);
}

void matmul_backward_bf16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b) {
  matmul_backward_in(a, b, dc, da, db, batch, b_batch, m, k, n, trans_a, trans_b, true);
}

void linear_bf16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n) {
  if (rows == 0 || n == 0) return;
  gemm(x, w, y, 1, 1, rows, k, n, false, true, 0.0f, true);
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) y[r * n + c] += bias[c];
}

void linear_backward_bf16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n) {
  if (dx) gemm(dy, w, dx, 1, 1, rows, n, k, false, false, 0.0f, true);
  if (dw) gemm(dy, x, dw, 1, 1, n, rows, k, true, false, 0.0f, true);
  if (dbias) linear_backward(x, w, dy, nullptr, nullptr, dbias, rows, k, n);
}

// ---- fp16 autocast ----------------------------------------------------------------
// oneDNN 2.6 has no f16 matmul on a CPU without AVX512-FP16 (primitive
// creation fails here), so the operands are rounded to fp16 values held in
// fp32 copies and multiplied by the fp32 matmul: two halves multiply exactly
// in fp32, so this is an fp16 product with fp32 accumulation.

namespace {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// F16C's conversions round to nearest even with IEEE overflow and
// subnormals, the same values as round_to_fp16 (checked against it in
// tests/backend/conformance_fp16_test.cpp) at a tenth of its cost.
__attribute__((target("avx,f16c"))) void round_fp16_f16c(const float* p, float* out, int64_t n) {
  const int64_t vec = n - n % 8;
  for (int64_t i = 0; i < vec; i += 8) {
    __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(p + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(half));
  }
  for (int64_t i = vec; i < n; ++i) out[i] = round_to_fp16(p[i]);
}
bool have_f16c() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang before 15 does not know
  // "f16c" as a __builtin_cpu_supports feature (the fuzz and sanitizer
  // builds use clang 14). AVX is asked the builtin, which also checks that
  // the OS saves the YMM registers.
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    return (ecx & (1u << 29)) != 0 && __builtin_cpu_supports("avx");
  }();
  return yes;
}
#else
void round_fp16_f16c(const float*, float*, int64_t) {}
bool have_f16c() { return false; }
#endif

// Rounded copies in per-thread scratch reused across calls (3 slots: a
// backward's two operands and the output gradient).
const float* to_fp16(const float* p, int64_t n, int slot) {
  thread_local std::vector<float> scratch[3];
  std::vector<float>& buf = scratch[slot];
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  float* out = buf.data();
  if (have_f16c()) {
    round_fp16_f16c(p, out, n);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = round_to_fp16(p[i]);
  }
  return out;
}
}  // namespace

void matmul_fp16(const float* a, const float* b, float* c, int64_t batch, int64_t b_batch, int64_t m,
                 int64_t k, int64_t n, bool trans_a, bool trans_b, float beta) {
  gemm(to_fp16(a, batch * m * k, 0), to_fp16(b, b_batch * k * n, 1), c, batch, b_batch, m, k, n, trans_a, trans_b, beta);
}

void matmul_backward_fp16(const float* a, const float* b, const float* dc, float* da, float* db,
                          int64_t batch, int64_t b_batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                          bool trans_b) {
  matmul_backward_in(to_fp16(a, batch * m * k, 0), to_fp16(b, b_batch * k * n, 1), to_fp16(dc, batch * m * n, 2), da, db, batch,
                     b_batch, m, k, n, trans_a, trans_b, false);
}

void linear_fp16(const float* x, const float* w, const float* bias, float* y, int64_t rows, int64_t k,
                 int64_t n) {
  linear(to_fp16(x, rows * k, 0), to_fp16(w, n * k, 1), bias, y, rows, k, n);
}

void linear_backward_fp16(const float* x, const float* w, const float* dy, float* dx, float* dw,
                          float* dbias, int64_t rows, int64_t k, int64_t n) {
  linear_backward(to_fp16(x, rows * k, 0), to_fp16(w, n * k, 1), to_fp16(dy, rows * n, 2), dx, dw, nullptr, rows, k, n);
  if (dbias) linear_backward(x, w, dy, nullptr, nullptr, dbias, rows, k, n);  // of the fp32 gradient, as bf16
}

}  // namespace nns::backend::cpu::fast
