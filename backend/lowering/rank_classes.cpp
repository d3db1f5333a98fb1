#include "backend/lowering/rank_classes.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>

#include "semantics/check_deadline.h"

namespace nns::backend {

namespace {

int64_t float_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<int64_t>(u);
}

// Appends a piece's extent (not its place: symmetric ranks hold other boxes).
void add_extent(std::vector<int64_t>& s, const Piece& p) {
  s.push_back(static_cast<int64_t>(p.length.size()));
  s.insert(s.end(), p.length.begin(), p.length.end());
  s.push_back(p.value_parts);
  s.push_back(p.replicas);
}

// The split chain above a leaf: what divides the elaborated op's arguments
// (lower_kernels.cpp, make_kernel).
void add_split_chain(std::vector<int64_t>& s, const sema::Plan& plan, int leaf) {
  for (int c = leaf; c >= 0 && plan.subops[static_cast<size_t>(c)].parent >= 0;
       c = plan.subops[static_cast<size_t>(c)].parent) {
    const sema::SubOp& sub = plan.subops[static_cast<size_t>(c)];
    s.push_back(static_cast<int64_t>(std::hash<std::string>{}(sub.split_id)));
    s.push_back(sub.split_num);
  }
  s.push_back(-1);  // the chain's end
}

}  // namespace

std::vector<int64_t> memory_signature(const sema::Plan& plan, const RankProgram& p) {
  std::vector<int64_t> s;
  s.reserve(p.instrs.size() * 11 + p.buffers.size() * 8 + p.kernels.size() * 16);
  s.push_back(static_cast<int64_t>(p.buffers.size()));
  for (const BufferDecl& b : p.buffers) {
    s.push_back(b.role);
    s.push_back(b.tensor);
    s.push_back(b.mb);
    add_extent(s, b.piece);
  }
  s.push_back(static_cast<int64_t>(p.kernels.size()));
  for (const SubOpKernel& k : p.kernels) {
    s.push_back(k.node);
    s.push_back(static_cast<int64_t>(k.in_slices.size()));
    for (const Piece& sl : k.in_slices) add_extent(s, sl);
    s.push_back(static_cast<int64_t>(k.out_slices.size()));
    for (const Piece& sl : k.out_slices) add_extent(s, sl);
    add_split_chain(s, plan, k.subop);
    s.push_back(k.recompute);
    s.push_back(float_bits(k.scale));
  }
  s.push_back(static_cast<int64_t>(p.instrs.size()));
  for (const PInstr& in : p.instrs) {
    s.push_back(in.kind);
    s.push_back(in.a);
    s.push_back(in.b);
    s.push_back(in.kernel);
    s.push_back(in.index);
    s.push_back(in.mb);
    s.push_back(float_bits(in.scale));
    s.push_back(in.count);
    s.push_back(in.edge);
    s.push_back(in.step);
    if (in.kind == PInstr::SliceIn || in.kind == PInstr::SliceGrad)
      s.push_back(in.a >= 0 && slice_in_place(p, in) >= 0);
    if (in.kind == PInstr::CollectOut) s.push_back(collect_out_whole(p, in));
  }
  s.push_back(static_cast<int64_t>(p.params.size()));
  for (const ParamSlot& slot : p.params) {
    s.push_back(slot.tensor);
    s.push_back(slot.param);
    s.push_back(slot.accum);
    s.push_back(slot.trainable);
    s.push_back(slot.shard);
  }
  s.push_back(static_cast<int64_t>(p.buckets.size()));
  for (const std::vector<int>& bucket : p.buckets) {
    s.push_back(static_cast<int64_t>(bucket.size()));
    s.insert(s.end(), bucket.begin(), bucket.end());
  }
  return s;
}

std::vector<int> memory_classes(const sema::Plan& plan, const LoweredPlan& lp, int count) {
  const size_t n = count < 0 ? lp.programs.size() : std::min(lp.programs.size(), static_cast<size_t>(count));
  std::vector<int> rep(n, -1);
  // Hash -> the representatives with that hash, and their signatures (kept:
  // a handful of classes on symmetric plans).
  std::unordered_map<size_t, std::vector<int>> by_hash;
  std::unordered_map<int, std::vector<int64_t>> signatures;
  for (size_t i = 0; i < n; ++i) {
    sema::CheckDeadline::poll();
    std::vector<int64_t> sig = memory_signature(plan, lp.programs[i]);
    size_t h = sig.size();
    for (int64_t v : sig) h = h * 1000003u ^ std::hash<int64_t>{}(v);
    std::vector<int>& reps = by_hash[h];
    for (int r : reps)
      if (signatures[r] == sig) {
        rep[i] = r;
        break;
      }
    if (rep[i] >= 0) continue;
    rep[i] = static_cast<int>(i);
    reps.push_back(static_cast<int>(i));
    signatures.emplace(static_cast<int>(i), std::move(sig));
  }
  return rep;
}

}  // namespace nns::backend
