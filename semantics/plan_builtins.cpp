// The plan primitives as builtins: select, trans (op-trans), assign and
// replicate (op-assign), order (op-order), recompute, unassigned, kind,
// name, splittable. They work on the Plan being evaluated
// (Interpreter::evaluate_plan) and refuse to run outside a plan block.
#include <algorithm>
#include <set>
#include "frontend/suggest.h"
#include "semantics/check_deadline.h"

#include "semantics/builtin_args.h"
#include "semantics/interpreter.h"
#include "semantics/op_registry.h"
#include "semantics/plan.h"

namespace nns::sema {

using front::SourceLoc;

bool is_task_value(const Value& v);    // schedule_builtins.cpp
TaskRef task_of_value(const Value& v);

namespace {

using builtin_args::arg;
using builtin_args::glob;

Plan& active(Interpreter& in, CallArgs& a, const char* fn) { return builtin_args::active_plan(in, a, fn, "is a plan primitive"); }

const Value& required(Interpreter& in, CallArgs& a, size_t i, const char* name, const char* fn) {
  const Value* v = arg(a, i, name);
  if (!v) in.fail(a.loc, std::string(fn) + "(): missing argument '" + name + "'");
  return *v;
}

std::vector<int> ops_of(Interpreter& in, CallArgs& a, size_t i, const char* name, const char* fn) {
  std::vector<int> out;
  builtin_args::collect_subops(in, required(in, a, i, name, fn), a.loc, fn, out);
  return out;
}

std::vector<int64_t> devices_of(Interpreter& in, const Plan& p, const Value& v, SourceLoc loc) {
  std::vector<int64_t> devs;
  if (v.is<RangeV>()) {
    for (int64_t d = v.as<RangeV>().lo; d < v.as<RangeV>().hi; ++d) devs.push_back(d);
  } else if (v.is<std::shared_ptr<List>>()) {
    for (const Value& d : *v.as<std::shared_ptr<List>>()) devs.push_back(in.to_int(d, loc, "device"));
  } else {
    devs.push_back(in.to_int(v, loc, "device"));
  }
  for (int64_t d : devs)
    if (d < 0 || d >= p.ngpus)
      in.fail(loc, "device " + std::to_string(d) + " is out of range: the plan runs on " + std::to_string(p.ngpus) +
                       " device(s), numbered 0.." + std::to_string(p.ngpus - 1));
  if (devs.empty()) in.fail(loc, "empty device list");
  std::vector<int64_t> sorted = devs;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) in.fail(loc, "a device appears twice in the device list");
  return devs;
}

Value handle_list(const std::vector<int>& ids) {
  List items;
  items.reserve(ids.size());
  for (int id : ids) items.push_back(Value(OpHandle{id}));
  return make_list(std::move(items));
}

std::string op_label(Interpreter& in, const Plan& p, int sub) {
  const SubOp& s = p.subops[sub];
  std::string name = "'" + in.graph().node(s.node).name + "'";
  if (s.parent >= 0) name += " (part " + std::to_string(s.split_index) + " of " + std::to_string(s.split_num) + " on " + s.split_id + ")";
  return name;
}

// ---- the primitives ------------------------------------------------------------------

// Why select() found nothing, with what the user probably meant: the three
// qualified names nearest the pattern (its wildcards dropped, compared with
// names cut to the pattern's length), or the op kinds there are.
std::string empty_select_message(Interpreter& in, const Plan& p, const std::string& pattern, const std::string* kind) {
  std::vector<std::string> names;
  std::set<std::string> kinds;
  for (size_t node = 0; node < p.root_of_node.size(); ++node) {
    if (p.root_of_node[node] < 0) continue;
    const OpNode& n = in.graph().node(static_cast<int>(node));
    kinds.insert(n.kind);
    if (glob(pattern.c_str(), n.name.c_str())) continue;  // matched: the kind excluded it
    names.push_back(n.name);
  }
  std::string msg = "select(\"" + pattern + "\"" + (kind ? ", kind = \"" + *kind + "\"" : std::string()) + ") matches no op";
  bool pattern_matches_some = names.size() < static_cast<size_t>(std::count_if(p.root_of_node.begin(), p.root_of_node.end(), [](int r) { return r >= 0; }));
  if (kind && (pattern_matches_some || !kinds.count(*kind))) {
    if (!kinds.count(*kind)) {
      std::string list;
      for (const std::string& k : kinds) list += (list.empty() ? "" : ", ") + k;
      return msg + ": no op is of kind '" + *kind + "' (kinds here: " + list + ")";
    }
    return msg + ": no op of kind '" + *kind + "' has a name matching the pattern";
  }
  std::string bare;
  for (char c : pattern)
    if (c != '*' && c != '?') bare += c;
  std::vector<std::pair<size_t, std::string>> near;
  for (const std::string& n : names) {
    std::string head = n.substr(0, std::min(n.size(), bare.size() + 2));
    near.push_back({std::min(front::edit_distance(bare, n), front::edit_distance(bare, head)), n});
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::string hint;
  for (size_t i = 0; i < near.size() && i < 3; ++i) hint += (i ? ", " : "") + std::string("'") + near[i].second + "'";
  if (!hint.empty()) msg += " (nearest names: " + hint + "; `nns check FILE --emit=graph` lists them all)";
  return msg + "; pass allow_empty = true where none is fine";
}

// select(pattern = "*", kind = none, allow_empty = false): top-level forward
// ops by qualified-name glob and op kind. Nothing found is an error (a typo
// in a pattern would otherwise leave those ops to the plan's defaults and
// the plan "legal") unless allow_empty says it may be.
Value b_select(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "select");
  const Value* pat = arg(a, 0, "pattern");
  const Value* kind = arg(a, 1, "kind");
  const Value* allow_empty = arg(a, 2, "allow_empty");
  if (allow_empty && !allow_empty->is<bool>()) in.fail(a.loc, "select(): allow_empty must be true or false");
  std::string pattern = pat && pat->is<std::string>() ? pat->as<std::string>() : "*";
  if (pat && !pat->is<std::string>()) in.fail(a.loc, "select(): the pattern must be a string");
  std::vector<int> ids;
  for (size_t node = 0; node < p.root_of_node.size(); ++node) {
    int root = p.root_of_node[node];
    if (root < 0) continue;
    const OpNode& n = in.graph().node(static_cast<int>(node));
    if (!glob(pattern.c_str(), n.name.c_str())) continue;
    if (kind && kind->is<std::string>() && n.kind != kind->as<std::string>()) continue;
    ids.push_back(root);
  }
  if (ids.empty() && !(allow_empty && allow_empty->as<bool>())) {
    std::string k = kind && kind->is<std::string>() ? kind->as<std::string>() : "";
    in.fail(a.loc, empty_select_message(in, p, pattern, kind && kind->is<std::string>() ? &k : nullptr));
  }
  return handle_list(ids);
}

// matches(op, pattern): whether the op's qualified name matches the glob.
Value b_matches(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "matches");
  std::vector<int> ids = ops_of(in, a, 0, "op", "matches");
  const Value& pat = required(in, a, 1, "pattern", "matches");
  if (ids.size() != 1 || !pat.is<std::string>()) in.fail(a.loc, "matches() takes one op and a pattern string");
  return Value(glob(pat.as<std::string>().c_str(), in.graph().node(p.subops[ids[0]].node).name.c_str()));
}

Value b_kind(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "kind");
  std::vector<int> ids = ops_of(in, a, 0, "op", "kind");
  if (ids.size() != 1) in.fail(a.loc, "kind() takes one op");
  return Value(in.graph().node(p.subops[ids[0]].node).kind);
}

Value b_name(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "name");
  std::vector<int> ids = ops_of(in, a, 0, "op", "name");
  if (ids.size() != 1) in.fail(a.loc, "name() takes one op");
  return Value(in.graph().node(p.subops[ids[0]].node).name);
}

// Resolves the split a trans() call asks for on one sub-op, or explains why not.
bool resolve_choice(Interpreter& in, const Plan& p, int sub, const Value* dim, const Value* idx, TransformChoice& out,
                    std::string& why) {
  const SubOp& s = p.subops[sub];
  const OpNode& n = in.graph().node(s.node);
  // The registry row (a linear search by name) only where a value split is asked about.
  auto value_split = [&] {
    const OpRow* row = n.composite ? nullptr : find_op_row(n.kind);
    return row && row->value_split;
  };
  std::string id;
  if (idx) {
    // nnScaler addressing: trans(op, idx=i, dim=d) splits input i along tensor dim d.
    int64_t i = in.to_int(*idx, {}, "idx");
    int64_t d = dim ? in.to_int(*dim, {}, "dim") : 0;
    auto c = choice_for(n.anno, static_cast<int>(i), static_cast<int>(d));
    if (!c) {
      why = "input " + std::to_string(i) + " dim " + std::to_string(d) + " of op '" + n.name + "' cannot be split";
      return false;
    }
    out = *c;
    return true;
  }
  if (!dim || !dim->is<std::string>()) {
    why = "trans() needs dim = \"IDENTIFIER\" (or \"value\" or \"batch\") or idx = I, dim = D";
    return false;
  }
  id = dim->as<std::string>();
  if (id == "batch") {
    // The batch dim: dim 0 of the op's first tensor input.
    for (size_t i = 0; i < n.anno.anno.inputs.size(); ++i) {
      if (n.anno.anno.inputs[i].non_tensor) continue;
      auto c = choice_for(n.anno, static_cast<int>(i), 0);
      if (!c) break;
      out = *c;
      return true;
    }
    why = "op '" + n.name + "' (" + n.kind + ") has no splittable batch dimension";
    return false;
  }
  // One identifier's choice, not the whole space (it is built below only
  // to explain a refusal).
  if (id == "value" && value_split()) {
    for (const TransformChoice& c : transform_space(n.anno, true))
      if (c.kind == TransformChoice::Value) {
        out = c;
        return true;
      }
  } else if (id != "value") {
    if (auto c = transform_choice(n.anno, id)) {
      out = *c;
      return true;
    }
  }
  std::vector<TransformChoice> space = transform_space(n.anno, value_split());
  // Explain: frozen, unknown, or not splittable.
  std::string options;
  for (const TransformChoice& c : space) options += (options.empty() ? "" : ", ") + (c.kind == TransformChoice::Value ? std::string("value") : c.id);
  bool frozen = false, known = false;
  for (const auto* side : {&n.anno.anno.inputs, &n.anno.anno.outputs})
    for (const OperandAnno& o : *side)
      for (const DimAnno& d : o.dims)
        for (const DimId& di : d.ids)
          if (di.name == id) {
            known = true;
            frozen = frozen || di.reduce == Reduce::Frozen;
          }
  if (frozen) why = "cannot split '" + id + "^' of op '" + n.name + "': its annotation \"" + n.anno.anno.to_string() + "\" marks it not partitionable";
  else if (known) why = "'" + id + "' of op '" + n.name + "' cannot be split (only the first identifier of a bracket can)";
  else why = "op '" + n.name + "' has no dimension '" + id + "' (annotation \"" + n.anno.anno.to_string() + "\")";
  why += options.empty() ? "; it cannot be split at all" : "; splittable: " + options;
  return false;
}

// The first `limit` divisors above 1 of `size`, ascending. Trial division
// up to sqrt(size), so a large prime dimension (up to the 2^48 elements a
// tensor may have) costs milliseconds, not a count to its size.
static std::vector<int64_t> small_divisors(int64_t size, size_t limit) {
  std::vector<int64_t> divs;
  for (int64_t d = 1; d <= size / d; ++d)
    if (size % d == 0) {
      if (d > 1) divs.push_back(d);
      if (size / d != d) divs.push_back(size / d);
    }
  std::sort(divs.begin(), divs.end());
  if (divs.size() > limit) divs.resize(limit);
  return divs;
}

// The part counts a dim of `size` splits into, for a refusal at a device
// count: "num = 2, 4 or 8" (the first few divisors above 1), or why none.
std::string accepted_counts(int64_t size) {
  const std::vector<int64_t> divs = small_divisors(size, 7);
  if (divs.empty()) return "no split of it is possible";
  std::string text = "this split accepts num = ";
  size_t shown = std::min<size_t>(divs.size(), 6);
  for (size_t i = 0; i < shown; ++i)
    text += (i == 0 ? "" : i + 1 == shown && divs.size() <= 6 ? " or " : ", ") + std::to_string(divs[i]);
  return text + (divs.size() > 6 ? ", ... (the divisors of " + std::to_string(size) + ")" : "");
}

// When the refused count is the plan's device count: the --gpus values
// this directive allows, so a plan refused at --gpus N says what it needs.
static std::string device_count_hint(int64_t size, bool num_is_device_count) {
  if (!num_is_device_count) return "";
  std::string list;
  for (int64_t d : small_divisors(size, 6)) list += (list.empty() ? "" : ", ") + std::to_string(d);
  return list.empty() ? "" : " (num is this plan's device count: --gpus " + list + ")";
}

// trans(op, dim = "ID" | "value" | "batch", num = n) or trans(op, idx = i, dim = d, num = n)
// Why trans(op = sub, dim, idx, num) would be refused, "" when it would
// not (num 0: any count the dim's size allows). trans() and splittable()
// both ask it, so splittable answers exactly what trans accepts.
std::string trans_refusal(Interpreter& in, Plan& p, int sub, const Value* dim, const Value* idx, int64_t num, TransformChoice& choice) {
  const SubOp& s = p.subops[sub];
  if (!s.leaf()) return "op " + op_label(in, p, sub) + " is split already; split its parts instead";
  if (!s.devices.empty()) return "op " + op_label(in, p, sub) + " is assigned already; split it before assigning";
  std::string why;
  if (!resolve_choice(in, p, sub, dim, idx, choice, why)) return why;
  if (choice.kind == TransformChoice::Dim) {
    // The identifier's size in this sub-op: the full size over earlier splits along it.
    int64_t local = choice.size;
    for (int up = sub; up >= 0 && p.subops[up].parent >= 0; up = p.subops[up].parent)
      if (p.subops[up].split_id == choice.id) local /= p.subops[up].split_num;
    if (num > 0 && local % num != 0)
      return "cannot split '" + choice.id + "' of op " + op_label(in, p, sub) + " into " + std::to_string(num) +
             " parts: its size " + std::to_string(local) + " is not divisible by " + std::to_string(num) + "; " +
             accepted_counts(local) + device_count_hint(local, num == p.ngpus);
    if (num == 0 && local < 2) return "'" + choice.id + "' of op " + op_label(in, p, sub) + " has size " + std::to_string(local) + " here: nothing to split";
  }
  return "";
}

Value b_trans(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "trans");
  std::vector<int> ids = ops_of(in, a, 0, "op", "trans");
  if (ids.size() != 1) in.fail(a.loc, "trans() splits one op at a time (got " + std::to_string(ids.size()) + "); loop over a selection");
  int sub = ids[0];
  int64_t num = in.to_int(required(in, a, 2, "num", "trans"), a.loc, "num");
  if (num < 1) in.fail(a.loc, "trans(): num must be at least 1, got " + std::to_string(num));
  TransformChoice choice;
  if (std::string why = trans_refusal(in, p, sub, arg(a, 1, "dim"), a.get("idx"), num, choice); !why.empty()) in.fail(a.loc, why);
  CheckDeadline::poll();
  return handle_list(split_in_plan(p, sub, choice, static_cast<int>(num), a.loc));
}

void place(Interpreter& in, CallArgs& a, const char* fn, const std::vector<int64_t>& devs, const std::vector<int>& ids) {
  Plan& p = *in.active_plan();
  for (int sub : ids) {
    SubOp& s = p.subops[sub];
    if (!s.leaf()) in.fail(a.loc, std::string(fn) + "(): op " + op_label(in, p, sub) + " is split; place its parts");
    if (!s.devices.empty())
      in.fail(a.loc, std::string(fn) + "(): op " + op_label(in, p, sub) + " is placed already (on device " + std::to_string(s.devices[0]) +
                         (s.devices.size() > 1 ? ", ..." : "") + ")");
    s.devices.assign(devs.begin(), devs.end());
    s.assign_loc = a.loc;
  }
}

// The order argument of assign(): true for "auto" (nns chooses which part
// goes to which device), false for "given" (the default).
bool auto_order_of(Interpreter& in, CallArgs& a) {
  const Value* o = arg(a, 2, "order");
  if (!o) return false;
  if (o->is<std::string>() && o->as<std::string>() == "given") return false;
  if (o->is<std::string>() && o->as<std::string>() == "auto") return true;
  in.fail(a.loc, "assign(): order must be \"given\" or \"auto\", got " +
                     (o->is<std::string>() ? "\"" + o->as<std::string>() + "\"" : a_type_name(*o)));
}

// The devices of assign()'s list form: in range, repeats allowed (two parts
// on one device, as a loop of assigns would place them).
std::vector<int64_t> device_list_of(Interpreter& in, const Plan& p, const List& list, SourceLoc loc) {
  std::vector<int64_t> devs;
  for (const Value& d : list) devs.push_back(devices_of(in, p, Value(in.to_int(d, loc, "device")), loc)[0]);
  if (devs.empty()) in.fail(loc, "assign(): empty device list");
  return devs;
}

// assign(parts, devices, order = "given" | "auto"): parts[i] on devices[i],
// or, with "auto", each part on a device of the list that nns chooses
// (Plan::auto_orders; placed in the given order until the choice).
Value assign_list(Interpreter& in, CallArgs& a, Plan& p, const List& device_values, bool auto_order) {
  const Value& parts = required(in, a, 0, "op", "assign");
  if (!parts.is<std::shared_ptr<List>>())
    in.fail(a.loc, "assign(): a list of devices places a list of parts, one per device, got " + a_type_name(parts) +
                       " (to run one op on several devices use replicate())");
  std::vector<int> ids = ops_of(in, a, 0, "op", "assign");
  std::vector<int64_t> devs = device_list_of(in, p, device_values, a.loc);
  if (ids.size() != devs.size())
    in.fail(a.loc, "assign(): " + std::to_string(ids.size()) + " part(s) but " + std::to_string(devs.size()) +
                       " device(s); the lists must have the same length (parts[i] runs on devices[i])");
  for (size_t i = 0; i < ids.size(); ++i) place(in, a, "assign", {devs[i]}, {ids[i]});
  if (auto_order) {
    AutoOrder group;
    group.subops = ids;
    group.devices.assign(devs.begin(), devs.end());
    group.loc = a.loc;
    p.auto_orders.push_back(std::move(group));
  }
  return Value();
}

// assign(op | ops, device): op-assign of sub-ops to one device; or the list
// form above.
Value b_assign(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "assign");
  const Value& d = required(in, a, 1, "device", "assign");
  bool auto_order = auto_order_of(in, a);
  if (d.is<std::shared_ptr<List>>()) return assign_list(in, a, p, *d.as<std::shared_ptr<List>>(), auto_order);
  if (d.is<RangeV>()) {
    // Checked device by device, so that 0..10**9 fails at the first device
    // past ngpus instead of building the list.
    List range;
    for (int64_t dev = d.as<RangeV>().lo; dev < d.as<RangeV>().hi; ++dev) range.push_back(Value(devices_of(in, p, Value(dev), a.loc)[0]));
    return assign_list(in, a, p, range, auto_order);
  }
  std::vector<int> ids = ops_of(in, a, 0, "op", "assign");
  if (!d.is<int64_t>())
    in.fail(a.loc, "assign(): the device must be an int or a list of ints, one per part (use replicate() to run one op on several devices)");
  if (auto_order) in.fail(a.loc, "assign(): order = \"auto\" chooses among a list of devices, one per part; got one device");
  place(in, a, "assign", devices_of(in, p, d, a.loc), ids);
  return Value();
}

// replicate(op | ops, devices): the same (sub-)op on every listed device.
Value b_replicate(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "replicate");
  std::vector<int> ids = ops_of(in, a, 0, "op", "replicate");
  place(in, a, "replicate", devices_of(in, p, required(in, a, 1, "devices", "replicate"), a.loc), ids);
  return Value();
}

// order(a, b): every leaf of a runs before every leaf of b (op-order).
Value b_order(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "order");
  const Value* x0 = arg(a, 0, "before");
  const Value* x1 = arg(a, 1, "after");
  if (x0 && x1 && (is_task_value(*x0) || is_task_value(*x1))) {
    if (!is_task_value(*x0) || !is_task_value(*x1))
      in.fail(a.loc, "order(): both arguments must be tasks (fwd/bwd/wgrad(OPS, mb)) or both ops");
    TaskRef t0 = task_of_value(*x0), t1 = task_of_value(*x1);
    if (t0 == t1) in.fail(a.loc, "order(): a task cannot run before itself");
    p.task_orders.push_back({t0, t1, a.loc});
    return Value();
  }
  std::vector<int> first = ops_of(in, a, 0, "before", "order");
  std::vector<int> second = ops_of(in, a, 1, "after", "order");
  for (int x : first)
    for (int y : second) {
      if (x == y) in.fail(a.loc, "order(): an op cannot run before itself");
      p.orders.push_back({x, y, a.loc});
    }
  return Value();
}

void mark_recompute(Plan& p, int sub, int call) {
  p.subops[sub].recompute = true;
  p.subops[sub].recompute_call = call;
  for (int c : p.subops[sub].children) mark_recompute(p, c, call);
}

// recompute(ops): consecutive ops of one call that all run a backward form
// a region that keeps only its inputs (sema::recompute_regions).
Value b_recompute(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "recompute");
  const int call = p.recompute_calls++;
  for (int sub : ops_of(in, a, 0, "ops", "recompute")) mark_recompute(p, sub, call);
  return Value();
}

void mark_regather(Plan& p, int sub) {
  p.subops[sub].regather = true;
  for (int c : p.subops[sub].children) mark_regather(p, c);
}

// regather(ops): an op's inputs that reach it through all-gathers only
// (sequence parallelism's gathered tokens) are not kept for its backward:
// the backward gathers them again from the shards (lowering: lower_emit.cpp).
Value b_regather(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "regather");
  Plan::RegatherCall call{a.loc, {}};
  for (int sub : ops_of(in, a, 0, "ops", "regather")) {
    mark_regather(p, sub);
    call.nodes.push_back(p.subops[sub].node);
  }
  p.regather_calls.push_back(std::move(call));
  return Value();
}

// zero1(ops = every op): shard the optimizer state of the parameters the
// ops read over their data-parallel group (Plan::zero1_params).
Value b_zero1(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "zero1");
  const Graph& g = in.graph();
  std::vector<int> nodes;
  if (arg(a, 0, "ops")) {
    for (int sub : ops_of(in, a, 0, "ops", "zero1")) nodes.push_back(p.subops[sub].node);
  } else {
    for (size_t n = 0; n < p.root_of_node.size(); ++n)
      if (p.root_of_node[n] >= 0) nodes.push_back(static_cast<int>(n));
  }
  for (int n : nodes)
    for (int t : g.node(n).inputs)
      if (g.tensor(t).kind == TensorKind::Param && !g.tensor(t).buffer && !p.zero1(t)) {  // buffers have no optimizer state
        auto at = std::lower_bound(p.zero1_params.begin(), p.zero1_params.end(), t);
        p.zero1_loc.insert(p.zero1_loc.begin() + (at - p.zero1_params.begin()), a.loc);
        p.zero1_params.insert(at, t);
      }
  bool any_param = false;
  for (int n : nodes)
    for (int t : g.node(n).inputs) any_param = any_param || g.tensor(t).kind == TensorKind::Param;
  if (!any_param) in.fail(a.loc, "zero1(): the ops given read no parameter");
  return Value();
}

Value b_unassigned(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "unassigned");
  std::vector<int> ids;
  for (int leaf : p.leaves())
    if (p.subops[leaf].devices.empty()) ids.push_back(leaf);
  return handle_list(ids);
}

// splittable(op, dim): whether trans(op, dim = dim, ...) would find the dimension.
Value b_splittable(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "splittable");
  std::vector<int> ids = ops_of(in, a, 0, "op", "splittable");
  if (ids.size() != 1) in.fail(a.loc, "splittable() takes one op");
  // splittable(op, dim, num = none): whether trans(op, dim = dim, num = num)
  // would be accepted (without num: into some number of parts).
  const Value* num_v = arg(a, 2, "num");
  int64_t num = num_v && !num_v->is<NoneV>() ? in.to_int(*num_v, a.loc, "num") : 0;
  if (num_v && !num_v->is<NoneV>() && num < 1) in.fail(a.loc, "splittable(): num must be at least 1, got " + std::to_string(num));
  TransformChoice c;
  return Value(trans_refusal(in, p, ids[0], arg(a, 1, "dim"), a.get("idx"), num, c).empty());
}

}  // namespace

void install_table_builtins(Env& env);     // checker/table_builtins.cpp: constraint tables
void install_schedule_builtins(Env& env);  // schedule_builtins.cpp: tasks and pipeline schedules
void install_plan_select_builtins(Env& env);  // plan_select.cpp: selection by model structure

void install_plan_builtins(Env& env) {
  install_table_builtins(env);
  install_schedule_builtins(env);
  install_plan_select_builtins(env);
  define_builtins(env, {
                           {"select", b_select, "pattern, kind, allow_empty"},
                           {"kind", b_kind, "op"},
                           {"name", b_name, "op"},
                           {"trans", b_trans, "op, dim, num, *, idx"},
                           {"assign", b_assign, "op, device, order"},
                           {"replicate", b_replicate, "op, devices"},
                           {"order", b_order, "before, after"},
                           {"recompute", b_recompute, "ops"},
                           {"regather", b_regather, "ops"},
                           {"zero1", b_zero1, "ops"},
                           {"unassigned", b_unassigned, ""},
                           {"splittable", b_splittable, "op, dim, num, *, idx"},
                           {"matches", b_matches, "op, pattern"},
                       });
}

}  // namespace nns::sema
