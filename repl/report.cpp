#include "repl/report.h"

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace nns::repl {

using sema::Graph;
using sema::OperandSlice;
using sema::Plan;
using sema::SubOp;

namespace {

std::string devices_text(const std::vector<int>& devs) {
  std::string s = "[";
  for (size_t i = 0; i < devs.size(); ++i) s += (i ? ", " : "") + std::to_string(devs[i]);
  return s + "]";
}

std::string signed_bytes(int64_t delta) {
  if (delta == 0) return "±0";
  return (delta > 0 ? "+" : "-") + sema::format_bytes(delta > 0 ? delta : -delta);
}

// Splits from the root down to `sub`: "h=1/2" (part 1 of 2 along h), "b=0/2.h=1/2".
std::string split_path(const Plan& p, int sub) {
  std::vector<std::string> parts;
  for (int s = sub; s >= 0 && p.subops[s].parent >= 0; s = p.subops[s].parent)
    parts.push_back(p.subops[s].split_id + "=" + std::to_string(p.subops[s].split_index) + "/" + std::to_string(p.subops[s].split_num));
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : ".") + *it;
  return out;
}

void leaves_under(const Plan& p, int sub, std::vector<int>& out) {
  if (p.subops[sub].leaf()) {
    out.push_back(sub);
    return;
  }
  for (int c : p.subops[sub].children) leaves_under(p, c, out);
}

}  // namespace

Plan completed(const Plan& plan) {
  Plan out = plan;
  std::vector<int> all;
  for (int d = 0; d < plan.ngpus; ++d) all.push_back(d);
  for (SubOp& s : out.subops)
    if (s.leaf() && s.devices.empty()) s.devices = all;
  return out;
}

int unplaced_leaves(const Plan& plan) {
  int n = 0;
  for (const SubOp& s : plan.subops)
    if (s.leaf() && s.devices.empty()) ++n;
  return n;
}

std::string Collective::key() const {
  return prim + "|" + groups + "|" + std::to_string(bytes) + "|" + (backward ? "b" : "f") + "|" + what;
}

int64_t CommSummary::bytes() const {
  int64_t b = 0;
  for (const Collective& c : collectives) b += c.bytes;
  return b;
}

CommSummary summarize_comm(const Graph& g, const Plan& plan) {
  CommSummary out;
  backend::CommPlan cp;
  try {
    cp = backend::derive_communication(g, completed(plan));
  } catch (const std::exception& e) {
    out.error = e.what();
    return out;
  }
  for (const backend::CommEdge& e : cp.edges) {
    if (e.shared_with >= 0) continue;  // reads (or sends its gradient through) another edge's transfer
    const sema::TensorInfo& t = g.tensor(e.tensor);
    std::string tensor = "%" + std::to_string(e.tensor) + (t.kind == sema::TensorKind::Activation ? "" : "(" + t.name + ")");
    std::string from = e.producer >= 0 ? g.node(e.producer).name : std::string(t.kind == sema::TensorKind::Param ? "param" : "input");
    std::string to = e.consumer >= 0 ? g.node(e.consumer).name : "update of " + t.name;
    std::string what = (e.backward ? "grad " : "") + tensor + " " + from + " -> " + to;
    if (!e.note.empty()) {
      out.notes.push_back(what + ": " + e.note);
      continue;
    }
    for (const backend::AdapterStep& s : e.adapter.steps) {
      if (s.prim == backend::AdapterStep::Chunk || s.prim == backend::AdapterStep::ValueSplit) continue;  // local, no traffic
      Collective c;
      c.prim = backend::prim_name(s.prim);
      if (s.prim == backend::AdapterStep::AllToAll) c.prim += " dim " + std::to_string(s.dim) + "->" + std::to_string(s.to_dim);
      else if (s.dim >= 0) c.prim += " dim " + std::to_string(s.dim);
      for (size_t i = 0; i < s.groups.size(); ++i) {
        c.groups += i ? " {" : "{";
        for (size_t j = 0; j < s.groups[i].size(); ++j) c.groups += (j ? "," : "") + std::to_string(s.groups[i][j]);
        c.groups += "}";
      }
      c.bytes = static_cast<int64_t>(s.bytes);
      c.backward = e.backward;
      c.what = what;
      out.collectives.push_back(std::move(c));
    }
  }
  return out;
}

PlanFacts analyse(const Graph& g, const Plan& plan, const sema::check::CheckOptions& opts, const sema::TrainSpec& spec,
                  const backend::Elaborator& elaborate) {
  PlanFacts f;
  f.comm = summarize_comm(g, plan);
  const Plan whole = completed(plan);
  f.check = sema::check::check_plan(g, whole, opts);
  f.memory_unknown = "the plan is not legal";
  if (f.check.verdict != sema::check::Verdict::Legal) return f;
  f.memory_unknown.clear();
  try {
    backend::LowerOptions lo;
    lo.elaborate = elaborate;
    backend::MemoryCheckOptions mo;
    mo.optimizer_slots = static_cast<int>(sema::optimizer_slots(spec.optimizer));
    backend::MemoryCheck m = backend::check_memory(g, whole, backend::lower_plan(g, whole, spec, lo), mo);
    f.memory.resize(static_cast<size_t>(std::max<int64_t>(whole.ngpus, 0)));
    for (const backend::RankMemory& r : m.ranks) {
      if (r.device < 0 || static_cast<size_t>(r.device) >= f.memory.size()) continue;
      auto whole_bytes = [](double b) { return static_cast<int64_t>(std::llround(b)); };
      f.memory[static_cast<size_t>(r.device)] = {whole_bytes(r.peak.weights), whole_bytes(r.peak.gradients), whole_bytes(r.peak.optimizer),
                                                 whole_bytes(r.peak.activations())};
    }
  } catch (const std::exception& e) {
    f.memory.clear();  // not lowerable as it stands: no program, no peak
    f.memory_unknown = std::string("the plan as it stands cannot be lowered (") + e.what() + ")";
  }
  return f;
}

std::string describe_partition(const Plan& plan, int node, size_t max_leaves) {
  if (node < 0 || node >= static_cast<int>(plan.root_of_node.size()) || plan.root_of_node[node] < 0) return "-";
  int root = plan.root_of_node[node];
  const SubOp& r = plan.subops[root];
  if (r.leaf()) {
    std::string s = r.devices.empty() ? "whole, not placed" : "whole on " + devices_text(r.devices);
    if (r.recompute) s += ", recompute";
    return r.regather ? s + ", regather" : s;
  }
  std::vector<int> leaves;
  leaves_under(plan, root, leaves);
  std::string s;
  for (size_t i = 0; i < leaves.size() && i < max_leaves; ++i) {
    const SubOp& l = plan.subops[leaves[i]];
    s += (i ? ", " : "") + split_path(plan, leaves[i]) + " -> " + (l.devices.empty() ? std::string("not placed") : devices_text(l.devices));
    if (l.recompute) s += " recompute";
    if (l.regather) s += " regather";
  }
  if (leaves.size() > max_leaves) s += ", ... (" + std::to_string(leaves.size()) + " parts)";
  return s;
}

std::string describe_subop(const Graph& g, const Plan& plan, int sub) {
  if (sub < 0 || sub >= static_cast<int>(plan.subops.size())) return "<undone>";
  std::string path = split_path(plan, sub);
  return g.node(plan.subops[sub].node).name + (path.empty() ? "" : " " + path);
}

std::string format_value(const sema::Value& v, const Graph& g, const Plan* plan) {
  using namespace sema;
  if (v.is<NoneV>()) return "none";
  if (v.is<bool>()) return v.as<bool>() ? "true" : "false";
  if (v.is<int64_t>()) return std::to_string(v.as<int64_t>());
  if (v.is<double>()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v.as<double>());
    std::string s = buf;
    if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // keep floats visibly floats
    return s;
  }
  if (v.is<std::string>()) {
    std::string s = "\"";
    for (char c : v.as<std::string>()) {
      if (c == '"' || c == '\\') s += '\\';
      if (c == '\n') s += "\\n";
      else if (c == '\t') s += "\\t";
      else s += c;
    }
    return s + "\"";
  }
  if (v.is<RangeV>()) return std::to_string(v.as<RangeV>().lo) + ".." + std::to_string(v.as<RangeV>().hi);
  if (v.is<std::shared_ptr<List>>()) {
    const List& l = *v.as<std::shared_ptr<List>>();
    std::string s = "[";
    const size_t max_items = 16;
    for (size_t i = 0; i < l.size() && i < max_items; ++i) s += (i ? ", " : "") + format_value(l[i], g, plan);
    if (l.size() > max_items) s += ", ... (" + std::to_string(l.size()) + " items)";
    return s + "]";
  }
  if (v.is<TensorV>()) {
    int id = v.as<TensorV>().id;
    if (id < 0 || id >= static_cast<int>(g.tensors().size())) return "<tensor>";
    const TensorInfo& t = g.tensor(id);
    std::string s = "tensor %" + std::to_string(id) + " " + dtype_name(t.dtype) + shape_to_string(t.shape);
    if (t.kind != TensorKind::Activation) s += " (" + std::string(t.kind == TensorKind::Param ? "param " : "input ") + t.name + ")";
    return s;
  }
  if (v.is<OpHandle>()) {
    int sub = v.as<OpHandle>().subop;
    if (!plan || sub < 0 || sub >= static_cast<int>(plan->subops.size())) return "<op: undone>";
    return "<op " + describe_subop(g, *plan, sub) + ">";
  }
  if (v.is<std::shared_ptr<Record>>()) {
    const Record& r = *v.as<std::shared_ptr<Record>>();
    std::string s = (r.kind == "dict" ? "" : r.kind) + "{";
    for (size_t i = 0; i < r.fields.size(); ++i) s += (i ? ", " : "") + r.fields[i].first + ": " + format_value(r.fields[i].second, g, plan);
    return s + "}";
  }
  if (v.is<std::shared_ptr<Function>>()) {
    const auto& f = v.as<std::shared_ptr<Function>>();
    return "<fn " + (f->fn && !f->fn->name.empty() ? f->fn->name : std::string("lambda")) + ">";
  }
  if (v.is<std::shared_ptr<OpDef>>()) {
    const OpDef& op = *v.as<std::shared_ptr<OpDef>>();
    std::string s = "<op " + op.name;
    for (size_t i = 0; i < op.annotations.size(); ++i) s += (i ? " | \"" : " \"") + op.annotations[i].to_string() + "\"";
    return s + (op.row ? "" : " composite") + ">";
  }
  if (v.is<std::shared_ptr<ModelClass>>()) return "<model " + v.as<std::shared_ptr<ModelClass>>()->decl->name + ">";
  if (v.is<std::shared_ptr<Instance>>()) {
    const Instance& i = *v.as<std::shared_ptr<Instance>>();
    std::string path = i.path();
    return "<" + i.class_name + " instance" + (path.empty() ? "" : " " + path) + ">";
  }
  if (v.is<std::shared_ptr<Builtin>>()) return "<builtin " + v.as<std::shared_ptr<Builtin>>()->name + ">";
  if (v.is<std::shared_ptr<Module>>()) return "<module " + v.as<std::shared_ptr<Module>>()->path + ">";
  return "<" + type_name(v) + ">";
}

Plan unpartitioned(const Plan& plan, int node) {
  Plan out = plan;
  if (node < 0 || node >= static_cast<int>(plan.root_of_node.size()) || plan.root_of_node[node] < 0) return out;
  int root = plan.root_of_node[node];
  std::vector<int> drop;
  std::vector<int> stack(plan.subops[root].children.begin(), plan.subops[root].children.end());
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    drop.push_back(s);
    for (int c : plan.subops[s].children) stack.push_back(c);
  }
  std::vector<int> new_index(plan.subops.size(), -1);
  std::vector<bool> dropped(plan.subops.size(), false);
  for (int s : drop) dropped[s] = true;
  out.subops.clear();
  for (size_t i = 0; i < plan.subops.size(); ++i)
    if (!dropped[i]) {
      new_index[i] = static_cast<int>(out.subops.size());
      out.subops.push_back(plan.subops[i]);
    }
  for (SubOp& s : out.subops) {
    if (s.parent >= 0) s.parent = new_index[s.parent];
    for (int& c : s.children) c = new_index[c];
  }
  SubOp& r = out.subops[new_index[root]];
  r.children.clear();
  r.devices.clear();
  r.recompute = false;
  r.regather = false;
  for (int& n : out.root_of_node)
    if (n >= 0) n = new_index[n];
  out.orders.clear();
  for (const sema::OrderConstraint& o : plan.orders)
    if (!dropped[o.before] && !dropped[o.after] && o.before != root && o.after != root)
      out.orders.push_back({new_index[o.before], new_index[o.after], o.loc});
  for (sema::PlanConstraint& c : out.constraints) {
    std::vector<int> kept;
    for (int sub : c.ops)
      if (!dropped[sub]) kept.push_back(new_index[sub]);
    c.ops = kept;
  }
  return out;
}

bool same_plan(const Plan& a, const Plan& b) {
  auto same_slice = [](const OperandSlice& x, const OperandSlice& y) {
    return x.tensor == y.tensor && x.start == y.start && x.length == y.length && x.value_index == y.value_index && x.value_parts == y.value_parts;
  };
  auto same_slices = [&](const std::vector<OperandSlice>& x, const std::vector<OperandSlice>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!same_slice(x[i], y[i])) return false;
    return true;
  };
  if (a.ngpus != b.ngpus || a.subops.size() != b.subops.size() || a.orders.size() != b.orders.size() || a.root_of_node != b.root_of_node)
    return false;
  for (size_t i = 0; i < a.subops.size(); ++i) {
    const SubOp &x = a.subops[i], &y = b.subops[i];
    if (x.node != y.node || x.parent != y.parent || x.children != y.children || x.split_id != y.split_id ||
        x.split_index != y.split_index || x.split_num != y.split_num || x.devices != y.devices ||
        x.recompute != y.recompute || x.regather != y.regather || !same_slices(x.inputs, y.inputs) ||
        !same_slices(x.outputs, y.outputs))
      return false;
  }
  for (size_t i = 0; i < a.orders.size(); ++i)
    if (a.orders[i].before != b.orders[i].before || a.orders[i].after != b.orders[i].after) return false;
  if (a.constraints.size() != b.constraints.size()) return false;
  for (size_t i = 0; i < a.constraints.size(); ++i) {
    const sema::PlanConstraint &x = a.constraints[i], &y = b.constraints[i];
    if (x.kind != y.kind || x.ops != y.ops || x.dims != y.dims || x.values != y.values || x.name != y.name) return false;
  }
  return true;
}

ChangeReport report_change(const Graph& g, const Plan& before, const PlanFacts& fb, const Plan& after, const PlanFacts& fa, bool colour,
                           bool list_ops) {
  ChangeReport rep;
  std::ostringstream out;
  const char* green = colour ? "\033[32m" : "";
  const char* red = colour ? "\033[31m" : "";
  const char* reset = colour ? "\033[0m" : "";

  // Ops whose partition, placement or recompute marks changed.
  std::vector<std::string> changed;
  for (size_t node = 0; node < after.root_of_node.size(); ++node) {
    if (after.root_of_node[node] < 0) continue;
    std::string now = describe_partition(after, static_cast<int>(node), 1000);
    std::string was = node < before.root_of_node.size() ? describe_partition(before, static_cast<int>(node), 1000) : "";
    if (now != was) changed.push_back(g.node(static_cast<int>(node)).name + ": " + describe_partition(after, static_cast<int>(node)));
  }
  const size_t max_ops = 8;
  for (size_t i = 0; i < changed.size() && i < max_ops && list_ops; ++i) out << "  op      " << changed[i] << "\n";
  if (changed.size() > max_ops && list_ops) out << "  op      ... and " << changed.size() - max_ops << " more op(s) changed ('ops' lists them)\n";
  if (after.orders.size() != before.orders.size()) {
    long long d = static_cast<long long>(after.orders.size()) - static_cast<long long>(before.orders.size());
    out << "  order   " << (d > 0 ? "+" : "") << d << " constraint(s), " << after.orders.size() << " in all\n";
  }
  for (size_t i = before.constraints.size(); i < after.constraints.size(); ++i)
    out << "  table   + " << after.constraints[i].name << "\n";
  if (after.constraints.size() < before.constraints.size())
    out << "  table   -" << before.constraints.size() - after.constraints.size() << " constraint table(s)\n";
  rep.changed = !changed.empty() || after.orders.size() != before.orders.size() || after.ngpus != before.ngpus;

  // Communication: the multiset difference of the derived collectives.
  const CommSummary &cb = fb.comm, &ca = fa.comm;
  if (!ca.error.empty()) {
    out << "  comm    cannot be derived: " << ca.error << "\n";
  } else {
    std::map<std::string, int> count;
    for (const Collective& c : cb.collectives) --count[c.key()];
    for (const Collective& c : ca.collectives) ++count[c.key()];
    std::vector<std::string> lines;
    int added = 0, removed = 0;
    auto line = [&](const Collective& c, bool add) {
      std::string bytes = sema::format_bytes(c.bytes);
      return std::string(add ? green : red) + (add ? "+ " : "- ") + c.prim + " " + c.groups + " " + bytes + reset + "  " +
             (c.backward ? "bwd " : "fwd ") + c.what;
    };
    std::map<std::string, int> left = count;
    for (const Collective& c : ca.collectives)
      if (left[c.key()] > 0) {
        --left[c.key()];
        ++added;
        lines.push_back(line(c, true));
      }
    for (const Collective& c : cb.collectives)
      if (left[c.key()] < 0) {
        ++left[c.key()];
        ++removed;
        lines.push_back(line(c, false));
      }
    std::string totals = std::to_string(ca.collectives.size()) + " collective(s) per step, " + sema::format_bytes(ca.bytes());
    if (added == 0 && removed == 0) {
      out << "  comm    unchanged: " << totals << "\n";
    } else {
      out << "  comm    +" << added << " -" << removed << ": " << totals << " (was " << cb.collectives.size() << ", "
          << sema::format_bytes(cb.bytes()) << ")\n";
      const size_t max_lines = 12;
      for (size_t i = 0; i < lines.size() && i < max_lines; ++i) out << "          " << lines[i] << "\n";
      if (lines.size() > max_lines) out << "          ... and " << lines.size() - max_lines << " more ('comm' lists every collective)\n";
    }
    std::set<std::string> old_notes(cb.notes.begin(), cb.notes.end());
    for (const std::string& n : ca.notes)
      if (!old_notes.count(n)) out << "  comm    not expressible as a layout: " << n << "\n";
  }

  // Memory per device: each rank's replayed peak.
  const std::vector<DeviceMemory>&mb = fb.memory, &ma = fa.memory;
  out << "  memory ";
  if (ma.empty()) {
    out << " not known: " << fa.memory_unknown;
  } else {
    // Runs of devices with the same memory and change share an entry:
    // "0..7: 68.49 GiB (-254.63 GiB)".
    auto delta = [&](size_t d) { return mb.size() == ma.size() ? ma[d].total() - mb[d].total() : 0; };
    size_t entries = 0;
    for (size_t d = 0; d < ma.size();) {
      size_t e = d + 1;
      while (e < ma.size() && ma[e].total() == ma[d].total() && delta(e) == delta(d)) ++e;
      if (++entries > 8) {
        out << " ...";
        break;
      }
      out << " " << (e - d == 1 ? std::to_string(d) : std::to_string(d) + ".." + std::to_string(e - 1)) << ": " << sema::format_bytes(ma[d].total());
      if (delta(d) != 0) out << " (" << signed_bytes(delta(d)) << ")";
      d = e;
    }
    if (entries > 8) {
      size_t lo = 0, hi = 0;
      for (size_t d = 0; d < ma.size(); ++d) {
        if (ma[d].total() < ma[lo].total()) lo = d;
        if (ma[d].total() > ma[hi].total()) hi = d;
      }
      out << " least " << sema::format_bytes(ma[lo].total()) << " (device " << lo << "), most " << sema::format_bytes(ma[hi].total()) << " (device "
          << hi << ")";
    }
  }
  out << "\n";
  rep.text = out.str();
  return rep;
}

}  // namespace nns::repl
