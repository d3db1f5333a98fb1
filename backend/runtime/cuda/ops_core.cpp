// Node kinds of the matrix products (cuBLASLt, gemm.h), fill and add_n.
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"

namespace nns::backend::NNS_DEV {

namespace {

int64_t prod(const sema::Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

RowMajorProduct product(const Call& call, const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t k, int64_t n, bool trans_a,
                        bool trans_b, const float* bias = nullptr) {
  RowMajorProduct p;
  p.input = call.products;
  p.a = a;
  p.b = b;
  p.c = c;
  p.a_batch = p.b_batch = batch;
  p.m = m;
  p.k = k;
  p.n = n;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.bias = bias;
  return p;
}

void matmul_fwd(const Call& c) {
  const sema::Shape& a = c.in[0].shape;
  const sema::Shape& b = c.in[1].shape;
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back(), batch = prod(a, 0, a.size() - 2);
  c.gemm.run(product(c, c.in[0].f32(), c.in[1].f32(), c.out[0].f32(), batch, m, k, n, false, false), c.scratch);
}

void matmul_bwd(const Call& c) {
  const sema::Shape& a = c.x(0).shape;
  const sema::Shape& b = c.x(1).shape;
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back(), batch = prod(a, 0, a.size() - 2);
  // dA = dC B^T, dB = A^T dC.
  if (float* da = c.dx(0)) c.gemm.run(product(c, c.dy(0).f32(), c.x(1).f32(), da, batch, m, n, k, false, true), c.scratch);
  if (float* db = c.dx(1)) c.gemm.run(product(c, c.x(0).f32(), c.dy(0).f32(), db, batch, k, m, n, true, false), c.scratch);
}

void linear_fwd(const Call& c) {
  int64_t k = c.in[0].shape.back(), n = c.in[1].shape[0], rows = c.in[0].numel() / k;
  const float* bias = c.in.size() > 2 ? c.in[2].f32() : nullptr;
  c.gemm.run(product(c, c.in[0].f32(), c.in[1].f32(), c.out[0].f32(), 1, rows, k, n, false, true, bias), c.scratch);
}

void linear_bwd(const Call& c) {
  int64_t k = c.x(0).shape.back(), n = c.x(1).shape[0], rows = c.x(0).numel() / k;
  if (float* dx = c.dx(0)) c.gemm.run(product(c, c.dy(0).f32(), c.x(1).f32(), dx, 1, rows, n, k, false, false), c.scratch);
  if (float* dw = c.dx(1)) c.gemm.run(product(c, c.dy(0).f32(), c.x(0).f32(), dw, 1, n, rows, k, true, false), c.scratch);
  if (c.fwd_inputs() > 2)
    if (float* dbias = c.dx(2)) kernels::column_sums(c.dy(0).f32(), dbias, rows, n, c.stream);
}

void fill_fwd(const Call& c) {
  kernels::fill(c.out[0].f32(), c.out[0].numel(), static_cast<float>(c.attr_float("value", 0)), c.stream);
}

void add_n_fwd(const Call& c) {
  std::vector<const float*> xs;
  for (const TensorView& t : c.in) xs.push_back(t.f32());
  kernels::add_n(c.out[0].f32(), xs.data(), static_cast<int>(xs.size()), c.out[0].numel(), c.stream);
}

}  // namespace

void register_core_kernels(KernelTable& t) {
  t["matmul"] = matmul_fwd;
  t["matmul_backward"] = matmul_bwd;
  t["bmm"] = matmul_fwd;
  t["bmm_backward"] = matmul_bwd;
  t["linear"] = linear_fwd;
  t["linear_backward"] = linear_bwd;
  t["linear_bias"] = linear_fwd;
  t["linear_bias_backward"] = linear_bwd;
  t["fill"] = fill_fwd;
  t["add_n"] = add_n_fwd;
}

}  // namespace nns::backend::NNS_DEV
