// `weights NAME { ... }` blocks (weight_map.h): run once like a plan body,
// their builtins (take, ignore, optional_prefix) record the entries of the
// map being evaluated and refuse to run anywhere else.
#include <algorithm>

#include "frontend/suggest.h"
#include "semantics/builtin_args.h"
#include "semantics/interpreter.h"

namespace nns::sema {

namespace {

using builtin_args::arg;

WeightMapSpec& active(Interpreter& in, CallArgs& a, const char* fn) {
  WeightMapSpec* m = in.active_weight_map();
  if (!m) in.fail(a.loc, std::string(fn) + "() maps checkpoint tensors: use it inside a weights block");
  return *m;
}

std::string string_arg(Interpreter& in, CallArgs& a, size_t i, const char* name, const char* fn) {
  const Value* v = arg(a, i, name);
  if (!v) in.fail(a.loc, std::string(fn) + "(): missing argument '" + name + "'");
  if (!v->is<std::string>())
    in.fail(a.loc, std::string(fn) + "(): '" + name + "' must be a string, got " + type_name(*v));
  if (v->as<std::string>().empty()) in.fail(a.loc, std::string(fn) + "(): '" + name + "' is empty");
  return v->as<std::string>();
}

// take(param, source, slice = [axis, start, end], transpose = false)
Value b_take(Interpreter& in, CallArgs& a) {
  WeightMapSpec& m = active(in, a, "take");
  WeightTake t;
  t.param = string_arg(in, a, 0, "param", "take");
  t.source = string_arg(in, a, 1, "source", "take");
  t.loc = a.loc;
  if (const Value* s = a.get("slice"); s && !s->is<NoneV>()) {
    if (!s->is<std::shared_ptr<List>>() || s->as<std::shared_ptr<List>>()->size() != 3)
      in.fail(a.loc, "take(): slice must be [axis, start, end], got " + type_name(*s));
    const List& l = *s->as<std::shared_ptr<List>>();
    int64_t axis = in.to_int(l[0], a.loc, "slice axis");
    t.start = in.to_int(l[1], a.loc, "slice start");
    t.end = in.to_int(l[2], a.loc, "slice end");
    if (axis < 0 || axis > 5) in.fail(a.loc, "take(): slice axis " + std::to_string(axis) + " is out of range (0..5)");
    if (t.start < 0 || t.end <= t.start)
      in.fail(a.loc,
              "take(): slice [" + std::to_string(t.start) + ", " + std::to_string(t.end) + ") is empty or negative");
    t.axis = static_cast<int>(axis);
  }
  if (const Value* tr = a.get("transpose"); tr && !tr->is<NoneV>()) {
    if (!tr->is<bool>()) in.fail(a.loc, "take(): transpose must be true or false, got " + type_name(*tr));
    t.transpose = tr->as<bool>();
  }
  for (const WeightTake& other : m.takes)
    if (other.param == t.param)
      in.fail(a.loc, "take(): parameter '" + t.param + "' is already taken from '" + other.source + "' at line " +
                         std::to_string(other.loc.line));
  m.takes.push_back(std::move(t));
  return Value();
}

// ignore(pattern): source tensors the map reads on purpose by no entry.
Value b_ignore(Interpreter& in, CallArgs& a) {
  active(in, a, "ignore").ignored.push_back(string_arg(in, a, 0, "pattern", "ignore"));
  return Value();
}

// optional_prefix(text): a source name may also be stored with this prefix.
Value b_optional_prefix(Interpreter& in, CallArgs& a) {
  active(in, a, "optional_prefix").prefixes.push_back(string_arg(in, a, 0, "prefix", "optional_prefix"));
  return Value();
}

}  // namespace

void install_weights_builtins(Env& env) {
  define_builtins(env, {
                           {"take", b_take, "param, source, *, slice, transpose"},
                           {"ignore", b_ignore, "pattern"},
                           {"optional_prefix", b_optional_prefix, "prefix"},
                       });
}

std::vector<std::string> Interpreter::weight_map_names() const {
  std::vector<std::string> out;
  for (const PlanInfo& w : weight_maps_) out.push_back(w.name);
  return out;
}

bool Interpreter::evaluate_weights(const std::string& name, WeightMapSpec& out) {
  start_budget();
  failure_ = Failure::None;
  auto it = std::find_if(weight_maps_.begin(), weight_maps_.end(), [&](const PlanInfo& w) { return w.name == name; });
  if (it == weight_maps_.end()) {
    std::vector<std::string> known = weight_map_names();
    std::string names;
    for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
    diags_.error({}, "unknown weights map '" + name + "'" + front::did_you_mean(name, known) +
                         (names.empty() ? " (the file defines no weights block)" : "; available: " + names));
    failure_ = Failure::UnknownPlan;
    return finish_phase(false);
  }
  out = WeightMapSpec{};
  out.name = name;
  out.loc = it->fn->loc;
  try {
    auto env = new_env(it->env ? it->env : main_env_);
    for (const front::Param& p : it->fn->params) {
      if (!p.default_value) fail(p.loc, "weights parameter '" + p.name + "' has no default value");
      env->define(p.name, eval(*p.default_value, env));
    }
    weight_map_ = &out;
    struct Reset {
      WeightMapSpec*& m;
      ~Reset() { m = nullptr; }
    } reset{weight_map_};
    Flow flow = exec_block(it->fn->body, env);
    if (flow != Flow::Normal && flow != Flow::Return)
      fail(it->fn->loc, "'break' or 'continue' outside a loop in weights '" + name + "'");
    if (out.takes.empty()) fail(it->fn->loc, "weights '" + name + "' takes no tensor (call take(param, source) in it)");
  } catch (front::UserError& e) {
    diags_.report(std::move(e.diag));
    return finish_phase(false);
  }
  return finish_phase(true);
}

}  // namespace nns::sema
