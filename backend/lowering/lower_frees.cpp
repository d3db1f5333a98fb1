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
  // In place, from the end: each instruction moves up by the frees before
  // it, each free lands right after its buffer's last use. (No second list
  // and no copy of rank 0's 600k instructions at AlphaFold2 dap; the
  // check's RSS did not change measurably.)
  const size_t n = R.P.instrs.size();
  std::vector<PInstr>& in = R.P.instrs;
  in.resize(n + frees.size());
  std::vector<int> moved(n + 1, 0);  // old index -> new (task spans follow)
  moved[n] = static_cast<int>(in.size());
  size_t w = in.size(), f = frees.size();  // w: one past the next slot to fill, from the end
  for (size_t i = n; i-- > 0;) {
    for (; f > 0 && frees[f - 1].first == static_cast<int>(i); --f) {
      PInstr fr;
      fr.kind = PInstr::Free;
      fr.a = frees[f - 1].second;
      fr.mb = R.P.buffers[static_cast<size_t>(fr.a)].mb;
      in[--w] = fr;
    }
    in[--w] = in[i];  // w >= i: what is below i is not yet moved
    moved[i] = static_cast<int>(w);
  }
  for (RankProgram::TaskSpan& t : R.P.tasks) {
    t.first = moved[static_cast<size_t>(t.first)];
    t.last = moved[static_cast<size_t>(t.last)];
  }
  mark_send_releases(R);
}

}  // namespace nns::backend::detail
