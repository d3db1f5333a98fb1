// Order: op-order directives and the data flow must admit a schedule.
//
// Every top-level op n gets an execution interval [s_n, e_n] (integers);
// data flow p -> n asserts e_p < s_n (hard: it is the model, not a
// directive). A sub-op x named by an order directive gets its own interval
// inside its parent's. order(a, b) asserts e_a < s_b under the order's
// tracking literal. A cycle — orders contradicting each other or the data
// flow, or ordering an op against its own part — makes the system unsat,
// and the core names the order directives of the cycle.
//
// Micro-batches (what order(a, b) means when b feeds a): the inputs of a
// train block are one micro-batch and a step runs several, so an order
// whose "after" op produces data the "before" op consumes cannot speak of
// one micro-batch; it orders a of micro-batch m before b of micro-batch
// m + 1 — the pipeline schedule of examples/01_mlp.nns, where the second
// layer of one micro-batch runs before the first layer of the next. Such
// a shifted order never creates a cycle within a micro-batch (every cycle
// in the unrolled schedule would have to stay inside one micro-batch), so
// it is not encoded; with a single micro-batch it constrains nothing. The
// data flow used here is between whole ops: a part of op n is taken to
// depend on every part of n's producers (conservative: it may reject an
// order between independent parts of dependent ops, never accept a cycle).
#include <algorithm>
#include <deque>

#include "semantics/checker/encoder.h"

namespace nns::sema::check {

namespace {

class OrderPass {
 public:
  explicit OrderPass(Encoder& e) : e_(e), g_(e.g), p_(e.plan) {}

  void run() {
    if (p_.orders.empty()) return;
    build_data_flow();
    for (const auto& [from, to] : data_edges_) {
      // Ids first: creating an entity grows the vectors the operands live in.
      int a = entity_of_root(from), b = entity_of_root(to);
      e_.solver.add(end_[a] < start_[b]);
      strict_.push_back({a, b, -1});
    }
    for (size_t i = 0; i < p_.orders.size(); ++i) {
      const OrderConstraint& o = p_.orders[i];
      int na = p_.subops[o.before].node, nb = p_.subops[o.after].node;
      int dir = e_.directive(DirectiveKind::Order, o.loc, "order #" + std::to_string(i));
      if (na != nb && reaches(nb, na)) continue;  // micro-batch m before m + 1: see the header comment
      int a = entity_of_sub(o.before), b = entity_of_sub(o.after);
      e_.tracked({dir}, end_[a] < start_[b]);
      strict_.push_back({a, b, dir});
    }
    e_.explain_with([this](const std::set<int>& core) { return explain(core); });
  }

 private:
  struct Edge {
    int from, to;
    int directive;  // -1: data flow
  };

  void build_data_flow() {
    for (size_t n = 0; n < p_.root_of_node.size(); ++n) {
      if (p_.root_of_node[n] < 0) continue;
      const OpNode& node = g_.node(static_cast<int>(n));
      for (int t : node.inputs) {
        int prod = g_.tensor(t).producer;
        if (prod < 0 || prod >= static_cast<int>(p_.root_of_node.size()) || p_.root_of_node[prod] < 0) continue;
        data_edges_.push_back({prod, static_cast<int>(n)});
      }
    }
    std::sort(data_edges_.begin(), data_edges_.end());
    data_edges_.erase(std::unique(data_edges_.begin(), data_edges_.end()), data_edges_.end());
    succ_.assign(p_.root_of_node.size(), {});
    for (const auto& [a, b] : data_edges_) succ_[a].push_back(b);
  }

  // Whether data flows (transitively) from node `from` to node `to`.
  bool reaches(int from, int to) {
    auto it = reach_cache_.find(from);
    if (it == reach_cache_.end()) {
      std::vector<char> seen(succ_.size(), 0);
      std::deque<int> q{from};
      seen[from] = 1;
      while (!q.empty()) {
        int x = q.front();
        q.pop_front();
        for (int y : succ_[x])
          if (!seen[y]) {
            seen[y] = 1;
            q.push_back(y);
          }
      }
      it = reach_cache_.emplace(from, std::move(seen)).first;
    }
    return it->second[to] != 0;
  }

  int new_entity(const std::string& name, int parent) {
    int id = static_cast<int>(start_.size());
    start_.push_back(e_.int_var("s_" + name));
    end_.push_back(e_.int_var("e_" + name));
    parent_.push_back(parent);
    e_.solver.add(start_[id] <= end_[id]);
    if (parent >= 0) e_.solver.add(start_[parent] <= start_[id] && end_[id] <= end_[parent]);
    return id;
  }

  int entity_of_root(int node) {
    auto it = node_entity_.find(node);
    if (it != node_entity_.end()) return it->second;
    int id = new_entity("n" + std::to_string(node), -1);
    label_.push_back("'" + g_.node(node).name + "'");
    node_entity_[node] = id;
    return id;
  }

  int entity_of_sub(int sub) {
    const SubOp& s = p_.subops[sub];
    if (s.parent < 0) return entity_of_root(s.node);
    auto it = sub_entity_.find(sub);
    if (it != sub_entity_.end()) return it->second;
    int parent = entity_of_sub(s.parent);
    int id = new_entity("x" + std::to_string(sub), parent);
    label_.push_back(e_.part_label(sub));
    sub_entity_[sub] = id;
    return id;
  }

  // Finds a cycle made of the strict edges whose directive is in the core
  // (data edges always count); intervals related by containment chain.
  std::optional<Conflict> explain(const std::set<int>& core) {
    int n = static_cast<int>(start_.size());
    std::vector<std::vector<std::pair<int, int>>> adj(n);  // to, edge index (-1: containment)
    for (size_t i = 0; i < strict_.size(); ++i) {
      const Edge& ed = strict_[i];
      if (ed.directive >= 0 && !core.count(ed.directive)) continue;
      adj[ed.from].push_back({ed.to, static_cast<int>(i)});
    }
    for (int x = 0; x < n; ++x)
      for (int a = parent_[x]; a >= 0; a = parent_[a]) {
        adj[x].push_back({a, -1});
        adj[a].push_back({x, -1});
      }
    // A cycle containing an order edge u -> v: a path back from v to u.
    for (size_t i = 0; i < strict_.size(); ++i) {
      const Edge& ed = strict_[i];
      if (ed.directive < 0 || !core.count(ed.directive)) continue;
      std::vector<std::pair<int, int>> prev(n, {-2, -2});
      std::deque<int> q{ed.to};
      prev[ed.to] = {-1, -1};
      while (!q.empty() && prev[ed.from].first == -2) {
        int x = q.front();
        q.pop_front();
        for (auto [y, ei] : adj[x])
          if (prev[y].first == -2) {
            prev[y] = {x, ei};
            q.push_back(y);
          }
      }
      if (prev[ed.from].first == -2) continue;
      std::vector<int> edges{static_cast<int>(i)};
      for (int x = ed.from; prev[x].first >= 0; x = prev[x].first)
        if (prev[x].second >= 0) edges.insert(edges.begin() + 1, prev[x].second);
      Conflict c;
      std::string steps;
      for (int ei : edges) {
        const Edge& s = strict_[ei];
        std::string step = s.directive >= 0 ? label_[s.from] + " runs before " + label_[s.to] : label_[s.from] + " feeds " + label_[s.to];
        steps += (steps.empty() ? "" : ", ") + step;
        if (s.directive >= 0) {
          c.directives.push_back(s.directive);
          c.notes[s.directive] = "orders " + label_[s.from] + " before " + label_[s.to];
        }
      }
      std::string why;
      if (edges.size() == 1) why = ", but one is a part of the other";
      c.message = "op-order cycle: " + steps + why + "; no schedule can satisfy these order directives";
      return c;
    }
    return std::nullopt;
  }

  Encoder& e_;
  const Graph& g_;
  const Plan& p_;
  std::vector<std::pair<int, int>> data_edges_;
  std::vector<std::vector<int>> succ_;
  std::map<int, std::vector<char>> reach_cache_;
  std::vector<z3::expr> start_, end_;
  std::vector<int> parent_;
  std::vector<std::string> label_;
  std::map<int, int> node_entity_, sub_entity_;
  std::vector<Edge> strict_;
};

}  // namespace

void encode_order(Encoder& e) {
  // The pass object must outlive solve(): its explainer reads it.
  auto pass = std::make_shared<OrderPass>(e);
  pass->run();
  e.keep_alive(pass);
}

}  // namespace nns::sema::check
