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

int64_t split_of(const std::vector<LayoutFactor>& fs, int dim) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.dim == dim) p *= f.n;
  return p;
}

// The layout with digit i turned into a split of dim d of weight 1 (the
// other digits of d weigh n times more), as a chunk or a reduce-scatter
// would leave it; false when d does not divide.
bool split_digit(std::vector<LayoutFactor>& fs, size_t i, int d, const sema::Shape& shape) {
  int64_t n = fs[i].n;
  if (shape[static_cast<size_t>(d)] % (split_of(fs, d) * n) != 0) return false;
  for (LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.dim == d) f.stride *= n;
  fs[i] = {LayoutFactor::D, d, n, 1};
  return true;
}

// Layouts a transfer may start or end in, near `fs`: itself, its partial
// sums reduced (V -> R), and its R and V digits turned into splits (all at
// once, each to any dim it divides), so that no byte crosses twice.
std::vector<std::vector<LayoutFactor>> variants(const std::vector<LayoutFactor>& fs0, const sema::Shape& shape) {
  std::vector<LayoutFactor> fs = normalized_factors(fs0);
  std::map<std::string, std::vector<LayoutFactor>> out;
  auto add = [&](const std::vector<LayoutFactor>& v) {
    std::vector<LayoutFactor> n = normalized_factors(v);
    out.emplace(Layout{{}, n}.to_string() + "|" + std::to_string(n.size()) + [&] {
      std::string k;
      for (const LayoutFactor& f : n) k += std::to_string(f.stride) + ",";
      return k;
    }(), n);
  };
  add(fs);
  if (has_value_parts(fs)) {
    std::vector<LayoutFactor> r = fs;
    for (LayoutFactor& f : r)
      if (f.kind == LayoutFactor::V) f.kind = LayoutFactor::R;
    add(r);
  }
  std::vector<size_t> loose;
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i].kind != LayoutFactor::D) loose.push_back(i);
  const int rank = static_cast<int>(shape.size());
  if (loose.empty() || rank == 0) return [&] {
    std::vector<std::vector<LayoutFactor>> v;
    for (auto& [k, f] : out) v.push_back(f);
    return v;
  }();
  size_t combos = 1;
  for (size_t i = 0; i < loose.size() && combos <= 4096; ++i) combos *= static_cast<size_t>(rank);
  for (size_t c = 0; c < combos && c < 4096; ++c) {
    std::vector<LayoutFactor> v = fs;
    size_t rest = c;
    bool ok = true;
    for (size_t i : loose) {
      int d = static_cast<int>(rest % static_cast<size_t>(rank));
      rest /= static_cast<size_t>(rank);
      ok = ok && split_digit(v, i, d, shape);
    }
    if (ok) add(v);
  }
  std::vector<std::vector<LayoutFactor>> v;
  for (auto& [k, f] : out) v.push_back(f);
  return v;
}

struct Candidate {
  Adapter a;
  bool found = false;
  void offer(Adapter c) {
    if (!found || c.cost < a.cost * (1 - 1e-12) || (c.cost <= a.cost * (1 + 1e-12) && c.steps.size() < a.steps.size())) {
      a = std::move(c);
      found = true;
    }
  }
};

Adapter join(const Adapter& first, const AdapterStep& mid, const Adapter& last, const AdapterCost& cm) {
  Adapter a = first;
  // A step that moves nothing (every device keeps what it needs) is left
  // out when it is the last: the consumer reads its piece in place.
  if (mid.bytes > 0 || !last.steps.empty()) a.steps.push_back(mid);
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
    split[d] = split_of(before.factors, static_cast<int>(d));
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

Adapter derive_adapter(const Layout& from_in, const Layout& to_in, const sema::Shape& shape, int64_t elem_bytes, bool exhaustive,
                       const AdapterCost& cm) {
  Layout from = normalize(from_in), to = normalize(to_in);
  check_layout(from, shape, "source");
  check_layout(to, shape, "target");
  if (from.devices == to.devices) return derive_in_group(from, to, shape, elem_bytes, exhaustive, cm);
  const std::vector<int>& A = from.devices;
  const std::vector<int>& B = to.devices;
  Candidate best;
  // The same devices in another order: name the target over the source's
  // order, then it is one group's business.
  std::vector<int> sa = A, sb = B;
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  if (sa == sb) {
    std::vector<Piece> want;
    for (int d : A) want.push_back(piece_of(to, d, shape));
    Layout fitted;
    if (fit_layout(A, want, shape, fitted)) {
      try {
        // The fitted layout names the target's pieces over the source's order.
        best.offer(derive_in_group(from, fitted, shape, elem_bytes, exhaustive, cm));
      } catch (const std::invalid_argument&) {
      }
    }
  }
  std::vector<std::vector<LayoutFactor>> src = variants(from.factors, shape), dst = variants(to.factors, shape);
  std::map<std::string, Adapter> chain_a, chain_b;
  auto in_a = [&](const std::vector<LayoutFactor>& t, Adapter& out) {
    Layout lt{A, t};
    std::string k = lt.to_string() + std::to_string(t.size());
    for (const LayoutFactor& f : t) k += "," + std::to_string(f.stride);
    auto it = chain_a.find(k);
    if (it == chain_a.end()) {
      Adapter a;
      a.cost = -1;
      try {
        a = derive_in_group(from, lt, shape, elem_bytes, exhaustive, cm);  // a part costs no more than the whole chain
      } catch (const std::invalid_argument&) {
      }
      it = chain_a.emplace(k, a).first;
    }
    out = it->second;
    return out.cost >= 0;
  };
  auto in_b = [&](const std::vector<LayoutFactor>& t, Adapter& out) {
    Layout lt{B, t};
    std::string k = lt.to_string() + std::to_string(t.size());
    for (const LayoutFactor& f : t) k += "," + std::to_string(f.stride);
    auto it = chain_b.find(k);
    if (it == chain_b.end()) {
      Adapter a;
      a.cost = -1;
      try {
        a = derive_in_group(lt, to, shape, elem_bytes, exhaustive, cm);
      } catch (const std::invalid_argument&) {
      }
      it = chain_b.emplace(k, a).first;
    }
    out = it->second;
    return out.cost >= 0;
  };
  // Positional: the same layout on both lists, each device sending its piece.
  if (A.size() == B.size())
    for (const auto& t : src) {
      Adapter ca, cb;
      if (!in_a(t, ca) || !in_b(t, cb)) continue;
      best.offer(join(ca, transfer_step(Layout{A, t}, Layout{B, t}, true, shape, elem_bytes), cb, cm));
    }
  // Piece-wise between layouts without partial sums.
  for (const auto& t : src) {
    if (has_value_parts(t)) continue;
    Adapter ca;
    if (!in_a(t, ca)) continue;
    for (const auto& t2 : dst) {
      if (has_value_parts(t2)) continue;
      Adapter cb;
      if (!in_b(t2, cb)) continue;
      if (best.found && ca.cost + cb.cost >= best.a.cost) continue;  // the step costs at least nothing
      best.offer(join(ca, transfer_step(Layout{A, t}, Layout{B, t2}, false, shape, elem_bytes), cb, cm));
    }
  }
  if (!best.found)
    throw std::invalid_argument("no chain moves " + from.to_string() + " to " + to.to_string());
  return best.a;
}

}  // namespace nns::backend
