#include "semantics/plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "semantics/op_registry.h"

namespace nns::sema {

std::string OperandSlice::to_string() const {
  if (!tensor) return "-";
  std::string s = "[";
  for (size_t d = 0; d < start.size(); ++d)
    s += (d ? ", " : "") + std::to_string(start[d]) + ":" + std::to_string(start[d] + length[d]);
  s += "]";
  if (value_parts > 1) s += " v" + std::to_string(value_index) + "/" + std::to_string(value_parts);
  return s;
}

static OperandSlice full_slice(const Shape& shape) {
  OperandSlice s;
  s.start.assign(shape.size(), 0);
  s.length = shape;
  return s;
}

SubOp whole_op(const Graph& g, int node) {
  const OpNode& n = g.node(node);
  SubOp s;
  s.node = node;
  for (int t : n.inputs) s.inputs.push_back(full_slice(g.tensor(t).shape));
  for (int t : n.outputs) s.outputs.push_back(full_slice(g.tensor(t).shape));
  return s;
}

Plan implicit_plan(const Graph& g) {
  Plan out;
  out.name = kImplicitPlanName;
  out.ngpus = 1;
  out.root_of_node.assign(g.nodes().size(), -1);
  out.segment_of_node.assign(g.nodes().size(), -1);
  for (const OpNode& n : g.nodes()) {
    if (n.parent >= 0 || n.phase != Phase::Forward) continue;
    out.root_of_node[n.id] = static_cast<int>(out.subops.size());
    SubOp whole = whole_op(g, n.id);
    whole.devices = {0};
    out.subops.push_back(std::move(whole));
  }
  return out;
}

// One effect of a split applied to one operand slice: a split dim narrows
// the range; a partial sum refines the value split.
static OperandSlice apply(const OperandSlice& in, const PartitionEffect& e, int index, int num) {
  OperandSlice out = in;
  if (e.kind == PartitionEffect::Split) {
    int64_t piece = in.length[e.dim] / num;
    out.start[e.dim] = in.start[e.dim] + piece * index;
    out.length[e.dim] = piece;
  } else if (e.kind == PartitionEffect::PartialSum) {
    out.value_index = in.value_index * num + index;
    out.value_parts = in.value_parts * num;
  }
  return out;
}

// One part of a split, built in place: each operand reserved to its final
// count, so that no slice is copied twice (a 1,024-device plan makes
// hundreds of thousands of parts).
static void fill_part(SubOp& s, const SubOp& parent, int parent_index, const TransformChoice& choice, int i, int num) {
  s.node = parent.node;
  s.parent = parent_index;
  s.split_id = choice.kind == TransformChoice::Value ? "value" : choice.id;
  s.split_index = i;
  s.split_num = num;
  s.recompute = parent.recompute;
  s.recompute_call = parent.recompute_call;
  s.regather = parent.regather;
  s.inputs.reserve(parent.inputs.size());
  for (size_t k = 0; k < parent.inputs.size(); ++k)
    s.inputs.push_back(k < choice.inputs.size() && parent.inputs[k].tensor
                           ? apply(parent.inputs[k], choice.inputs[k], i, num)
                           : parent.inputs[k]);
  s.outputs.reserve(parent.outputs.size());
  for (size_t k = 0; k < parent.outputs.size(); ++k)
    s.outputs.push_back(k < choice.outputs.size() ? apply(parent.outputs[k], choice.outputs[k], i, num)
                                                  : parent.outputs[k]);
}

std::vector<SubOp> split_subop(const SubOp& parent, int parent_index, const TransformChoice& choice, int num) {
  std::vector<SubOp> parts(static_cast<size_t>(num));
  for (int i = 0; i < num; ++i) fill_part(parts[static_cast<size_t>(i)], parent, parent_index, choice, i, num);
  return parts;
}

std::vector<int> split_in_plan(Plan& plan, int parent_index, const TransformChoice& choice, int num,
                               front::SourceLoc loc) {
  // Grown geometrically here (not by the resize alone) so that a plan of
  // many small splits reallocates its sub-ops O(log n) times.
  const size_t first = plan.subops.size();
  if (plan.subops.capacity() < first + static_cast<size_t>(num))
    plan.subops.reserve(std::max(2 * plan.subops.capacity(), first + static_cast<size_t>(num)));
  plan.subops.resize(first + static_cast<size_t>(num));
  const SubOp& parent = plan.subops[static_cast<size_t>(parent_index)];
  std::vector<int> ids(static_cast<size_t>(num));
  for (int i = 0; i < num; ++i) {
    SubOp& part = plan.subops[first + static_cast<size_t>(i)];
    fill_part(part, parent, parent_index, choice, i, num);
    part.split_loc = loc;
    ids[static_cast<size_t>(i)] = static_cast<int>(first) + i;
  }
  plan.subops[static_cast<size_t>(parent_index)].children = ids;
  return ids;
}

RecomputeRegions recompute_regions(const Graph& g, const Plan& plan, const GradientFlow& flow) {
  RecomputeRegions out;
  out.region_of_node.assign(g.nodes().size(), -1);
  // The recompute() call that marked every part of node n; -1: none.
  auto call_of = [&](size_t n) {
    int call = -2;
    for (int leaf : plan.leaves_of(static_cast<int>(n))) {
      const SubOp& s = plan.subops[static_cast<size_t>(leaf)];
      if (!s.recompute || (call != -2 && s.recompute_call != call)) return -1;
      call = s.recompute_call;
    }
    return call < 0 ? -1 : call;
  };
  auto segment = [&](size_t n) { return n < plan.segment_of_node.size() ? plan.segment_of_node[n] : -1; };
  std::vector<int> run;
  int run_call = -1;
  auto close = [&] {
    // Trailing ops without backward leave: the recompute runs before the
    // backward of the last op that has one.
    while (!run.empty() && !flow.backward[static_cast<size_t>(run.back())]) run.pop_back();
    if (run.size() >= 2) {
      for (int n : run) out.region_of_node[static_cast<size_t>(n)] = static_cast<int>(out.ops.size());
      out.ops.push_back(run);
    }
    run.clear();
  };
  for (size_t n = 0; n < plan.root_of_node.size(); ++n) {
    if (plan.root_of_node[n] < 0) continue;  // not a top-level op: runs of top-level ops skip it
    int call = call_of(n);
    // An op without backward (a constant table, a mask) marked by the
    // region's call joins it (made again in its recompute instead of kept);
    // otherwise it neither joins nor breaks a region.
    if (n >= flow.backward.size() || !flow.backward[n]) {
      if (!run.empty() && call == run_call && segment(static_cast<size_t>(run.back())) == segment(n)) run.push_back(static_cast<int>(n));
      continue;
    }
    if (call < 0) {
      close();
      continue;
    }
    if (!run.empty() && (segment(static_cast<size_t>(run.back())) != segment(n) || call != run_call)) close();
    run.push_back(static_cast<int>(n));
    run_call = call;
  }
  close();
  return out;
}

bool Plan::zero1(int tensor) const { return std::binary_search(zero1_params.begin(), zero1_params.end(), tensor); }

std::vector<int> Plan::leaves() const {
  std::vector<int> out;
  for (size_t i = 0; i < subops.size(); ++i)
    if (subops[i].leaf()) out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> Plan::leaves_of(int node) const {
  std::vector<int> out;
  if (node < 0 || node >= static_cast<int>(root_of_node.size()) || root_of_node[node] < 0) return out;
  std::vector<int> stack{root_of_node[node]};
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    if (subops[s].leaf()) out.push_back(s);
    else stack.insert(stack.end(), subops[s].children.begin(), subops[s].children.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

static void dump_subop(const Plan& p, int index, int depth, std::ostringstream& out) {
  const SubOp& s = p.subops[index];
  std::string indent(2 * depth + 4, ' ');
  out << indent << "#" << index;
  if (s.parent >= 0) out << " " << s.split_id << " " << s.split_index << "/" << s.split_num;
  if (s.leaf()) {
    out << " on [";
    for (size_t i = 0; i < s.devices.size(); ++i) out << (i ? ", " : "") << s.devices[i];
    out << "]";
    if (s.recompute) out << " recompute";
    if (s.regather) out << " regather";
    out << "  in ";
    for (size_t i = 0; i < s.inputs.size(); ++i) out << (i ? ", " : "") << s.inputs[i].to_string();
    out << "  out ";
    for (size_t i = 0; i < s.outputs.size(); ++i) out << (i ? ", " : "") << s.outputs[i].to_string();
  }
  out << "\n";
  for (int c : s.children) dump_subop(p, c, depth + 1, out);
}

GradientFlow gradient_flow(const Graph& g, const Plan& plan) {
  GradientFlow f;
  std::vector<int> order;
  for (size_t n = 0; n < plan.root_of_node.size(); ++n)
    if (plan.root_of_node[n] >= 0) order.push_back(static_cast<int>(n));
  f.requires_grad.assign(g.tensors().size(), false);
  for (int p : g.params()) f.requires_grad[p] = dtype_is_float(g.tensor(p).dtype) && !g.tensor(p).buffer && !g.inference;
  for (int n : order) {
    const OpNode& node = g.node(n);
    bool any = false;
    // detach (and every op no gradient flows through) cuts the gradient: its output needs none,
    for (size_t i = 0; i < node.inputs.size(); ++i) any = any || (f.requires_grad[node.inputs[i]] && passes_gradient(node, i));
    for (int t : node.outputs) f.requires_grad[t] = any && dtype_is_float(g.tensor(t).dtype);
  }
  f.reaches.assign(g.tensors().size(), false);
  if (g.loss >= 0) f.reaches[g.loss] = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const OpNode& node = g.node(*it);
    bool any = false;
    for (int t : node.outputs) any = any || f.reaches[t];
    // and what only feeds a detach (or where's condition) does not reach the loss.
    for (size_t i = 0; any && i < node.inputs.size(); ++i)
      if (passes_gradient(node, i)) f.reaches[node.inputs[i]] = true;
  }
  f.backward.assign(g.nodes().size(), false);
  for (int n : order) {
    const OpNode& node = g.node(n);
    bool in = false, out = false;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      in = in || (f.requires_grad[node.inputs[i]] && g.tensor(node.inputs[i]).kind != TensorKind::Input && passes_gradient(node, i));
    for (int t : node.outputs) out = out || f.reaches[t];
    f.backward[static_cast<size_t>(n)] = in && out;  // detach has no backward
  }
  return f;
}

bool TaskRef::operator<(const TaskRef& o) const {
  if (segment != o.segment) return segment < o.segment;
  if (mb != o.mb) return mb < o.mb;
  return phase < o.phase;
}

std::string Plan::task_text(const TaskRef& t) const {
  std::string seg = t.segment >= 0 && t.segment < static_cast<int>(segments.size()) ? segments[static_cast<size_t>(t.segment)].name : "?";
  return std::string(1, "FBW"[t.phase]) + "(" + seg + ", mb " + std::to_string(t.mb) + ")";
}

// "order auto: parts of linear#1 on devices 0,4,1,5 (adapters 96 bytes; given order 160 bytes)"
static std::string auto_order_line(const Plan& p, const Graph& g, const AutoOrder& a) {
  std::vector<int> nodes;
  for (int sub : a.subops)
    if (std::find(nodes.begin(), nodes.end(), p.subops[sub].node) == nodes.end()) nodes.push_back(p.subops[sub].node);
  std::string ops;
  for (int n : nodes) ops += (ops.empty() ? "" : ", ") + g.node(n).name;
  const std::vector<int>& devs = a.chosen.empty() ? a.devices : a.chosen;
  std::string list;
  for (int d : devs) list += (list.empty() ? "" : ",") + std::to_string(d);
  std::string line = "order auto: parts of " + ops + " on devices " + list;
  if (a.chosen.empty()) return line + " (not chosen: the given order)";
  auto bytes = [](double c) { return std::isfinite(c) ? std::to_string(static_cast<int64_t>(c)) + " bytes" : std::string("some edge without an adapter"); };
  return line + " (adapters " + bytes(a.cost_chosen) + "; given order " + bytes(a.cost_given) + ")";
}

std::string Plan::dump(const Graph& g) const {
  std::ostringstream out;
  out << "plan " << name << " on " << ngpus << " device(s) {\n";
  for (size_t node = 0; node < root_of_node.size(); ++node) {
    int root = root_of_node[node];
    if (root < 0) continue;
    out << "  " << g.node(static_cast<int>(node)).name << " \"" << g.node(static_cast<int>(node)).anno.anno.to_string() << "\"\n";
    dump_subop(*this, root, 0, out);
  }
  for (const OrderConstraint& o : orders) out << "  order #" << o.before << " before #" << o.after << "\n";
  for (const AutoOrder& a : auto_orders) out << "  " << auto_order_line(*this, g, a) << "\n";
  for (size_t i = 0; i < segments.size(); ++i) {
    out << "  segment " << i << " " << segments[i].name << (segments[i].split_w ? " (B/W split)" : "") << ":";
    for (int n : segments[i].nodes) out << " " << g.node(n).name;
    out << "\n";
  }
  for (const PlanSchedule& s : schedules)
    out << "  schedule " << s.kind << ": " << s.ranks << " pipeline rank(s), " << s.micro_batches << " micro-batch(es), " << task_orders.size()
        << " task order(s)\n";
  if (schedules.empty())
    for (const TaskOrder& o : task_orders) out << "  order " << task_text(o.before) << " before " << task_text(o.after) << "\n";
  if (!zero1_params.empty()) {
    out << "  zero1:";
    for (int t : zero1_params) out << " " << g.tensor(t).name;
    out << "\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace nns::sema
