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

namespace {

bool same_piece(const Piece& a, const Piece& b) {
  return a.start == b.start && a.length == b.length && a.value_index == b.value_index &&
         a.value_parts == b.value_parts && a.replica_index == b.replica_index && a.replicas == b.replicas;
}

bool same_pieces(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_piece(a[i], b[i])) return false;
  return true;
}

// A rank as replica `r` names it: its device when it is in the replica,
// else the absolute rank, told apart by sign.
int64_t relative(int rank, int r, int devices) {
  return rank >= r * devices && rank < (r + 1) * devices ? rank - r * devices : -1 - static_cast<int64_t>(rank);
}

// A group likewise, as a whole: its devices when every member is in
// replica r, else its absolute ranks (a group across the replicas, such as
// a replica average's, is the same group in every replica's program).
std::vector<int64_t> relative_group(const std::vector<std::vector<int>>& groups, int id, int r, int devices) {
  if (id < 0) return {0};
  const std::vector<int>& m = groups[static_cast<size_t>(id)];
  const bool inside = std::all_of(m.begin(), m.end(), [&](int x) { return x >= r * devices && x < (r + 1) * devices; });
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
  if (float_bits(a.scale) != float_bits(b.scale) || a.recompute != b.recompute || a.elaborated != b.elaborated)
    return "scale or recompute";
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
