// Chains between different device lists: a permuted order of the same
// devices, another group of the same size, or a group of another size.
//
// A chain is: collectives on the source list (to a layout T), one send/recv
// step (T over the source list -> T' over the destination list), then
// collectives on the destination list (T' -> the target). The search tries
// T among the source layout and its variants (partial sums reduced; R and V
// digits turned into splits, so that every byte crosses once) and T' among
// the target's variants, and keeps the cheapest by AdapterCost. For the
// same devices in another order it first tries to name the target over the
// source's order (fit_layout): then one group's collectives do it, e.g. a
// single reduce-scatter for nnScaler's interleaved order.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "backend/lowering/adapters.h"
#include "backend/lowering/geometry.h"

namespace nns::backend {

namespace {

bool has_value_parts(const std::vector<LayoutFactor>& fs) {
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::V) return true;
  return false;
}


// The layout with digit i turned into a split of dim d of weight 1 (the
// other digits of d weigh n times more), as a chunk or a reduce-scatter
// would leave it; false when d does not divide.
bool split_digit(std::vector<LayoutFactor>& fs, size_t i, int d, const sema::Shape& shape) {
  int64_t n = fs[i].n;
  if (shape[static_cast<size_t>(d)] % (layout_split(fs, d) * n) != 0) return false;
  for (LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.dim == d) f.stride *= n;
  fs[i] = {LayoutFactor::D, d, n, 1};
  return true;
}

// The layout with its D digits split into prime digits, in every order of
// significance within each dim (the positions of the digits unchanged).
std::vector<std::vector<LayoutFactor>> stride_orders(const std::vector<LayoutFactor>& fs) {
  std::vector<LayoutFactor> digits;
  for (const LayoutFactor& f : fs)
    for (const LayoutFactor& d : prime_digits(f)) digits.push_back(d);
  return significance_orders(digits);
}

// Layouts a transfer may start or end in, near `fs`: each R or V digit kept,
// turned into a split of a dim it divides (so that no byte crosses twice),
// or, for V, reduced to R; fewest changes first, at most 512 of them (64
// past 16 devices, where each costs a search over many more layouts). On
// small groups also every significance order of their split digits: where
// the two lists share devices, the order decides how much of its piece a
// device already holds.
std::vector<std::vector<LayoutFactor>> variants(const std::vector<LayoutFactor>& fs0, const sema::Shape& shape, size_t devices) {
  // R and V factors as prime digits: R(4) is R(2) R(2), whose halves may go
  // different ways.
  std::vector<LayoutFactor> fs;
  for (const LayoutFactor& f : normalized_factors(fs0)) {
    if (f.kind == LayoutFactor::D) fs.push_back(f);
    else
      for (const LayoutFactor& d : prime_digits(f)) fs.push_back(d);
  }
  std::map<std::string, std::vector<LayoutFactor>> out;
  std::vector<std::vector<LayoutFactor>> order;
  auto add = [&](const std::vector<LayoutFactor>& v) {
    std::vector<LayoutFactor> n = normalized_factors(v);
    if (out.emplace(layout_key(n), n).second) order.push_back(n);
  };
  std::vector<size_t> loose;
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i].kind != LayoutFactor::D) loose.push_back(i);
  const int rank = static_cast<int>(shape.size());
  // Option per loose digit: 0 keep, 1 reduce (V only), 2 + d split on dim d.
  const int options = 2 + rank;
  size_t combos = 1;
  for (size_t i = 0; i < loose.size() && combos <= 1u << 20; ++i) combos *= static_cast<size_t>(options);
  std::vector<std::pair<int, size_t>> by_changes;
  for (size_t c = 0; c < combos && c < (1u << 20); ++c) {
    int changed = 0;
    for (size_t rest = c, i = 0; i < loose.size(); ++i, rest /= static_cast<size_t>(options)) changed += rest % static_cast<size_t>(options) != 0;
    by_changes.push_back({changed, c});
  }
  std::stable_sort(by_changes.begin(), by_changes.end(), [](auto& a, auto& b) { return a.first < b.first; });
  // Whatever the cap leaves out, these come first: every partial sum reduced,
  // and every loose digit split on one dim (the first that takes them all).
  auto uniform = [&](int opt) {
    size_t c = 0;
    for (size_t i = loose.size(); i-- > 0;) c = c * static_cast<size_t>(options) + static_cast<size_t>(fs[loose[i]].kind == LayoutFactor::V || opt >= 2 ? opt : 0);
    return c;
  };
  std::vector<std::pair<int, size_t>> first;
  for (int opt = 1; opt < options; ++opt) first.push_back({0, uniform(opt)});
  by_changes.insert(by_changes.begin(), first.begin(), first.end());
  for (auto& [changed, c] : by_changes) {
    if (order.size() >= (devices <= 16 ? 512u : 64u)) break;
    std::vector<LayoutFactor> v = fs;
    size_t rest = c;
    bool ok = true;
    for (size_t i : loose) {
      int opt = static_cast<int>(rest % static_cast<size_t>(options));
      rest /= static_cast<size_t>(options);
      if (opt == 1) {
        ok = ok && v[i].kind == LayoutFactor::V;
        v[i].kind = LayoutFactor::R;
      } else if (opt >= 2) {
        ok = ok && split_digit(v, i, opt - 2, shape);
      }
    }
    if (ok) add(v);
  }
  if (devices <= 16) {
    std::vector<std::vector<LayoutFactor>> base = order;
    for (const auto& f : base)
      for (auto& g : stride_orders(f)) add(g);
  }
  return order;
}

Adapter join(const Layout& before, const Adapter& first, const AdapterStep& mid, const Adapter& last, const sema::Shape& shape,
             const AdapterCost& cm) {
  Adapter a = first;
  // A step in which every device keeps exactly the piece it has is left out
  // when it is the last: the consumer reads that piece in place.
  bool keeps_all = mid.bytes == 0;
  for (const auto& pair : mid.groups)
    keeps_all = keeps_all && pair[0] == pair[1] &&
                piece_of(first.steps.empty() ? before : first.steps.back().after, pair[0], shape).same_box(piece_of(mid.after, pair[1], shape));
  if (!keeps_all || !last.steps.empty()) a.steps.push_back(mid);
  a.steps.insert(a.steps.end(), last.steps.begin(), last.steps.end());
  a.bytes = first.bytes + mid.bytes + last.bytes;
  a.cross = mid.cross;
  a.cost = first.cost + weighted_cost(mid, cm) + last.cost;
  return a;
}

}  // namespace

double weighted_cost(const AdapterStep& st, const AdapterCost& cost) { return st.bytes + (cost.boundary_weight - 1) * st.cross; }

AdapterStep transfer_step(const Layout& before_in, const Layout& after_in, bool positional, const sema::Shape& shape, int64_t elem_bytes) {
  Layout before = normalize(before_in), after = normalize(after_in);
  check_layout(before, shape, "source");
  check_layout(after, shape, "target");
  std::set<int> source(before.devices.begin(), before.devices.end());
  AdapterStep st;
  st.prim = AdapterStep::SendRecv;
  st.after = after;
  const double elem = static_cast<double>(elem_bytes);
  auto count = [&](int s, int d, int64_t numel) {
    st.groups.push_back({s, d});
    if (s == d) return;
    double b = static_cast<double>(numel) * elem;
    st.bytes += b;
    if (!source.count(d)) st.cross += b;
  };
  if (positional) {
    if (before.devices.size() != after.devices.size() || before.factors != after.factors)
      throw std::invalid_argument("a positional send/recv needs the same layout on lists of one size");
    for (size_t p = 0; p < before.devices.size(); ++p)
      count(before.devices[p], after.devices[p], piece_of(before, before.devices[p], shape).numel());
    return st;
  }
  if (has_value_parts(before.factors) || has_value_parts(after.factors))
    throw std::invalid_argument("a piece-wise send/recv cannot move partial sums");
  // Holders of every block of `before`, by block index.
  const size_t rank = shape.size();
  std::vector<int64_t> split(rank), len(rank);
  for (size_t d = 0; d < rank; ++d) {
    split[d] = layout_split(before.factors, static_cast<int>(d));
    len[d] = shape[d] / split[d];
  }
  std::map<std::vector<int64_t>, std::vector<int>> holders;
  std::map<int, std::vector<int64_t>> block_of;
  for (int dev : before.devices) {
    Piece p = piece_of(before, dev, shape);
    std::vector<int64_t> b(rank);
    for (size_t d = 0; d < rank; ++d) b[d] = p.start[d] / len[d];
    holders[b].push_back(dev);
    block_of[dev] = b;
  }
  for (size_t k = 0; k < after.devices.size(); ++k) {
    int dev = after.devices[k];
    Piece want = piece_of(after, dev, shape);
    std::vector<int64_t> lo(rank), hi(rank);
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = want.start[d] / len[d];
      hi[d] = (want.start[d] + want.length[d] + len[d] - 1) / len[d];
    }
    const std::vector<int64_t>* mine = block_of.count(dev) ? &block_of[dev] : nullptr;
    std::vector<int64_t> b = lo;
    while (true) {
      Piece cell;
      cell.start.resize(rank);
      cell.length = len;
      for (size_t d = 0; d < rank; ++d) cell.start[d] = b[d] * len[d];
      Piece part;
      if (intersect(cell, want, part.start, part.length)) {
        const std::vector<int>& hs = holders.at(b);
        int from = mine && *mine == b ? dev : hs[k % hs.size()];
        count(from, dev, part.numel());
      }
      size_t d = rank;
      while (d-- > 0) {
        if (++b[d] < hi[d]) break;
        b[d] = lo[d];
      }
      if (d == static_cast<size_t>(-1)) break;
    }
  }
  return st;
}

namespace {

// What a send/recv step from `before` (over A) to `after` (over B) moves,
// without building its pairs: the bytes (summed over receivers) and those
// leaving the source list; false when the step cannot be built.
bool transfer_volume(const Layout& before, const Layout& after, bool positional, const std::vector<int>& sorted_a, const sema::Shape& shape,
                     int64_t elem_bytes, double& bytes, double& cross, bool& keeps_all) {
  bytes = cross = 0;
  keeps_all = true;
  auto in_a = [&](int d) { return std::binary_search(sorted_a.begin(), sorted_a.end(), d); };
  const double full = static_cast<double>(sema::numel(shape) * elem_bytes);
  if (positional) {
    if (before.devices.size() != after.devices.size() || before.factors != after.factors) return false;
    const double piece = full / static_cast<double>(layout_pieces(before.factors));
    for (size_t p = 0; p < before.devices.size(); ++p) {
      if (before.devices[p] == after.devices[p]) continue;
      keeps_all = false;
      bytes += piece;
      if (!in_a(after.devices[p])) cross += piece;
    }
    return true;
  }
  if (has_value_parts(before.factors) || has_value_parts(after.factors)) return false;
  const double want = full / static_cast<double>(layout_pieces(after.factors));
  const double elem = static_cast<double>(elem_bytes);
  for (int d : after.devices) {
    if (!in_a(d)) {
      bytes += want;
      cross += want;
      keeps_all = false;
      continue;
    }
    Piece have = piece_of(before, d, shape), need = piece_of(after, d, shape), part;
    double local = intersect(have, need, part.start, part.length) ? static_cast<double>(part.numel()) * elem : 0;
    bytes += want - local;
    keeps_all = keeps_all && have.same_box(need);
  }
  return true;
}

// One way of making the change, costed before it is built.
struct Plan {
  enum Kind { InGroup, Relabel, Positional, PieceWise } kind = InGroup;
  std::vector<LayoutFactor> t, t2;  // Positional / PieceWise: layouts before and after the send/recv
  Layout fitted;                    // Relabel
  double cost = 0;
  int steps = 0;
};

}  // namespace

Adapter derive_adapter(const Layout& from_in, const Layout& to_in, const sema::Shape& shape, int64_t elem_bytes, bool exhaustive,
                       const AdapterCost& cm) {
  Layout from = normalize(from_in), to = normalize(to_in);
  check_layout(from, shape, "source");
  check_layout(to, shape, "target");
  const std::vector<int>& A = from.devices;
  const std::vector<int>& B = to.devices;
  Plan best;
  bool found = false;
  auto offer = [&](Plan c) {
    if (!found || c.cost < best.cost * (1 - 1e-12) || (c.cost <= best.cost * (1 + 1e-12) && c.steps < best.steps)) {
      best = std::move(c);
      found = true;
    }
  };
  if (A == B) {
    // One group. A single collective moves exactly what the devices must
    // receive (or reduces, which a send cannot), so without replicas (which
    // could serve a block from nearer) no send/recv beats it; a longer chain
    // (e.g. blocks permuted among the devices) may lose to sends of the
    // blocks that move.
    // (Past cm.give_up_above the search may report no chain: then only
    // the sends are left to try.)
    try {
      Adapter in = derive_in_group(from, to, shape, elem_bytes, exhaustive, cm);
      int moving = 0;
      for (const AdapterStep& st : in.steps) moving += st.prim != AdapterStep::Chunk && st.prim != AdapterStep::ValueSplit;
      bool replicated = false;
      for (const LayoutFactor& f : from.factors) replicated = replicated || f.kind == LayoutFactor::R;
      // Past 16 devices the searches for the sends' layouts cost more than
      // they save: the collectives' chain stands.
      if ((moving <= 1 && !replicated) || A.size() > 16) return in;
      Plan p;
      p.cost = in.cost;
      p.steps = static_cast<int>(in.steps.size());
      offer(p);
    } catch (const std::invalid_argument&) {
      if (!std::isfinite(cm.give_up_above)) throw;
    }
  }
  std::vector<int> sa = A, sb = B;
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  // The same devices in another order: name the target over the source's
  // order, then it is one group's business.
  if (sa == sb && A != B) {
    std::vector<Piece> want;
    for (int d : A) want.push_back(piece_of(to, d, shape));
    Plan p;
    p.kind = Plan::Relabel;
    if (fit_layout(A, want, shape, p.fitted) &&
        in_group_cost(from.factors, p.fitted.factors, shape, elem_bytes, A.size(), exhaustive, p.cost, p.steps, cm.give_up_above))
      offer(p);
  }
  std::vector<std::vector<LayoutFactor>> src = variants(from.factors, shape, A.size()), dst = variants(to.factors, shape, B.size());
  // Chains on each side, costed once per layout.
  struct Side {
    bool ok = false;
    double cost = 0;
    int steps = 0;
  };
  std::map<std::string, Side> side_a, side_b;
  // A part of a chain costs no more than the whole, so a side's search may
  // give up past the cheapest chain found so far (or the caller's bound):
  // that prunes most of each search. The bound only falls, so a side found
  // missing under it stays missing.
  auto bound = [&] { return found ? std::min(best.cost, cm.give_up_above) : cm.give_up_above; };
  auto cost_a = [&](const std::vector<LayoutFactor>& t) -> const Side& {
    auto [it, fresh] = side_a.emplace(layout_key(t), Side{});
    if (fresh) it->second.ok = in_group_cost(from.factors, t, shape, elem_bytes, A.size(), exhaustive, it->second.cost, it->second.steps, bound());
    return it->second;
  };
  auto cost_b = [&](const std::vector<LayoutFactor>& t) -> const Side& {
    auto [it, fresh] = side_b.emplace(layout_key(t), Side{});
    if (fresh) it->second.ok = in_group_cost(t, to.factors, shape, elem_bytes, B.size(), exhaustive, it->second.cost, it->second.steps, bound());
    return it->second;
  };
  auto consider = [&](Plan::Kind kind, const std::vector<LayoutFactor>& t, const std::vector<LayoutFactor>& t2) {
    const Side& a = cost_a(t);
    if (!a.ok) return;
    const Side& b = cost_b(t2);
    if (!b.ok) return;
    if (found && a.cost + b.cost > best.cost * (1 + 1e-12)) return;  // the send/recv costs at least nothing
    double bytes, cross;
    bool keeps_all;
    if (!transfer_volume(Layout{A, t}, Layout{B, t2}, kind == Plan::Positional, sa, shape, elem_bytes, bytes, cross, keeps_all)) return;
    Plan p;
    p.kind = kind;
    p.t = t;
    p.t2 = t2;
    p.cost = a.cost + b.cost + bytes + (cm.boundary_weight - 1) * cross;
    p.steps = a.steps + b.steps + (keeps_all && b.steps == 0 ? 0 : 1);
    offer(p);
  };
  // Positional: the same layout on both lists, each device sending its piece
  // (a layout near the source's, or near the target's).
  if (A.size() == B.size()) {
    for (const auto& t : src) consider(Plan::Positional, t, t);
    for (const auto& t : dst) consider(Plan::Positional, t, t);
  }
  // Piece-wise between layouts without partial sums.
  for (const auto& t : src)
    if (!has_value_parts(t))
      for (const auto& t2 : dst)
        if (!has_value_parts(t2)) consider(Plan::PieceWise, t, t2);
  if (!found) throw std::invalid_argument("no chain moves " + from.to_string() + " to " + to.to_string());
  if (best.cost > cm.give_up_above * (1 + 1e-9))
    throw std::invalid_argument("no chain moves " + from.to_string() + " to " + to.to_string() + " within the cost given");
  switch (best.kind) {
    case Plan::InGroup: return derive_in_group(from, to, shape, elem_bytes, exhaustive, cm);
    case Plan::Relabel: return derive_in_group(from, best.fitted, shape, elem_bytes, exhaustive);
    default: {
      Layout t{A, best.t}, t2{B, best.t2};
      Adapter ca = derive_in_group(from, t, shape, elem_bytes, exhaustive);
      Adapter cb = derive_in_group(t2, to, shape, elem_bytes, exhaustive);
      return join(from, ca, transfer_step(t, t2, best.kind == Plan::Positional, shape, elem_bytes), cb, shape, cm);
    }
  }
}

}  // namespace nns::backend
