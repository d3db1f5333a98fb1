#include "repl/plan_text.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace nns::repl {

using sema::Plan;
using sema::SubOp;

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct Writer {
  const sema::Graph& g;
  const Plan& p;
  bool parametric = false;  // counts equal to the device count written as ngpus
  std::ostringstream out;
  std::map<int, std::string> var;  // split sub-op -> the variable holding its parts
  int next_var = 0;

  // A split count or the end of a device range: `ngpus` where it is the
  // device count and the text is parametric.
  std::string count(int64_t n) const { return parametric && n == p.ngpus ? std::string("ngpus") : std::to_string(n); }
  std::string device_list(const std::vector<int>& devs) const {
    // a..n for a run of consecutive devices, else a list.
    bool run = devs.size() > 1;
    for (size_t i = 1; i < devs.size(); ++i) run = run && devs[i] == devs[i - 1] + 1;
    if (run) return std::to_string(devs.front()) + ".." + count(devs.back() + 1);
    std::string s = "[";
    for (size_t i = 0; i < devs.size(); ++i) s += (i ? ", " : "") + std::to_string(devs[i]);
    return s + "]";
  }

  std::string ref(int sub) {
    const SubOp& s = p.subops[sub];
    if (s.parent < 0) return "by_name(" + quoted(g.node(s.node).name) + ")";
    return var.at(s.parent) + "[" + std::to_string(s.split_index) + "]";
  }
  std::string trans(int sub) {
    const SubOp& first = p.subops[p.subops[sub].children.front()];
    return "trans(" + ref(sub) + ", dim = " + quoted(first.split_id) + ", num = " + count(first.split_num) + ")";
  }
};

// A whole op split once, each part assigned to device i in order: the
// common shape of tensor-parallel plans, written as one loop over names.
bool simple_split(const Plan& p, int root) {
  const SubOp& r = p.subops[root];
  if (r.leaf() || r.recompute || r.regather) return false;
  for (size_t i = 0; i < r.children.size(); ++i) {
    const SubOp& c = p.subops[r.children[i]];
    if (!c.leaf() || c.recompute || c.regather || c.devices.size() != 1 || c.devices[0] != static_cast<int>(i))
      return false;
  }
  return true;
}

// The trans() calls, in the order the splits were made; runs of simple
// splits become loops. Returns the leaves those loops place.
std::set<int> write_splits(Writer& w) {
  const sema::Graph& g = w.g;
  const Plan& p = w.p;
  std::ostringstream& out = w.out;
  // Sub-ops that an order() refers to need a name outside any loop.
  std::set<int> referenced;
  for (const sema::OrderConstraint& o : p.orders) {
    referenced.insert(o.before);
    referenced.insert(o.after);
  }
  for (const sema::PlanConstraint& c : p.constraints)
    for (int sub : c.ops) referenced.insert(sub);
  auto touches_referenced = [&](int root) {
    if (referenced.count(root)) return true;
    for (int c : p.subops[root].children)
      if (referenced.count(c)) return true;
    return false;
  };

  // Splits in the order they were made: sub-ops whose children come first.
  std::vector<int> splits;
  for (size_t i = 0; i < p.subops.size(); ++i)
    if (!p.subops[i].leaf()) splits.push_back(static_cast<int>(i));
  std::sort(splits.begin(), splits.end(), [&](int a, int b) { return p.subops[a].children.front() < p.subops[b].children.front(); });

  std::set<int> placed_inline;  // leaves assigned inside a loop
  for (size_t i = 0; i < splits.size();) {
    int s = splits[i];
    // A run of consecutive simple splits of whole ops with the same
    // dimension and count becomes one loop.
    size_t j = i;
    if (p.subops[s].parent < 0 && simple_split(p, s) && !touches_referenced(s)) {
      const SubOp& c0 = p.subops[p.subops[s].children.front()];
      while (j < splits.size()) {
        int t = splits[j];
        const SubOp& tc = p.subops[p.subops[t].children.front()];
        if (p.subops[t].parent >= 0 || !simple_split(p, t) || touches_referenced(t) || tc.split_id != c0.split_id || tc.split_num != c0.split_num)
          break;
        ++j;
      }
    }
    if (j > i) {
      const SubOp& c0 = p.subops[p.subops[s].children.front()];
      if (j - i == 1) {
        out << "  let p" << w.next_var << " = " << w.trans(s) << "\n";
        out << "  for i in 0.." << w.count(c0.split_num) << " { assign(p" << w.next_var << "[i], i) }\n";
        ++w.next_var;
      } else {
        out << "  for opname in [";
        for (size_t k = i; k < j; ++k) out << (k > i ? ",\n                  " : "") << quoted(g.node(p.subops[splits[k]].node).name);
        out << "] {\n";
        out << "    let parts = trans(by_name(opname), dim = " << quoted(c0.split_id)
            << ", num = " << w.count(c0.split_num) << ")\n";
        out << "    for i in 0.." << w.count(c0.split_num) << " { assign(parts[i], i) }\n";
        out << "  }\n";
      }
      for (size_t k = i; k < j; ++k)
        for (int c : p.subops[splits[k]].children) placed_inline.insert(c);
      i = j;
      continue;
    }
    std::string v = "p" + std::to_string(w.next_var++);
    out << "  let " << v << " = " << w.trans(s) << "\n";
    w.var[s] = v;
    ++i;
  }
  return placed_inline;
}

// assign() and replicate() for every placed leaf not in `placed_inline`; whether every leaf is placed.
bool write_placements(Writer& w, const std::set<int>& placed_inline) {
  const Plan& p = w.p;
  std::ostringstream& out = w.out;
  // Placements. When every leaf is placed, those on all devices in order
  // are what replicate(unassigned(), ...) makes of the rest.
  bool complete = true;
  for (const SubOp& s : p.subops)
    if (s.leaf() && s.devices.empty()) complete = false;
  std::vector<int> all;
  for (int d = 0; d < p.ngpus; ++d) all.push_back(d);
  bool rest_replicated = false;
  // Consecutive parts of one split placed i -> i: a loop.
  std::set<int> done = placed_inline;
  for (const auto& [parent, v] : w.var) {
    const SubOp& s = p.subops[parent];
    bool in_order = true;
    for (size_t i = 0; i < s.children.size(); ++i) {
      const SubOp& c = p.subops[s.children[i]];
      in_order = in_order && c.leaf() && c.devices.size() == 1 && c.devices[0] == static_cast<int>(i);
    }
    if (in_order) {
      out << "  for i in 0.." << w.count(static_cast<int64_t>(s.children.size())) << " { assign(" << v << "[i], i) }\n";
      for (int c : s.children) done.insert(c);
    }
  }
  for (size_t i = 0; i < p.subops.size(); ++i) {
    const SubOp& s = p.subops[i];
    if (!s.leaf() || s.devices.empty() || done.count(static_cast<int>(i))) continue;
    if (complete && s.devices == all) {
      rest_replicated = true;
      continue;
    }
    if (s.devices.size() == 1) out << "  assign(" << w.ref(static_cast<int>(i)) << ", " << s.devices[0] << ")\n";
    else
      out << "  replicate(" << w.ref(static_cast<int>(i)) << ", " << w.device_list(s.devices) << ")\n";
  }
  if (rest_replicated) out << "  replicate(unassigned(), 0.." << w.count(p.ngpus) << ")\n";
  return complete;
}

// recompute() and regather() marks and order() constraints between sub-ops.
void write_recompute_and_orders(Writer& w) {
  const Plan& p = w.p;
  std::ostringstream& out = w.out;
  // Recompute marks: a mark covers a sub-op and everything split from it.
  // Regather marks in one call (a call that gathers nothing again is
  // warned about, and most marked ops of a block have no gathered input).
  std::string regather;
  for (size_t i = 0; i < p.subops.size(); ++i) {
    const SubOp& s = p.subops[i];
    if (s.recompute && (s.parent < 0 || !p.subops[s.parent].recompute)) out << "  recompute(" << w.ref(static_cast<int>(i)) << ")\n";
    if (s.regather && (s.parent < 0 || !p.subops[s.parent].regather))
      regather += (regather.empty() ? "" : ", ") + w.ref(static_cast<int>(i));
  }
  if (!regather.empty()) out << "  regather([" << regather << "])\n";
  for (const sema::OrderConstraint& o : p.orders) out << "  order(" << w.ref(o.before) << ", " << w.ref(o.after) << ")\n";
}

void write_schedules(Writer& w) {
  const sema::Graph& g = w.g;
  const Plan& p = w.p;
  std::ostringstream& out = w.out;
  // Pipeline schedules: each segment as the list of its ops, the library
  // schedule as one call, hand-written task orders one by one.
  if (!p.task_orders.empty()) {
    for (size_t i = 0; i < p.segments.size(); ++i) {
      out << "  let segment" << i << " = [";
      for (size_t k = 0; k < p.segments[i].nodes.size(); ++k) out << (k ? ", " : "") << "by_name(" << quoted(g.node(p.segments[i].nodes[k]).name) << ")";
      out << "]\n";
    }
    auto seg = [](int s) { return "segment" + std::to_string(s); };
    front::SourceLoc sched_loc;
    if (!p.schedules.empty()) {
      const sema::PlanSchedule& sc = p.schedules[0];
      sched_loc = sc.loc;
      const std::vector<int>& st = sc.stage_segment;
      out << "  schedule(" << quoted(sc.kind) << ", [";
      if (sc.kind == "nf1b" || sc.kind == "3f1b") {
        for (int k = 0; k <= sc.recycles; ++k) {
          out << (k ? ", " : "") << "[";
          for (int r = 0; r < sc.ranks; ++r) out << (r ? ", " : "") << seg(st[static_cast<size_t>(k * sc.ranks + r)]);
          out << "]";
        }
        out << "]";
      } else {
        size_t n = sc.kind == "interlaced" ? st.size() - 2 : st.size();
        for (size_t k = 0; k < n; ++k) out << (k ? ", " : "") << seg(st[k]);
        out << "]";
        if (sc.v > 1) out << ", v = " << sc.v;
        if (sc.kind == "interlaced") out << ", head = " << seg(st[n]) << ", tail = " << seg(st[n + 1]);
      }
      out << ")\n";
    }
    static const char* task_fn[] = {"fwd", "bwd", "wgrad"};
    for (const sema::TaskOrder& o : p.task_orders) {
      if (!p.schedules.empty() && o.loc.line == sched_loc.line && o.loc.col == sched_loc.col && o.loc.file == sched_loc.file) continue;
      out << "  order(" << task_fn[o.before.phase] << "(" << seg(o.before.segment) << ", " << o.before.mb << "), " << task_fn[o.after.phase] << "("
          << seg(o.after.segment) << ", " << o.after.mb << "))\n";
    }
  }
}

void write_constraints(Writer& w) {
  const Plan& p = w.p;
  std::ostringstream& out = w.out;
  // Constraint tables, each with its own name so the checker's messages stay the same.
  for (const sema::PlanConstraint& c : p.constraints) {
    static const char* fns[] = {"same_split", "split_only", "split_counts", "place_on"};
    out << "  " << fns[c.kind] << "([";
    for (size_t i = 0; i < c.ops.size(); ++i) out << (i ? ", " : "") << w.ref(c.ops[i]);
    out << "], ";
    if (c.kind == sema::PlanConstraint::SameSplit) {
      out << quoted(c.dims.empty() ? std::string("batch") : c.dims[0]);
    } else if (c.kind == sema::PlanConstraint::SplitOnly) {
      out << "[";
      for (size_t i = 0; i < c.dims.size(); ++i) out << (i ? ", " : "") << quoted(c.dims[i]);
      out << "]";
    } else {
      out << "[";
      for (size_t i = 0; i < c.values.size(); ++i) out << (i ? ", " : "") << c.values[i];
      out << "]";
    }
    out << ", name = " << quoted(c.name) << ")\n";
  }
}

}  // namespace

std::string plan_to_nns(const sema::Graph& g, const Plan& p, const std::string& name, bool parametric) {
  Writer w{g, p, parametric, {}, {}, 0};
  std::ostringstream& out = w.out;
  out << "plan " << name << "(ngpus) {\n";
  if (!parametric)
    out << "  assert(ngpus == " << p.ngpus << ", \"plan " << name << " was made for " << p.ngpus << " device(s)\")\n";
  out << "  fn by_name(qualified) { return select(qualified)[0] }  # the one op of that name\n";

  std::set<int> placed_inline = write_splits(w);
  bool complete = write_placements(w, placed_inline);
  write_recompute_and_orders(w);
  write_schedules(w);
  write_constraints(w);
  if (!complete) {
    int n = 0;
    for (const SubOp& s : p.subops)
      if (s.leaf() && s.devices.empty()) ++n;
    out << "  # not finished: " << n << " sub-op(s) have no device yet; evaluating this plan reports them\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace nns::repl
