// Internal to rank symmetry (rank_symmetry.cpp, rank_skeleton.cpp): how
// one tensor's boxes and labels move along the plan's period. Along each
// axis the atoms (the pieces between box boundaries) move by a permutation;
// labels move per number of parts.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "backend/lowering/geometry.h"
#include "backend/lowering/rank_symmetry.h"
#include "semantics/graph.h"

namespace nns::backend::detail {

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
  // Where the atoms a0..a1 (side by side) land m periods on: the first's
  // image when they land in order, side by side again; -1 otherwise.
  int lands(int a0, int a1, int64_t m) const {
    const int b0 = atoms.power(a0, m);
    for (int a = a0 + 1; a <= a1; ++a)
      if (atoms.power(a, m) != b0 + (a - a0)) return -1;
    return b0;
  }
  std::vector<std::array<int64_t, 3>> pairs;  // while building: (start, length) -> image start
};

// While building: the pairs added last to any axis, by a hash of each
// (a filter: most pairs repeat, and resolve_axis sorts what passes it).
// One table for every axis: one per axis (64 pairs) made each AxisMap
// 1.6 KB, and AlphaFold2's ~10^5 axes spent more zeroing them than finding.
class RecentPairs {
 public:
  // Whether (tensor, axis, p) is new to the table (then it is put there).
  bool fresh(int tensor, size_t axis, const std::array<int64_t, 3>& p) {
    uint64_t h = (static_cast<uint64_t>(p[0]) * 0x9e3779b97f4a7c15ull) ^
                 (static_cast<uint64_t>(p[1]) * 0xc2b2ae3d27d4eb4full) ^ static_cast<uint64_t>(p[2]);
    h ^= (static_cast<uint64_t>(tensor) << 8 | axis) * 0xff51afd7ed558ccdull;
    Slot& slot = slots_[(h ^ (h >> 29)) & (kSlots - 1)];
    if (slot.tensor == tensor && slot.axis == axis && slot.pair == p) return false;
    slot = {tensor, axis, p};
    return true;
  }

 private:
  struct Slot {
    int tensor = -1;
    size_t axis = 0;
    std::array<int64_t, 3> pair{};
  };
  static constexpr size_t kSlots = 4096;
  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
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
  // Whether labels in `parts` parts move (by any number of periods).
  bool has(int32_t parts) const { return parts <= 1 || moves.count(parts) > 0; }
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
  // Whether axis i has a move: only a box that is the whole of an axis
  // without one moves (it stays).
  bool has_axis(size_t i) const { return !axes.empty() && axes[i].bounds.size() >= 3; }
};

inline bool resolve_axis(AxisMap& ax, int64_t extent) {
  ax.bounds = {0, extent};
  std::sort(ax.pairs.begin(), ax.pairs.end());
  ax.pairs.erase(std::unique(ax.pairs.begin(), ax.pairs.end()), ax.pairs.end());
  for (const auto& [s, l, t] : ax.pairs)
    for (int64_t b : {s, s + l, t, t + l}) ax.bounds.push_back(b);
  std::sort(ax.bounds.begin(), ax.bounds.end());
  ax.bounds.erase(std::unique(ax.bounds.begin(), ax.bounds.end()), ax.bounds.end());
  auto atom_at = [&](int64_t x) {  // the atom starting at x, -1: none
    auto it = std::lower_bound(ax.bounds.begin(), ax.bounds.end(), x);
    return it == ax.bounds.end() || *it != x || it + 1 == ax.bounds.end() ? -1
                                                                          : static_cast<int>(it - ax.bounds.begin());
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

struct RankSymmetry::Maps {
  const sema::Graph* g = nullptr;
  std::vector<TensorMap> tensors;
  RecentPairs recent;  // while building

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
      const std::array<int64_t, 3> pair{a.start[i], a.length[i], b.start[i]};
      if (recent.fresh(t, i, pair)) m.axes[i].pairs.push_back(pair);
    }
    return true;
  }
  bool add_pieces(int t, const Piece& a, const Piece& b) {
    TensorMap& m = at(t);
    return add_boxes(t, a, b) && m.value.add(a.value_index, a.value_parts, b.value_index, b.value_parts) &&
           m.replica.add(a.replica_index, a.replicas, b.replica_index, b.replicas);
  }
  bool add_slices(int t, const OperandSlice& a, const OperandSlice& b) {
    return add_boxes(t, a, b) &&
           at(t).value.add(static_cast<int32_t>(a.value_index), static_cast<int32_t>(a.value_parts),
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
      if (!tm.has_axis(i)) return false;
      const AxisMap& ax = tm.axes[i];
      const int a0 = ax.atom_of(s), b0 = ax.lands(a0, ax.atom_of(s + l - 1), m);
      if (b0 < 0) return false;
      p.start[i] = s - ax.bounds[static_cast<size_t>(a0)] + ax.bounds[static_cast<size_t>(b0)];
    }
    return true;
  }
  bool move_piece(int t, Piece& p, int64_t m) const {
    if (t < 0) return true;
    const TensorMap& tm = tensors[static_cast<size_t>(t)];
    return move_box(t, p, m) && tm.value.move(p.value_index, p.value_parts, m) &&
           tm.replica.move(p.replica_index, p.replicas, m);
  }
};

}  // namespace nns::backend::detail
