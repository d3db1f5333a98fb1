// host_copy_box (backend.h): the box copy on host memory.
#include <cstring>

#include "backend/runtime/backend.h"

namespace nns::backend {

void host_copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale) {
  const size_t rank = box.length.size();
  if (box.src_dims.size() != rank || box.src_at.size() != rank || box.dst_dims.size() != rank || box.dst_at.size() != rank)
    throw RuntimeError("internal: a box copy whose buffers and box differ in rank");
  if (box.src_bf16)
    throw RuntimeError("internal: a bf16 box source on host memory (only a backend with bf16_storage() stores bf16)");
  float* d = static_cast<float*>(dst);
  const float* s = static_cast<const float*>(src);
  const bool raw = !add && scale == 1.f;
  if (rank == 0) {
    if (raw) std::memcpy(d, s, sizeof(float));
    else d[0] = add ? d[0] + scale * s[0] : scale * s[0];
    return;
  }
  for (int64_t l : box.length)
    if (l == 0) return;
  // A dimension both buffers hold whole folds into the one before it: the
  // same elements in the same order, in longer contiguous runs (a piece
  // split only on its first dimension is one run per copy). The eight
  // per-dimension arrays live in one block, on the stack for up to 16
  // dimensions: a program's copies are mostly small, and eight heap
  // vectors per copy cost more than copying a few hundred floats.
  constexpr size_t kStackRank = 16;
  int64_t stack[8 * kStackRank];
  std::vector<int64_t> heap(rank > kStackRank ? 8 * rank : 0);
  int64_t* block = rank > kStackRank ? heap.data() : stack;
  int64_t *len = block, *sdim = block + rank, *ddim = block + 2 * rank, *sat = block + 3 * rank, *dat = block + 4 * rank,
          *sstride = block + 5 * rank, *dstride = block + 6 * rank, *idx = block + 7 * rank;
  size_t n = 1;
  len[0] = box.length[0], sdim[0] = box.src_dims[0], ddim[0] = box.dst_dims[0], sat[0] = box.src_at[0], dat[0] = box.dst_at[0];
  for (size_t k = 1; k < rank; ++k) {
    if (box.length[k] == box.src_dims[k] && box.length[k] == box.dst_dims[k]) {
      len[n - 1] *= box.length[k];
      sat[n - 1] *= box.src_dims[k];
      dat[n - 1] *= box.dst_dims[k];
      sdim[n - 1] *= box.src_dims[k];
      ddim[n - 1] *= box.dst_dims[k];
    } else {
      len[n] = box.length[k];
      sdim[n] = box.src_dims[k];
      ddim[n] = box.dst_dims[k];
      sat[n] = box.src_at[k];
      dat[n] = box.dst_at[k];
      ++n;
    }
  }
  for (size_t k = 0; k < n; ++k) sstride[k] = dstride[k] = 1, idx[k] = 0;
  for (size_t k = n - 1; k-- > 0;) {
    sstride[k] = sstride[k + 1] * sdim[k + 1];
    dstride[k] = dstride[k + 1] * ddim[k + 1];
  }
  const int64_t inner = len[n - 1];
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t k = 0; k < n; ++k) {
      so += (sat[k] + idx[k]) * sstride[k];
      doff += (dat[k] + idx[k]) * dstride[k];
    }
    const float* sp = s + so;
    float* tp = d + doff;
    if (add) {
      for (int64_t i = 0; i < inner; ++i) tp[i] += scale * sp[i];
    } else if (!raw) {
      for (int64_t i = 0; i < inner; ++i) tp[i] = scale * sp[i];
    } else {
      std::memcpy(tp, sp, static_cast<size_t>(inner) * sizeof(float));
    }
    // The next index over every dimension but the last.
    size_t k = n - 1;
    while (k-- > 0) {
      if (++idx[k] < len[k]) break;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) break;
  }
}

}  // namespace nns::backend
