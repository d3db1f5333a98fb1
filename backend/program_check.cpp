#include "backend/program_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "backend/comm_plan.h"
#include "backend/plan_runtime.h"

namespace nns::backend {

namespace {

const std::vector<std::pair<const char*, SeededBug>> kBugs = {
    {"missing-allreduce", SeededBug::MissingAllreduce}, {"allgather-for-allreduce", SeededBug::AllgatherForAllreduce},
    {"wrong-group", SeededBug::WrongGroup},             {"wrong-stage-device", SeededBug::WrongStageDevice},
    {"replica-scale", SeededBug::ReplicaScale},         {"early-update", SeededBug::EarlyUpdate},
    {"double-count", SeededBug::DoubleCount},           {"collective-order", SeededBug::CollectiveOrder}};

std::string region_text(const std::vector<int64_t>& start, const std::vector<int64_t>& length) {
  std::string s = "[";
  for (size_t d = 0; d < start.size(); ++d) s += (d ? ", " : "") + std::to_string(start[d]) + ":" + std::to_string(start[d] + length[d]);
  return s + "]";
}

std::string group_text(const std::vector<int>& g) {
  std::string s = "{";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "}";
}

// What one device holds of a tensor: a region and, per value label of the
// producer's partial sums, how many times it is counted.
struct Abs {
  std::vector<int64_t> start, length;
  std::map<int64_t, double> w;
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
void simulate_edge(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors) {
  const sema::Shape& shape = g.tensor(e.tensor).shape;
  std::string what = edge_text(g, e);
  std::map<int, Abs> st;
  int64_t labels = 1;
  for (int d : e.from.devices) {
    Piece p = piece_of(e.from, d, shape);
    st[d] = Abs{p.start, p.length, {{p.value_index, 1.0}}};
    labels = p.value_parts;
  }
  Layout cur = e.from;
  for (size_t si = 0; si < e.adapter.steps.size(); ++si) {
    const AdapterStep& s = e.adapter.steps[si];
    std::string at = what + ", step " + std::to_string(si + 1) + " (" + prim_name(s.prim) + ")";
    if (s.prim == AdapterStep::SendRecv) {
      std::map<int, Abs> next = st;
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
    std::map<int, Abs> next;
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
        if (want.value_parts > had.value_parts)
          for (auto& [l, w] : a.w) w /= static_cast<double>(want.value_parts / had.value_parts);
        next[d] = a;
      }
      st = next;
      cur = s.after;
      continue;
    }
    std::set<int> covered;
    for (const auto& grp : s.groups) {
      for (int d : grp) {
        if (!st.count(d)) {
          errors.push_back(at + ": device " + std::to_string(d) + " of group " + group_text(grp) + " holds no piece of the tensor");
          return;
        }
        covered.insert(d);
      }
      std::vector<Abs> mem;
      for (int d : grp) mem.push_back(st[d]);
      if (s.prim == AdapterStep::AllReduce || s.prim == AdapterStep::ReduceScatter) {
        Abs sum = mem[0];
        sum.w.clear();
        for (const Abs& m : mem) {
          if (!same_region(m, mem[0])) {
            errors.push_back(at + ": group " + group_text(grp) + " sums pieces of different regions (" + region_text(mem[0].start, mem[0].length) +
                             " and " + region_text(m.start, m.length) + ")");
            return;
          }
          for (auto& [l, w] : m.w) sum.w[l] += w;
        }
        // The members' partial sums must be distinct and together make the
        // part the result layout says each device holds.
        bool integral = true;
        int64_t have = 0;
        for (auto& [l, w] : sum.w) {
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
          for (auto& [d, a] : st)
            if (same_region(a, mem[0]) && std::find(grp.begin(), grp.end(), d) == grp.end()) holders.push_back(d);
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
        std::vector<int64_t> lo = mem[0].start, hi = mem[0].start;
        int64_t volume = 0;
        for (const Abs& m : mem) {
          if (m.w != mem[0].w) {
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
        Abs box{lo, std::vector<int64_t>(lo.size()), mem[0].w};
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
    for (auto& [d, a] : st)
      if (!covered.count(d)) next[d] = a;  // not in any group of this step
    st = next;
    cur = s.after;
  }
  // At the consumer: each device holds its slice; per region (and replica),
  // the value parts it is read in add up to every partial sum exactly once.
  std::map<std::pair<std::vector<int64_t>, int64_t>, std::map<int64_t, double>> total;
  for (int d : e.to.devices) {
    Piece want = piece_of(e.to, d, shape);
    auto it = st.find(d);
    if (it == st.end()) {
      errors.push_back(what + ": device " + std::to_string(d) + " never receives its piece " + region_text(want.start, want.length));
      return;
    }
    if (it->second.start != want.start || it->second.length != want.length) {
      errors.push_back(what + ": device " + std::to_string(d) + " ends with " + region_text(it->second.start, it->second.length) + " but reads " +
                       region_text(want.start, want.length) + (want.length == it->second.length ? " (a wrong device group?)" : ""));
      return;
    }
    auto& sum = total[{want.start, want.replica_index}];
    for (auto& [l, w] : it->second.w) sum[l] += w * (want.value_parts > 1 ? 1.0 : 1.0);
    if (want.value_parts == 1) {
      for (int64_t l = 0; l < labels; ++l) {
        double w = it->second.w.count(l) ? it->second.w.at(l) : 0.0;
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
  std::vector<int> group;  // global ranks
  std::string what;
  std::set<int> params;    // Bucket: the parameters it reduces
  double scale = 1;        // Replica: the averaging factor
  bool operator==(const Entry& o) const { return kind == o.kind && edge == o.edge && step == o.step && group == o.group && what == o.what; }
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
  auto is_deferred = [](const CommEdge& e) {
    return e.backward && e.consumer < 0 && e.adapter.steps.size() == 1 && e.adapter.steps[0].prim == AdapterStep::AllReduce;
  };
  auto bucket_key = [](const CommEdge& e) {
    std::string key;
    for (const auto& grp : e.adapter.steps[0].groups) key += group_text(grp);
    return key;
  };
  std::map<std::pair<int, int>, int> fwd_edge, bwd_edge;  // (node, input) -> edge
  for (int i : live) (cp.edges[i].backward ? bwd_edge : fwd_edge)[{cp.edges[i].backward ? cp.edges[i].producer : cp.edges[i].consumer, cp.edges[i].input_index}] = i;
  std::vector<std::vector<Entry>> seq(static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    int replica = rank / k, device = rank % k;
    auto grank = [&](int d) { return replica * k + d; };
    auto emit_edge = [&](int ei) {
      const CommEdge& e = cp.edges[ei];
      for (size_t s = 0; s < e.adapter.steps.size(); ++s) {
        const AdapterStep& st = e.adapter.steps[s];
        if (st.prim == AdapterStep::Chunk || st.prim == AdapterStep::ValueSplit) continue;
        for (const auto& grp : st.groups) {
          if (std::find(grp.begin(), grp.end(), device) == grp.end()) continue;
          Entry en;
          en.edge = ei;
          en.step = static_cast<int>(s);
          for (int d : grp) en.group.push_back(grank(d));
          std::sort(en.group.begin(), en.group.end());
          en.what = std::string(prim_name(st.prim)) + " of " + edge_text(g, e);
          seq[rank].push_back(en);
        }
      }
    };
    for (int n : order)
      for (size_t kk = 0; kk < g.node(n).inputs.size(); ++kk)
        if (auto it = fwd_edge.find({n, static_cast<int>(kk)}); it != fwd_edge.end()) emit_edge(it->second);
    std::map<std::string, Entry> buckets;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      for (size_t kk = 0; kk < g.node(*it).inputs.size(); ++kk) {
        auto e = bwd_edge.find({*it, static_cast<int>(kk)});
        if (e == bwd_edge.end()) continue;
        const CommEdge& ce = cp.edges[e->second];
        if (!is_deferred(ce)) {
          emit_edge(e->second);
          continue;
        }
        for (const auto& grp : ce.adapter.steps[0].groups) {
          if (std::find(grp.begin(), grp.end(), device) == grp.end()) continue;
          Entry& b = buckets[bucket_key(ce)];
          b.kind = Entry::Bucket;
          b.group.clear();
          for (int d : grp) b.group.push_back(grank(d));
          b.what = "bucketed gradient allreduce over " + group_text(b.group);
          b.params.insert(ce.tensor);
        }
      }
    for (auto& [key, b] : buckets)
      if (b.group.size() > 1) seq[rank].push_back(b);
    std::set<int> held;  // parameters whose gradient this rank updates
    for (int i : live) {
      const CommEdge& e = cp.edges[i];
      if (e.backward && e.consumer < 0 && std::find(e.to.devices.begin(), e.to.devices.end(), device) != e.to.devices.end()) held.insert(e.tensor);
    }
    if (replicas > 1)
      for (int p : held) {
        Entry r;
        r.kind = Entry::Replica;
        r.param = p;
        for (int j = 0; j < replicas; ++j) r.group.push_back(j * k + device);
        r.scale = 1.0 / replicas;
        r.what = "replica average of the gradient of " + g.tensor(p).name;
        seq[rank].push_back(r);
      }
    Entry loss;
    loss.kind = Entry::Loss;
    for (int r = 0; r < world; ++r) loss.group.push_back(r);
    loss.what = "loss and gradient-norm allreduce";
    if (world > 1) seq[rank].push_back(loss);
    for (int p : held) {
      Entry u;
      u.kind = Entry::Update;
      u.param = p;
      u.what = "update of " + g.tensor(p).name;
      seq[rank].push_back(u);
    }
  }
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
      auto& s = seq[0];
      for (size_t i = 0; i < s.size() && !done; ++i)
        if (s[i].kind == Entry::Update) {
          // Move it before the first reduction that involves its parameter.
          for (size_t j = 0; j < i && !done; ++j)
            if ((s[j].kind == Entry::Bucket && s[j].params.count(s[i].param)) || (s[j].kind == Entry::Replica && s[j].param == s[i].param) ||
                (s[j].kind == Entry::Coll && cp.edges[s[j].edge].tensor == s[i].param)) {
              Entry u = s[i];
              s.erase(s.begin() + static_cast<long>(i));
              s.insert(s.begin() + static_cast<long>(j), u);
              out.applied = "rank 0 issues the " + u.what + " before its gradient is reduced";
              done = true;
            }
        }
    }
    if (bug == SeededBug::CollectiveOrder) {
      auto& s = seq[0];
      for (size_t i = 0; i + 1 < s.size() && !done; ++i)
        for (size_t j = i + 1; j < s.size() && !done; ++j)
          if (s[i].kind != Entry::Update && s[j].kind != Entry::Update && !(s[i] == s[j])) {
            std::swap(s[i], s[j]);
            out.applied = "rank 0 issues '" + s[i].what + "' before '" + s[j].what + "'";
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
    const auto& s = seq[static_cast<size_t>(rank)];
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i].kind == Entry::Update)
        for (size_t j = i + 1; j < s.size(); ++j)
          if ((s[j].kind == Entry::Bucket && s[j].params.count(s[i].param)) || (s[j].kind == Entry::Replica && s[j].param == s[i].param) ||
              (s[j].kind == Entry::Coll && cp.edges[s[j].edge].tensor == s[i].param && cp.edges[s[j].edge].backward)) {
            out.errors.push_back("rank " + std::to_string(rank) + ": the " + s[i].what + " is issued before its gradient is reduced (" + s[j].what + ")");
            break;
          }
      if (s[i].kind == Entry::Replica && std::fabs(s[i].scale - 1.0 / replicas) > 1e-12)
        out.errors.push_back("rank " + std::to_string(rank) + ": the gradient of " + g.tensor(s[i].param).name + " is scaled by " +
                             std::to_string(s[i].scale) + " but by 1/" + std::to_string(replicas) + " on the other replicas");
    }
  }

  // Matching: a collective runs when every member of its group has it next.
  std::vector<size_t> pos(static_cast<size_t>(world), 0);
  auto next_coll = [&](int r) -> const Entry* {
    auto& s = seq[static_cast<size_t>(r)];
    while (pos[r] < s.size() && s[pos[r]].kind == Entry::Update) ++pos[r];
    return pos[r] < s.size() ? &s[pos[r]] : nullptr;
  };
  while (true) {
    bool progress = false, pending = false;
    for (int r = 0; r < world; ++r) {
      const Entry* e = next_coll(r);
      if (!e) continue;
      pending = true;
      bool all = true;
      for (int m : e->group) {
        const Entry* o = next_coll(m);
        all = all && o && *o == *e;
      }
      if (!all) continue;
      std::vector<int> members = e->group;
      for (int m : members) ++pos[m];
      ++out.collectives;
      progress = true;
    }
    if (!pending) break;
    if (!progress) {
      std::string msg = "deadlock: the ranks wait on different collectives:";
      int shown = 0;
      for (int r = 0; r < world && shown < 4; ++r)
        if (const Entry* e = next_coll(r)) {
          msg += " rank " + std::to_string(r) + " on the " + e->what + " over " + group_text(e->group) + ";";
          ++shown;
        }
      out.errors.push_back(msg);
      break;
    }
  }
  out.ok = out.errors.empty();
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace nns::backend
