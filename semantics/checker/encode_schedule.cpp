// Schedules: the task orders of a plan (order(task, task) and what
// schedule(...) generates, plan.h) must admit an execution, and the
// activations they keep in flight must fit.
//
// The happens-before graph has one node per task (segment, phase,
// micro-batch), where a segment's task is ONE node however many devices
// run it: its devices meet in its collectives, so none can be past it
// while another has not reached it. Ops of no segment are segments of one
// op each (they run whenever their data is there, on any device). Edges:
//   - data flow: F(producer, mb) -> F(consumer, mb) between segments, and
//     the reverse between their backwards; F -> B -> W of one segment;
//   - each order(task, task) directive (tracked: a cycle names them).
// A point-to-point send never blocks (lowering posts it and receives are
// waited where they are read), so a cycle is exactly a deadlock or an
// impossible order; one is reported with the order directives on it, as
// encode_order.cpp does for op-level orders. An order between tasks that
// share no device is an error too: nothing would enforce it.
//
// Memory under a schedule (micro-batches in flight) is not estimated here:
// the capacity check replays the lowered programs, in schedule order
// (backend/lowering/memory_check.h).
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "semantics/checker/encoder.h"

namespace nns::sema::check {

namespace {

class SchedulePass {
 public:
  explicit SchedulePass(Encoder& e) : e_(e), g_(e.g), p_(e.plan) {}

  void run() {
    if (p_.task_orders.empty()) return;
    m_ = std::max<int64_t>(1, e_.opts.micro_batches);
    units();
    if (!shared_devices()) return;
    build_graph();
    find_cycle();
  }

 private:
  // ---- units: segments, then every op of no segment ----------------------------------------
  void units() {
    nseg_ = static_cast<int>(p_.segments.size());
    unit_of_node_.assign(p_.root_of_node.size(), -1);
    for (size_t n = 0; n < p_.root_of_node.size(); ++n) {
      if (p_.root_of_node[n] < 0) continue;
      int s = n < p_.segment_of_node.size() ? p_.segment_of_node[n] : -1;
      if (s >= 0) {
        unit_of_node_[n] = s;
      } else {
        unit_of_node_[n] = nseg_ + static_cast<int>(loose_.size());
        loose_.push_back(static_cast<int>(n));
      }
    }
    nunits_ = nseg_ + static_cast<int>(loose_.size());
    // Which ops have a backward: the facts lowering uses (plan.h).
    GradientFlow flow = gradient_flow(g_, p_);
    has_b_.assign(nunits_, false);
    for (size_t n = 0; n < p_.root_of_node.size(); ++n)
      if (p_.root_of_node[n] >= 0 && flow.backward[n]) has_b_[unit_of_node_[n]] = true;
    // Devices of each segment (of its leaves).
    seg_devs_.assign(nseg_, {});
    for (int leaf : p_.leaves()) {
      int s = unit_of_node_[p_.subops[leaf].node];
      if (s < nseg_)
        for (int d : p_.subops[leaf].devices) seg_devs_[s].insert(d);
    }
  }

  std::string task_text(int unit, int phase, int mb) const {
    std::string name = unit < nseg_ ? p_.segments[unit].name : "'" + g_.node(loose_[unit - nseg_]).name + "'";
    return std::string(1, "FBW"[phase]) + "(" + name + ", mb " + std::to_string(mb) + ")";
  }
  int id(int unit, int phase, int mb) const { return (unit * 3 + phase) * static_cast<int>(m_) + mb; }

  bool shared_devices() {
    for (const TaskOrder& o : p_.task_orders) {
      const std::set<int>& a = seg_devs_[o.before.segment];
      const std::set<int>& b = seg_devs_[o.after.segment];
      bool meet = false;
      for (int d : a) meet = meet || b.count(d);
      if (meet) continue;
      int dir = e_.directive(DirectiveKind::Order, o.loc, "order");
      Conflict c;
      c.directives.push_back(dir);
      c.message = "order of " + p_.task_text(o.before) + " before " + p_.task_text(o.after) +
                  ": the two tasks run on no common device, so nothing would enforce it (tasks on different devices are ordered by their data only)";
      e_.conflict(c);
      return false;
    }
    return true;
  }

  // ---- the happens-before graph -------------------------------------------------------------
  struct Edge {
    int to, directive;  // directive -1: data flow or phase order
    int order = -1;     // index into task_orders
  };
  void add(int from, int to, int dir = -1, int order = -1) { adj_[from].push_back({to, dir, order}); }

  void build_graph() {
    adj_.assign(static_cast<size_t>(nunits_) * 3 * m_, {});
    std::set<std::pair<int, int>> flow;  // unit -> unit
    for (size_t n = 0; n < p_.root_of_node.size(); ++n) {
      if (p_.root_of_node[n] < 0) continue;
      for (int t : g_.node(static_cast<int>(n)).inputs) {
        int prod = g_.tensor(t).producer;
        if (prod < 0 || prod >= static_cast<int>(p_.root_of_node.size()) || p_.root_of_node[prod] < 0) continue;
        int a = unit_of_node_[prod], b = unit_of_node_[n];
        if (a == b) continue;
        flow.insert({a, b});
        flow_example_.insert({{a, b}, {t, prod, static_cast<int>(n)}});
      }
    }
    for (int mb = 0; mb < m_; ++mb) {
      for (const auto& [a, b] : flow) {
        add(id(a, 0, mb), id(b, 0, mb));
        if (has_b_[a] && has_b_[b]) add(id(b, 1, mb), id(a, 1, mb));
      }
      for (int u = 0; u < nunits_; ++u) {
        if (!has_b_[u]) continue;
        add(id(u, 0, mb), id(u, 1, mb));
        if (u < nseg_ && p_.segments[u].split_w) add(id(u, 1, mb), id(u, 2, mb));
      }
    }
    for (size_t i = 0; i < p_.task_orders.size(); ++i) {
      const TaskOrder& o = p_.task_orders[i];
      int dir = e_.directive(DirectiveKind::Order, o.loc, "order");
      add(id(o.before.segment, o.before.phase, o.before.mb), id(o.after.segment, o.after.phase, o.after.mb), dir, static_cast<int>(i));
    }
  }

  // A cycle through an order edge: reported with its directives.
  bool find_cycle() {
    // Kahn: what remains is on or behind a cycle.
    const size_t n = adj_.size();
    std::vector<int> indeg(n, 0);
    for (const auto& es : adj_)
      for (const Edge& ed : es) ++indeg[ed.to];
    std::vector<int> q;
    for (size_t v = 0; v < n; ++v)
      if (!indeg[v]) q.push_back(static_cast<int>(v));
    size_t seen = 0;
    while (!q.empty()) {
      int v = q.back();
      q.pop_back();
      ++seen;
      for (const Edge& ed : adj_[v])
        if (--indeg[ed.to] == 0) q.push_back(ed.to);
    }
    if (seen == n) return false;
    // For each order edge u -> v left in the cyclic part, a path v -> u.
    for (size_t u = 0; u < n; ++u) {
      if (!indeg[u]) continue;
      for (const Edge& ed : adj_[u]) {
        if (ed.directive < 0 || !indeg[ed.to]) continue;
        std::vector<std::pair<int, const Edge*>> prev(n, {-2, nullptr});
        std::deque<int> bfs{ed.to};
        prev[ed.to] = {-1, nullptr};
        while (!bfs.empty() && prev[u].first == -2) {
          int x = bfs.front();
          bfs.pop_front();
          for (const Edge& e2 : adj_[x])
            if (indeg[e2.to] && prev[e2.to].first == -2) {
              prev[e2.to] = {x, &e2};
              bfs.push_back(e2.to);
            }
        }
        if (prev[u].first == -2) continue;
        std::vector<std::pair<int, const Edge*>> path{{static_cast<int>(u), &ed}};  // (from, edge)
        std::vector<std::pair<int, const Edge*>> back;
        for (int x = static_cast<int>(u); prev[x].first >= 0; x = prev[x].first) back.push_back({prev[x].first, prev[x].second});
        path.insert(path.end(), back.rbegin(), back.rend());
        report(path);
        return true;
      }
    }
    return false;
  }

  std::string node_text(int v) const {
    int mb = v % static_cast<int>(m_), rest = v / static_cast<int>(m_);
    return task_text(rest / 3, rest % 3, mb);
  }

  // Which tensor makes unit a feed unit b: named with both ops, their
  // lines and units, and, where it flows from a later stage back to an
  // earlier one, the stage assignment that removes the cycle.
  std::string flow_text(int a, int b) const {
    auto it = flow_example_.find({a, b});
    if (it == flow_example_.end()) return "";
    const auto& [t, prod, cons] = it->second;
    auto op = [&](int n) {
      std::string unit = unit_of_node_[n] < nseg_ ? ", in " + p_.segments[unit_of_node_[n]].name : "";
      return "'" + g_.node(n).name + "' (line " + std::to_string(g_.node(n).loc.line) + unit + ")";
    };
    std::string why = "; tensor " + g_.tensor(t).name + " of " + op(prod) + " is read by " + op(cons);
    if (a < nseg_ && b < nseg_ && a > b)
      why += "; a pipeline's data flows to the same or a later stage: put '" + g_.node(cons).name + "' in " +
             p_.segments[a].name + " or later, or '" + g_.node(prod).name + "' in " + p_.segments[b].name +
             " or earlier";
    return why;
  }

  void report(const std::vector<std::pair<int, const Edge*>>& path) {
    Conflict c;
    std::string steps, detail;
    std::set<int> dirs;
    for (const auto& [from, ed] : path) {
      std::string a = node_text(from), b = node_text(ed->to);
      std::string step;
      if (ed->directive >= 0) {
        step = a + " runs before " + b;
        if (dirs.insert(ed->directive).second) {
          c.directives.push_back(ed->directive);
          c.notes[ed->directive] = "orders " + a + " before " + b;
        }
      } else {
        int fu = (from / static_cast<int>(m_)) / 3, tu = (ed->to / static_cast<int>(m_)) / 3;
        step = fu == tu ? b + " needs " + a : a + " feeds " + b;
        bool forward = (from / static_cast<int>(m_)) % 3 == 0;  // a backward's data flows against its forward's
        std::string why = fu == tu ? "" : forward ? flow_text(fu, tu) : flow_text(tu, fu);
        if (detail.empty() || (why.find("a pipeline's data") != std::string::npos &&
                               detail.find("a pipeline's data") == std::string::npos))
          detail = why;
      }
      steps += (steps.empty() ? "" : ", ") + step;
    }
    c.message = "op-order cycle: " + steps +
                "; no schedule can satisfy these order directives (the ranks would deadlock)" + detail;
    e_.conflict(c);
  }

  Encoder& e_;
  const Graph& g_;
  const Plan& p_;
  int64_t m_ = 1;
  int nseg_ = 0, nunits_ = 0;
  std::vector<int> unit_of_node_, loose_;
  std::vector<bool> has_b_;
  std::vector<std::set<int>> seg_devs_;
  std::vector<std::vector<Edge>> adj_;
  std::map<std::pair<int, int>, std::tuple<int, int, int>>
      flow_example_;  // (unit, unit) -> (tensor, producer, consumer)
};

}  // namespace

void encode_schedule(Encoder& e) {
  SchedulePass pass(e);
  pass.run();
}

}  // namespace nns::sema::check
