// The value half of program verification (program_check.h): every edge's
// adapter run abstractly on every device of its groups, each piece a region
// of the full tensor with the partial sums it counts.
#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/lowering/geometry.h"
#include "backend/lowering/program_order.h"

namespace nns::backend {

namespace {

// Per value label of the producer's partial sums, how many times a piece
// counts it; sorted by label. Immutable and shared: after a reduction every
// member of the group holds the same counts, and copying them per device
// would make a 1024-device allreduce cost 1024 x 1024.
using WeightList = std::vector<std::pair<int64_t, double>>;
using Weights = std::shared_ptr<const WeightList>;

Weights single_weight(int64_t label) { return std::make_shared<const WeightList>(WeightList{{label, 1.0}}); }

Weights scaled(const Weights& w, double factor) {
  WeightList out = *w;
  for (auto& lw : out) lw.second /= factor;
  return std::make_shared<const WeightList>(std::move(out));
}

bool same_weights(const Weights& a, const Weights& b) { return a == b || *a == *b; }

double weight_of(const WeightList& w, int64_t label) {
  auto it = std::lower_bound(w.begin(), w.end(), std::make_pair(label, -1e300));
  return it != w.end() && it->first == label ? it->second : 0.0;
}

// What one device holds of a tensor: a region and its partial-sum counts.
struct Abs {
  std::vector<int64_t> start, length;
  Weights w;
};

bool same_region(const Abs& a, const Abs& b) { return a.start == b.start && a.length == b.length; }

bool inside(const std::vector<int64_t>& s, const std::vector<int64_t>& l, const Abs& outer) {
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] < outer.start[d] || s[d] + l[d] > outer.start[d] + outer.length[d]) return false;
  return true;
}

}  // namespace

namespace detail {

std::string edge_text(const sema::Graph& g, const CommEdge& e) {
  const sema::TensorInfo& t = g.tensor(e.tensor);
  std::string name = t.kind == sema::TensorKind::Activation ? "%" + std::to_string(e.tensor) : t.name;
  std::string from =
      e.producer >= 0 ? g.node(e.producer).name : (t.kind == sema::TensorKind::Param ? "param" : "input");
  std::string to = e.consumer >= 0 ? g.node(e.consumer).name : "update of " + t.name;
  return (e.backward ? "gradient of " : "") + name + " (" + from + " -> " + to + ")";
}

// Runs edge `e`'s adapter abstractly on every device; appends diagnoses.
// What each device holds, indexed by device (a std::map per edge step made
// a 1024-device check allocate millions of nodes).
class DeviceStates {
 public:
  bool count(int d) const { return d >= 0 && static_cast<size_t>(d) < has_.size() && has_[static_cast<size_t>(d)]; }
  Abs& operator[](int d) {
    if (static_cast<size_t>(d) >= has_.size()) {
      has_.resize(static_cast<size_t>(d) + 1, 0);
      vals_.resize(static_cast<size_t>(d) + 1);
    }
    has_[static_cast<size_t>(d)] = 1;
    return vals_[static_cast<size_t>(d)];
  }
  const Abs* find(int d) const { return count(d) ? &vals_[static_cast<size_t>(d)] : nullptr; }
  // Nothing held; the pieces' storage is kept for the next step to reuse
  // (a fresh table per step allocated every device's piece again).
  void clear() { std::fill(has_.begin(), has_.end(), 0); }
  int limit() const { return static_cast<int>(has_.size()); }  // devices below this may be held

 private:
  std::vector<char> has_;
  std::vector<Abs> vals_;
};

// Runs edge `e`'s adapter abstractly on every device; appends diagnoses.
class EdgeSimulation {
 public:
  EdgeSimulation(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors)
      : e_(e),
        shape(g.tensor(e.tensor).shape),
        what(edge_text(g, e)),
        errors_(errors),
        st(tables().first),
        next_(tables().second) {
    st.clear();
    next_.clear();
    // Devices holding one partial sum share its (immutable) counts: one
    // allocation per label instead of per device, and equal counts are then
    // told equal by address.
    std::vector<Weights> of_label;
    for (int d : e.from.devices) {
      Piece p = piece_of(e.from, d, shape);
      Weights w;
      if (p.value_index >= 0 && p.value_index < p.value_parts) {
        if (of_label.size() < static_cast<size_t>(p.value_parts)) of_label.resize(static_cast<size_t>(p.value_parts));
        Weights& shared = of_label[static_cast<size_t>(p.value_index)];
        if (!shared) shared = single_weight(p.value_index);
        w = shared;
      } else {
        w = single_weight(p.value_index);
      }
      st[d] = Abs{std::move(p.start), std::move(p.length), std::move(w)};
      labels = p.value_parts;
    }
  }

  void run() {
    Layout cur = e_.from;
    for (size_t si = 0; si < e_.adapter.steps.size(); ++si) {
      const AdapterStep& s = e_.adapter.steps[si];
      at = what + ", step " + std::to_string(si + 1) + " (" + prim_name(s.prim) + ")";
      bool ok = s.prim == AdapterStep::SendRecv                                     ? send_recv(s, cur)
                : s.prim == AdapterStep::Chunk || s.prim == AdapterStep::ValueSplit ? cut(s, cur)
                                                                                    : collective(s);
      if (!ok) return;
      cur = s.after;
    }
    at_consumer();
  }

 private:
  const CommEdge& e_;
  const sema::Shape& shape;
  std::string what, at;
  std::vector<std::string>& errors_;
  // What each device holds, and the next step's table: the calling
  // thread's, reused from edge to edge (each edge allocating a piece per
  // device of a 1024-device list twice was much of the value half).
  static std::pair<DeviceStates, DeviceStates>& tables() {
    static thread_local std::pair<DeviceStates, DeviceStates> t;
    return t;
  }
  DeviceStates &st, &next_;
  int64_t labels = 1;

  // Pieces move between device lists: each device of the next layout
  // assembles its piece from the parts its pairs deliver (transfer_parts).
  bool send_recv(const AdapterStep& s, const Layout& cur) {
    DeviceStates& next = next_;
    next.clear();
    for (const auto& pr : s.groups)
      if (!st.count(pr[0])) {
        errors_.push_back(at + ": device " + std::to_string(pr[0]) + " sends a piece it does not hold");
        return false;
      }
    for (int d : s.after.devices) {
      Piece want = piece_of(s.after, d, shape);
      std::vector<TransferPart> parts = transfer_parts(s, cur, d, shape);
      if (parts.empty()) {
        errors_.push_back(at + ": device " + std::to_string(d) + " of the next stage receives nothing");
        return false;
      }
      const Weights& w = st.find(parts[0].from)->w;
      for (const TransferPart& p : parts) {
        const Abs& src = *st.find(p.from);
        if (!inside(p.box.start, p.box.length, src)) {
          errors_.push_back(at + ": device " + std::to_string(p.from) + " sends " +
                            region_text(p.box.start, p.box.length) + " but holds " +
                            region_text(src.start, src.length));
          return false;
        }
        if (!same_weights(src.w, w)) {
          errors_.push_back(at + ": device " + std::to_string(d) + " assembles parts holding different partial sums");
          return false;
        }
      }
      if (!tiles(want, parts)) {
        std::string got;
        for (const TransferPart& p : parts) got += (got.empty() ? "" : ", ") + region_text(p.box.start, p.box.length);
        errors_.push_back(at + ": device " + std::to_string(d) + " needs " + region_text(want.start, want.length) +
                          " but receives " + got);
        return false;
      }
      Abs& a = next[d];
      a.start = std::move(want.start);
      a.length = std::move(want.length);
      a.w = w;
    }
    std::swap(st, next_);
    return true;
  }

  // A local chunk or value split: each device keeps a part of its piece.
  bool cut(const AdapterStep& s, const Layout& cur) {
    DeviceStates& next = next_;
    next.clear();
    Weights cut_from, cut_to;  // the last counts scaled, and what they became
    double cut_factor = 0;
    // The value parts of every piece of `cur` (piece_of's for each device:
    // the product of its V factors), once instead of a piece per device.
    int64_t had_parts = 1;
    for (const LayoutFactor& f : cur.factors)
      if (f.kind == LayoutFactor::V) had_parts *= f.n;
    for (int d : s.after.devices) {
      Piece want = piece_of(s.after, d, shape);
      if (!st.count(d)) {
        errors_.push_back(at + ": device " + std::to_string(d) + " cuts a piece it does not hold");
        return false;
      }
      const Abs& held = *st.find(d);
      if (!inside(want.start, want.length, held)) {
        errors_.push_back(at + ": device " + std::to_string(d) + " cuts " + region_text(want.start, want.length) +
                          " out of " + region_text(held.start, held.length));
        return false;
      }
      Abs& a = next[d];
      a.start = std::move(want.start);
      a.length = std::move(want.length);
      a.w = held.w;
      if (want.value_parts > had_parts) {
        // Devices holding the same counts cut them alike: scaled once.
        const double factor = static_cast<double>(want.value_parts / had_parts);
        if (held.w != cut_from || factor != cut_factor) {
          cut_from = held.w;
          cut_factor = factor;
          cut_to = scaled(held.w, factor);
        }
        a.w = cut_to;
      }
    }
    std::swap(st, next_);
    return true;
  }

  // One collective per group; devices in no group keep their piece.
  bool collective(const AdapterStep& s) {
    DeviceStates& next = next_;
    next.clear();
    std::vector<char> covered(static_cast<size_t>(st.limit()), 0);  // devices in a group of this step
    for (const auto& grp : s.groups) {
      for (int d : grp) {
        if (!st.count(d)) {
          errors_.push_back(at + ": device " + std::to_string(d) + " of group " + group_text(grp) +
                            " holds no piece of the tensor");
          return false;
        }
        covered[static_cast<size_t>(d)] = 1;
      }
      std::vector<const Abs*> mem;
      for (int d : grp) mem.push_back(&st[d]);
      bool ok = s.prim == AdapterStep::AllReduce || s.prim == AdapterStep::ReduceScatter ? reduce(s, grp, mem, next)
                                                                                         : gather(s, grp, mem, next);
      if (!ok) return false;
    }
    for (int d = 0; d < st.limit(); ++d)
      if (st.count(d) && !covered[static_cast<size_t>(d)]) next[d] = *st.find(d);
    std::swap(st, next_);
    return true;
  }

  // AllReduce, ReduceScatter: partial sums add up.
  bool reduce(const AdapterStep& s, const std::vector<int>& grp, const std::vector<const Abs*>& mem,
              DeviceStates& next) {
    WeightList all;
    for (const Abs* m : mem) {
      if (!same_region(*m, *mem[0])) {
        errors_.push_back(at + ": group " + group_text(grp) + " sums pieces of different regions (" +
                          region_text(mem[0]->start, mem[0]->length) + " and " + region_text(m->start, m->length) +
                          ")");
        return false;
      }
      all.insert(all.end(), m->w->begin(), m->w->end());
    }
    std::sort(all.begin(), all.end());
    WeightList merged;
    for (const auto& lw : all) {
      if (!merged.empty() && merged.back().first == lw.first)
        merged.back().second += lw.second;
      else
        merged.push_back(lw);
    }
    Abs sum{mem[0]->start, mem[0]->length, std::make_shared<const WeightList>(std::move(merged))};
    // The members' partial sums must be distinct and together make the
    // part the result layout says each device holds.
    bool integral = true;
    int64_t have = 0;
    for (auto& [l, w] : *sum.w) {
      integral = integral && std::fabs(w - std::round(w)) < 1e-9;
      if (w > 1.0 + 1e-9 && integral) {
        errors_.push_back(at + ": group " + group_text(grp) + " counts partial sum " + std::to_string(l) + " " +
                          std::to_string(static_cast<int>(std::lround(w))) + " times");
        return false;
      }
      ++have;
    }
    int64_t want_parts = labels / std::max<int64_t>(1, piece_of(s.after, grp[0], shape).value_parts);
    if (integral && have < want_parts) {
      std::vector<int> holders;
      for (int d = 0; d < st.limit(); ++d)
        if (st.count(d) && same_region(*st.find(d), *mem[0]) && std::find(grp.begin(), grp.end(), d) == grp.end())
          holders.push_back(d);
      errors_.push_back(at + ": group " + group_text(grp) + " sums " + std::to_string(have) + " of the " +
                        std::to_string(want_parts) + " partial sums it must combine (a wrong device group: devices " +
                        group_text(holders) + " hold the others)");
      return false;
    }
    for (int d : grp) {
      Abs& a = next[d];  // assigned field by field: the storage the table kept is reused
      a.w = sum.w;
      if (s.prim == AdapterStep::ReduceScatter) {
        Piece want = piece_of(s.after, d, shape);
        a.start = want.start;
        a.length = want.length;
      } else {
        a.start = sum.start;
        a.length = sum.length;
      }
    }
    return true;
  }

  // AllGather, AllToAll: regions move, values must agree.
  bool gather(const AdapterStep& s, const std::vector<int>& grp, const std::vector<const Abs*>& mem,
              DeviceStates& next) {
    std::vector<int64_t> lo = mem[0]->start, hi = mem[0]->start;
    int64_t volume = 0;
    for (const Abs* mp : mem) {
      const Abs& m = *mp;
      if (!same_weights(m.w, mem[0]->w)) {
        errors_.push_back(at + ": group " + group_text(grp) +
                          " gathers pieces holding different partial sums (an allreduce is needed first)");
        return false;
      }
      int64_t v = 1;
      for (size_t d = 0; d < m.start.size(); ++d) {
        lo[d] = std::min(lo[d], m.start[d]);
        hi[d] = std::max(hi[d], m.start[d] + m.length[d]);
        v *= m.length[d];
      }
      volume += v;
    }
    Abs box{lo, std::vector<int64_t>(lo.size()), mem[0]->w};
    int64_t bv = 1;
    for (size_t d = 0; d < lo.size(); ++d) {
      box.length[d] = hi[d] - lo[d];
      bv *= box.length[d];
    }
    if (bv != volume) {
      errors_.push_back(at + ": group " + group_text(grp) +
                        " does not hold the blocks of one region (its pieces overlap or leave gaps)");
      return false;
    }
    for (int d : grp) {
      Piece want = piece_of(s.after, d, shape);
      if (!inside(want.start, want.length, box)) {
        errors_.push_back(at + ": device " + std::to_string(d) + " needs " + region_text(want.start, want.length) +
                          " but group " + group_text(grp) + " holds only " + region_text(box.start, box.length));
        return false;
      }
      Abs& a = next[d];
      a.start = want.start;
      a.length = want.length;
      a.w = box.w;
    }
    return true;
  }

  // At the consumer: each device holds its slice; per region (and replica),
  // the value parts it is read in add up to every partial sum exactly once.
  bool at_consumer() {
    const CommEdge& e = e_;
    std::set<const WeightList*> whole;  // counts already found to hold every partial sum once
    for (int d : e.to.devices) {
      Piece want = piece_of(e.to, d, shape);
      const Abs* held = st.find(d);
      if (!held) {
        errors_.push_back(what + ": device " + std::to_string(d) + " never receives its piece " +
                          region_text(want.start, want.length));
        return false;
      }
      if ((*held).start != want.start || (*held).length != want.length) {
        errors_.push_back(what + ": device " + std::to_string(d) + " ends with " +
                          region_text((*held).start, (*held).length) + " but reads " +
                          region_text(want.start, want.length) +
                          (want.length == (*held).length ? " (a wrong device group?)" : ""));
        return false;
      }
      const WeightList& wl = *(*held).w;
      if (want.value_parts == 1 && !whole.count(&wl)) {
        whole.insert(&wl);
        for (int64_t l = 0; l < labels; ++l) {
          double w = weight_of(wl, l);
          if (std::fabs(w - 1.0) > 1e-9) {
            errors_.push_back(what + ": device " + std::to_string(d) + " reads " +
                              region_text(want.start, want.length) +
                              (w < 1.0 ? " without partial sum " + std::to_string(l) + " of " + std::to_string(labels) +
                                             " (a missing allreduce?)"
                                       : " with partial sum " + std::to_string(l) + " counted " +
                                             std::to_string(static_cast<int>(std::lround(w))) + " times"));
            return false;
          }
        }
      }
    }
    return true;
  }
};

void simulate_edge(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors) {
  EdgeSimulation(g, e, errors).run();
}

}  // namespace detail

}  // namespace nns::backend
