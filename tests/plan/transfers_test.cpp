// Chains between device lists (permuted orders, other groups, other sizes):
// every pair of layouts over 2, 4 and 8 devices is derived, run on real
// numbers by a plain reference executor written here (independent of the
// runtime), and its cost compared with an exhaustive search over the
// primitive set: collectives on the source list, one send/recv, collectives
// on the destination list.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "backend/lowering/adapters.h"
#include "backend/lowering/geometry.h"

using namespace nns::backend;
using F = LayoutFactor;

namespace {

const std::vector<int64_t> kShape{8, 8};

std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

// ---- the reference executor ------------------------------------------------------------------

struct Held {
  Piece p;
  std::vector<double> data;  // row-major over p's box
};
using State = std::map<int, Held>;

int64_t offset_in(const Piece& p, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off = off * p.length[d] + (idx[d] - p.start[d]);
  return off;
}

// Calls f(index) for every index of the box.
template <class Fn>
void each_index(const std::vector<int64_t>& start, const std::vector<int64_t>& length, Fn f) {
  std::vector<int64_t> idx = start;
  int64_t n = 1;
  for (int64_t l : length) n *= l;
  for (int64_t k = 0; k < n; ++k) {
    f(idx);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < start[d] + length[d]) break;
      idx[d] = start[d];
    }
  }
}

// The box `want` (inside h's box) of what h holds.
Held cut(const Held& h, Piece want) {
  REQUIRE(contains(h.p, want.start, want.length));
  Held out{want, std::vector<double>(static_cast<size_t>(want.numel()))};
  each_index(want.start, want.length, [&](const std::vector<int64_t>& i) {
    out.data[static_cast<size_t>(offset_in(want, i))] = h.data[static_cast<size_t>(offset_in(h.p, i))];
  });
  return out;
}

// Writes the part of `from` inside into's box; returns the elements written.
int64_t paste(Held& into, const Held& from) {
  Piece part;
  if (!intersect(into.p, from.p, part.start, part.length)) return 0;
  each_index(part.start, part.length, [&](const std::vector<int64_t>& i) {
    into.data[static_cast<size_t>(offset_in(into.p, i))] = from.data[static_cast<size_t>(offset_in(from.p, i))];
  });
  return part.numel();
}

struct Reference {
  std::vector<double> full;                 // the tensor
  std::vector<std::vector<double>> parts;   // partial sums adding up to it, per label

  explicit Reference(int64_t value_parts) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    size_t n = static_cast<size_t>(kShape[0] * kShape[1]);
    full.resize(n);
    for (double& x : full) x = u(rng);
    parts.assign(static_cast<size_t>(value_parts), std::vector<double>(n, 0));
    for (size_t i = 0; i < n; ++i) {
      double rest = full[i];
      for (size_t v = 0; v + 1 < parts.size(); ++v) rest -= parts[v][i] = u(rng);
      parts.back()[i] = rest;
    }
  }

  Held piece(const Layout& l, int device) const {
    Piece p = piece_of(l, device, kShape);
    const std::vector<double>& src = p.value_parts > 1 ? parts[static_cast<size_t>(p.value_index)] : full;
    Held whole{full_piece(kShape), src};
    Held h = cut(whole, p);
    h.p = p;
    return h;
  }
};

// Runs the adapter's steps on real numbers; returns false (with INFO) on a
// step that cannot run as written.
State execute(const Adapter& a, const Layout& from, const Reference& ref) {
  State st;
  for (int d : from.devices) st[d] = ref.piece(from, d);
  Layout cur = from;
  for (const AdapterStep& s : a.steps) {
    State next;
    auto want = [&](int d) { return piece_of(s.after, d, kShape); };
    switch (s.prim) {
      case AdapterStep::AllReduce:
      case AdapterStep::ReduceScatter:
        for (const auto& grp : s.groups) {
          Held sum = st.at(grp[0]);
          for (size_t i = 1; i < grp.size(); ++i) {
            const Held& m = st.at(grp[i]);
            REQUIRE(m.p.same_box(sum.p));
            for (size_t k = 0; k < sum.data.size(); ++k) sum.data[k] += m.data[k];
          }
          for (int d : grp) {
            Held h = cut(sum, want(d));
            next[d] = h;
          }
        }
        break;
      case AdapterStep::AllGather:
      case AdapterStep::AllToAll:
        for (const auto& grp : s.groups)
          for (int d : grp) {
            Held h{want(d), std::vector<double>(static_cast<size_t>(want(d).numel()), 0)};
            int64_t written = 0;
            for (int m : grp) written += paste(h, st.at(m));
            if (s.prim == AdapterStep::AllGather) REQUIRE(written == h.p.numel());
            next[d] = h;
          }
        break;
      case AdapterStep::Chunk:
      case AdapterStep::ValueSplit:
        for (int d : s.after.devices) {
          Held h = cut(st.at(d), want(d));
          double split = static_cast<double>(want(d).value_parts / piece_of(cur, d, kShape).value_parts);
          for (double& x : h.data) x /= split;
          next[d] = h;
        }
        break;
      case AdapterStep::SendRecv:
        for (int d : s.after.devices) {
          Held h{want(d), std::vector<double>(static_cast<size_t>(want(d).numel()), 0)};
          std::vector<TransferPart> parts = transfer_parts(s, cur, d, kShape);
          REQUIRE(tiles(h.p, parts));
          for (const TransferPart& p : parts) {
            Held part = cut(st.at(p.from), p.box);
            paste(h, part);
          }
          next[d] = h;
        }
        break;
    }
    // Devices in no group of a collective keep their piece.
    if (s.prim != AdapterStep::SendRecv && s.prim != AdapterStep::Chunk && s.prim != AdapterStep::ValueSplit)
      for (auto& [d, h] : st)
        if (!next.count(d)) next[d] = h;
    st = std::move(next);
    cur = s.after;
  }
  return st;
}

// Whether the devices of `to` end up holding exactly the tensor as `to` lays
// it out (the partial sums of each block adding up to it).
bool holds_target(const State& st, const Layout& to, const Reference& ref, std::string& why) {
  std::map<std::vector<int64_t>, std::map<int64_t, const Held*>> by_box;
  for (int d : to.devices) {
    auto it = st.find(d);
    Piece want = piece_of(to, d, kShape);
    if (it == st.end() || !it->second.p.same_box(want)) {
      why = "device " + std::to_string(d) + " does not hold " + region_text(want.start, want.length);
      return false;
    }
    auto& labels = by_box[want.start];
    auto [pos, fresh] = labels.emplace(want.value_index, &it->second);
    if (!fresh && pos->second->data != it->second.data) {
      why = "replicas of a piece differ on device " + std::to_string(d);
      return false;
    }
  }
  for (auto& [start, labels] : by_box) {
    const Piece& box = labels.begin()->second->p;
    Held whole{full_piece(kShape), ref.full};
    Held expect = cut(whole, box);
    std::vector<double> sum(expect.data.size(), 0);
    for (auto& [label, h] : labels)
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += h->data[k];
    for (size_t k = 0; k < sum.size(); ++k)
      if (std::fabs(sum[k] - expect.data[k]) > 1e-9) {
        why = "block " + region_text(box.start, box.length) + " sums to the wrong values";
        return false;
      }
  }
  return true;
}

// ---- the exhaustive cost ----------------------------------------------------------------------

struct Group {
  std::vector<int> devices;
  std::vector<std::vector<F>> layouts;
  std::map<std::string, size_t> index;
  std::vector<std::vector<double>> dist;  // dist[i][j]: cheapest chain from layout i to layout j

  explicit Group(std::vector<int> devs) : devices(std::move(devs)) {
    layouts = all_layouts(static_cast<int64_t>(devices.size()), kShape);
    for (size_t i = 0; i < layouts.size(); ++i) index[layout_key(layouts[i])] = i;
    const double inf = std::numeric_limits<double>::infinity();
    dist.assign(layouts.size(), std::vector<double>(layouts.size(), inf));
    for (size_t i = 0; i < layouts.size(); ++i)
      for (auto& [fs, c] : chain_costs_from(layouts[i], kShape, 4, static_cast<int64_t>(devices.size())))
        if (auto it = index.find(layout_key(fs)); it != index.end()) dist[i][it->second] = c;
  }
  Layout at(size_t i) const { return Layout{devices, layouts[i]}; }
};

bool has_v(const std::vector<F>& fs) {
  for (const F& f : fs)
    if (f.kind == F::V) return true;
  return false;
}

// Whether layouts a and b name the same pieces on the same devices (the
// labels of partial sums may be numbered differently).
bool same_pieces(const Layout& a, const Layout& b) {
  std::map<int, Piece> pa, pb;
  for (int d : a.devices) pa[d] = piece_of(a, d, kShape);
  for (int d : b.devices) pb[d] = piece_of(b, d, kShape);
  if (pa.size() != pb.size()) return false;
  for (auto& [d, p] : pa) {
    auto it = pb.find(d);
    if (it == pb.end() || !p.same_box(it->second) || p.value_parts != it->second.value_parts) return false;
  }
  for (auto& [d, p] : pa)
    for (auto& [e, q] : pa) {
      bool same_a = p.same_box(q) && p.value_index == q.value_index;
      bool same_b = pb[d].same_box(pb[e]) && pb[d].value_index == pb[e].value_index;
      if (same_a != same_b) return false;
    }
  return true;
}

struct Exhaustive {
  const Group& A;
  const Group& B;
  std::vector<std::vector<double>> y;  // y[t][to]: cheapest send/recv from t plus chain to `to`

  Exhaustive(const Group& a, const Group& b) : A(a), B(b) {
    const double inf = std::numeric_limits<double>::infinity();
    const AdapterCost cm;
    std::vector<std::vector<double>> x(A.layouts.size(), std::vector<double>(B.layouts.size(), inf));
    for (size_t t = 0; t < A.layouts.size(); ++t)
      for (size_t u = 0; u < B.layouts.size(); ++u) {
        if (A.devices.size() == B.devices.size() && layout_key(A.layouts[t]) == layout_key(B.layouts[u]))
          x[t][u] = std::min(x[t][u], weighted_cost(transfer_step(A.at(t), B.at(u), true, kShape, 4), cm));
        if (!has_v(A.layouts[t]) && !has_v(B.layouts[u])) x[t][u] = std::min(x[t][u], weighted_cost(transfer_step(A.at(t), B.at(u), false, kShape, 4), cm));
      }
    y.assign(A.layouts.size(), std::vector<double>(B.layouts.size(), inf));
    for (size_t t = 0; t < A.layouts.size(); ++t)
      for (size_t u = 0; u < B.layouts.size(); ++u)
        if (x[t][u] < inf)
          for (size_t to = 0; to < B.layouts.size(); ++to) y[t][to] = std::min(y[t][to], x[t][u] + B.dist[u][to]);
  }

  double cost(size_t from, size_t to, bool explain = false) const {
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> sa = A.devices, sb = B.devices;
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    if (sa == sb)
      for (size_t l = 0; l < A.layouts.size(); ++l)
        if (A.dist[from][l] < best && same_pieces(A.at(l), B.at(to))) best = A.dist[from][l];
    for (size_t t = 0; t < A.layouts.size(); ++t) best = std::min(best, A.dist[from][t] + y[t][to]);
    if (explain) {
      for (size_t l = 0; l < A.layouts.size(); ++l)
        if (sa == sb && A.dist[from][l] <= best && same_pieces(A.at(l), B.at(to))) fprintf(stderr, "  relabel via %s: %g\n", A.at(l).to_string().c_str(), A.dist[from][l]);
      for (size_t t = 0; t < A.layouts.size(); ++t)
        if (A.dist[from][t] + y[t][to] <= best) fprintf(stderr, "  via T=%s: %g + %g\n", A.at(t).to_string().c_str(), A.dist[from][t], y[t][to]);
    }
    return best;
  }
};

// Every pair of layouts from list a to list b: derived, run, and as cheap as
// the exhaustive search. Returns the number of pairs checked.
int check_all_pairs(const std::vector<int>& a, const std::vector<int>& b) {
  Group A(a), B(b);
  Exhaustive ex(A, B);
  int checked = 0;
  for (size_t i = 0; i < A.layouts.size(); ++i)
    for (size_t j = 0; j < B.layouts.size(); ++j) {
      Layout from = A.at(i), to = B.at(j);
      INFO(from.to_string() << "  =>  " << to.to_string());
      Adapter ad;
      REQUIRE_NOTHROW(ad = derive_adapter(from, to, kShape, 4));
      INFO(ad.to_string());
      Reference ref(piece_of(from, from.devices[0], kShape).value_parts);
      State st = execute(ad, from, ref);
      std::string why;
      CHECK(holds_target(st, to, ref, why));
      INFO(why);
      double best = ex.cost(i, j);
      CHECK(ad.cost == Approx(best).epsilon(1e-9));
      if (getenv("NNS_EXPLAIN") && ad.cost > best * (1 + 1e-9)) ex.cost(i, j, true);
      ++checked;
    }
  return checked;
}

}  // namespace

TEST_CASE("nnScaler's interleaved order: partial sums V(2) D(4) to an 8-way split is one reduce-scatter", "[transfers]") {
  Layout from{range(0, 8), {{F::V, -1, 2, 0}, {F::D, 0, 4, 0}}};
  Layout to{{0, 4, 1, 5, 2, 6, 3, 7}, {{F::D, 0, 8, 0}}};
  Adapter a = derive_adapter(from, to, kShape, 4);
  REQUIRE(a.steps.size() == 1);
  CHECK(a.steps[0].prim == AdapterStep::ReduceScatter);
  CHECK(a.steps[0].groups == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // Against the natural order, which needs more than the one collective.
  Adapter natural = derive_adapter(from, Layout{range(0, 8), {{F::D, 0, 8, 0}}}, kShape, 4);
  CHECK(natural.cost > a.cost);
  Reference ref(2);
  std::string why;
  CHECK(holds_target(execute(a, from, ref), to, ref, why));
}

TEST_CASE("pieces replicated outside and inside a split are a layout", "[transfers]") {
  // Device p = r1 * 4 + d * 2 + r2: R(2) D0(2) R(2).
  std::vector<int> order = range(0, 8);
  std::vector<Piece> pieces;
  for (int p = 0; p < 8; ++p) {
    Piece x;
    x.start = {(p / 2 % 2) * 4, 0};
    x.length = {4, 8};
    pieces.push_back(x);
  }
  Layout l;
  REQUIRE(fit_layout(order, pieces, kShape, l));
  CHECK(l.to_string() == "R(2) D0(2) R(2) over [0,1,2,3,4,5,6,7]");
  Adapter a = derive_adapter(l, Layout{range(0, 8), {{F::R, -1, 8, 0}}}, kShape, 4);
  CHECK(a.steps.size() == 1);
  CHECK(a.steps[0].prim == AdapterStep::AllGather);
}

TEST_CASE("disjoint groups: reduce on the source, send each byte once, gather on the destination", "[transfers]") {
  // A 64 MiB tensor V(4) D(2) on devices 0-7 moving to R(2) D(2) D(2) on 8-15.
  const std::vector<int64_t> shape{4096, 4096};
  Layout from{range(0, 8), {{F::V, -1, 4, 0}, {F::D, 0, 2, 0}}};
  Layout to{range(8, 16), {{F::R, -1, 2, 0}, {F::D, 0, 2, 0}, {F::D, 1, 2, 0}}};
  Adapter a = derive_adapter(from, to, shape, 4);
  const double mib = 1024.0 * 1024.0;
  INFO(a.to_string());
  CHECK(a.cross <= 64 * mib);
  CHECK(a.bytes <= 320 * mib);
  // The chain that builds the target inside the source group and then
  // sends each device's piece: 128 MiB across.
  Adapter inside = derive_in_group(from, Layout{range(0, 8), to.factors}, shape, 4);
  AdapterStep send = transfer_step(Layout{range(0, 8), to.factors}, to, true, shape, 4);
  CHECK(send.cross == Approx(128 * mib));
  CHECK(inside.bytes + send.bytes > a.bytes);
  CHECK(a.cost < inside.cost + weighted_cost(send, AdapterCost{}));
}

TEST_CASE("groups of different sizes: 4 producers to 8 consumers and back", "[transfers]") {
  for (const auto& a_b : {std::pair{range(0, 4), range(4, 12)}, std::pair{range(0, 8), range(8, 12)},
                          std::pair{range(0, 4), range(0, 8)}}) {
    const auto& a = a_b.first;  // not a structured binding: the lambda below captures it
    const auto& b = a_b.second;
    Layout from{a, {{F::D, 0, static_cast<int64_t>(a.size()), 0}}};
    Layout to{b, {{F::D, 1, static_cast<int64_t>(b.size()), 0}}};
    Adapter ad = derive_adapter(from, to, kShape, 4);
    Reference ref(1);
    std::string why;
    INFO(from.to_string() << " => " << to.to_string() << "\n" << ad.to_string());
    CHECK(holds_target(execute(ad, from, ref), to, ref, why));
    CHECK(ad.cross == Approx(8 * 8 * 4.0 * static_cast<double>(std::count_if(b.begin(), b.end(), [&](int d) {
                                    return std::find(a.begin(), a.end(), d) == a.end();
                                  })) / static_cast<double>(b.size())));
  }
}

TEST_CASE("every layout pair over 2 devices: permuted, disjoint, overlapping, 2 -> 4 and 4 -> 2", "[transfers]") {
  int n = 0;
  n += check_all_pairs({0, 1}, {1, 0});
  n += check_all_pairs({0, 1}, {2, 3});
  n += check_all_pairs({0, 1}, {1, 2});
  n += check_all_pairs({0, 1}, {0, 1, 2, 3});
  n += check_all_pairs({0, 1, 2, 3}, {2, 3});
  n += check_all_pairs({0, 1}, {4, 5, 6, 7});
  CHECK(n > 100);
}

TEST_CASE("every layout pair over 4 devices: one group, permuted orders, disjoint and unequal groups", "[transfers]") {
  int n = 0;
  n += check_all_pairs(range(0, 4), range(0, 4));
  n += check_all_pairs(range(0, 4), {0, 2, 1, 3});
  n += check_all_pairs(range(0, 4), {3, 1, 2, 0});
  n += check_all_pairs(range(0, 4), range(4, 8));
  n += check_all_pairs(range(0, 4), range(2, 6));
  n += check_all_pairs(range(0, 4), range(4, 12));
  n += check_all_pairs(range(0, 8), range(8, 12));
  CHECK(n > 1000);
}

TEST_CASE("every layout pair over 8 devices: one group, nnScaler's order, a reversed order and a disjoint group", "[transfers]") {
  int n = 0;
  n += check_all_pairs(range(0, 8), range(0, 8));
  n += check_all_pairs(range(0, 8), {0, 4, 1, 5, 2, 6, 3, 7});
  n += check_all_pairs(range(0, 8), {7, 6, 5, 4, 3, 2, 1, 0});
  n += check_all_pairs(range(0, 8), range(8, 16));
  CHECK(n > 30000);
}

TEST_CASE("within one group, strided layouts: the shortcut and the A* bound find chains as cheap as plain Dijkstra", "[transfers]") {
  int compared = 0, worse = 0;
  for (int n : {4, 8}) {
    std::vector<std::vector<F>> ls = all_layouts(n, kShape);
    for (const auto& a : ls)
      for (const auto& b : ls) {
        Layout from{range(0, n), a}, to{range(0, n), b};
        Adapter fast, full;
        try {
          full = derive_in_group(from, to, kShape, 4, true);
        } catch (const std::invalid_argument&) {
          CHECK_THROWS_AS(derive_in_group(from, to, kShape, 4), std::invalid_argument);
          continue;
        }
        fast = derive_in_group(from, to, kShape, 4);
        INFO(from.to_string() << " -> " << to.to_string() << "\n" << fast.to_string() << "searched:\n" << full.to_string());
        CHECK(fast.cost == Approx(full.cost));
        worse += fast.cost > full.cost * (1 + 1e-9);
        ++compared;
      }
  }
  CHECK(compared > 5000);
  CHECK(worse == 0);
}
