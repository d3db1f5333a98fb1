// Constraint tables in .nns: builtins that a plan calls to state rules about
// itself. They only record the rule (Plan::constraints); the checker
// enforces it (encode_tables.cpp), so a table may come before or after the
// directives it speaks of, and a table written once as a function can be
// called from several plans:
//
//   fn megatron_table(ngpus) {
//     split_only(select(kind = "attention"), ["h"], name = "attention splits heads")
//     split_counts(select("*"), [1, ngpus], name = "one tensor-parallel degree")
//   }
//   plan megatron(ngpus) { megatron_table(ngpus) ... }
//
//   same_split(OPS, DIM = "batch", name = N)   every op of OPS that has DIM splits it into the same number of parts
//   split_only(OPS, DIMS, name = N)            OPS may be split only along DIMS (identifiers, "batch", "value")
//   split_counts(OPS, COUNTS, name = N)        each op of OPS is split into a number of parts listed in COUNTS
//   place_on(OPS, DEVICES, name = N)           every part of OPS runs only on DEVICES
//
// OPS is an op, a list of ops (select(...)) or a name pattern as select()
// takes it. Without name = ..., the rule is named by its call text.
#include <algorithm>

#include "semantics/builtin_args.h"
#include "semantics/dimop.h"
#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::sema {

using front::SourceLoc;

namespace {

using builtin_args::arg;
using builtin_args::glob;

Plan& active(Interpreter& in, CallArgs& a, const char* fn) {
  return builtin_args::active_plan(in, a, fn, "declares a constraint of a plan");
}

void collect_ops(Interpreter& in, const Plan& p, const Value& v, SourceLoc loc, const char* fn, std::vector<int>& out) {
  if (v.is<OpHandle>()) {
    int sub = v.as<OpHandle>().subop;
    if (sub < 0 || sub >= static_cast<int>(p.subops.size())) in.fail(loc, std::string(fn) + "(): this op handle no longer exists");
    out.push_back(sub);
  } else if (v.is<std::string>()) {
    for (size_t node = 0; node < p.root_of_node.size(); ++node)
      if (p.root_of_node[node] >= 0 && glob(v.as<std::string>().c_str(), in.graph().node(static_cast<int>(node)).name.c_str()))
        out.push_back(p.root_of_node[node]);
  } else if (v.is<std::shared_ptr<List>>()) {
    for (const Value& item : *v.as<std::shared_ptr<List>>()) collect_ops(in, p, item, loc, fn, out);
  } else {
    in.fail(loc, std::string(fn) + "() expects ops (an op, a list of ops or a name pattern), got " + type_name(v));
  }
}

std::vector<std::string> strings_of(Interpreter& in, const Value& v, SourceLoc loc, const char* fn) {
  std::vector<std::string> out;
  if (v.is<std::string>()) return {v.as<std::string>()};
  if (v.is<std::shared_ptr<List>>()) {
    for (const Value& item : *v.as<std::shared_ptr<List>>()) {
      if (!item.is<std::string>()) in.fail(loc, std::string(fn) + "(): dimensions are strings (\"h\", \"batch\", \"value\"), got " + type_name(item));
      out.push_back(item.as<std::string>());
    }
    if (!out.empty()) return out;
  }
  in.fail(loc, std::string(fn) + "(): expected a dimension name or a non-empty list of them");
}

std::vector<int64_t> ints_of(Interpreter& in, const Value& v, SourceLoc loc, const char* what) {
  std::vector<int64_t> out;
  if (v.is<RangeV>()) {
    for (int64_t x = v.as<RangeV>().lo; x < v.as<RangeV>().hi; ++x) out.push_back(x);
  } else if (v.is<std::shared_ptr<List>>()) {
    for (const Value& item : *v.as<std::shared_ptr<List>>()) out.push_back(in.to_int(item, loc, what));
  } else {
    out.push_back(in.to_int(v, loc, what));
  }
  return out;
}

// split_only's and same_split's dimension names must each be a dimension
// of some op of the table ("batch" and "value" always are): a misspelt
// name used to make a table that allowed nothing or constrained nothing,
// without a word.
void check_dims_exist(Interpreter& in, const Plan& p, const PlanConstraint& c, SourceLoc loc, const char* fn) {
  for (const std::string& dim : c.dims) {
    if (dim == "batch" || dim == "value" || c.ops.empty()) continue;
    std::vector<std::string> ids;
    bool found = false;
    for (int sub : c.ops) {
      const OpNode& node = in.graph().node(p.subops[static_cast<size_t>(sub)].node);
      for (const TransformChoice& t : transform_space(node.anno, false)) {
        found = found || t.id == dim;
        if (std::find(ids.begin(), ids.end(), t.id) == ids.end()) ids.push_back(t.id);
      }
    }
    if (found) continue;
    std::string known;
    for (const std::string& id : ids) known += (known.empty() ? "'" : ", '") + id + "'";
    in.fail(loc, std::string(fn) + "(): no op of the table has a dimension '" + dim + "' (their dimensions: " +
                     (known.empty() ? "none" : known) + "; \"batch\" and \"value\" are always allowed)");
  }
}

Value declare(Interpreter& in, CallArgs& a, const char* fn, PlanConstraint::Kind kind) {
  Plan& p = active(in, a, fn);
  PlanConstraint c;
  c.kind = kind;
  c.loc = a.loc;
  const Value* ops = arg(a, 0, "ops");
  if (!ops) in.fail(a.loc, std::string(fn) + "(): missing argument 'ops'");
  collect_ops(in, p, *ops, a.loc, fn, c.ops);
  switch (kind) {
    case PlanConstraint::SameSplit: {
      const Value* d = arg(a, 1, "dim");
      c.dims = d ? strings_of(in, *d, a.loc, fn) : std::vector<std::string>{"batch"};
      if (c.dims.size() != 1) in.fail(a.loc, "same_split(): give one dimension");
      break;
    }
    case PlanConstraint::SplitOnly: {
      const Value* d = arg(a, 1, "dims");
      if (!d) in.fail(a.loc, "split_only(): missing argument 'dims'");
      c.dims = strings_of(in, *d, a.loc, fn);
      break;
    }
    case PlanConstraint::SplitCounts: {
      const Value* v = arg(a, 1, "counts");
      if (!v) in.fail(a.loc, "split_counts(): missing argument 'counts'");
      c.values = ints_of(in, *v, a.loc, "split count");
      for (int64_t x : c.values)
        if (x < 1) in.fail(a.loc, "split_counts(): counts are positive, got " + std::to_string(x));
      break;
    }
    case PlanConstraint::PlaceOn: {
      const Value* v = arg(a, 1, "devices");
      if (!v) in.fail(a.loc, "place_on(): missing argument 'devices'");
      c.values = ints_of(in, *v, a.loc, "device");
      break;
    }
  }
  check_dims_exist(in, p, c, a.loc, fn);
  if (c.values.empty() && (kind == PlanConstraint::SplitCounts || kind == PlanConstraint::PlaceOn))
    in.fail(a.loc, std::string(fn) + "(): the list of allowed values is empty");
  if (const Value* n = a.get("name")) {
    if (!n->is<std::string>()) in.fail(a.loc, std::string(fn) + "(): name must be a string");
    c.name = n->as<std::string>();
  } else if (a.loc.valid()) {
    std::string_view line = in.sources().file(a.loc.file).line(a.loc.line);
    c.name = a.loc.col >= 1 && static_cast<size_t>(a.loc.col - 1) < line.size()
                 ? std::string(line.substr(a.loc.col - 1, static_cast<size_t>(std::max(1, a.loc.length))))
                 : fn;
  } else {
    c.name = fn;
  }
  p.constraints.push_back(std::move(c));
  return Value();
}

Value b_same_split(Interpreter& in, CallArgs& a) { return declare(in, a, "same_split", PlanConstraint::SameSplit); }
Value b_split_only(Interpreter& in, CallArgs& a) { return declare(in, a, "split_only", PlanConstraint::SplitOnly); }
Value b_split_counts(Interpreter& in, CallArgs& a) { return declare(in, a, "split_counts", PlanConstraint::SplitCounts); }
Value b_place_on(Interpreter& in, CallArgs& a) { return declare(in, a, "place_on", PlanConstraint::PlaceOn); }

}  // namespace

void install_symbolic_builtins(Env& env);  // symbolic_values.cpp

void install_table_builtins(Env& env) {
  install_symbolic_builtins(env);
  define_builtins(env, {
                           {"same_split", b_same_split, "ops, dim, *, name"},
                           {"split_only", b_split_only, "ops, dims, *, name"},
                           {"split_counts", b_split_counts, "ops, counts, *, name"},
                           {"place_on", b_place_on, "ops, devices, *, name"},
                       });
}

}  // namespace nns::sema
