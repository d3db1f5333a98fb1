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
#include "backend/lowering/rank_symmetry_maps.h"

namespace nns::backend::detail {

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
        const std::vector<int>& image_devices = A.plan.subops[static_cast<size_t>(image)].devices;
        if (from.size() == 1 && image_devices.size() == 1) {  // most leaves: no lists to sort
          if (shift(from[0]) != image_devices[0]) return nullptr;
          continue;
        }
        std::vector<int> to = image_devices;
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

}  // namespace nns::backend::detail
