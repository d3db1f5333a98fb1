// Seeded bug `double-inplace-allreduce` (buffer_check.h): a partial sum's
// allreduces run in place on the producer's buffer instead of on copies.
// Only the buffer check sees it.
#include <map>
#include <utility>
#include <vector>

#include "backend/lowering/buffer_check.h"

namespace nns::backend {

namespace {

// The extracts that copy a value buffer for an allreduce (lower_edges.cpp:
// "reduce a copy, or it would sum twice"), by value buffer: the extract's
// index and the allreduce's. Frees may sit between the two.
std::map<int, std::vector<std::pair<size_t, size_t>>> reduced_copies(const RankProgram& p) {
  std::map<int, std::vector<std::pair<size_t, size_t>>> out;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const PInstr& x = p.instrs[i];
    if (x.kind != PInstr::Extract || x.scale != 1.f || x.a < 0 ||
        p.buffers[static_cast<size_t>(x.a)].role != BufferDecl::Value)
      continue;
    size_t j = i + 1;
    while (j < p.instrs.size() && p.instrs[j].kind == PInstr::Free) ++j;
    if (j < p.instrs.size() && p.instrs[j].kind == PInstr::AllReduce && p.instrs[j].a == x.b)
      out[x.a].push_back({i, j});
  }
  return out;
}

// In p, the value buffer v's copies dropped: its allreduces run on v itself,
// every use of a copy reads v, and v is freed after its new last use.
void drop_copies(RankProgram& p, int v, const std::vector<std::pair<size_t, size_t>>& pairs) {
  std::vector<char> copy(p.buffers.size(), 0), skip(p.instrs.size(), 0);
  for (const auto& [x, r] : pairs) {
    copy[static_cast<size_t>(p.instrs[x].b)] = 1;
    skip[x] = 1;
  }
  std::vector<PInstr> out;
  int last = -1;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    PInstr in = p.instrs[i];
    if (skip[i]) continue;
    auto gone = [&](int b) { return b >= 0 && (b == v || copy[static_cast<size_t>(b)]); };
    if (in.kind == PInstr::Free && gone(in.a)) continue;
    if (gone(in.a)) in.a = v;
    if (gone(in.b)) in.b = v;
    out.push_back(in);
    if (in.a == v || in.b == v) last = static_cast<int>(out.size()) - 1;
  }
  PInstr fr;
  fr.kind = PInstr::Free;
  fr.a = v;
  fr.mb = p.buffers[static_cast<size_t>(v)].mb;
  out.insert(out.begin() + (last + 1), fr);
  // (Task spans are not moved: verification does not read them.)
  p.instrs = std::move(out);
}

}  // namespace

bool seed_double_inplace_allreduce(const sema::Graph& g, LoweredPlan& lp, std::string& applied) {
  // The first value (by rank, then instruction) whose buffer is copied for
  // two allreduces; on every rank, each of its buffers copied twice or
  // more loses its copies.
  int tensor = -1;
  for (const RankProgram& p : lp.programs) {
    for (const auto& [v, pairs] : reduced_copies(p))
      if (pairs.size() >= 2) {
        tensor = p.buffers[static_cast<size_t>(v)].tensor;
        break;
      }
    if (tensor >= 0) break;
  }
  if (tensor < 0) return false;
  int ranks = 0;
  for (RankProgram& p : lp.programs) {
    bool touched = false;
    for (bool again = true; again;) {  // one buffer per pass (the indices move), one per micro-batch
      again = false;
      for (const auto& [v, pairs] : reduced_copies(p)) {
        if (p.buffers[static_cast<size_t>(v)].tensor != tensor || pairs.size() < 2) continue;
        drop_copies(p, v, pairs);
        again = touched = true;
        break;
      }
    }
    ranks += touched;
  }
  const sema::TensorInfo& t = g.tensor(tensor);
  applied = "the allreduces of " + (t.kind == sema::TensorKind::Activation ? "%" + std::to_string(tensor) : t.name) +
            ", a partial sum read by two ops, run twice in place on the producer's buffer (no copies) on " +
            std::to_string(ranks) + " rank(s)";
  return true;
}

}  // namespace nns::backend
