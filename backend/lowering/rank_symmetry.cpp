// Rank symmetry (rank_symmetry.h): the period under which a plan maps onto
// itself, and programs moved along it.
//
// The move of one tensor is found from pairs: every leaf on device d and
// the leaf in the same position on device d + k (its operand slices), and
// every layout of the analysis and of the derived communication at d and at
// d + k (the pieces, with their partial-sum and copy labels). Along each
// axis, the boundaries of every box cut the axis into atoms; a pair of
// boxes that are not the whole axis says that the atoms of the first move
// to those of the second, in order, by a translation. The atoms must then
// move by a permutation, found once for the period k; the move by m periods
// is its m-th power (read off its cycles). A box that is the whole axis
// stays. Labels move the same way, per number of parts.
#include "backend/lowering/rank_symmetry.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

namespace {

// A permutation of 0..n-1, by its cycles: its m-th power at x in O(1).
struct Cycles {
  std::vector<int> cycle, pos;
  std::vector<std::vector<int>> cycles;
  // `next` with -1 for points no pair moved (they stay). False when it is
  // not a permutation.
  bool build(std::vector<int> next) {
    const size_t n = next.size();
    std::vector<char> hit(n, 0);
    for (size_t i = 0; i < n; ++i)
      if (next[i] < 0) next[i] = static_cast<int>(i);
    for (int x : next)
      if (hit[static_cast<size_t>(x)]++) return false;
    cycle.assign(n, -1);
    pos.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (cycle[i] >= 0) continue;
      const int c = static_cast<int>(cycles.size());
      cycles.emplace_back();
      for (size_t x = i; cycle[x] < 0; x = static_cast<size_t>(next[x])) {
        cycle[x] = c;
        pos[x] = static_cast<int>(cycles.back().size());
        cycles.back().push_back(static_cast<int>(x));
      }
    }
    return true;
  }
  int power(int x, int64_t m) const {
    const std::vector<int>& c = cycles[static_cast<size_t>(cycle[static_cast<size_t>(x)])];
    return c[static_cast<size_t>((pos[static_cast<size_t>(x)] + m) % static_cast<int64_t>(c.size()))];
  }
};

struct AxisMap {
  std::vector<int64_t> bounds;  // atom i is [bounds[i], bounds[i + 1])
  int64_t uniform = 0;          // every atom's length when they are all equal (0: not)
  Cycles atoms;
  // The atom holding x (0 <= x < the axis' extent).
  int atom_of(int64_t x) const {
    if (uniform > 0) return static_cast<int>(x / uniform);
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin()) - 1;
  }
  std::vector<std::array<int64_t, 3>> pairs;  // while building: (start, length) -> image start
};

struct LabelMap {
  std::map<int32_t, std::vector<int>> next;  // while building: per parts, index -> image
  std::map<int32_t, Cycles> moves;
  bool add(int32_t index, int32_t parts, int32_t to_index, int32_t to_parts) {
    if (parts != to_parts) return false;
    if (parts <= 1) return true;
    std::vector<int>& v = next[parts];
    if (v.empty()) v.assign(static_cast<size_t>(parts), -1);
    int& slot = v[static_cast<size_t>(index)];
    if (slot >= 0 && slot != to_index) return false;
    slot = to_index;
    return true;
  }
  bool resolve() {
    for (auto& [parts, v] : next)
      if (!moves[parts].build(std::move(v))) return false;
    next.clear();
    return true;
  }
  bool move(int32_t& index, int32_t parts, int64_t m) const {
    if (parts <= 1) return true;
    auto it = moves.find(parts);
    if (it == moves.end()) return false;
    index = it->second.power(index, m);
    return true;
  }
};

struct TensorMap {
  std::vector<AxisMap> axes;
  LabelMap value, replica;
};

bool resolve_axis(AxisMap& ax, int64_t extent) {
  ax.bounds = {0, extent};
  std::sort(ax.pairs.begin(), ax.pairs.end());
  ax.pairs.erase(std::unique(ax.pairs.begin(), ax.pairs.end()), ax.pairs.end());
  for (const auto& [s, l, t] : ax.pairs)
    for (int64_t b : {s, s + l, t, t + l}) ax.bounds.push_back(b);
  std::sort(ax.bounds.begin(), ax.bounds.end());
  ax.bounds.erase(std::unique(ax.bounds.begin(), ax.bounds.end()), ax.bounds.end());
  auto atom_at = [&](int64_t x) {  // the atom starting at x, -1: none
    auto it = std::lower_bound(ax.bounds.begin(), ax.bounds.end(), x);
    return it == ax.bounds.end() || *it != x || it + 1 == ax.bounds.end() ? -1 : static_cast<int>(it - ax.bounds.begin());
  };
  std::vector<int> next(ax.bounds.size() - 1, -1);
  for (const auto& [s, l, t] : ax.pairs)
    for (int a = atom_at(s); a >= 0 && ax.bounds[static_cast<size_t>(a)] < s + l; ++a) {
      const int64_t lo = ax.bounds[static_cast<size_t>(a)], len = ax.bounds[static_cast<size_t>(a) + 1] - lo;
      const int b = atom_at(lo - s + t);
      if (b < 0 || ax.bounds[static_cast<size_t>(b) + 1] - ax.bounds[static_cast<size_t>(b)] != len) return false;
      if (next[static_cast<size_t>(a)] >= 0 && next[static_cast<size_t>(a)] != b) return false;
      next[static_cast<size_t>(a)] = b;
    }
  ax.pairs.clear();
  ax.pairs.shrink_to_fit();
  ax.uniform = ax.bounds[1] - ax.bounds[0];
  for (size_t i = 1; i + 1 < ax.bounds.size() && ax.uniform > 0; ++i)
    if (ax.bounds[i + 1] - ax.bounds[i] != ax.uniform) ax.uniform = 0;
  return ax.atoms.build(std::move(next));
}

}  // namespace

struct RankSymmetry::Maps {
  const sema::Graph* g = nullptr;
  std::vector<TensorMap> tensors;

  TensorMap& at(int t) {
    TensorMap& m = tensors[static_cast<size_t>(t)];
    if (m.axes.empty()) m.axes.resize(g->tensor(t).shape.size());
    return m;
  }
  // Box a (start, length per axis) of tensor t moves to box b.
  template <class A, class B>
  bool add_boxes(int t, const A& a, const B& b) {
    const Shape& shape = g->tensor(t).shape;
    if (a.start.size() != shape.size() || b.start.size() != shape.size()) return false;
    TensorMap& m = at(t);
    for (size_t i = 0; i < shape.size(); ++i) {
      if (a.length[i] != b.length[i]) return false;
      if (a.start[i] == 0 && a.length[i] == shape[i]) {
        if (b.start[i] != 0) return false;
        continue;
      }
      // Neighbouring devices often hold the same block: one pair for them.
      std::vector<std::array<int64_t, 3>>& pairs = m.axes[i].pairs;
      const std::array<int64_t, 3> pair{a.start[i], a.length[i], b.start[i]};
      if (pairs.empty() || pairs.back() != pair) pairs.push_back(pair);
    }
    return true;
  }
  bool add_pieces(int t, const Piece& a, const Piece& b) {
    TensorMap& m = at(t);
    return add_boxes(t, a, b) && m.value.add(a.value_index, a.value_parts, b.value_index, b.value_parts) &&
           m.replica.add(a.replica_index, a.replicas, b.replica_index, b.replicas);
  }
  bool add_slices(int t, const OperandSlice& a, const OperandSlice& b) {
    return add_boxes(t, a, b) && at(t).value.add(static_cast<int32_t>(a.value_index), static_cast<int32_t>(a.value_parts),
                                                 static_cast<int32_t>(b.value_index), static_cast<int32_t>(b.value_parts));
  }
  bool resolve() {
    for (size_t t = 0; t < tensors.size(); ++t) {
      TensorMap& m = tensors[t];
      if (m.axes.empty()) continue;
      const Shape& shape = g->tensor(static_cast<int>(t)).shape;
      for (size_t i = 0; i < m.axes.size(); ++i)
        if (!resolve_axis(m.axes[i], shape[i])) return false;
      if (!m.value.resolve() || !m.replica.resolve()) return false;
    }
    return true;
  }

  // Moves piece p of tensor t by m periods; false when it cannot.
  template <class P>
  bool move_box(int t, P& p, int64_t m) const {
    const Shape& shape = g->tensor(t).shape;
    const TensorMap& tm = tensors[static_cast<size_t>(t)];
    if (p.start.size() != shape.size()) return false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t s = p.start[i], l = p.length[i];
      if (s == 0 && l == shape[i]) continue;
      if (tm.axes.empty() || tm.axes[i].bounds.size() < 3) return false;
      const AxisMap& ax = tm.axes[i];
      const int a0 = ax.atom_of(s), a1 = ax.atom_of(s + l - 1);
      const int b0 = ax.atoms.power(a0, m);
      for (int a = a0 + 1; a <= a1; ++a)
        if (ax.atoms.power(a, m) != b0 + (a - a0)) return false;
      p.start[i] = s - ax.bounds[static_cast<size_t>(a0)] + ax.bounds[static_cast<size_t>(b0)];
    }
    return true;
  }
  bool move_piece(int t, Piece& p, int64_t m) const {
    if (t < 0) return true;
    const TensorMap& tm = tensors[static_cast<size_t>(t)];
    return move_box(t, p, m) && tm.value.move(p.value_index, p.value_parts, m) && tm.replica.move(p.replica_index, p.replicas, m);
  }
};

namespace {

// A hash of (shape, layout): the key of a layout's moves.
uint64_t layout_hash(const Shape& shape, const Layout& l) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull; };
  for (int64_t x : shape) mix(x);
  for (int d : l.devices) mix(d);
  for (const LayoutFactor& f : l.factors) {
    mix(f.kind);
    mix(f.dim);
    mix(f.n);
    mix(f.stride);
  }
  return h;
}

// The maps of the shift d -> d + k (mod devices), or null when the plan is
// not invariant under it.
std::unique_ptr<RankSymmetry::Maps> maps_of(const PlanAnalysis& A, int devices, int k) {
  auto shift = [&](int d) { return (d + k) % devices; };
  // Each device runs as many leaves of each op as the device k after it,
  // and a leaf moves to one leaf (the one in its position there), run by
  // its devices moved.
  std::vector<int> image_of(A.plan.subops.size(), -1);
  std::vector<int> moved_devices;
  for (const PlanAnalysis::Op& op : A.ops)
    for (const auto& [d, leaves] : op.leaves_on) {
      auto it = op.leaves_on.find(shift(d));
      if (it == op.leaves_on.end() || it->second.size() != leaves.size()) return nullptr;
      for (size_t i = 0; i < leaves.size(); ++i) {
        int& image = image_of[static_cast<size_t>(leaves[i])];
        if (image >= 0) {
          if (image != it->second[i]) return nullptr;
          continue;
        }
        image = it->second[i];
        const std::vector<int>& from = A.plan.subops[static_cast<size_t>(leaves[i])].devices;
        std::vector<int> to = A.plan.subops[static_cast<size_t>(image)].devices;
        moved_devices.clear();
        for (int x : from) moved_devices.push_back(shift(x));
        std::sort(moved_devices.begin(), moved_devices.end());
        std::sort(to.begin(), to.end());
        if (moved_devices != to) return nullptr;
      }
    }
  auto maps = std::make_unique<RankSymmetry::Maps>();
  maps->g = &A.g;
  maps->tensors.resize(A.g.tensors().size());
  // Each leaf's slices and its image's, once per leaf.
  for (const PlanAnalysis::Op& op : A.ops) {
    const sema::OpNode& node = A.g.node(op.node);
    for (int leaf : A.plan.leaves_of(op.node)) {
      if (image_of[static_cast<size_t>(leaf)] < 0) continue;
      const sema::SubOp& a = A.plan.subops[static_cast<size_t>(leaf)];
      const sema::SubOp& b = A.plan.subops[static_cast<size_t>(image_of[static_cast<size_t>(leaf)])];
      if (a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) return nullptr;
      for (size_t j = 0; j < a.inputs.size() && j < node.inputs.size(); ++j)
        if (a.inputs[j].tensor && !maps->add_slices(node.inputs[j], a.inputs[j], b.inputs[j])) return nullptr;
      for (size_t j = 0; j < a.outputs.size() && j < node.outputs.size(); ++j)
        if (a.outputs[j].tensor && !maps->add_slices(node.outputs[j], a.outputs[j], b.outputs[j])) return nullptr;
    }
  }
  // Every layout, its pairs added once per tensor; `made` keeps the layouts
  // made here.
  std::deque<Layout> made;
  std::vector<Piece> pieces;
  // A layout's pairs are a function of the tensor's shape and the layout:
  // found once (the distinct ones, in device order) for the tensors that
  // share both (a model's repeated blocks), then added to each.
  struct Moves {
    const Shape* shape;
    const Layout* layout;
    std::vector<std::pair<Piece, Piece>> pairs;
    bool ok = true;
  };
  std::unordered_map<uint64_t, std::deque<Moves>> by_shape;  // (deque: `added` points into it)
  std::set<std::pair<int, const Moves*>> added;
  auto moves_of = [&](const Shape& shape, const Layout& l) -> const Moves& {
    std::deque<Moves>& same = by_shape[layout_hash(shape, l)];
    for (const Moves& m : same)
      if (*m.shape == shape && m.layout->devices == l.devices && m.layout->factors == l.factors) return m;
    Moves m{&shape, &l, {}, true};
    pieces.clear();
    for (int d : l.devices) pieces.push_back(piece_of(l, d, shape));
    const bool sorted = std::is_sorted(l.devices.begin(), l.devices.end());
    for (size_t p = 0; p < l.devices.size() && m.ok; ++p) {
      const int e = shift(l.devices[p]);
      auto q = sorted ? std::lower_bound(l.devices.begin(), l.devices.end(), e) : std::find(l.devices.begin(), l.devices.end(), e);
      if (q == l.devices.end() || *q != e) {
        m.ok = false;
        break;
      }
      const Piece& b = pieces[static_cast<size_t>(q - l.devices.begin())];
      if (!m.pairs.empty() && same_piece(m.pairs.back().first, pieces[p]) && same_piece(m.pairs.back().second, b))
        continue;
      m.pairs.emplace_back(pieces[p], b);
    }
    same.push_back(std::move(m));
    return same.back();
  };
  auto layout = [&](int t, const Layout& l) {
    if (t < 0 || l.devices.empty()) return true;
    const Moves& m = moves_of(A.g.tensor(t).shape, l);
    if (!m.ok) return false;
    if (!added.insert({t, &m}).second) return true;
    for (const auto& [a, b] : m.pairs)
      if (!maps->add_pieces(t, a, b)) return false;
    return true;
  };
  for (const PlanAnalysis::Op& op : A.ops) {
    const sema::OpNode& node = A.g.node(op.node);
    for (size_t j = 0; j < op.in_layout.size() && j < node.inputs.size(); ++j)
      if (!layout(node.inputs[j], op.in_layout[j])) return nullptr;
    for (size_t j = 0; j < op.grad_in_layout.size() && j < node.inputs.size(); ++j)
      if (!layout(node.inputs[j], op.grad_in_layout[j])) return nullptr;
    // An output's gradient lives in its layout with partial sums read as
    // copies (gradient_layout: the loss seed's).
    for (size_t j = 0; j < op.out_layout.size() && j < node.outputs.size(); ++j) {
      if (!layout(node.outputs[j], op.out_layout[j])) return nullptr;
      Layout grad = gradient_layout(op.out_layout[j]);
      if (grad.factors != op.out_layout[j].factors && !layout(node.outputs[j], made.emplace_back(std::move(grad)))) return nullptr;
    }
  }
  for (const auto& [t, l] : A.storage)
    if (!layout(t, l)) return nullptr;
  for (const CommEdge& e : A.cp.edges) {
    if (!layout(e.tensor, e.from) || !layout(e.tensor, e.to)) return nullptr;
    for (const AdapterStep& st : e.adapter.steps)
      if (!layout(e.tensor, st.after)) return nullptr;
  }
  if (!maps->resolve()) return nullptr;
  return maps;
}

}  // namespace

RankSymmetry::RankSymmetry(const PlanAnalysis& A, int devices, int period, std::unique_ptr<Maps> maps)
    : A_(A), devices_(devices), period_(period), maps_(std::move(maps)) {
  // Each op's leaves by device, as a table: a move reads them for every op.
  leaves_at_.assign(A.ops.size() * static_cast<size_t>(devices), nullptr);
  for (size_t op = 0; op < A.ops.size(); ++op)
    for (const auto& [d, leaves] : A.ops[op].leaves_on)
      if (d >= 0 && d < devices) leaves_at_[op * static_cast<size_t>(devices) + static_cast<size_t>(d)] = &leaves;
}
RankSymmetry::~RankSymmetry() = default;
int RankSymmetry::period() const { return period_; }

std::shared_ptr<const RankSymmetry> RankSymmetry::of(const PlanAnalysis& A, int devices) {
  std::lock_guard<std::mutex> lock(A.symmetry_mu);
  if (!A.symmetry_looked || A.symmetry_devices != devices) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<RankSymmetry> found = find(A, devices);
    if (found)
      found->find_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    A.symmetry = std::move(found);
    A.symmetry_looked = true;
    A.symmetry_devices = devices;
  }
  return A.symmetry;
}

std::unique_ptr<RankSymmetry> RankSymmetry::find(const PlanAnalysis& A, int devices) {
  for (int k = 1; k < devices; ++k) {
    if (devices % k != 0) continue;
    if (std::unique_ptr<Maps> maps = maps_of(A, devices, k))
      return std::unique_ptr<RankSymmetry>(new RankSymmetry(A, devices, k, std::move(maps)));
  }
  return nullptr;
}

namespace {

// The sub-ops of `to`'s kernels: the rank's kernels are its leaves op by op
// (in the analysis' order, each op's leaves on the device in leaf order:
// make_kernels), so kernel i of `from` moves to the leaf in the same
// position on `to`. Empty when the kernels do not line up so. `at(op, d)`:
// the leaves of op on device d (null: none).
template <class At>
std::vector<int> moved_leaves(size_t ops, const At& at, const RankProgram& from, int to) {
  std::vector<int> out;
  out.reserve(from.kernels.size());
  for (size_t op = 0; op < ops; ++op) {
    const std::vector<int>* a = at(op, from.device);
    if (!a) continue;
    const std::vector<int>* b = at(op, to);
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

}  // namespace

bool RankSymmetry::move(const RankProgram& from, int to, GroupTable& groups, RankProgram& out) const {
  const int D = devices_;
  const int delta = ((to - from.device) % D + D) % D;
  if (from.replica != 0 || to < 0 || to >= D || delta % period_ != 0) return false;
  const int64_t m = delta / period_;
  auto shift = [&](int d) { return (d + delta) % D; };
  const Maps& maps = *maps_;
  out = RankProgram();
  out.rank = out.device = to;
  out.kernels.reserve(from.kernels.size());
  auto at = [&](size_t op, int d) { return leaves_at_[op * static_cast<size_t>(D) + static_cast<size_t>(d)]; };
  const std::vector<int> leaves = from.kernels.empty() ? std::vector<int>() : moved_leaves(A_.ops.size(), at, from, to);
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
    c.wgrad_nodes = k.wgrad_nodes;  // whether the backward is split (the bodies are made for the device)
    out.kernels.push_back(std::move(c));
  }
  out.buffers = from.buffers;
  for (BufferDecl& b : out.buffers)
    if (!maps.move_piece(b.tensor, b.piece, m)) return false;
  // Groups: a send/recv pair moves member by member; an adapter step's
  // collective runs over the group of that step the moved device is in (the
  // list lowering names), which must hold the moved members; any other
  // group (buckets, zero1, the loss over every rank) is listed ascending.
  // A collective's block boxes follow their members to their new places.
  struct Moved {
    bool pair = false;                   // a send/recv pair
    const std::vector<int>* step_list = nullptr;  // the adapter step's group it was made for (null: none)
    int group = -1;
    std::vector<int> place;  // member i's position in the moved group
  };
  std::unordered_map<int, std::deque<Moved>> moved_groups;  // group -> its moves (one per step list)
  std::map<std::tuple<int, int, int>, int> moved_geoms;      // (geom, group, tensor) -> id
  std::vector<int> position(static_cast<size_t>(D), -1);
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
      if (static_cast<size_t>(r) >= position.size()) position.resize(static_cast<size_t>(r / D + 1) * static_cast<size_t>(D), -1);
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
  out.instrs = from.instrs;
  for (PInstr& in : out.instrs) {
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
    if (fresh) {
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
      g->second = static_cast<int>(out.geoms.size());
      out.geoms.push_back(std::move(geom));
    }
    in.geom = g->second;
  }
  out.tasks = from.tasks;
  out.buckets = from.buckets;
  out.params = from.params;
  out.tags = from.tags;
  out.replayed = from.replayed;
  return true;
}

}  // namespace nns::backend::detail
