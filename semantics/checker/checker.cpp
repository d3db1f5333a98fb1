// The checker's driver: builds the encoding pass by pass, asks Z3, turns
// an unsat core into one diagnostic, prints the verdict.
#include "semantics/checker/checker.h"
#include "semantics/check_deadline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "semantics/checker/encoder.h"
#include "semantics/checker/symbolic_check.h"

namespace nns::sema::check {

using front::SourceLoc;

std::string interval_text(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ":" + std::to_string(hi) + ")"; }

bool loc_before(const SourceLoc& a, const SourceLoc& b) {
  if (a.valid() != b.valid()) return a.valid();
  if (a.file != b.file) return a.file < b.file;
  if (a.line != b.line) return a.line < b.line;
  return a.col < b.col;
}

// ---- Encoder ---------------------------------------------------------------------------

Encoder::Encoder(const Graph& graph, const Plan& p, const CheckOptions& o) : g(graph), plan(p), opts(o), solver(ctx) {
  // A smaller core names fewer directives; the cost is a few extra solver
  // calls on the (rare) unsat path only.
  z3::params params(ctx);
  params.set("timeout", opts.timeout_ms);
  params.set("core.minimize", true);
  solver.set(params);
}

static std::string call_text(const CheckOptions& opts, SourceLoc loc) {
  if (!opts.sources || !loc.valid() || loc.file >= opts.sources->count()) return "";
  std::string_view line = opts.sources->file(loc.file).line(loc.line);
  if (loc.col < 1 || static_cast<size_t>(loc.col - 1) >= line.size()) return "";
  std::string text(line.substr(loc.col - 1, static_cast<size_t>(std::max(1, loc.length))));
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

int Encoder::directive(DirectiveKind kind, SourceLoc loc, const std::string& fallback_label) {
  auto key = std::make_tuple(static_cast<int>(kind), loc.file, loc.line, loc.col, loc.valid() ? loc.length : 0);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  int id = static_cast<int>(directives_.size());
  std::string label = call_text(opts, loc);
  directives_.push_back({kind, loc, label.empty() ? fallback_label : "'" + label + "'"});
  literals_.push_back(ctx.bool_const(("d" + std::to_string(id)).c_str()));
  index_[key] = id;
  ++stats.directives;
  return id;
}

// Cached per sub-op: the passes ask for a sub-op's directive many times.
int Encoder::trans_of(int sub) {
  if (trans_cache_.empty()) trans_cache_.assign(plan.subops.size(), -1);
  int& cached = trans_cache_[sub];
  if (cached >= 0) return cached;
  const SubOp& s = plan.subops[sub];
  return cached = directive(DirectiveKind::Trans, s.split_loc, "the split of op '" + op_name(s.node) + "'");
}

int Encoder::place_of(int leaf) {
  if (place_cache_.empty()) place_cache_.assign(plan.subops.size(), -1);
  int& cached = place_cache_[leaf];
  if (cached >= 0) return cached;
  const SubOp& s = plan.subops[leaf];
  if (!s.assign_loc.valid() && s.devices.empty())
    // Never placed: the op's call site stands for the missing directive.
    return cached = directive(DirectiveKind::Place, g.node(s.node).loc, "op '" + op_name(s.node) + "' (never placed)");
  return cached = directive(DirectiveKind::Place, s.assign_loc, "the placement of op '" + op_name(s.node) + "'");
}

void Encoder::ground(bool holds, const std::function<Conflict()>& make) {
  CheckDeadline::poll();  // every constraint decided while encoding passes here
  ++stats.ground_checks;
  if (!holds) conflict(make());
}

void Encoder::conflict(Conflict c) {
  std::vector<int> dirs = c.directives;
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  // One assertion per directive set: a wrong trans in a loop over 1000 ops
  // is one conflict, explained by its first instance.
  for (const Conflict& seen : ground_conflicts_) {
    std::vector<int> other = seen.directives;
    std::sort(other.begin(), other.end());
    if (other == dirs) return;
  }
  c.directives = dirs;
  z3::expr all = ctx.bool_val(true);
  for (int d : dirs) all = all && literals_[d];
  solver.add(!all);
  ++stats.tracked;
  ground_conflicts_.push_back(std::move(c));
}

void Encoder::tracked(const std::vector<int>& dirs, const z3::expr& f) {
  CheckDeadline::poll();
  z3::expr all = ctx.bool_val(true);
  for (int d : dirs) all = all && literals_[d];
  solver.add(z3::implies(all, f));
  ++stats.tracked;
}

z3::expr Encoder::int_var(const std::string& name) {
  ++stats.variables;
  return ctx.int_const(name.c_str());
}

std::string Encoder::op_name(int node) const { return g.node(node).name; }

// "op 'x'", "part 1 of 2 on 'n' of op 'x'", nested:
// "part 1 of 2 on 'h' (within part 0 of 4 on 'b') of op 'x'".
std::string Encoder::part_label(int sub) const {
  const SubOp& s = plan.subops[sub];
  if (s.parent < 0) return "op '" + op_name(s.node) + "'";
  auto step = [&](const SubOp& p) {
    return "part " + std::to_string(p.split_index) + " of " + std::to_string(p.split_num) + " on '" + p.split_id + "'";
  };
  std::string text = step(s), within;
  for (int x = s.parent; x >= 0 && plan.subops[x].parent >= 0; x = plan.subops[x].parent)
    within += (within.empty() ? "" : ", ") + step(plan.subops[x]);
  if (!within.empty()) text += " (within " + within + ")";
  return text + " of op '" + op_name(s.node) + "'";
}

void Encoder::solve(CheckResult& result) {
  z3::expr_vector assumptions(ctx);
  for (const z3::expr& l : literals_) assumptions.push_back(l);
  solver.set("timeout", CheckDeadline::remaining_ms(opts.timeout_ms));
  z3::check_result r = solver.check(assumptions);
  if (r == z3::sat) {
    result.verdict = Verdict::Legal;
    return;
  }
  if (r == z3::unknown) {
    result.verdict = Verdict::Unknown;
    std::string why = solver.reason_unknown();
    result.reason = why == "timeout" || why == "canceled"
                        ? "the Z3 time limit (" + std::to_string(opts.timeout_ms) + " ms, --check-timeout) ran out while checking the directives"
                        : "Z3 could not decide the directives (" + why + ")";
    return;
  }
  std::set<int> core;
  z3::expr_vector uc = solver.unsat_core();
  for (unsigned i = 0; i < uc.size(); ++i) {
    std::string name = uc[i].decl().name().str();
    if (name.size() > 1 && name[0] == 'd') core.insert(std::stoi(name.substr(1)));
  }
  std::optional<Conflict> found;
  for (const Conflict& c : ground_conflicts_) {
    bool inside = std::all_of(c.directives.begin(), c.directives.end(), [&](int d) { return core.count(d) > 0; });
    if (inside) {
      found = c;
      break;
    }
  }
  for (size_t i = 0; !found && i < explainers_.size(); ++i) found = explainers_[i](core);
  if (!found) {
    // Every constraint has an explainer; reaching this is a checker bug, but
    // the user still gets the directives Z3 blamed.
    Conflict c;
    c.directives.assign(core.begin(), core.end());
    c.message = "these directives cannot hold together";
    found = c;
  }
  Conflict& c = *found;
  std::sort(c.directives.begin(), c.directives.end(), [&](int a, int b) {
    if (loc_before(directives_[a].loc, directives_[b].loc)) return true;
    if (loc_before(directives_[b].loc, directives_[a].loc)) return false;
    return a < b;
  });
  c.directives.erase(std::unique(c.directives.begin(), c.directives.end()), c.directives.end());
  if (c.cite_first && !c.directives.empty() && c.notes.count(c.directives[0])) c.message += "; this directive " + c.notes[c.directives[0]];
  front::Diagnostic d{front::Severity::Error, c.directives.empty() ? SourceLoc{} : directives_[c.directives[0]].loc, c.message, {}};
  for (size_t i = 1; i < c.directives.size(); ++i) {
    int dir = c.directives[i];
    auto it = c.notes.find(dir);
    d.notes.push_back({front::Severity::Note, directives_[dir].loc, it != c.notes.end() ? it->second : "together with " + directives_[dir].label, {}});
  }
  result.verdict = Verdict::Illegal;
  result.diagnostics.push_back(std::move(d));
}

// ---- check_plan ----------------------------------------------------------------------

CheckResult check_plan(const Graph& g, const Plan& plan, const CheckOptions& opts) {
  CheckResult result;
  auto t0 = std::chrono::steady_clock::now();
  Encoder e(g, plan, opts);
  auto timed = [&](const char* name, auto&& pass) {
    auto a = std::chrono::steady_clock::now();
    pass();
    result.pass_ms.push_back({name, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count()});
  };
  try {
    timed("splits", [&] { encode_splits(e); });
    timed("order", [&] { encode_order(e); });
    timed("schedule", [&] { encode_schedule(e); });
    timed("tables", [&] { encode_tables(e); });
  } catch (const z3::exception& ex) {
    result.verdict = Verdict::Unknown;
    result.reason = std::string("Z3 failed while encoding: ") + ex.msg();
    return result;
  }
  auto t1 = std::chrono::steady_clock::now();
  result.encode_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  try {
    timed("solve", [&] { e.solve(result); });
    // Symbolic sizes: the directive check above ran at the witness sizes;
    // what must hold for every admissible size is proved next.
    if (result.verdict == Verdict::Legal) timed("symbolic", [&] { prove_symbolic(e, result); });
  } catch (const z3::exception& ex) {
    result.verdict = Verdict::Unknown;
    result.reason = std::string("Z3 failed: ") + ex.msg();
  }
  result.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  result.stats = e.stats;
  return result;
}

int exit_code(Verdict v) {
  switch (v) {
    case Verdict::Legal: return 0;
    case Verdict::Illegal: return 65;
    case Verdict::Unknown: return 70;
  }
  return 70;
}

static std::string ms_text(double ms) {
  char buf[32];
  if (ms < 10) std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  else std::snprintf(buf, sizeof buf, "%.0f ms", ms);
  return buf;
}

std::string verdict_line(const Plan& plan, const CheckResult& r, bool illegal) {
  std::string line = "check: plan " + plan.name + " on " + std::to_string(plan.ngpus) + (plan.ngpus == 1 ? " device: " : " devices: ");
  const std::string timing = " (" + ms_text(r.total_ms()) + ")";
  if (illegal) return line + "illegal" + timing;
  switch (r.verdict) {
    case Verdict::Legal: return line + "legal" + (r.symbolic ? " for every admissible size" : "") + timing;
    case Verdict::Illegal: return line + "illegal" + timing;
    case Verdict::Unknown: return line + "unknown: " + r.reason + timing;
  }
  return line;
}

bool check_plan(const Graph& g, const Plan& plan, const CheckOptions& opts, front::DiagnosticEngine& diags, std::ostream& out, Verdict* verdict) {
  CheckResult r = check_plan(g, plan, opts);
  for (auto& d : r.diagnostics) diags.report(d);
  if (verdict) *verdict = r.verdict;
  out << verdict_line(plan, r) << "\n";
  return r.verdict == Verdict::Legal;
}

// ---- sizes ------------------------------------------------------------------------------

bool parse_memory_size(const std::string& text, int64_t& bytes, std::string& label, std::string& err) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number = text.substr(0, i), unit = text.substr(i);
  while (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  static const std::pair<const char*, double> units[] = {
      {"", 1},          {"B", 1},       {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},      {"MB", 1e6},    {"GB", 1e9},     {"TB", 1e12},       {"K", 1024.0},         {"M", 1048576.0},
      {"G", 1073741824.0}, {"T", 1099511627776.0}};
  double scale = -1;
  for (const auto& [u, f] : units)
    if (unit == u) scale = f;
  char* end = nullptr;
  double v = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale < 0 || number.empty() || *end != '\0' || !(v > 0) || v * scale > 9e18) {
    err = "--device-memory: '" + text + "' is not a size (e.g. 80GiB, 512MiB, 1.5TB)";
    return false;
  }
  bytes = static_cast<int64_t>(std::llround(v * scale));
  label = format_bytes(bytes);
  return true;
}

}  // namespace nns::sema::check
