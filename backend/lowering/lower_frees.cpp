// The frees pass, last: every micro-batch buffer (and every bucket) is
// freed right after its last use; parameters, accumulated gradients and
// zero1 shards stay. Task spans move with the instructions. A sent buffer
// freed before its send is known complete is released later, at the point
// mark_send_releases names (lower_releases.cpp).
#include <algorithm>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

// The buffer plan: every micro-batch buffer (and every bucket) is freed
// right after its last use; parameters and accumulated gradients stay.
void inject_frees(RankBuild& R) {
  std::vector<int> last(R.P.buffers.size(), -1);
  for (size_t i = 0; i < R.P.instrs.size(); ++i) {
    const PInstr& in = R.P.instrs[i];
    if (in.a >= 0) last[static_cast<size_t>(in.a)] = static_cast<int>(i);
    if (in.b >= 0) last[static_cast<size_t>(in.b)] = static_cast<int>(i);
    if (in.kind == PInstr::BucketAllReduce)
      for (int b : R.P.buckets[static_cast<size_t>(in.index)]) last[static_cast<size_t>(b)] = static_cast<int>(i);
  }
  std::vector<std::pair<int, int>> frees;  // (last use, buffer), sorted
  for (size_t b = 0; b < R.P.buffers.size(); ++b) {
    BufferDecl::Role r = R.P.buffers[b].role;
    if (r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard || last[b] < 0) continue;
    frees.emplace_back(last[b], static_cast<int>(b));
  }
  std::sort(frees.begin(), frees.end());
  std::vector<PInstr> out;
  out.reserve(R.P.instrs.size() + frees.size());
  std::vector<int> moved(R.P.instrs.size() + 1, 0);  // old index -> new (task spans follow)
  size_t f = 0;
  for (size_t i = 0; i < R.P.instrs.size(); ++i) {
    moved[i] = static_cast<int>(out.size());
    out.push_back(R.P.instrs[i]);
    for (; f < frees.size() && frees[f].first == static_cast<int>(i); ++f) {
      PInstr fr;
      fr.kind = PInstr::Free;
      fr.a = frees[f].second;
      fr.mb = R.P.buffers[static_cast<size_t>(fr.a)].mb;
      out.push_back(fr);
    }
  }
  moved[R.P.instrs.size()] = static_cast<int>(out.size());
  for (RankProgram::TaskSpan& t : R.P.tasks) {
    t.first = moved[static_cast<size_t>(t.first)];
    t.last = moved[static_cast<size_t>(t.last)];
  }
  R.P.instrs = std::move(out);
  mark_send_releases(R);
}

}  // namespace nns::backend::detail
