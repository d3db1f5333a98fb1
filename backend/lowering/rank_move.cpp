// Rank symmetry (rank_symmetry.h): a program moved along the plan's period,
// whole (what lower_plan gives a device of an orbit) or as a skeleton (its
// communication only, what `nns check` verifies of a moved device).
//
// Both decide the same way whether a device moves: its kernels line up with
// the image leaves, every box and label of its kernels and buffers moves
// (move_piece; the skeleton decides it once per distinct interval of each
// axis for every period, pieces_move), and its peers, groups and collective
// block boxes move (move_comm, shared).
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "backend/lowering/lower_internal.h"
#include "backend/lowering/rank_symmetry.h"
#include "backend/lowering/rank_symmetry_maps.h"

namespace nns::backend::detail {

// The sub-ops of `to`'s kernels: the rank's kernels are its leaves op by op
// (in the analysis' order, each op's leaves on the device in leaf order:
// make_kernels), so kernel i of `from` moves to the leaf in the same
// position on `to`. Empty when the kernels do not line up so.
std::vector<int> RankSymmetry::moved_leaves(const RankProgram& from, int to) const {
  const size_t D = static_cast<size_t>(devices_);
  std::vector<int> out;
  out.reserve(from.kernels.size());
  for (size_t op = 0; op < A_.ops.size(); ++op) {
    const std::vector<int>* a = leaves_at_[op * D + static_cast<size_t>(from.device)];
    if (!a) continue;
    const std::vector<int>* b = leaves_at_[op * D + static_cast<size_t>(to)];
    if (!b || b->size() != a->size()) return {};
    for (size_t i = 0; i < a->size(); ++i) {
      const size_t k = out.size();
      if (k >= from.kernels.size() || from.kernels[k].subop != (*a)[i]) return {};
      out.push_back((*b)[i]);
    }
  }
  if (out.size() != from.kernels.size()) return {};
  return out;
}

bool RankSymmetry::move(const RankProgram& from, int to, GroupTable& groups, RankProgram& out) const {
  const int D = devices_;
  const int delta = ((to - from.device) % D + D) % D;
  if (from.replica != 0 || to < 0 || to >= D || delta % period_ != 0) return false;
  const int64_t m = delta / period_;
  const Maps& maps = *maps_;
  out = RankProgram();
  out.rank = out.device = to;
  out.kernels.reserve(from.kernels.size());
  const std::vector<int> leaves = from.kernels.empty() ? std::vector<int>() : moved_leaves(from, to);
  if (leaves.size() != from.kernels.size()) return false;
  for (const SubOpKernel& k : from.kernels) {
    SubOpKernel c;
    c.subop = leaves[out.kernels.size()];
    c.node = k.node;
    const sema::OpNode& node = A_.g.node(k.node);
    c.in_slices = k.in_slices;
    c.out_slices = k.out_slices;
    for (size_t j = 0; j < c.in_slices.size(); ++j)
      if (!maps.move_piece(j < node.inputs.size() ? node.inputs[j] : -1, c.in_slices[j], m)) return false;
    for (size_t j = 0; j < c.out_slices.size(); ++j)
      if (!maps.move_piece(j < node.outputs.size() ? node.outputs[j] : -1, c.out_slices[j], m)) return false;
    c.scale = k.scale;
    c.row_strided_inputs = k.row_strided_inputs;
    c.recompute = k.recompute;
    c.regather_inputs = k.regather_inputs;
    c.wgrad_nodes = k.wgrad_nodes;  // whether the backward is split (the bodies are made for the device)
    out.kernels.push_back(std::move(c));
  }
  out.buffers = from.buffers;
  for (BufferDecl& b : out.buffers)
    if (!maps.move_piece(b.tensor, b.piece, m)) return false;
  out.instrs = from.instrs;
  if (!move_comm(from, to, m, groups, out.instrs, &out.geoms)) return false;
  out.tasks = from.tasks;
  out.buckets = from.buckets;
  out.params = from.params;
  out.tags = from.tags;
  out.replayed = from.replayed;
  return true;
}

bool RankSymmetry::move_comm(const RankProgram& from, int to, int64_t m, GroupTable& groups,
                             std::vector<PInstr>& instrs, std::vector<CollectiveGeom>* geoms) const {
  const int D = devices_;
  const int delta = static_cast<int>(m * period_ % D);
  auto shift = [&](int d) { return (d + delta) % D; };
  const Maps& maps = *maps_;
  // Groups: a send/recv pair moves member by member; an adapter step's
  // collective runs over the group of that step the moved device is in (the
  // list lowering names), which must hold the moved members; any other
  // group (buckets, zero1, the loss over every rank) is listed ascending.
  // A collective's block boxes follow their members to their new places.
  struct Moved {
    bool pair = false;                            // a send/recv pair
    const std::vector<int>* step_list = nullptr;  // the adapter step's group it was made for (null: none)
    int group = -1;
    std::vector<int> place;  // member i's position in the moved group
  };
  std::unordered_map<int, std::deque<Moved>> moved_groups;  // group -> its moves (one per step list)
  std::map<std::tuple<int, int, int>, int> moved_geoms;     // (geom, group, tensor) -> id
  std::vector<int> position(static_cast<size_t>(D), -1);
  Piece scratch;  // a skeleton's block boxes moved to see that they move
  auto move_group = [&](const PInstr& in, const AdapterStep* st) -> const Moved* {
    const std::vector<int>* devs = st ? A_.devices_of_group(*st, to) : nullptr;
    if (st && !devs) return nullptr;
    const bool pair = in.kind == PInstr::Send || in.kind == PInstr::Recv;
    std::deque<Moved>& versions = moved_groups[in.group];
    for (const Moved& v : versions)
      if (v.pair == pair && (v.step_list == devs || (v.step_list && devs && *v.step_list == *devs))) return &v;
    std::vector<int> members;
    {
      std::lock_guard<std::mutex> lock(groups.mu);
      members = groups.groups[static_cast<size_t>(in.group)];
    }
    // A group across plan replicas (a replica average, the loss over every
    // rank) moves its members within their replicas.
    std::vector<int> image;
    for (int r : members) {
      if (r < 0) return nullptr;
      image.push_back(r / D * D + shift(r % D));
      if (static_cast<size_t>(r) >= position.size())
        position.resize(static_cast<size_t>(r / D + 1) * static_cast<size_t>(D), -1);
    }
    std::vector<int> list = image;
    if (devs) {
      list = *devs;
    } else if (!pair) {
      if (!std::is_sorted(members.begin(), members.end())) return nullptr;
      std::sort(list.begin(), list.end());
    }
    if (list.size() != image.size()) return nullptr;
    for (size_t i = 0; i < list.size(); ++i) position[static_cast<size_t>(list[i])] = static_cast<int>(i);
    Moved mv;
    mv.pair = pair;
    mv.step_list = devs;
    bool ok = true;
    for (int r : image) {
      ok = ok && position[static_cast<size_t>(r)] >= 0;
      mv.place.push_back(position[static_cast<size_t>(r)]);
    }
    for (int r : list) position[static_cast<size_t>(r)] = -1;
    if (!ok) return nullptr;
    mv.group = groups.intern(list);
    versions.push_back(std::move(mv));
    return &versions.back();
  };
  for (PInstr& in : instrs) {
    if (in.peer >= 0) {
      if (in.peer >= D) return false;
      in.peer = shift(in.peer);
    }
    if (in.group < 0) continue;
    const CommEdge* e = in.edge >= 0 ? &A_.cp.edges[static_cast<size_t>(in.edge)] : nullptr;
    const AdapterStep* st = nullptr;
    if (e && in.step >= 0 && in.kind != PInstr::Send && in.kind != PInstr::Recv &&
        static_cast<size_t>(in.step) < e->adapter.steps.size())
      st = &e->adapter.steps[static_cast<size_t>(in.step)];
    const Moved* mv = move_group(in, st);
    if (!mv) return false;
    const int old_group = in.group;
    in.group = mv->group;
    if (in.geom < 0) continue;
    const int tensor = in.a >= 0 ? from.buffers[static_cast<size_t>(in.a)].tensor : e ? e->tensor : -1;
    auto [g, fresh] = moved_geoms.try_emplace({in.geom, old_group, tensor}, -1);
    if (fresh && !geoms) {
      // A skeleton names no block boxes: they must only move (as below).
      const CollectiveGeom& have = from.geoms[static_cast<size_t>(in.geom)];
      const bool own = have.send.size() == 1 && have.recv.size() == 1 && mv->place.size() > 1;
      for (size_t n : {have.send.size(), have.recv.size()})
        if (!own && n != 0 && n != mv->place.size()) return false;
      for (const std::vector<Piece>* list : {&have.send, &have.recv})
        for (const Piece& p : *list) {
          scratch = p;  // (copy assignment keeps the vectors' storage)
          if (!maps.move_piece(tensor, scratch, m)) return false;
        }
    } else if (fresh) {
      const CollectiveGeom& have = from.geoms[static_cast<size_t>(in.geom)];
      CollectiveGeom geom;
      geom.send.resize(have.send.size());
      geom.recv.resize(have.recv.size());
      // Block boxes are listed per member, or not at all, or (an all-to-all
      // lowered for communication only) the device's own block alone.
      const bool own = have.send.size() == 1 && have.recv.size() == 1 && mv->place.size() > 1;
      for (size_t n : {have.send.size(), have.recv.size()})
        if (!own && n != 0 && n != mv->place.size()) return false;
      auto place = [&](size_t i) { return own ? 0 : static_cast<size_t>(mv->place[i]); };
      for (size_t i = 0; i < have.send.size(); ++i) {
        Piece p = have.send[i];
        if (!maps.move_piece(tensor, p, m)) return false;
        geom.send[place(i)] = std::move(p);
      }
      for (size_t i = 0; i < have.recv.size(); ++i) {
        Piece p = have.recv[i];
        if (!maps.move_piece(tensor, p, m)) return false;
        geom.recv[place(i)] = std::move(p);
      }
      g->second = static_cast<int>(geoms->size());
      geoms->push_back(std::move(geom));
    }
    // A skeleton names no block boxes (its readers never look them up).
    in.geom = geoms ? g->second : -1;
  }
  return true;
}

namespace {

// One axis interval of a tensor that is not the whole axis: what move_box
// decides per axis.
struct Interval {
  int tensor = 0, axis = 0;
  int64_t start = 0, length = 0;
  bool operator==(const Interval& o) const {
    return tensor == o.tensor && axis == o.axis && start == o.start && length == o.length;
  }
};
struct IntervalHash {
  size_t operator()(const Interval& v) const {
    uint64_t h = static_cast<uint64_t>(v.tensor) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(v.axis) << 56;
    h = (h ^ static_cast<uint64_t>(v.start)) * 0x100000001b3ull;
    return static_cast<size_t>((h ^ static_cast<uint64_t>(v.length)) * 0xff51afd7ed558ccdull);
  }
};

}  // namespace

RankSymmetry::SkeletonBase RankSymmetry::skeleton_base(const RankProgram& from) const {
  SkeletonBase base;
  // Whether the kernels line up with the leaves (moved_leaves): what fails
  // for one device fails for all, since find() saw every device run as
  // many leaves of each op as the device a period on (so every device of
  // the orbit does), and the rest is about `from` alone.
  base.leaves = from.kernels.empty() || moved_leaves(from, from.device).size() == from.kernels.size();
  // What the order half reads (its collectives, sends, receives, waits and
  // updates) and where each stands in the whole program.
  for (size_t i = 0; i < from.instrs.size(); ++i) {
    const PInstr& in = from.instrs[i];
    if (in.group < 0 && in.peer < 0 && in.kind != PInstr::Update) continue;
    base.comm.push_back(in);
    base.at.push_back(static_cast<uint32_t>(i));
  }
  const Maps& maps = *maps_;
  const int64_t M = devices_ / period_;
  std::vector<char>& ok = base.pieces;
  ok.assign(static_cast<size_t>(M), 1);
  // Whether move_piece fails for every m alike (a rank mismatch, an axis
  // or a label with no move), and the distinct intervals of the others.
  bool never = false;
  std::unordered_set<Interval, IntervalHash> seen;
  std::vector<Interval> intervals;
  auto add = [&](int t, const Piece& p) {
    if (t < 0 || never) return;
    const Shape& shape = A_.g.tensor(t).shape;
    const TensorMap& tm = maps.tensors[static_cast<size_t>(t)];
    if (p.start.size() != shape.size() || !tm.value.has(p.value_parts) || !tm.replica.has(p.replicas)) {
      never = true;
      return;
    }
    for (size_t i = 0; i < shape.size(); ++i) {
      if (p.start[i] == 0 && p.length[i] == shape[i]) continue;
      if (!tm.has_axis(i)) {
        never = true;
        return;
      }
      const Interval v{t, static_cast<int>(i), p.start[i], p.length[i]};
      if (seen.insert(v).second) intervals.push_back(v);
    }
  };
  for (const SubOpKernel& k : from.kernels) {
    const sema::OpNode& node = A_.g.node(k.node);
    for (size_t j = 0; j < k.in_slices.size(); ++j) add(j < node.inputs.size() ? node.inputs[j] : -1, k.in_slices[j]);
    for (size_t j = 0; j < k.out_slices.size(); ++j)
      add(j < node.outputs.size() ? node.outputs[j] : -1, k.out_slices[j]);
  }
  for (const BufferDecl& b : from.buffers) add(b.tensor, b.piece);
  if (never) {
    std::fill(ok.begin(), ok.end(), 0);
    return base;
  }
  // An interval moves by m periods when its atoms land in order, side by
  // side (move_box).
  for (const Interval& v : intervals) {
    const AxisMap& ax = maps.tensors[static_cast<size_t>(v.tensor)].axes[static_cast<size_t>(v.axis)];
    const int a0 = ax.atom_of(v.start), a1 = ax.atom_of(v.start + v.length - 1);
    for (int64_t m = 1; m < M; ++m)
      if (ok[static_cast<size_t>(m)] && ax.lands(a0, a1, m) < 0) ok[static_cast<size_t>(m)] = 0;
  }
  return base;
}

bool RankSymmetry::move_skeleton(const RankProgram& from, const SkeletonBase& base, int to, GroupTable& groups,
                                 RankProgram& out) const {
  const int D = devices_;
  const int delta = ((to - from.device) % D + D) % D;
  if (from.replica != 0 || to < 0 || to >= D || delta % period_ != 0) return false;
  const int64_t m = delta / period_;
  if (static_cast<size_t>(m) >= base.pieces.size() || !base.pieces[static_cast<size_t>(m)]) return false;
  if (!base.leaves) return false;
  out = RankProgram();
  out.rank = out.device = to;
  out.instrs = base.comm;
  out.instr_at = base.at;
  if (!move_comm(from, to, m, groups, out.instrs, nullptr)) return false;
  out.tags = from.tags;
  out.replayed = from.replayed;
  return true;
}

}  // namespace nns::backend::detail
