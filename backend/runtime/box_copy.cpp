// host_copy_box (backend.h): the box copy on host memory.
#include <cstring>

#include "backend/runtime/backend.h"

namespace nns::backend {

void host_copy_box(void* dst, const void* src, const BoxCopy& box, bool add, float scale) {
  const size_t rank = box.length.size();
  if (box.src_dims.size() != rank || box.src_at.size() != rank || box.dst_dims.size() != rank || box.dst_at.size() != rank)
    throw RuntimeError("internal: a box copy whose buffers and box differ in rank");
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
  // split only on its first dimension is one run per copy).
  std::vector<int64_t> len{box.length[0]}, sdim{box.src_dims[0]}, ddim{box.dst_dims[0]}, sat{box.src_at[0]}, dat{box.dst_at[0]};
  for (size_t k = 1; k < rank; ++k) {
    if (box.length[k] == box.src_dims[k] && box.length[k] == box.dst_dims[k]) {
      len.back() *= box.length[k];
      sat.back() *= box.src_dims[k];
      dat.back() *= box.dst_dims[k];
      sdim.back() *= box.src_dims[k];
      ddim.back() *= box.dst_dims[k];
    } else {
      len.push_back(box.length[k]);
      sdim.push_back(box.src_dims[k]);
      ddim.push_back(box.dst_dims[k]);
      sat.push_back(box.src_at[k]);
      dat.push_back(box.dst_at[k]);
    }
  }
  const size_t n = len.size();
  std::vector<int64_t> sstride(n, 1), dstride(n, 1);
  for (size_t k = n - 1; k-- > 0;) {
    sstride[k] = sstride[k + 1] * sdim[k + 1];
    dstride[k] = dstride[k + 1] * ddim[k + 1];
  }
  const int64_t inner = len[n - 1];
  std::vector<int64_t> idx(n, 0);
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
