// Constraint tables: the rules a plan declares about itself (nnScaler's
// Tables 2-7, written in .nns with the builtins of table_builtins.cpp).
//
// split_only, split_counts and place_on judge one op at a time: a breach is
// a conflict between the constraint and the directive that breaks it.
// same_split relates ops to each other: one Z3 integer per constraint is
// the common split count, and every op's count along the dimension is
// asserted equal to it under the literals of the directives that made the
// count (its trans directives, or its placement when it is not split) — so
// the core of a breach names the constraint and two directives that
// disagree.
#include <algorithm>

#include "semantics/checker/encoder.h"

namespace nns::sema::check {

namespace {

std::string list_text(const std::vector<std::string>& xs) {
  std::string s;
  for (const std::string& x : xs) s += (s.empty() ? "'" : ", '") + x + "'";
  return s;
}

// "1, 2 or 4"
std::string list_text(const std::vector<int64_t>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i == 0 ? "" : i + 1 == xs.size() ? " or " : ", ") + std::to_string(xs[i]);
  return s;
}

std::string parts_text(int64_t n) { return n == 1 ? "1 part (not split)" : std::to_string(n) + " parts"; }

// The identifier `dim` names on this op: "batch" is dim 0 of the first
// tensor input (as trans() reads it); "" when the op has no such split.
std::string resolve_dim(const OpNode& n, const std::string& dim) {
  if (dim == "value") return "value";
  if (dim == "batch") {
    for (size_t i = 0; i < n.anno.anno.inputs.size(); ++i) {
      if (n.anno.anno.inputs[i].non_tensor) continue;
      auto c = choice_for(n.anno, static_cast<int>(i), 0);
      return c ? c->id : "";
    }
    return "";
  }
  for (const TransformChoice& c : transform_space(n.anno, false))
    if (c.id == dim) return dim;
  return "";
}

// "'h'", or "'*0' (its batch dimension)" when the identifier is the batch.
std::string id_text(const OpNode& n, const std::string& id) {
  std::string s = "'" + id + "'";
  if (id != "value" && id == resolve_dim(n, "batch")) s += " (its batch dimension)";
  return s;
}

class TablePass {
 public:
  explicit TablePass(Encoder& e) : e_(e), g_(e.g), p_(e.plan) {}

  void run() {
    for (size_t i = 0; i < p_.constraints.size(); ++i) {
      const PlanConstraint& c = p_.constraints[i];
      int dc = e_.directive(DirectiveKind::Constraint, c.loc, "constraint '" + c.name + "'");
      switch (c.kind) {
        case PlanConstraint::SplitOnly: split_only(c, dc); break;
        case PlanConstraint::SplitCounts: split_counts(c, dc); break;
        case PlanConstraint::PlaceOn: place_on(c, dc); break;
        case PlanConstraint::SameSplit: same_split(c, dc, static_cast<int>(i)); break;
      }
    }
  }

 private:
  // The sub-ops under `sub` (itself included).
  template <class F>
  void each_sub(int sub, F&& f) {
    std::vector<int> stack{sub};
    while (!stack.empty()) {
      int x = stack.back();
      stack.pop_back();
      f(x);
      for (auto it = p_.subops[x].children.rbegin(); it != p_.subops[x].children.rend(); ++it) stack.push_back(*it);
    }
  }

  void split_only(const PlanConstraint& c, int dc) {
    for (int op : c.ops) {
      const OpNode& n = g_.node(p_.subops[op].node);
      std::vector<std::string> allowed;
      for (const std::string& d : c.dims) allowed.push_back(resolve_dim(n, d));
      each_sub(op, [&](int x) {
        const SubOp& s = p_.subops[x];
        ++e_.stats.ground_checks;
        if (s.children.empty()) return;
        const std::string& id = p_.subops[s.children[0]].split_id;
        if (std::find(allowed.begin(), allowed.end(), id) != allowed.end()) return;
        Conflict k;
        int dt = e_.trans_of(s.children[0]);
        k.directives = {dc, dt};
        k.message = "constraint '" + c.name + "' allows op '" + n.name + "' to be split only along " + list_text(c.dims) +
                    ", but it is split along " + id_text(n, id);
        k.notes[dc] = "constraint '" + c.name + "' is declared here";
        k.notes[dt] = "op '" + n.name + "' is split along " + id_text(n, id) + " here";
        e_.conflict(k);
      });
    }
  }

  // Trans directives on the path from `top` down to `leaf` (the placement when none).
  std::vector<int> path_directives(int top, int leaf, int64_t& parts, const std::string& only_id = "") {
    std::vector<int> dirs;
    parts = 1;
    for (int x = leaf; x != top && p_.subops[x].parent >= 0; x = p_.subops[x].parent) {
      const SubOp& s = p_.subops[x];
      if (!only_id.empty() && s.split_id != only_id) continue;
      parts *= s.split_num;
      dirs.push_back(e_.trans_of(x));
    }
    std::sort(dirs.begin(), dirs.end());
    dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
    if (dirs.empty()) dirs.push_back(e_.place_of(leaf));
    return dirs;
  }

  void split_counts(const PlanConstraint& c, int dc) {
    for (int op : c.ops) {
      const OpNode& n = g_.node(p_.subops[op].node);
      each_sub(op, [&](int x) {
        if (!p_.subops[x].children.empty()) return;
        ++e_.stats.ground_checks;
        int64_t parts = 1;
        std::vector<int> dirs = path_directives(op, x, parts);
        if (std::find(c.values.begin(), c.values.end(), parts) != c.values.end()) return;
        Conflict k;
        k.directives = dirs;
        k.directives.push_back(dc);
        k.message = "constraint '" + c.name + "' allows op '" + n.name + "' to be split into " + list_text(c.values) +
                    " parts, but the plan splits it into " + std::to_string(parts);
        k.notes[dc] = "constraint '" + c.name + "' is declared here";
        for (int d : dirs)
          k.notes[d] = e_.info(d).kind == DirectiveKind::Trans ? "op '" + n.name + "' is split here" : "op '" + n.name + "' is placed whole here";
        e_.conflict(k);
      });
    }
  }

  void place_on(const PlanConstraint& c, int dc) {
    for (int op : c.ops) {
      each_sub(op, [&](int x) {
        const SubOp& s = p_.subops[x];
        if (!s.children.empty()) return;
        ++e_.stats.ground_checks;
        for (int d : s.devices) {
          if (std::find(c.values.begin(), c.values.end(), d) != c.values.end()) continue;
          Conflict k;
          int dp = e_.place_of(x);
          k.directives = {dc, dp};
          k.message = "constraint '" + c.name + "' allows " + e_.part_label(x) + " only on device(s) " + list_text(c.values) +
                      ", but it is placed on device " + std::to_string(d);
          k.notes[dc] = "constraint '" + c.name + "' is declared here";
          k.notes[dp] = "placed on device " + std::to_string(d) + " here";
          e_.conflict(k);
          return;
        }
      });
    }
  }

  struct Group {
    int64_t parts;
    std::vector<int> dirs;
    int op;  // an op with this count (for the message)
  };

  void same_split(const PlanConstraint& c, int dc, int index) {
    const std::string& dim = c.dims.empty() ? std::string("batch") : c.dims[0];
    std::vector<Group> groups;
    for (int op : c.ops) {
      const OpNode& n = g_.node(p_.subops[op].node);
      std::string id = resolve_dim(n, dim);
      if (id.empty()) continue;  // the op has no such dimension: the rule does not speak of it
      each_sub(op, [&](int x) {
        if (!p_.subops[x].children.empty()) return;
        int64_t parts = 1;
        std::vector<int> dirs = path_directives(op, x, parts, id);
        for (const Group& gr : groups)
          if (gr.parts == parts && gr.dirs == dirs) return;
        groups.push_back({parts, dirs, p_.subops[op].node});
      });
    }
    if (groups.empty()) return;
    z3::expr count = e_.int_var("same_split_" + std::to_string(index));
    for (const Group& gr : groups) {
      std::vector<int> dirs = gr.dirs;
      dirs.push_back(dc);
      e_.tracked(dirs, count == e_.int_val(gr.parts));
    }
    std::string name = c.name;
    e_.explain_with([this, groups, dc, name, dim](const std::set<int>& core) -> std::optional<Conflict> {
      if (!core.count(dc)) return std::nullopt;
      auto in_core = [&](const Group& gr) {
        return std::all_of(gr.dirs.begin(), gr.dirs.end(), [&](int d) { return core.count(d) > 0; });
      };
      for (size_t i = 0; i < groups.size(); ++i)
        for (size_t j = 0; j < i; ++j) {
          const Group &a = groups[j], &b = groups[i];
          if (a.parts == b.parts || !in_core(a) || !in_core(b)) continue;
          Conflict k;
          k.directives = a.dirs;
          k.directives.insert(k.directives.end(), b.dirs.begin(), b.dirs.end());
          k.directives.push_back(dc);
          k.message = "constraint '" + name + "' requires every op to split '" + dim + "' the same way, but op '" + g_.node(a.op).name +
                      "' is split into " + parts_text(a.parts) + " along it and op '" + g_.node(b.op).name + "' into " +
                      parts_text(b.parts);
          k.notes[dc] = "constraint '" + name + "' is declared here";
          for (int d : a.dirs) k.notes[d] = "op '" + g_.node(a.op).name + "': " + parts_text(a.parts) + " here";
          for (int d : b.dirs) k.notes[d] = "op '" + g_.node(b.op).name + "': " + parts_text(b.parts) + " here";
          return k;
        }
      return std::nullopt;
    });
  }

  Encoder& e_;
  const Graph& g_;
  const Plan& p_;
};

}  // namespace

void encode_tables(Encoder& e) {
  auto pass = std::make_shared<TablePass>(e);
  pass->run();
  e.keep_alive(pass);
}

}  // namespace nns::sema::check
