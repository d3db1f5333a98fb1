// The shapes of the fused attention op `sdpa(q, kt, v)` (stdlib prelude),
// read the same way by every backend's kernels (cpu/ops_attention.cpp,
// cuda/kernels_attention.cu): q [..., s, e], kt [..., e, t], v [..., t, f],
// the leading dims one batch.
#pragma once

#include <cstdint>

#include "backend/runtime/node_call.h"

namespace nns::backend {

struct AttentionDims {
  int64_t batch = 1, s = 0, e = 0, t = 0, f = 0;
  int64_t scores() const { return batch * s * t; }
};

inline AttentionDims attention_dims(const sema::Shape& q, const sema::Shape& kt, const sema::Shape& v) {
  AttentionDims d;
  d.s = q[q.size() - 2], d.e = q.back(), d.t = kt.back(), d.f = v.back();
  for (size_t i = 0; i + 2 < q.size(); ++i) d.batch *= q[i];
  return d;
}

// The scores' shape [..., s, t] (q's leading dims): what sdpa_bias's bias
// broadcasts against.
inline sema::Shape scores_shape(const sema::Shape& q, const AttentionDims& d) {
  sema::Shape s(q.begin(), q.end() - 2);
  s.push_back(d.s);
  s.push_back(d.t);
  return s;
}

// The query position of score row i is i mod this: the `period` attribute
// (grouped-query attention stacks its groups' queries), else s.
inline int64_t mask_period(const NodeCall& c, const AttentionDims& d) {
  const int64_t period = c.attr_int_or("period", 0);
  return period > 0 ? period : d.s;
}

}  // namespace nns::backend
