#include "backend/lowering/rank_classes.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "backend/lowering/parallel.h"
#include "semantics/check_deadline.h"

namespace nns::backend {

namespace {

int64_t float_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<int64_t>(u);
}

// The signature is written to a sink (put(value), put(first, last)): a
// vector (memory_signature), or a running hash and a comparison against a
// stored signature (ChunkSink), so that classifying ranks holds one
// signature per class, not one per rank (at 32 ranks of AlphaFold2 each is
// some 100 MB).
struct VectorSink {
  std::vector<int64_t>& out;
  void put(int64_t v) { out.push_back(v); }
  template <class It>
  void put(It first, It last) {
    out.insert(out.end(), first, last);
  }
};

// The hash of the signature and, when `want` is set, whether it equals
// *want element by element. Values gather in a block that is hashed and
// compared (memcmp) when full: per value a store instead of a hash step and
// a compare with its branches, which made the sink most of classifying
// 1024 ranks.
class ChunkSink {
 public:
  explicit ChunkSink(const std::vector<int64_t>* want) : want_(want) {}
  void put(int64_t v) {
    buf_[n_++] = v;
    if (n_ == kBlock) flush();
  }
  template <class It>
  void put(It first, It last) {
    for (; first != last; ++first) put(*first);
  }
  size_t hash() {
    flush();
    return h_ * 1000003u ^ at_;
  }
  bool equal() {
    flush();
    return same_ && want_ && at_ == want_->size();
  }

 private:
  static constexpr size_t kBlock = 512;
  const std::vector<int64_t>* want_;
  int64_t buf_[kBlock];
  size_t n_ = 0, at_ = 0, h_ = 0;
  bool same_ = true;
  void flush() {
    for (size_t i = 0; i < n_; ++i) h_ = h_ * 1000003u ^ std::hash<int64_t>{}(buf_[i]);
    if (same_)
      same_ = want_ && at_ + n_ <= want_->size() && std::memcmp(buf_, want_->data() + at_, n_ * sizeof(int64_t)) == 0;
    at_ += n_;
    n_ = 0;
  }
};

// Appends a piece's extent (not its place: symmetric ranks hold other boxes).
template <class Sink>
void add_extent(Sink& s, const Piece& p) {
  s.put(static_cast<int64_t>(p.length.size()));
  s.put(p.length.begin(), p.length.end());
  s.put(p.value_parts);
  s.put(p.replicas);
}

// The split chain above a leaf: what divides the elaborated op's arguments
// (lower_kernels.cpp, make_kernel).
template <class Sink>
void add_split_chain(Sink& s, const sema::Plan& plan, int leaf) {
  for (int c = leaf; c >= 0 && plan.subops[static_cast<size_t>(c)].parent >= 0;
       c = plan.subops[static_cast<size_t>(c)].parent) {
    const sema::SubOp& sub = plan.subops[static_cast<size_t>(c)];
    s.put(static_cast<int64_t>(std::hash<std::string>{}(sub.split_id)));
    s.put(sub.split_num);
  }
  s.put(-1);  // the chain's end
}

template <class Sink>
void write_signature(const sema::Plan& plan, const RankProgram& p, Sink& s) {
  s.put(static_cast<int64_t>(p.buffers.size()));
  for (const BufferDecl& b : p.buffers) {
    s.put(b.role);
    s.put(b.tensor);
    s.put(b.mb);
    add_extent(s, b.piece);
  }
  s.put(static_cast<int64_t>(p.kernels.size()));
  for (const SubOpKernel& k : p.kernels) {
    s.put(k.node);
    s.put(static_cast<int64_t>(k.in_slices.size()));
    for (const Piece& sl : k.in_slices) add_extent(s, sl);
    s.put(static_cast<int64_t>(k.out_slices.size()));
    for (const Piece& sl : k.out_slices) add_extent(s, sl);
    add_split_chain(s, plan, k.subop);
    s.put(k.recompute);
    s.put(static_cast<int64_t>(k.regather_inputs.size()));
    for (char c : k.regather_inputs) s.put(c != 0);
    s.put(float_bits(k.scale));
  }
  s.put(static_cast<int64_t>(p.instrs.size()));
  for (const PInstr& in : p.instrs) {
    s.put(in.kind);
    s.put(in.a);
    s.put(in.b);
    s.put(in.kernel);
    s.put(in.index);
    s.put(in.mb);
    s.put(float_bits(in.scale));
    s.put(in.count);
    s.put(in.edge);
    s.put(in.step);
    if (in.kind == PInstr::SliceIn || in.kind == PInstr::SliceGrad) s.put(in.a >= 0 && slice_in_place(p, in) >= 0);
    if (in.kind == PInstr::CollectOut) s.put(collect_out_whole(p, in));
  }
  s.put(static_cast<int64_t>(p.params.size()));
  for (const ParamSlot& slot : p.params) {
    s.put(slot.tensor);
    s.put(slot.param);
    s.put(slot.accum);
    s.put(slot.trainable);
    s.put(slot.shard);
  }
  s.put(static_cast<int64_t>(p.buckets.size()));
  for (const std::vector<int>& bucket : p.buckets) {
    s.put(static_cast<int64_t>(bucket.size()));
    s.put(bucket.begin(), bucket.end());
  }
}

}  // namespace

std::vector<int64_t> memory_signature(const sema::Plan& plan, const RankProgram& p) {
  std::vector<int64_t> s;
  s.reserve(p.instrs.size() * 11 + p.buffers.size() * 8 + p.kernels.size() * 16);
  VectorSink sink{s};
  write_signature(plan, p, sink);
  return s;
}

namespace {

// Per instruction of `p`, the facts write_signature derives from more than
// the instruction (1 or 0): a slice-in or slice-grad read in place, a
// collect-out taking the whole buffer; 0 for the other kinds.
std::vector<char> derived_flags(const RankProgram& p) {
  std::vector<char> f(p.instrs.size(), 0);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const PInstr& in = p.instrs[i];
    if (in.kind == PInstr::SliceIn || in.kind == PInstr::SliceGrad) f[i] = in.a >= 0 && slice_in_place(p, in) >= 0;
    if (in.kind == PInstr::CollectOut) f[i] = collect_out_whole(p, in);
  }
  return f;
}

bool same_extent(const Piece& a, const Piece& b) {
  return a.length == b.length && a.value_parts == b.value_parts && a.replicas == b.replicas;
}

bool same_extents(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_extent(a[i], b[i])) return false;
  return true;
}

// add_split_chain's values of two leaves equal (split ids by their hashes,
// as the signature holds them).
bool same_split_chain(const sema::Plan& plan, int a, int b) {
  auto up = [&](int c) { return c >= 0 && plan.subops[static_cast<size_t>(c)].parent >= 0; };
  for (; up(a) || up(b);
       a = plan.subops[static_cast<size_t>(a)].parent, b = plan.subops[static_cast<size_t>(b)].parent) {
    if (a == b) return true;  // one chain from here up
    if (!up(a) || !up(b)) return false;
    const sema::SubOp &x = plan.subops[static_cast<size_t>(a)], &y = plan.subops[static_cast<size_t>(b)];
    if (x.split_num != y.split_num) return false;
    if (x.split_id != y.split_id && std::hash<std::string>{}(x.split_id) != std::hash<std::string>{}(y.split_id))
      return false;
  }
  return true;
}

// Whether b's signature equals a's (`a_flags`: derived_flags(a)), without
// writing either: field for field what write_signature writes, in its
// order. Writing both and comparing them element by element cost as much
// as reading each program twice; this reads b once, next to a.
bool same_signature(const sema::Plan& plan, const RankProgram& a, const std::vector<char>& a_flags,
                    const RankProgram& b) {
  if (a.buffers.size() != b.buffers.size() || a.kernels.size() != b.kernels.size() ||
      a.instrs.size() != b.instrs.size() || a.params.size() != b.params.size() || a.buckets != b.buckets)
    return false;
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const BufferDecl &x = a.buffers[i], &y = b.buffers[i];
    if (x.role != y.role || x.tensor != y.tensor || x.mb != y.mb || !same_extent(x.piece, y.piece)) return false;
  }
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const SubOpKernel &x = a.kernels[i], &y = b.kernels[i];
    if (x.node != y.node || x.recompute != y.recompute || x.regather_inputs != y.regather_inputs ||
        float_bits(x.scale) != float_bits(y.scale) || !same_extents(x.in_slices, y.in_slices) ||
        !same_extents(x.out_slices, y.out_slices) || !same_split_chain(plan, x.subop, y.subop))
      return false;
  }
  for (size_t i = 0; i < a.instrs.size(); ++i) {
    const PInstr &x = a.instrs[i], &y = b.instrs[i];
    if (x.kind != y.kind || x.a != y.a || x.b != y.b || x.kernel != y.kernel || x.index != y.index || x.mb != y.mb ||
        float_bits(x.scale) != float_bits(y.scale) || x.count != y.count || x.edge != y.edge || x.step != y.step)
      return false;
    if (y.kind == PInstr::SliceIn || y.kind == PInstr::SliceGrad) {
      if (a_flags[i] != static_cast<char>(y.a >= 0 && slice_in_place(b, y) >= 0)) return false;
    } else if (y.kind == PInstr::CollectOut && a_flags[i] != static_cast<char>(collect_out_whole(b, y))) {
      return false;
    }
  }
  for (size_t i = 0; i < a.params.size(); ++i) {
    const ParamSlot &x = a.params[i], &y = b.params[i];
    if (x.tensor != y.tensor || x.param != y.param || x.accum != y.accum || x.trainable != y.trainable ||
        x.shard != y.shard)
      return false;
  }
  return true;
}

}  // namespace

bool same_memory_signature(const sema::Plan& plan, const RankProgram& a, const RankProgram& b) {
  return same_signature(plan, a, derived_flags(a), b);
}

namespace {

// memory_classes over `progs` (indices into it).
std::vector<int> classes_of(const sema::Plan& plan, const std::vector<const RankProgram*>& progs, size_t hash_mask) {
  const size_t n = progs.size();
  std::vector<int> rep(n, -1);
  if (n == 0) return rep;
  // Every program compared with program 0 in one pass, on all cores
  // (symmetric plans: one class, one read of each program). Each
  // representative holds its derived flags (derived_flags), not a signature.
  std::unordered_map<int, std::vector<char>> flags;
  flags[0] = derived_flags(*progs[0]);
  std::vector<char> same(n, 0);
  same[0] = 1;
  parallel_for(n - 1, [&](size_t k) {
    sema::CheckDeadline::poll();
    same[k + 1] = same_signature(plan, *progs[0], flags.at(0), *progs[k + 1]);
  });
  if (std::all_of(same.begin(), same.end(), [](char x) { return x != 0; })) return std::vector<int>(n, 0);
  // The others are hashed (with program 0, whose bucket they may share):
  // each tentatively in the class of the first of them with the same hash,
  // and compared with it field by field (a hash only buckets them).
  std::vector<size_t> hash(n, 0);
  parallel_for(n, [&](size_t i) {
    if (same[i] && i > 0) return;
    sema::CheckDeadline::poll();
    ChunkSink h(nullptr);
    write_signature(plan, *progs[i], h);
    hash[i] = h.hash() & hash_mask;
  });
  std::unordered_map<size_t, std::vector<int>> by_hash;  // hash -> representatives, in program order
  by_hash[hash[0]].push_back(0);
  std::unordered_map<size_t, int> first_other;  // hash -> the first program unlike program 0
  std::vector<int> firsts;
  for (size_t i = 0; i < n; ++i) {
    if (same[i]) {
      rep[i] = 0;
      continue;
    }
    auto [it, fresh] = first_other.emplace(hash[i], static_cast<int>(i));
    rep[i] = it->second;
    if (fresh) {
      firsts.push_back(static_cast<int>(i));
      by_hash[hash[i]].push_back(static_cast<int>(i));
      flags[static_cast<int>(i)];
    }
  }
  parallel_for(firsts.size(), [&](size_t k) {
    sema::CheckDeadline::poll();
    flags.at(firsts[k]) = derived_flags(*progs[static_cast<size_t>(firsts[k])]);
  });
  std::vector<char> checked(n, 1);
  parallel_for(n, [&](size_t i) {
    if (same[i] || rep[i] == static_cast<int>(i)) return;
    sema::CheckDeadline::poll();
    const size_t r = static_cast<size_t>(rep[i]);
    checked[i] = same_signature(plan, *progs[r], flags.at(rep[i]), *progs[i]);
  });
  // A program unlike its tentative class (a hash collision): in program
  // order, the first representative with its hash that it equals, else a
  // class of its own.
  for (size_t i = 0; i < n; ++i) {
    if (checked[i]) continue;
    sema::CheckDeadline::poll();
    rep[i] = -1;
    std::vector<int>& reps = by_hash[hash[i]];
    for (size_t k = 0; k < reps.size() && rep[i] < 0; ++k)
      if (same_signature(plan, *progs[static_cast<size_t>(reps[k])], flags.at(reps[k]), *progs[i])) rep[i] = reps[k];
    if (rep[i] >= 0) continue;
    rep[i] = static_cast<int>(i);
    reps.push_back(static_cast<int>(i));
    flags.emplace(static_cast<int>(i), derived_flags(*progs[i]));
  }
  return rep;
}

}  // namespace

std::vector<int> memory_classes(const sema::Plan& plan, const LoweredPlan& lp, int count, size_t hash_mask) {
  const size_t n = count < 0 ? lp.programs.size() : std::min(lp.programs.size(), static_cast<size_t>(count));
  // A skeleton (RankProgram::moved_from) is in its representative's class:
  // the move keeps every extent, role, label count and instruction, all the
  // signature reads. The whole programs are classed among themselves.
  std::vector<const RankProgram*> whole;
  std::vector<int> place(n, -1);
  for (size_t i = 0; i < n; ++i)
    if (lp.programs[i].moved_from < 0) {
      place[i] = static_cast<int>(whole.size());
      whole.push_back(&lp.programs[i]);
    }
  const std::vector<int> of_whole = classes_of(plan, whole, hash_mask);
  std::vector<int> rep(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const int from = lp.programs[i].moved_from >= 0 ? lp.programs[i].moved_from : static_cast<int>(i);
    if (from < 0 || static_cast<size_t>(from) >= n || place[static_cast<size_t>(from)] < 0)
      throw std::logic_error("memory_classes: a skeleton's representative is not among the programs");
    // (The class's representative by its place in lp.programs.)
    rep[i] =
        static_cast<int>(whole[static_cast<size_t>(of_whole[static_cast<size_t>(place[static_cast<size_t>(from)])])] -
                         lp.programs.data());
  }
  return rep;
}

namespace {

// A rank as replica `r` names it: its device when it is in the replica,
// else the absolute rank, told apart by sign.
int64_t relative(int rank, int r, int devices) {
  return in_replica(rank, r, devices) ? rank - r * devices : -1 - static_cast<int64_t>(rank);
}

// A group likewise, as a whole: its devices when every member is in
// replica r, else its absolute ranks (a group across the replicas, such as
// a replica average's, is the same group in every replica's program).
std::vector<int64_t> relative_group(const std::vector<std::vector<int>>& groups, int id, int r, int devices) {
  if (id < 0) return {0};
  const std::vector<int>& m = groups[static_cast<size_t>(id)];
  const bool inside = std::all_of(m.begin(), m.end(), [&](int x) { return in_replica(x, r, devices); });
  std::vector<int64_t> out{inside ? 1 : 2};
  for (int x : m) out.push_back(inside ? x - r * devices : x);
  return out;
}

// What differs between instruction `a` of replica 0 and `b` of replica r
// ("" when nothing does, up to the renaming).
std::string instr_difference(const PInstr& a, const std::vector<std::vector<int>>& ga, const PInstr& b,
                             const std::vector<std::vector<int>>& gb, int r, int devices) {
  auto num = [](const char* what, int64_t x, int64_t y) {
    return std::string(what) + " " + std::to_string(x) + " vs " + std::to_string(y);
  };
  if (a.kind != b.kind) return std::string("kind ") + instr_name(a.kind) + " vs " + instr_name(b.kind);
  if (a.a != b.a) return num("operand a", a.a, b.a);
  if (a.b != b.b) return num("operand b", a.b, b.b);
  if (a.kernel != b.kernel || a.index != b.index)
    return num("kernel", a.kernel, b.kernel) + ", " + num("index", a.index, b.index);
  if (a.edge != b.edge || a.step != b.step || a.geom != b.geom)
    return num("edge", a.edge, b.edge) + ", " + num("step", a.step, b.step);
  if (a.mb != b.mb) return num("micro-batch", a.mb, b.mb);
  if (a.count != b.count) return num("count", a.count, b.count);
  if (float_bits(a.scale) != float_bits(b.scale))
    return "scale " + std::to_string(a.scale) + " vs " + std::to_string(b.scale);
  if (a.tag != b.tag) return num("tag", a.tag, b.tag);
  if ((a.peer < 0) != (b.peer < 0) || (a.peer >= 0 && relative(a.peer, 0, devices) != relative(b.peer, r, devices)))
    return num("peer", a.peer, b.peer);
  if (relative_group(ga, a.group, 0, devices) != relative_group(gb, b.group, r, devices)) {
    auto text = [](const std::vector<std::vector<int>>& g, int id) {
      return id < 0 ? std::string("none") : group_text(g[static_cast<size_t>(id)]);
    };
    return "group " + text(ga, a.group) + " vs " + text(gb, b.group);
  }
  return "";
}

std::string kernel_difference(const SubOpKernel& a, const SubOpKernel& b) {
  if (a.subop != b.subop || a.node != b.node)
    return "sub-op " + std::to_string(a.subop) + " vs " + std::to_string(b.subop);
  if (!same_pieces(a.in_slices, b.in_slices) || !same_pieces(a.out_slices, b.out_slices)) return "slices";
  if (float_bits(a.scale) != float_bits(b.scale) || a.recompute != b.recompute || a.elaborated != b.elaborated ||
      a.regather_inputs != b.regather_inputs)
    return "scale, recompute or regather";
  if (a.dy != b.dy || a.wgrad_nodes != b.wgrad_nodes || a.bwd.nodes != b.bwd.nodes || a.bwd.grads != b.bwd.grads ||
      a.fwd_release != b.fwd_release || a.bwd_release != b.bwd_release || a.drop_after_collect != b.drop_after_collect)
    return "local graph";
  return "";
}

std::string params_difference(const RankProgram& a, const RankProgram& b) {
  if (a.params.size() != b.params.size())
    return "parameter count " + std::to_string(a.params.size()) + " vs " + std::to_string(b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    const ParamSlot &x = a.params[i], &y = b.params[i];
    if (x.tensor != y.tensor || x.param != y.param || x.accum != y.accum || x.trainable != y.trainable ||
        x.shard != y.shard)
      return "parameter slot " + std::to_string(i);
  }
  if (a.buckets != b.buckets) return "gradient buckets";
  if (a.tags != b.tags) return "tag count " + std::to_string(a.tags) + " vs " + std::to_string(b.tags);
  return "";
}

}  // namespace

std::string replica_difference(const RankProgram& base, const std::vector<std::vector<int>>& base_groups,
                               const RankProgram& prog, const std::vector<std::vector<int>>& groups, int devices) {
  const int r = prog.replica;
  if (base.replica != 0 || prog.device != base.device || prog.rank != r * devices + base.device)
    return "rank " + std::to_string(prog.rank) + " (device " + std::to_string(prog.device) + ") is not replica " +
           std::to_string(r) + "'s rank of device " + std::to_string(base.device);
  if (base.buffers.size() != prog.buffers.size())
    return "buffer count " + std::to_string(base.buffers.size()) + " vs " + std::to_string(prog.buffers.size());
  for (size_t i = 0; i < base.buffers.size(); ++i) {
    const BufferDecl &x = base.buffers[i], &y = prog.buffers[i];
    if (x.role != y.role || x.tensor != y.tensor || x.mb != y.mb || !same_piece(x.piece, y.piece))
      return "buffer b" + std::to_string(i);
  }
  if (base.kernels.size() != prog.kernels.size())
    return "kernel count " + std::to_string(base.kernels.size()) + " vs " + std::to_string(prog.kernels.size());
  for (size_t i = 0; i < base.kernels.size(); ++i)
    if (std::string d = kernel_difference(base.kernels[i], prog.kernels[i]); !d.empty())
      return "kernel k" + std::to_string(i) + ": " + d;
  if (base.instrs.size() != prog.instrs.size())
    return "instruction count " + std::to_string(base.instrs.size()) + " vs " + std::to_string(prog.instrs.size());
  for (size_t i = 0; i < base.instrs.size(); ++i) {
    std::string d = instr_difference(base.instrs[i], base_groups, prog.instrs[i], groups, r, devices);
    if (!d.empty()) return "instruction " + std::to_string(i) + " (" + instr_name(base.instrs[i].kind) + "): " + d;
  }
  if (base.tasks.size() != prog.tasks.size()) return "task count";
  for (size_t i = 0; i < base.tasks.size(); ++i) {
    const RankProgram::TaskSpan &x = base.tasks[i], &y = prog.tasks[i];
    if (x.segment != y.segment || x.mb != y.mb || x.phase != y.phase || x.first != y.first || x.last != y.last)
      return "task " + std::to_string(i);
  }
  if (base.geoms.size() != prog.geoms.size()) return "collective geometry count";
  for (size_t i = 0; i < base.geoms.size(); ++i)
    if (!same_pieces(base.geoms[i].send, prog.geoms[i].send) || !same_pieces(base.geoms[i].recv, prog.geoms[i].recv))
      return "collective geometry " + std::to_string(i);
  return params_difference(base, prog);
}

}  // namespace nns::backend
