#include "backend/lowering/program_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/geometry.h"

namespace nns::backend {

namespace {

const std::vector<std::pair<const char*, SeededBug>> kBugs = {
    {"missing-allreduce", SeededBug::MissingAllreduce}, {"allgather-for-allreduce", SeededBug::AllgatherForAllreduce},
    {"wrong-group", SeededBug::WrongGroup},             {"wrong-stage-device", SeededBug::WrongStageDevice},
    {"replica-scale", SeededBug::ReplicaScale},         {"early-update", SeededBug::EarlyUpdate},
    {"double-count", SeededBug::DoubleCount},           {"collective-order", SeededBug::CollectiveOrder}};

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

std::string edge_text(const sema::Graph& g, const CommEdge& e) {
  const sema::TensorInfo& t = g.tensor(e.tensor);
  std::string name = t.kind == sema::TensorKind::Activation ? "%" + std::to_string(e.tensor) : t.name;
  std::string from = e.producer >= 0 ? g.node(e.producer).name : (t.kind == sema::TensorKind::Param ? "param" : "input");
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
  void clear() {
    has_.clear();
    vals_.clear();
  }
  int limit() const { return static_cast<int>(has_.size()); }  // devices below this may be held

 private:
  std::vector<char> has_;
  std::vector<Abs> vals_;
};

void simulate_edge(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors) {
  const sema::Shape& shape = g.tensor(e.tensor).shape;
  std::string what = edge_text(g, e);
  DeviceStates st;
  int64_t labels = 1;
  for (int d : e.from.devices) {
    Piece p = piece_of(e.from, d, shape);
    st[d] = Abs{p.start, p.length, single_weight(p.value_index)};
    labels = p.value_parts;
  }
  Layout cur = e.from;
  for (size_t si = 0; si < e.adapter.steps.size(); ++si) {
    const AdapterStep& s = e.adapter.steps[si];
    std::string at = what + ", step " + std::to_string(si + 1) + " (" + prim_name(s.prim) + ")";
    if (s.prim == AdapterStep::SendRecv) {
      DeviceStates next = st;
      for (const auto& pr : s.groups) {
        if (!st.count(pr[0])) {
          errors.push_back(at + ": device " + std::to_string(pr[0]) + " sends a piece it does not hold");
          return;
        }
        next[pr[1]] = st[pr[0]];
      }
      st.clear();
      for (int d : s.after.devices) {
        if (!next.count(d)) {
          errors.push_back(at + ": device " + std::to_string(d) + " of the next stage receives nothing");
          return;
        }
        Piece want = piece_of(s.after, d, shape);
        Abs a = next[d];
        if (!inside(want.start, want.length, a)) {
          errors.push_back(at + ": device " + std::to_string(d) + " needs " + region_text(want.start, want.length) + " but holds " +
                           region_text(a.start, a.length));
          return;
        }
        a.start = want.start;
        a.length = want.length;
        st[d] = a;
      }
      cur = s.after;
      continue;
    }
    DeviceStates next;
    if (s.prim == AdapterStep::Chunk || s.prim == AdapterStep::ValueSplit) {
      for (int d : s.after.devices) {
        Piece want = piece_of(s.after, d, shape), had = piece_of(cur, d, shape);
        Abs a = st[d];
        if (!inside(want.start, want.length, a)) {
          errors.push_back(at + ": device " + std::to_string(d) + " cuts " + region_text(want.start, want.length) + " out of " +
                           region_text(a.start, a.length));
          return;
        }
        a.start = want.start;
        a.length = want.length;
        if (want.value_parts > had.value_parts) a.w = scaled(a.w, static_cast<double>(want.value_parts / had.value_parts));
        next[d] = std::move(a);
      }
      st = std::move(next);
      cur = s.after;
      continue;
    }
    std::vector<char> covered(static_cast<size_t>(st.limit()), 0);  // devices in a group of this step
    for (const auto& grp : s.groups) {
      for (int d : grp) {
        if (!st.count(d)) {
          errors.push_back(at + ": device " + std::to_string(d) + " of group " + group_text(grp) + " holds no piece of the tensor");
          return;
        }
        covered[static_cast<size_t>(d)] = 1;
      }
      std::vector<const Abs*> mem;
      for (int d : grp) mem.push_back(&st[d]);
      if (s.prim == AdapterStep::AllReduce || s.prim == AdapterStep::ReduceScatter) {
        WeightList all;
        for (const Abs* m : mem) {
          if (!same_region(*m, *mem[0])) {
            errors.push_back(at + ": group " + group_text(grp) + " sums pieces of different regions (" + region_text(mem[0]->start, mem[0]->length) +
                             " and " + region_text(m->start, m->length) + ")");
            return;
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
            errors.push_back(at + ": group " + group_text(grp) + " counts partial sum " + std::to_string(l) + " " +
                             std::to_string(static_cast<int>(std::lround(w))) + " times");
            return;
          }
          ++have;
        }
        int64_t want_parts = labels / std::max<int64_t>(1, piece_of(s.after, grp[0], shape).value_parts);
        if (integral && have < want_parts) {
          std::vector<int> holders;
          for (int d = 0; d < st.limit(); ++d)
            if (st.count(d) && same_region(*st.find(d), *mem[0]) && std::find(grp.begin(), grp.end(), d) == grp.end()) holders.push_back(d);
          errors.push_back(at + ": group " + group_text(grp) + " sums " + std::to_string(have) + " of the " + std::to_string(want_parts) +
                           " partial sums it must combine (a wrong device group: devices " + group_text(holders) + " hold the others)");
          return;
        }
        for (int d : grp) {
          Abs a = sum;
          if (s.prim == AdapterStep::ReduceScatter) {
            Piece want = piece_of(s.after, d, shape);
            a.start = want.start;
            a.length = want.length;
          }
          next[d] = a;
        }
      } else {  // AllGather, AllToAll: move regions, values must agree
        std::vector<int64_t> lo = mem[0]->start, hi = mem[0]->start;
        int64_t volume = 0;
        for (const Abs* mp : mem) {
          const Abs& m = *mp;
          if (!same_weights(m.w, mem[0]->w)) {
            errors.push_back(at + ": group " + group_text(grp) + " gathers pieces holding different partial sums (an allreduce is needed first)");
            return;
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
          errors.push_back(at + ": group " + group_text(grp) + " does not hold the blocks of one region (its pieces overlap or leave gaps)");
          return;
        }
        for (int d : grp) {
          Piece want = piece_of(s.after, d, shape);
          if (!inside(want.start, want.length, box)) {
            errors.push_back(at + ": device " + std::to_string(d) + " needs " + region_text(want.start, want.length) + " but group " +
                             group_text(grp) + " holds only " + region_text(box.start, box.length));
            return;
          }
          Abs a = box;
          a.start = want.start;
          a.length = want.length;
          next[d] = a;
        }
      }
    }
    for (int d = 0; d < st.limit(); ++d)
      if (st.count(d) && !covered[static_cast<size_t>(d)]) next[d] = *st.find(d);  // not in any group of this step
    st = std::move(next);
    cur = s.after;
  }
  // At the consumer: each device holds its slice; per region (and replica),
  // the value parts it is read in add up to every partial sum exactly once.
  std::set<const WeightList*> whole;  // counts already found to hold every partial sum once
  for (int d : e.to.devices) {
    Piece want = piece_of(e.to, d, shape);
    const Abs* held = st.find(d);
    if (!held) {
      errors.push_back(what + ": device " + std::to_string(d) + " never receives its piece " + region_text(want.start, want.length));
      return;
    }
    if ((*held).start != want.start || (*held).length != want.length) {
      errors.push_back(what + ": device " + std::to_string(d) + " ends with " + region_text((*held).start, (*held).length) + " but reads " +
                       region_text(want.start, want.length) + (want.length == (*held).length ? " (a wrong device group?)" : ""));
      return;
    }
    const WeightList& wl = *(*held).w;
    if (want.value_parts == 1 && !whole.count(&wl)) {
      whole.insert(&wl);
      for (int64_t l = 0; l < labels; ++l) {
        double w = weight_of(wl, l);
        if (std::fabs(w - 1.0) > 1e-9) {
          errors.push_back(what + ": device " + std::to_string(d) + " reads " + region_text(want.start, want.length) +
                           (w < 1.0 ? " without partial sum " + std::to_string(l) + " of " + std::to_string(labels) + " (a missing allreduce?)"
                                    : " with partial sum " + std::to_string(l) + " counted " + std::to_string(static_cast<int>(std::lround(w))) +
                                          " times"));
          return;
        }
      }
    }
  }
}

struct Entry {
  enum Kind { Coll, Bucket, Replica, Loss, Update } kind = Coll;
  int edge = -1, step = -1, param = -1;
  const std::vector<int>* devgroup = nullptr;  // devices of the plan (Coll, Bucket; shared, not copied per rank)
  int replica = 0;                              // global rank = replica * k + device
  int bucket = -1;                              // Bucket: its key's rank among all keys (the runtime orders buckets by key)
  double scale = 1;                             // Replica: the averaging factor
  bool operator==(const Entry& o) const {
    return kind == o.kind && edge == o.edge && step == o.step && param == o.param && devgroup == o.devgroup && replica == o.replica &&
           bucket == o.bucket;
  }
};

}  // namespace

bool seeded_bug_from_name(const std::string& name, SeededBug& out) {
  for (const auto& [n, b] : kBugs)
    if (name == n) {
      out = b;
      return true;
    }
  return false;
}

std::string seeded_bug_names() {
  std::string s;
  for (const auto& [n, b] : kBugs) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

ProgramCheck verify_programs(const sema::Graph& g, const sema::Plan& plan, int replicas, SeededBug bug) {
  auto t0 = std::chrono::steady_clock::now();
  ProgramCheck out;
  int k = static_cast<int>(plan.ngpus);
  int world = k * replicas;
  out.ranks = world;
  CommPlan cp = derive_communication(g, plan);

  // The edges the runtime runs (plan_runtime.cpp lower()): every forward
  // edge; a gradient edge where the input needs a gradient and the op's
  // outputs reach the loss.
  std::vector<int> order;
  for (size_t n = 0; n < plan.root_of_node.size(); ++n)
    if (plan.root_of_node[n] >= 0) order.push_back(static_cast<int>(n));
  std::vector<bool> req(g.tensors().size(), false), reaches(g.tensors().size(), false);
  for (int p : g.params()) req[p] = sema::dtype_is_float(g.tensor(p).dtype);
  for (int n : order) {
    bool any = false;
    for (int t : g.node(n).inputs) any = any || req[t];
    for (int t : g.node(n).outputs) req[t] = any && sema::dtype_is_float(g.tensor(t).dtype);
  }
  if (g.loss >= 0) reaches[g.loss] = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    bool any = false;
    for (int t : g.node(*it).outputs) any = any || reaches[t];
    if (any)
      for (int t : g.node(*it).inputs) reaches[t] = true;
  }
  auto op_backward = [&](int n) {
    bool in = false, outp = false;
    for (int t : g.node(n).inputs) in = in || (req[t] && g.tensor(t).kind != sema::TensorKind::Input);
    for (int t : g.node(n).outputs) outp = outp || reaches[t];
    return in && outp;
  };
  std::vector<int> live;  // indices into cp.edges
  for (size_t i = 0; i < cp.edges.size(); ++i) {
    const CommEdge& e = cp.edges[i];
    if (!e.note.empty()) {
      out.errors.push_back(edge_text(g, e) + ": " + e.note);
      continue;
    }
    if (e.backward && (!req[e.tensor] || g.tensor(e.tensor).kind == sema::TensorKind::Input || !op_backward(e.producer))) continue;
    live.push_back(static_cast<int>(i));
  }

  // ---- seeded bugs in the lowered communication ------------------------------------------
  auto first_step = [&](AdapterStep::Prim p) -> std::pair<int, int> {
    for (int i : live)
      for (size_t s = 0; s < cp.edges[i].adapter.steps.size(); ++s)
        if (cp.edges[i].adapter.steps[s].prim == p) return {i, static_cast<int>(s)};
    return {-1, -1};
  };
  if (bug == SeededBug::MissingAllreduce || bug == SeededBug::AllgatherForAllreduce || bug == SeededBug::DoubleCount ||
      bug == SeededBug::WrongGroup) {
    auto [ei, si] = first_step(AdapterStep::AllReduce);
    if (ei < 0) {
      out.errors.push_back("seeded bug: the plan has no allreduce to corrupt");
      out.ok = false;
      return out;
    }
    auto& steps = cp.edges[ei].adapter.steps;
    std::string where = edge_text(g, cp.edges[ei]);
    if (bug == SeededBug::MissingAllreduce) {
      steps.erase(steps.begin() + si);
      out.applied = "dropped the allreduce of " + where;
    } else if (bug == SeededBug::AllgatherForAllreduce) {
      steps[si].prim = AdapterStep::AllGather;
      steps[si].dim = 0;
      out.applied = "an allgather instead of the allreduce of " + where;
    } else if (bug == SeededBug::DoubleCount) {
      steps.insert(steps.begin() + si, steps[si]);
      out.applied = "the allreduce of " + where + " runs twice";
    } else {
      // Swap the last member of the first group with a device outside it
      // (or drop it when every device is in the group).
      auto& grp = steps[si].groups[0];
      int outside = -1;
      for (int d = 0; d < k && outside < 0; ++d)
        if (std::find(grp.begin(), grp.end(), d) == grp.end()) outside = d;
      std::string before = group_text(grp);
      if (outside >= 0 && steps[si].groups.size() == 1) grp.back() = outside;
      else grp.pop_back();
      std::sort(grp.begin(), grp.end());
      out.applied = "the allreduce of " + where + " runs over " + group_text(grp) + " instead of " + before;
    }
  }
  if (bug == SeededBug::WrongStageDevice) {
    auto [ei, si] = first_step(AdapterStep::SendRecv);
    if (ei < 0) {
      out.errors.push_back("seeded bug: the plan has no send/recv to corrupt");
      out.ok = false;
      return out;
    }
    auto& pr = cp.edges[ei].adapter.steps[si].groups[0];
    int wrong = (pr[1] + 1) % k == pr[0] ? (pr[1] + 2) % k : (pr[1] + 1) % k;
    out.applied = "send/recv of " + edge_text(g, cp.edges[ei]) + " goes to device " + std::to_string(wrong) + " instead of " + std::to_string(pr[1]);
    pr[1] = wrong;
  }

  // ---- values: every edge on every device ------------------------------------------------
  for (int i : live) {
    ++out.edges;
    out.steps += static_cast<int>(cp.edges[i].adapter.steps.size());
    simulate_edge(g, cp.edges[i], out.errors);
  }

  // ---- each rank's sequence of collectives, as the runtime issues them --------------------
  // (plan_runtime.cpp run_micro_batch/step: forward ops in order with their
  // input edges, backward ops in reverse with their gradient edges, buckets
  // in key order, replica averages and the loss reduction, then updates.)
  auto is_deferred = [](const CommEdge& e) {
    return e.backward && e.consumer < 0 && e.adapter.steps.size() == 1 && e.adapter.steps[0].prim == AdapterStep::AllReduce;
  };
  auto bucket_key = [](const CommEdge& e) {
    std::string key;
    for (const auto& grp : e.adapter.steps[0].groups) key += group_text(grp);
    return key;
  };
  // Per edge step: which of its groups each device is in (-1: none).
  std::map<std::pair<int, int>, std::vector<int>> group_of_device;
  for (int i : live)
    for (size_t st = 0; st < cp.edges[i].adapter.steps.size(); ++st) {
      std::vector<int>& m = group_of_device[{i, static_cast<int>(st)}];
      m.assign(static_cast<size_t>(k), -1);
      const auto& groups = cp.edges[i].adapter.steps[st].groups;
      for (size_t gi = 0; gi < groups.size(); ++gi)
        for (int d : groups[gi])
          if (d >= 0 && d < k) m[static_cast<size_t>(d)] = static_cast<int>(gi);
    }
  std::map<std::pair<int, int>, int> fwd_edge, bwd_edge;  // (node, input) -> edge
  for (int i : live) (cp.edges[i].backward ? bwd_edge : fwd_edge)[{cp.edges[i].backward ? cp.edges[i].producer : cp.edges[i].consumer, cp.edges[i].input_index}] = i;
  std::map<int, std::vector<bool>> holders;  // param -> devices that update a piece of it
  for (int i : live) {
    const CommEdge& e = cp.edges[i];
    if (!e.backward || e.consumer >= 0) continue;
    std::vector<bool>& h = holders[e.tensor];
    h.resize(static_cast<size_t>(k), false);
    for (int d : e.to.devices) h[static_cast<size_t>(d)] = true;
  }
  std::vector<int> world_group;
  for (int d = 0; d < k; ++d) world_group.push_back(d);
  std::vector<std::vector<Entry>> seq(static_cast<size_t>(world));
  // Bucket keys, computed once per edge (a key names every group: building
  // it per rank made a 1024-rank check spend seconds on strings) and
  // numbered in key order.
  std::vector<int> bucket_of(cp.edges.size(), -1);
  {
    std::map<std::string, std::vector<int>> by_key;
    for (int i : live)
      if (is_deferred(cp.edges[i])) by_key[bucket_key(cp.edges[i])].push_back(i);
    int id = 0;
    for (auto& [key, edges] : by_key) {
      for (int i : edges) bucket_of[static_cast<size_t>(i)] = id;
      ++id;
    }
  }
  std::vector<std::map<int, std::set<int>>> bucket_members;  // per rank: bucket -> params
  for (int rank = 0; rank < world; ++rank) {
    int replica = rank / k, device = rank % k;
    auto emit_edge = [&](int ei) {
      const CommEdge& e = cp.edges[ei];
      for (size_t st = 0; st < e.adapter.steps.size(); ++st) {
        const AdapterStep& step = e.adapter.steps[st];
        if (step.prim == AdapterStep::Chunk || step.prim == AdapterStep::ValueSplit) continue;
        int gi = group_of_device[{ei, static_cast<int>(st)}][static_cast<size_t>(device)];
        if (step.prim == AdapterStep::SendRecv) {
          // One entry per pair this device is in, in pair order.
          for (const auto& pr : step.groups)
            if (pr[0] == device || pr[1] == device) {
              Entry en;
              en.edge = ei;
              en.step = static_cast<int>(st);
              en.devgroup = &pr;
              en.replica = replica;
              seq[rank].push_back(en);
            }
          continue;
        }
        if (gi < 0) continue;
        Entry en;
        en.edge = ei;
        en.step = static_cast<int>(st);
        en.devgroup = &step.groups[static_cast<size_t>(gi)];
        en.replica = replica;
        seq[rank].push_back(en);
      }
    };
    for (int n : order)
      for (size_t kk = 0; kk < g.node(n).inputs.size(); ++kk)
        if (auto it = fwd_edge.find({n, static_cast<int>(kk)}); it != fwd_edge.end()) emit_edge(it->second);
    std::map<int, Entry> buckets;
    std::map<int, std::set<int>> bucket_params;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      for (size_t kk = 0; kk < g.node(*it).inputs.size(); ++kk) {
        auto e = bwd_edge.find({*it, static_cast<int>(kk)});
        if (e == bwd_edge.end()) continue;
        const CommEdge& ce = cp.edges[e->second];
        if (!is_deferred(ce)) {
          emit_edge(e->second);
          continue;
        }
        int gi = group_of_device[{e->second, 0}][static_cast<size_t>(device)];
        if (gi < 0) continue;
        int key = bucket_of[static_cast<size_t>(e->second)];
        Entry& b = buckets[key];
        b.kind = Entry::Bucket;
        b.bucket = key;
        b.devgroup = &ce.adapter.steps[0].groups[static_cast<size_t>(gi)];
        b.replica = replica;
        bucket_params[key].insert(ce.tensor);
      }
    for (auto& [key, b] : buckets)
      if (b.devgroup->size() > 1) seq[rank].push_back(b);
    std::vector<int> held;
    for (auto& [p, h] : holders)
      if (h[static_cast<size_t>(device)]) held.push_back(p);
    if (replicas > 1)
      for (int p : held) {
        Entry r;
        r.kind = Entry::Replica;
        r.param = p;
        r.devgroup = nullptr;  // the same device of every replica
        r.scale = 1.0 / replicas;
        seq[rank].push_back(r);
      }
    if (world > 1) {
      Entry loss;
      loss.kind = Entry::Loss;
      seq[rank].push_back(loss);
    }
    for (int p : held) {
      Entry u;
      u.kind = Entry::Update;
      u.param = p;
      seq[rank].push_back(u);
    }
    for (Entry& en : seq[rank])
      if (en.kind == Entry::Bucket) en.param = -1;
    bucket_members.emplace_back(std::move(bucket_params));
  }
  // The members (global ranks) of an entry's collective.
  auto members = [&](int rank, const Entry& e) {
    std::vector<int> m;
    if (e.kind == Entry::Loss) {
      for (int r = 0; r < world; ++r) m.push_back(r);
    } else if (e.kind == Entry::Replica) {
      for (int j = 0; j < replicas; ++j) m.push_back(j * k + rank % k);
    } else {
      for (int d : *e.devgroup) m.push_back(e.replica * k + d);
    }
    return m;
  };
  auto describe = [&](const Entry& e) -> std::string {
    switch (e.kind) {
      case Entry::Coll: return std::string(prim_name(cp.edges[e.edge].adapter.steps[e.step].prim)) + " of " + edge_text(g, cp.edges[e.edge]);
      case Entry::Bucket: return "bucketed gradient allreduce over " + group_text(*e.devgroup);
      case Entry::Replica: return "replica average of the gradient of " + g.tensor(e.param).name;
      case Entry::Loss: return "loss and gradient-norm allreduce";
      case Entry::Update: return "update of " + g.tensor(e.param).name;
    }
    return "?";
  };
  auto reduces = [&](int rank, const Entry& r, int param) {
    if (r.kind == Entry::Bucket) return bucket_members[static_cast<size_t>(rank)][r.bucket].count(param) > 0;
    if (r.kind == Entry::Replica) return r.param == param;
    if (r.kind == Entry::Coll) return cp.edges[r.edge].backward && cp.edges[r.edge].tensor == param;
    return false;
  };

  if (bug == SeededBug::ReplicaScale || bug == SeededBug::EarlyUpdate || bug == SeededBug::CollectiveOrder) {
    bool done = false;
    if (bug == SeededBug::ReplicaScale && replicas > 1)
      for (Entry& en : seq[static_cast<size_t>(k)])  // rank k: device 0 of replica 1
        if (en.kind == Entry::Replica && !done) {
          en.scale = 1.0;
          done = true;
          out.applied = "replica 1 averages the gradient of " + g.tensor(en.param).name + " with factor 1 instead of 1/" + std::to_string(replicas);
        }
    if (bug == SeededBug::EarlyUpdate) {
      auto& sq = seq[0];
      for (size_t i = 0; i < sq.size() && !done; ++i)
        if (sq[i].kind == Entry::Update)
          for (size_t j = 0; j < i && !done; ++j)
            if (reduces(0, sq[j], sq[i].param)) {
              Entry u = sq[i];
              sq.erase(sq.begin() + static_cast<long>(i));
              sq.insert(sq.begin() + static_cast<long>(j), u);
              out.applied = "rank 0 issues the " + describe(u) + " before its gradient is reduced";
              done = true;
            }
    }
    if (bug == SeededBug::CollectiveOrder) {
      auto& sq = seq[0];
      for (size_t i = 0; i + 1 < sq.size() && !done; ++i)
        for (size_t j = i + 1; j < sq.size() && !done; ++j)
          if (sq[i].kind != Entry::Update && sq[j].kind != Entry::Update && !(sq[i] == sq[j])) {
            std::swap(sq[i], sq[j]);
            out.applied = "rank 0 issues '" + describe(sq[i]) + "' before '" + describe(sq[j]) + "'";
            done = true;
          }
    }
    if (!done) {
      out.errors.push_back("seeded bug: nothing to corrupt in this plan (needs " + std::string(bug == SeededBug::ReplicaScale ? "replicas" : "collectives") + ")");
      out.ok = false;
      return out;
    }
  }

  // Updates after every reduction of their gradient; one scale everywhere.
  for (int rank = 0; rank < world; ++rank) {
    const auto& sq = seq[static_cast<size_t>(rank)];
    std::set<int> updated;
    for (size_t i = 0; i < sq.size(); ++i) {
      if (sq[i].kind == Entry::Update) updated.insert(sq[i].param);
      else
        for (int p : updated)
          if (reduces(rank, sq[i], p)) {
            out.errors.push_back("rank " + std::to_string(rank) + ": the update of " + g.tensor(p).name + " is issued before its gradient is reduced (" +
                                 describe(sq[i]) + ")");
            updated.erase(p);
            break;
          }
      if (sq[i].kind == Entry::Replica && std::fabs(sq[i].scale - 1.0 / replicas) > 1e-12)
        out.errors.push_back("rank " + std::to_string(rank) + ": the gradient of " + g.tensor(sq[i].param).name + " is scaled by " +
                             std::to_string(sq[i].scale) + " but by 1/" + std::to_string(replicas) + " on the other replicas");
    }
  }

  // Matching: a collective runs when every member of its group has it next.
  // Worklist: a rank is looked at again only when it has advanced.
  std::vector<size_t> pos(static_cast<size_t>(world), 0);
  auto next_coll = [&](int r) -> const Entry* {
    auto& sq = seq[static_cast<size_t>(r)];
    while (pos[r] < sq.size() && sq[pos[r]].kind == Entry::Update) ++pos[r];
    return pos[r] < sq.size() ? &sq[pos[r]] : nullptr;
  };
  std::vector<int> work;
  for (int r = world - 1; r >= 0; --r) work.push_back(r);
  while (!work.empty()) {
    int r = work.back();
    work.pop_back();
    const Entry* e = next_coll(r);
    if (!e) continue;
    std::vector<int> m = members(r, *e);
    bool all = true;
    for (int x : m) {
      const Entry* o = next_coll(x);
      all = all && o && *o == *e;
      if (!all) break;
    }
    if (!all) continue;
    for (int x : m) ++pos[x];
    ++out.collectives;
    for (int x : m) work.push_back(x);
  }
  {
    std::string msg;
    int shown = 0;
    for (int r = 0; r < world && shown < 4; ++r)
      if (const Entry* e = next_coll(r)) {
        msg += " rank " + std::to_string(r) + " on the " + describe(*e) + " over " + group_text(members(r, *e)) + ";";
        ++shown;
      }
    if (!msg.empty()) out.errors.push_back("deadlock: the ranks wait on different collectives:" + msg);
  }
  out.ok = out.errors.empty();
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace nns::backend
