// Builtin functions of the language and the train block's evaluation.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "frontend/suggest.h"
#include "semantics/interpreter.h"

namespace nns::sema {

using front::SourceLoc;

namespace {

// Argument `i` by position or `name` by keyword; `fallback` when absent.
const Value* arg(CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.get(name);
}

double num(Interpreter& in, CallArgs& a, size_t i, const char* name, double fallback) {
  const Value* v = arg(a, i, name);
  return v ? in.to_float(*v, a.loc, name) : fallback;
}

int64_t integer(Interpreter& in, CallArgs& a, size_t i, const char* name, int64_t fallback) {
  const Value* v = arg(a, i, name);
  return v ? in.to_int(*v, a.loc, name) : fallback;
}

Value record(std::string kind, std::vector<std::pair<std::string, Value>> fields) {
  auto r = std::make_shared<Record>();
  r->kind = std::move(kind);
  r->fields = std::move(fields);
  return Value(r);
}

std::string to_text(const Value& v);

std::string list_text(const List& l) {
  std::string s = "[";
  for (size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + to_text(l[i]);
  return s + "]";
}

std::string to_text(const Value& v) {
  if (v.is<NoneV>()) return "none";
  if (v.is<bool>()) return v.as<bool>() ? "true" : "false";
  if (v.is<int64_t>()) return std::to_string(v.as<int64_t>());
  if (v.is<double>()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v.as<double>());
    return buf;
  }
  if (v.is<std::string>()) return v.as<std::string>();
  if (v.is<RangeV>()) return std::to_string(v.as<RangeV>().lo) + ".." + std::to_string(v.as<RangeV>().hi);
  if (v.is<std::shared_ptr<List>>()) return list_text(*v.as<std::shared_ptr<List>>());
  if (v.is<TensorV>()) return "tensor %" + std::to_string(v.as<TensorV>().id);
  if (v.is<std::shared_ptr<Record>>()) {
    const Record& r = *v.as<std::shared_ptr<Record>>();
    std::string s = (r.kind == "dict" ? "" : r.kind) + "{";
    for (size_t i = 0; i < r.fields.size(); ++i) s += (i ? ", " : "") + r.fields[i].first + ": " + to_text(r.fields[i].second);
    return s + "}";
  }
  return "<" + type_name(v) + ">";
}

// ---- general-purpose builtins ----------------------------------------------------

Value b_len(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1) in.fail(a.loc, "len() takes one argument");
  const Value& v = a.positional[0];
  if (v.is<std::shared_ptr<List>>()) return Value(static_cast<int64_t>(v.as<std::shared_ptr<List>>()->size()));
  if (v.is<std::string>()) return Value(static_cast<int64_t>(v.as<std::string>().size()));
  if (v.is<RangeV>()) return Value(v.as<RangeV>().hi - v.as<RangeV>().lo);
  in.fail(a.loc, "len() of " + a_type_name(v));
}

Value b_range(Interpreter& in, CallArgs& a) {
  if (a.positional.empty()) in.fail(a.loc, "range() needs at least one argument");
  int64_t lo = 0, hi, step = 1;
  if (a.positional.size() == 1) {
    hi = in.to_int(a.positional[0], a.loc, "range end");
  } else {
    lo = in.to_int(a.positional[0], a.loc, "range start");
    hi = in.to_int(a.positional[1], a.loc, "range end");
    if (a.positional.size() == 3) step = in.to_int(a.positional[2], a.loc, "range step");
  }
  if (step == 0) in.fail(a.loc, "range() step must not be zero");
  if (step == 1) return Value(RangeV{lo, std::max(lo, hi)});
  // Elements without overflow: the distance over the step, rounded up.
  long double span = step > 0 ? static_cast<long double>(hi) - lo : static_cast<long double>(lo) - hi;
  long double count = span <= 0 ? 0 : (span + std::abs(static_cast<long double>(step)) - 1) / std::abs(static_cast<long double>(step));
  in.check_list_size(count > static_cast<long double>(kMaxListElements) ? kMaxListElements + 1 : static_cast<int64_t>(count), a.loc);
  List items;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) items.push_back(Value(i));
  return make_list(std::move(items));
}

Value b_print(Interpreter&, CallArgs& a) {
  std::string s;
  for (size_t i = 0; i < a.positional.size(); ++i) s += (i ? " " : "") + to_text(a.positional[i]);
  std::cout << s << "\n";
  return Value();
}

Value b_str(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1) in.fail(a.loc, "str() takes one argument");
  std::string text = to_text(a.positional[0]);
  in.check_string_size(static_cast<int64_t>(text.size()), a.loc);
  return Value(std::move(text));
}

Value b_int(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1) in.fail(a.loc, "int() takes one argument");
  double v = in.to_float(a.positional[0], a.loc, "int() argument");
  return Value(static_cast<int64_t>(std::trunc(v)));
}

Value b_float(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1) in.fail(a.loc, "float() takes one argument");
  return Value(in.to_float(a.positional[0], a.loc, "float() argument"));
}

// min / max over arguments or over one list.
Value extremum(Interpreter& in, CallArgs& a, bool want_max) {
  std::vector<Value> items = a.positional;
  if (items.size() == 1 && items[0].is<std::shared_ptr<List>>()) items = *items[0].as<std::shared_ptr<List>>();
  if (items.empty()) in.fail(a.loc, std::string(want_max ? "max" : "min") + "() of nothing");
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    double x = in.to_float(items[i], a.loc, "argument"), b = in.to_float(best, a.loc, "argument");
    if (want_max ? x > b : x < b) best = items[i];
  }
  return best;
}
Value b_min(Interpreter& in, CallArgs& a) { return extremum(in, a, false); }
Value b_max(Interpreter& in, CallArgs& a) { return extremum(in, a, true); }

Value b_abs(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1) in.fail(a.loc, "abs() takes one argument");
  const Value& v = a.positional[0];
  if (v.is<int64_t>()) return Value(std::llabs(v.as<int64_t>()));
  return Value(std::fabs(in.to_float(v, a.loc, "abs() argument")));
}

Value math1(Interpreter& in, CallArgs& a, const char* name, double (*f)(double)) {
  if (a.positional.size() != 1) in.fail(a.loc, std::string(name) + "() takes one argument");
  double x = in.to_float(a.positional[0], a.loc, "argument");
  double r = f(x);
  if (std::isnan(r)) in.fail(a.loc, std::string(name) + "() of " + to_text(a.positional[0]) + " is undefined");
  return Value(r);
}
Value b_sqrt(Interpreter& in, CallArgs& a) { return math1(in, a, "sqrt", [](double x) { return std::sqrt(x); }); }
Value b_log2(Interpreter& in, CallArgs& a) { return math1(in, a, "log2", [](double x) { return std::log2(x); }); }
Value b_exp(Interpreter& in, CallArgs& a) { return math1(in, a, "exp", [](double x) { return std::exp(x); }); }
Value b_log(Interpreter& in, CallArgs& a) { return math1(in, a, "log", [](double x) { return std::log(x); }); }
Value b_sin(Interpreter& in, CallArgs& a) { return math1(in, a, "sin", [](double x) { return std::sin(x); }); }
Value b_cos(Interpreter& in, CallArgs& a) { return math1(in, a, "cos", [](double x) { return std::cos(x); }); }
Value b_floor(Interpreter& in, CallArgs& a) {
  return Value(static_cast<int64_t>(std::floor(math1(in, a, "floor", [](double x) { return x; }).as<double>())));
}
Value b_ceil(Interpreter& in, CallArgs& a) {
  return Value(static_cast<int64_t>(std::ceil(math1(in, a, "ceil", [](double x) { return x; }).as<double>())));
}

Value b_sum(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1 || !a.positional[0].is<std::shared_ptr<List>>()) in.fail(a.loc, "sum_list() takes one list");
  bool ints = true;
  int64_t si = 0;
  double sf = 0;
  for (const Value& v : *a.positional[0].as<std::shared_ptr<List>>()) {
    if (v.is<int64_t>()) si += v.as<int64_t>();
    else { ints = false; sf += in.to_float(v, a.loc, "list element"); }
  }
  return ints ? Value(si) : Value(sf + static_cast<double>(si));
}

Value b_prod(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1 || !a.positional[0].is<std::shared_ptr<List>>()) in.fail(a.loc, "prod() takes one list");
  int64_t p = 1;
  for (const Value& v : *a.positional[0].as<std::shared_ptr<List>>()) p *= in.to_int(v, a.loc, "list element");
  return Value(p);
}

Value b_append(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 2 || !a.positional[0].is<std::shared_ptr<List>>()) in.fail(a.loc, "append(list, value) takes a list and a value");
  auto& list = *a.positional[0].as<std::shared_ptr<List>>();
  in.check_list_size(static_cast<int64_t>(list.size()) + 1, a.loc);
  in.check_no_cycle(list, a.positional[1], a.loc);
  list.push_back(a.positional[1]);
  return a.positional[0];  // the list itself (appended in place), so calls chain
}

Value b_assert(Interpreter& in, CallArgs& a) {
  if (a.positional.empty()) in.fail(a.loc, "assert() needs a condition");
  const Value& c = a.positional[0];
  bool ok = c.is<bool>() ? c.as<bool>() : c.is<int64_t>() ? c.as<int64_t>() != 0 : !c.is<NoneV>();
  if (!ok) in.fail(a.loc, "assertion failed" + (a.positional.size() > 1 ? ": " + to_text(a.positional[1]) : std::string()));
  return Value();
}

Value b_error(Interpreter& in, CallArgs& a) {
  in.fail(a.loc, a.positional.empty() ? std::string("error() called") : to_text(a.positional[0]));
}

// ---- init specs (param / input initializers) -----------------------------------

Value b_normal(Interpreter& in, CallArgs& a) {
  double std = num(in, a, 0, "std", 1.0);
  if (std < 0) in.fail(a.loc, "normal(): std must be non-negative");
  return record("init:normal", {{"std", Value(std)}});
}
Value b_trunc_normal(Interpreter& in, CallArgs& a) {
  return record("init:trunc_normal", {{"std", Value(num(in, a, 0, "std", 0.02))}});
}
Value b_zeros(Interpreter& in, CallArgs& a) { return record("init:zeros", {}); }
Value b_ones(Interpreter& in, CallArgs& a) { return record("init:ones", {}); }
Value b_uniform(Interpreter& in, CallArgs& a) {
  double lo = num(in, a, 0, "low", -1), hi = num(in, a, 1, "high", 1);
  if (!(lo < hi)) in.fail(a.loc, "uniform(): low must be below high");
  return record("init:uniform", {{"low", Value(lo)}, {"high", Value(hi)}});
}
// Rotary position embedding angles for a buffer [..., positions, dim]
// (the runtime fills them: trainer.h, fill_init).
Value b_rotary(Interpreter& in, CallArgs& a) {
  double base = num(in, a, 0, "base", 10000.0);
  if (!(base > 1)) in.fail(a.loc, "rotary(): base must be greater than 1");
  return record("init:rotary", {{"base", Value(base)}});
}
Value b_randn(Interpreter& in, CallArgs& a) {
  return record("init:randn", {{"std", Value(num(in, a, 0, "std", 1.0))}});
}
Value b_tokens(Interpreter& in, CallArgs& a) {
  int64_t n = integer(in, a, 0, "vocab", 0);
  if (n <= 0) in.fail(a.loc, "tokens(): the vocabulary size must be positive");
  return record("init:tokens", {{"vocab", Value(n)}});
}
Value b_labels(Interpreter& in, CallArgs& a) {
  int64_t n = integer(in, a, 0, "classes", 0);
  if (n <= 0) in.fail(a.loc, "labels(): the number of classes must be positive");
  return record("init:labels", {{"classes", Value(n)}});
}

// ---- training specs ----------------------------------------------------------------

Value b_sgd(Interpreter& in, CallArgs& a) {
  return record("sgd", {{"lr", Value(num(in, a, 0, "lr", 0.01))},
                        {"momentum", Value(num(in, a, 99, "momentum", 0.0))},
                        {"weight_decay", Value(num(in, a, 99, "weight_decay", 0.0))}});
}
Value b_adamw(Interpreter& in, CallArgs& a) {
  return record("adamw", {{"lr", Value(num(in, a, 0, "lr", 1e-3))},
                          {"beta1", Value(num(in, a, 99, "beta1", 0.9))},
                          {"beta2", Value(num(in, a, 99, "beta2", 0.999))},
                          {"eps", Value(num(in, a, 99, "eps", 1e-8))},
                          {"weight_decay", Value(num(in, a, 99, "weight_decay", 0.01))}});
}
Value b_constant_lr(Interpreter& in, CallArgs& a) {
  return record("schedule", {{"kind", Value(std::string("constant"))}});
}
Value b_cosine_lr(Interpreter& in, CallArgs& a) {
  return record("schedule", {{"kind", Value(std::string("cosine"))},
                             {"warmup", Value(integer(in, a, 99, "warmup", 0))},
                             {"min_lr", Value(num(in, a, 99, "min_lr", 0.0))},
                             {"steps", Value(integer(in, a, 99, "steps", 0))}});
}
Value b_linear_lr(Interpreter& in, CallArgs& a) {
  return record("schedule", {{"kind", Value(std::string("linear"))},
                             {"warmup", Value(integer(in, a, 99, "warmup", 0))},
                             {"min_lr", Value(num(in, a, 99, "min_lr", 0.0))},
                             {"steps", Value(integer(in, a, 99, "steps", 0))}});
}
// Dynamic loss scaling (precision = "fp16"): PyTorch GradScaler's defaults (train_spec.h).
Value b_dynamic_loss_scale(Interpreter& in, CallArgs& a) {
  double init = num(in, a, 99, "init", 65536.0), growth = num(in, a, 99, "growth", 2.0), backoff = num(in, a, 99, "backoff", 0.5);
  int64_t interval = integer(in, a, 99, "interval", 2000);
  if (!(init > 0) || !std::isfinite(init)) in.fail(a.loc, "dynamic_loss_scale(): init must be a positive finite number");
  if (!(growth >= 1) || !std::isfinite(growth)) in.fail(a.loc, "dynamic_loss_scale(): growth must be at least 1");
  if (!(backoff > 0 && backoff < 1)) in.fail(a.loc, "dynamic_loss_scale(): backoff must be in (0, 1)");
  if (interval <= 0) in.fail(a.loc, "dynamic_loss_scale(): interval must be a positive number of steps");
  return record("loss_scale", {{"init", Value(init)}, {"growth", Value(growth)}, {"backoff", Value(backoff)}, {"interval", Value(interval)}});
}
Value b_synthetic(Interpreter& in, CallArgs& a) {
  return record("data", {{"kind", Value(std::string("synthetic"))}, {"seed", Value(integer(in, a, 0, "seed", 0))}});
}
Value b_safetensors(Interpreter& in, CallArgs& a) {
  const Value* p = arg(a, 0, "path");
  if (!p || !p->is<std::string>()) in.fail(a.loc, "safetensors() needs a file path string");
  return record("data", {{"kind", Value(std::string("safetensors"))}, {"path", *p}});
}

// Token sources (backend/runtime/data/token_dataset.h): windows of seq + 1
// tokens feed the `input` (w[0:seq]) and `target` (w[1:seq+1]) inputs.
std::string text(Interpreter& in, CallArgs& a, size_t i, const char* fn, const char* name, const char* fallback) {
  const Value* v = arg(a, i, name);
  if (!v) {
    if (!fallback) in.fail(a.loc, std::string(fn) + "() needs " + name + " (a string)");
    return fallback;
  }
  if (!v->is<std::string>()) in.fail(a.loc, std::string(fn) + "(): " + name + " must be a string, got " + type_name(*v));
  return v->as<std::string>();
}
Value token_source(Interpreter& in, CallArgs& a, const char* fn, std::string dtype) {
  return record("data", {{"kind", Value(std::string(fn))}, {"path", Value(text(in, a, 0, fn, "path", nullptr))},
                         {"dtype", Value(std::move(dtype))}, {"seed", Value(integer(in, a, 99, "seed", 0))},
                         {"input", Value(text(in, a, 99, fn, "input", "ids"))}, {"target", Value(text(in, a, 99, fn, "target", "targets"))}});
}
Value b_token_file(Interpreter& in, CallArgs& a) {
  std::string dtype = text(in, a, 99, "token_file", "dtype", "uint16");
  if (dtype != "uint16" && dtype != "uint32") in.fail(a.loc, "token_file(): dtype must be \"uint16\" or \"uint32\", got \"" + dtype + "\"");
  return token_source(in, a, "token_file", dtype);
}
Value b_megatron_tokens(Interpreter& in, CallArgs& a) { return token_source(in, a, "megatron_tokens", ""); }

// .npy arrays (backend/runtime/data/array_dataset.h): {input: "file.npy", ...}.
Value b_arrays(Interpreter& in, CallArgs& a) {
  const Value* f = arg(a, 0, "files");
  if (!f || !f->is<std::shared_ptr<Record>>() || f->as<std::shared_ptr<Record>>()->kind != "dict")
    in.fail(a.loc, "arrays() needs a dict of model input -> .npy path, e.g. arrays({x: \"x.npy\", y: \"y.npy\"})");
  for (const auto& [name, path] : f->as<std::shared_ptr<Record>>()->fields)
    if (!path.is<std::string>()) in.fail(a.loc, "arrays(): the file for '" + name + "' must be a path string, got " + type_name(path));
  return record("data", {{"kind", Value(std::string("arrays"))}, {"files", *f}, {"seed", Value(integer(in, a, 99, "seed", 0))}});
}

}  // namespace

void install_builtins(Env& env) {
  define_builtins(env, {
                           {"len", b_len, "value, /"},
                           {"range", b_range, "start, stop, step, /"},
                           {"print", b_print, "values..."},
                           {"str", b_str, "value, /"},
                           {"int", b_int, "value, /"},
                           {"float", b_float, "value, /"},
                           {"min", b_min, "values..."},
                           {"max", b_max, "values..."},
                           {"abs", b_abs, "x, /"},
                           {"sqrt", b_sqrt, "x, /"},
                           {"log2", b_log2, "x, /"},
                           {"exp", b_exp, "x, /"},
                           {"log", b_log, "x, /"},
                           {"sin", b_sin, "x, /"},
                           {"cos", b_cos, "x, /"},
                           {"floor", b_floor, "x, /"},
                           {"ceil", b_ceil, "x, /"},
                           {"sum_list", b_sum, "list, /"},
                           {"prod", b_prod, "list, /"},
                           {"append", b_append, "list, value, /"},
                           {"assert", b_assert, "condition, message, /"},
                           {"error", b_error, "message, /"},
                           {"normal", b_normal, "std"},
                           {"trunc_normal", b_trunc_normal, "std"},
                           {"zeros", b_zeros, ""},
                           {"ones", b_ones, ""},
                           {"uniform", b_uniform, "low, high"},
                           {"rotary", b_rotary, "base"},
                           {"randn", b_randn, "std"},
                           {"tokens", b_tokens, "vocab"},
                           {"labels", b_labels, "classes"},
                           {"sgd", b_sgd, "lr, *, momentum, weight_decay"},
                           {"adamw", b_adamw, "lr, *, beta1, beta2, eps, weight_decay"},
                           {"constant_lr", b_constant_lr, ""},
                           {"cosine_lr", b_cosine_lr, "*, warmup, min_lr, steps"},
                           {"linear_lr", b_linear_lr, "*, warmup, min_lr, steps"},
                           {"synthetic", b_synthetic, "seed"},
                           {"safetensors", b_safetensors, "path"},
                           {"token_file", b_token_file, "path, *, dtype, seed, input, target"},
                           {"megatron_tokens", b_megatron_tokens, "path, *, seed, input, target"},
                           {"arrays", b_arrays, "files, *, seed"},
                           {"dynamic_loss_scale", b_dynamic_loss_scale, "*, init, growth, backoff, interval"},
                       });
}

// ---- the train block ------------------------------------------------------------------

namespace {

const char* const kSettings[] = {"model",       "loss",          "optimizer",  "schedule",    "data",
                                 "steps",       "micro_batches", "clip",       "precision",   "loss_scale",
                                 "grad_reduce", "val_data",      "eval_every", "eval_batches"};

// A data source's record (synthetic(...), token_file(...), ...) as the runtime reads it.
void data_spec_of(const Record& r, DataSpec& d) {
  d.kind = r.get("kind")->as<std::string>();
  if (const Value* s = r.get("seed")) d.seed = s->as<int64_t>();
  if (const Value* p = r.get("path")) d.path = p->as<std::string>();
  if (const Value* t = r.get("dtype")) d.token_dtype = t->as<std::string>();
  if (const Value* i = r.get("input")) d.input = i->as<std::string>();
  if (const Value* t = r.get("target")) d.target = t->as<std::string>();
  if (const Value* files = r.get("files"))
    for (const auto& [name, path] : files->as<std::shared_ptr<Record>>()->fields)
      d.arrays.emplace_back(name, path.as<std::string>());
}

bool is_setting(const std::string& n) {
  for (const char* s : kSettings)
    if (n == s) return true;
  return false;
}

std::string settings_list() {
  std::string s;
  for (const char* k : kSettings) s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}
}  // namespace

void Interpreter::run_train(const front::TrainDecl& t, const std::shared_ptr<Env>& module_env, SourceLoc loc) {
  auto env = new_env(module_env);
  TrainSpec spec;
  spec.loc = loc;
  std::map<std::string, SourceLoc> set_at;
  for (const front::StmtPtr& s : t.body) {
    auto* assign = std::get_if<front::AssignStmt>(&s->node);
    auto* name = assign ? std::get_if<front::Name>(&assign->target->node) : nullptr;
    // A setting stays a setting once set (so a second assignment is caught);
    // other names bound in the block (`let`) are ordinary locals.
    bool local = name && env->find_local(name->id) && !set_at.count(name->id);
    if (!name || local) {
      Flow f = exec(*s, env);
      if (f != Flow::Normal)
        fail(flow_loc_, std::string(flow_keyword(f)) + (f == Flow::Return ? " in a train block" : " outside a loop in a train block"));
      continue;
    }
    const std::string& key = name->id;
    if (!is_setting(key))
      fail(assign->target->loc, "unknown training setting '" + key + "'" +
                                    front::did_you_mean(key, std::vector<std::string>(std::begin(kSettings), std::end(kSettings))) +
                                    " (settings: " + settings_list() + "); use 'let' for a local name");
    if (assign->op != "=") fail(s->loc, "training setting '" + key + "' must be set with '='");
    if (set_at.count(key)) fail(assign->target->loc, "training setting '" + key + "' is set twice");
    set_at[key] = assign->value->loc;
    Value v = eval(*assign->value, env);
    SourceLoc vl = assign->value->loc;
    auto need_record = [&](const char* kind, const char* hint) -> const Record& {
      if (!v.is<std::shared_ptr<Record>>() || v.as<std::shared_ptr<Record>>()->kind.find(kind) == std::string::npos)
        fail(vl, "'" + key + "' must be " + hint + ", got " + type_name(v));
      return *v.as<std::shared_ptr<Record>>();
    };
    if (key == "model") {
      if (!v.is<std::shared_ptr<Instance>>()) fail(vl, "'model' must be a model instance, got " + type_name(v));
    } else if (key == "loss") {
      if (!v.is<TensorV>()) fail(vl, "'loss' must be a tensor, got " + type_name(v));
      const TensorInfo& lt = graph_->tensor(v.as<TensorV>().id);
      if (numel(lt.shape) != 1) fail(vl, "the loss must have one element, but its shape is " + shape_to_string(lt.shape));
      if (!dtype_is_float(lt.dtype)) fail(vl, "the loss must be a float tensor, but it is " + std::string(dtype_name(lt.dtype)));
      spec.loss = v.as<TensorV>().id;
    } else if (key == "optimizer") {
      if (!v.is<std::shared_ptr<Record>>() || (v.as<std::shared_ptr<Record>>()->kind != "sgd" && v.as<std::shared_ptr<Record>>()->kind != "adamw"))
        fail(vl, "'optimizer' must be sgd(...) or adamw(...), got " + type_name(v));
      const Record& r = *v.as<std::shared_ptr<Record>>();
      spec.optimizer.kind = r.kind;
      spec.optimizer.lr = r.get("lr")->as<double>();
      if (!(spec.optimizer.lr > 0)) fail(vl, "the learning rate must be positive");
      if (r.kind == "sgd") {
        spec.optimizer.momentum = r.get("momentum")->as<double>();
        spec.optimizer.weight_decay = r.get("weight_decay")->as<double>();
        if (spec.optimizer.momentum < 0 || spec.optimizer.momentum >= 1) fail(vl, "sgd momentum must be in [0, 1)");
      } else {
        spec.optimizer.beta1 = r.get("beta1")->as<double>();
        spec.optimizer.beta2 = r.get("beta2")->as<double>();
        spec.optimizer.eps = r.get("eps")->as<double>();
        spec.optimizer.weight_decay = r.get("weight_decay")->as<double>();
        if (spec.optimizer.beta1 < 0 || spec.optimizer.beta1 >= 1 || spec.optimizer.beta2 < 0 || spec.optimizer.beta2 >= 1)
          fail(vl, "adamw betas must be in [0, 1)");
      }
      if (spec.optimizer.weight_decay < 0) fail(vl, "weight decay must be non-negative");
    } else if (key == "schedule") {
      const Record& r = need_record("schedule", "constant_lr(), cosine_lr(...) or linear_lr(...)");
      spec.schedule.kind = r.get("kind")->as<std::string>();
      if (const Value* w = r.get("warmup")) spec.schedule.warmup = w->as<int64_t>();
      if (const Value* m = r.get("min_lr")) spec.schedule.min_lr = m->as<double>();
      if (const Value* n = r.get("steps")) {
        spec.schedule.steps = n->as<int64_t>();
        spec.schedule.pinned = spec.schedule.steps > 0;
      }
      if (spec.schedule.warmup < 0) fail(vl, "warmup must be non-negative");
      if (spec.schedule.steps < 0) fail(vl, "the schedule's steps must be positive (0: the train block's steps)");
    } else if (key == "data" || key == "val_data") {
      const Record& r = need_record("data", "synthetic(seed), safetensors(path), token_file(path, ...), megatron_tokens(prefix, ...) or arrays({...})");
      data_spec_of(r, key == "data" ? spec.data : spec.val_data);
      spec.has_val_data |= key == "val_data";
    } else if (key == "eval_every" || key == "eval_batches") {
      int64_t n = to_int(v, vl, key.c_str());
      if (n <= 0) fail(vl, "'" + key + "' must be positive, got " + std::to_string(n));
      (key == "eval_every" ? spec.eval_every : spec.eval_batches) = n;
    } else if (key == "steps" || key == "micro_batches") {
      int64_t n = to_int(v, vl, key.c_str());
      if (n <= 0) fail(vl, "'" + key + "' must be positive, got " + std::to_string(n));
      // Micro-batch indices are ints throughout lowering and the schedules.
      if (key == "micro_batches" && n > kMaxMicroBatches)
        fail(vl, "'micro_batches' is at most " + std::to_string(kMaxMicroBatches) + ", got " + std::to_string(n));
      (key == "steps" ? spec.steps : spec.micro_batches) = n;
    } else if (key == "clip") {
      spec.clip = to_float(v, vl, "clip");
      if (spec.clip < 0) fail(vl, "'clip' must be non-negative (0 disables clipping)");
    } else if (key == "precision") {
      if (!v.is<std::string>()) fail(vl, "'precision' must be a string (\"fp32\", \"bf16\" or \"fp16\"), got " + type_name(v));
      const std::string& p = v.as<std::string>();
      if (p != "fp32" && p != "bf16" && p != "fp16") fail(vl, "unknown precision \"" + p + "\" (\"fp32\", \"bf16\" or \"fp16\")");
      spec.precision = p;
    } else if (key == "loss_scale") {
      const Record& r = need_record("loss_scale", "dynamic_loss_scale(...)");
      spec.loss_scale.init = r.get("init")->as<double>();
      spec.loss_scale.growth = r.get("growth")->as<double>();
      spec.loss_scale.backoff = r.get("backoff")->as<double>();
      spec.loss_scale.interval = r.get("interval")->as<int64_t>();
    } else if (key == "grad_reduce") {
      if (!v.is<std::string>()) fail(vl, "'grad_reduce' must be a string (\"fp32\" or \"bf16\"), got " + type_name(v));
      const std::string& r = v.as<std::string>();
      if (r != "fp32" && r != "bf16") fail(vl, "unknown gradient reduction dtype \"" + r + "\" (\"fp32\" or \"bf16\")");
      spec.grad_reduce = r;
    }
    env->define(key, std::move(v));
  }
  if (spec.loss < 0) fail(loc, "the train block does not set 'loss'");
  // Loss scaling exists for fp16's range; bf16 and fp32 have fp32's.
  if (auto ls = set_at.find("loss_scale"); ls != set_at.end() && spec.precision != "fp16")
    fail(ls->second, "'loss_scale' applies to precision \"fp16\" only (this block trains in " + spec.precision + ")");
  if (spec.schedule.steps == 0) spec.schedule.steps = spec.steps;
  // Validation needs both: when to evaluate and on what.
  if (auto e = set_at.find("eval_every"); e != set_at.end() && !spec.has_val_data)
    fail(e->second, "'eval_every' needs 'val_data' (the validation data source) in the train block");
  if (auto d = set_at.find("val_data"); d != set_at.end() && spec.eval_every == 0)
    fail(d->second, "'val_data' needs 'eval_every = K' (validate every K steps) in the train block");
  // The block's own names for tensors (`let logits = model(ids)`), which
  // `nns run --eval --dump-outputs` writes; settings are not among them.
  for (const std::string& n : env->order)
    if (const Value* v = env->find_local(n); v && v->is<TensorV>() && !is_setting(n))
      spec.named_tensors[n] = v->as<TensorV>().id;
  graph_->loss = spec.loss;
  train_ = spec;
}

}  // namespace nns::sema
