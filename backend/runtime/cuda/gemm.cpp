#include "backend/runtime/cuda/gemm.h"

#include <algorithm>

#include "backend/runtime/backend.h"
#include "backend/runtime/cuda/call.h"
#include "backend/runtime/cuda/kernels.h"

namespace nns::backend::NNS_DEV {

ColMajorProduct plan(const RowMajorProduct& p) {
  ColMajorProduct q;
  q.batch = std::max(p.a_batch, p.b_batch);
  q.rows = p.n;
  q.cols = p.m;
  q.inner = p.k;
  // cuBLASLt's A is our b: stored column-major as [n, k] (ld n) untransposed
  // (row-major [k, n]), or [k, n] (ld k) when trans_b (row-major [n, k]).
  q.a = p.b;
  q.trans_a = p.trans_b;
  q.ld_a = p.trans_b ? p.k : p.n;
  q.stride_a = p.b_batch == 1 && q.batch > 1 ? 0 : p.k * p.n;
  // Its B is our a: [k, m] (ld k) untransposed, [m, k] (ld m) when trans_a.
  q.b = p.a;
  q.trans_b = p.trans_a;
  q.ld_b = p.trans_a ? p.m : p.k;
  q.stride_b = p.a_batch == 1 && q.batch > 1 ? 0 : p.m * p.k;
  q.d = p.c;
  q.ld_d = p.n;
  q.stride_d = p.m * p.n;
  q.beta = p.beta;
  q.bias = p.bias;  // along the rows of C^T: n of them
  return q;
}

void Gemm::run(const RowMajorProduct& p, Scratch& scratch) {
  int64_t batch = std::max(p.a_batch, p.b_batch);
  if (batch == 0 || p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    // No products to sum: C = beta C (cuBLASLt rejects an empty contraction).
    if (p.bias) throw RuntimeError("CUDA gemm: a bias with an empty contraction is not supported");
    if (p.beta == 0.f) memset_async(p.c, 0, sizeof(float) * static_cast<size_t>(batch * p.m * p.n), stream_);
    else kernels::scale(p.c, p.c, batch * p.m * p.n, p.beta, stream_);
    return;
  }
  ColMajorProduct q = plan(p);
  if (p.input != ProductInput::F32) {
    int64_t na = (p.a_batch == 1 ? 1 : batch) * p.m * p.k, nb = (p.b_batch == 1 ? 1 : batch) * p.k * p.n;
    uint16_t* a16 = scratch.get<uint16_t>(na);
    uint16_t* b16 = scratch.get<uint16_t>(nb);
    auto round = p.input == ProductInput::BF16 ? kernels::to_bf16 : kernels::to_fp16;
    round(p.a, a16, na, stream_);
    round(p.b, b16, nb, stream_);
    q.input = p.input;
    q.a = b16;  // plan() swapped the operands: cuBLASLt's A is our b
    q.b = a16;
  }
  run_column_major(q);
}

}  // namespace nns::backend::NNS_DEV
