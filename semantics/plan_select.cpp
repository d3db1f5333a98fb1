// Selection by model structure for plans (issue 26):
//   ops_of("blocks[0:6]")        the ops of modules by path and index range
//   after(x) / before(x)         the ops downstream / upstream of x by data flow
//   between(a, b)                the ops downstream of a and upstream of b
//   pipeline_stages(S, blocks)   S pipeline stages of a model's repeated blocks
// They name ops by where they sit in the model, so a selector keeps its
// meaning when an unrelated op is added elsewhere (a positional `#k` name
// does not: it counts the calls of its kind in its module).
#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

#include "semantics/builtin_args.h"
#include "semantics/interpreter.h"
#include "semantics/builtin_signature.h"
#include "semantics/plan.h"

namespace nns::sema {

namespace {

using builtin_args::arg;
using front::SourceLoc;

Plan& active(Interpreter& in, CallArgs& a, const char* fn) {
  return builtin_args::active_plan(in, a, fn, "is a plan primitive");
}

// The top-level forward nodes of the plan's graph, in execution (= topological) order.
std::vector<int> forward_nodes(const Plan& p) {
  std::vector<int> out;
  for (size_t n = 0; n < p.root_of_node.size(); ++n)
    if (p.root_of_node[n] >= 0) out.push_back(static_cast<int>(n));
  return out;
}

Value handles_of_nodes(const Plan& p, const std::vector<int>& nodes) {
  List items;
  for (int n : nodes) items.push_back(Value(OpHandle{p.root_of_node[n]}));
  return make_list(std::move(items));
}

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == '.')
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// One step of a module path: a name, optionally with an index `[i]` or a
// half-open range `[lo:hi]` (either end may be left out) over the numbered
// children of that name (a model list such as `blocks`).
struct PathStep {
  std::string name;
  bool indexed = false;
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
};

std::vector<PathStep> parse_path(Interpreter& in, SourceLoc loc, const std::string& path) {
  std::vector<PathStep> steps;
  const std::string bad = "ops_of(\"" + path + "\"): ";
  for (const std::string& part : split_dots(path)) {
    PathStep st;
    size_t br = part.find('[');
    st.name = part.substr(0, br);
    if (st.name.empty())
      in.fail(loc, bad + "an empty step in the module path (write it as \"blocks[0:6]\" or \"blocks.3.attn\")");
    if (br != std::string::npos) {
      if (part.back() != ']') in.fail(loc, bad + "an index must end with ']'");
      std::string inside = part.substr(br + 1, part.size() - br - 2);
      size_t colon = inside.find(':');
      std::string lo = inside.substr(0, colon), hi = colon == std::string::npos ? "" : inside.substr(colon + 1);
      if ((!lo.empty() && !all_digits(lo)) || (!hi.empty() && !all_digits(hi)) ||
          (colon == std::string::npos && lo.empty()))
        in.fail(loc, bad + "the index '[" + inside + "]' is not I or LO:HI with non-negative integers");
      st.indexed = true;
      st.lo = lo.empty() ? 0 : std::stoll(lo);
      st.hi = colon == std::string::npos ? st.lo + 1 : hi.empty() ? st.hi : std::stoll(hi);
      if (st.hi <= st.lo) in.fail(loc, bad + "the range '[" + inside + "]' is empty");
    }
    steps.push_back(st);
  }
  return steps;
}

// Whether an op's qualified name lies inside the module the path names.
bool in_module(const std::vector<PathStep>& steps, const std::vector<std::string>& name) {
  size_t k = 0;
  for (const PathStep& st : steps) {
    if (k >= name.size() || name[k] != st.name) return false;
    ++k;
    if (!st.indexed) continue;
    if (k >= name.size() || !all_digits(name[k])) return false;
    int64_t i = std::stoll(name[k]);
    if (i < st.lo || i >= st.hi) return false;
    ++k;
  }
  return k < name.size();  // the op itself comes after the module path
}

// The module paths there are (the op names without their last step), for
// an error that found nothing.
std::string known_modules(Interpreter& in, const Plan& p) {
  std::set<std::string> mods;
  for (int n : forward_nodes(p)) {
    std::vector<std::string> parts = split_dots(in.graph().node(n).name);
    std::string m;
    for (size_t i = 0; i + 1 < parts.size() && i < 2; ++i) {
      if (all_digits(parts[i])) break;
      m += (m.empty() ? "" : ".") + parts[i];
    }
    if (!m.empty()) mods.insert(m);
  }
  std::string list;
  for (const std::string& m : mods) list += (list.empty() ? "" : ", ") + m;
  return list.empty() ? "the model's ops are all at top level" : "modules here: " + list;
}

std::vector<int> module_nodes(Interpreter& in, const Plan& p, SourceLoc loc, const std::string& path) {
  std::vector<PathStep> steps = parse_path(in, loc, path);
  std::vector<int> out;
  for (int n : forward_nodes(p))
    if (in_module(steps, split_dots(in.graph().node(n).name))) out.push_back(n);
  if (out.empty()) in.fail(loc, "ops_of(\"" + path + "\") matches no op (" + known_modules(in, p) + ")");
  return out;
}

// ops_of(path): the top-level ops inside the module the path names.
Value b_ops_of(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "ops_of");
  const Value* path = arg(a, 0, "path");
  if (!path || !path->is<std::string>())
    in.fail(a.loc, "ops_of() takes a module path string, e.g. ops_of(\"blocks[0:6]\")");
  return handles_of_nodes(p, module_nodes(in, p, a.loc, path->as<std::string>()));
}

// The top-level nodes of the ops a value designates.
std::set<int> nodes_of(Interpreter& in, const Plan& p, CallArgs& a, size_t i, const char* name, const char* fn) {
  const Value* v = arg(a, i, name);
  if (!v) in.fail(a.loc, std::string(fn) + "(): missing argument '" + name + "'");
  std::vector<int> subs;
  builtin_args::collect_subops(in, *v, a.loc, fn, subs);
  std::set<int> nodes;
  for (int s : subs) nodes.insert(p.subops[s].node);
  if (nodes.empty()) in.fail(a.loc, std::string(fn) + "(): '" + name + "' is an empty list of ops");
  return nodes;
}

// Forward reachability over the top-level data flow: downstream (consumers)
// when `down`, else upstream (producers). The start ops are not included.
std::vector<bool> reach(Interpreter& in, const Plan& p, const std::set<int>& from, bool down) {
  const Graph& g = in.graph();
  std::vector<int> fwd = forward_nodes(p);
  std::vector<bool> hit(p.root_of_node.size(), false);
  std::vector<bool> seed(p.root_of_node.size(), false);
  for (int n : from) seed[n] = true;
  auto step = [&](int n) {
    for (int t : g.node(n).inputs) {
      int prod = g.tensor(t).producer;
      if (prod < 0 || prod >= static_cast<int>(hit.size())) continue;
      if (down && (seed[prod] || hit[prod]) && !seed[n]) hit[n] = true;
      if (!down && (seed[n] || hit[n]) && !seed[prod]) hit[prod] = true;
    }
  };
  if (down)
    for (int n : fwd) step(n);
  else
    for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) step(*it);
  return hit;
}

Value select_hits(const Plan& p, const std::vector<bool>& hit) {
  std::vector<int> nodes;
  for (int n : forward_nodes(p))
    if (hit[n]) nodes.push_back(n);
  return handles_of_nodes(p, nodes);
}

// after(ops): every op that reads, directly or not, a tensor of `ops`.
Value b_after(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "after");
  return select_hits(p, reach(in, p, nodes_of(in, p, a, 0, "ops", "after"), true));
}

// before(ops): every op whose output `ops` read, directly or not.
Value b_before(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "before");
  return select_hits(p, reach(in, p, nodes_of(in, p, a, 0, "ops", "before"), false));
}

// between(a, b): the ops after a and before b (neither end included).
Value b_between(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "between");
  std::vector<bool> down = reach(in, p, nodes_of(in, p, a, 0, "first", "between"), true);
  std::vector<bool> up = reach(in, p, nodes_of(in, p, a, 1, "last", "between"), false);
  for (size_t n = 0; n < down.size(); ++n) down[n] = down[n] && up[n];
  return select_hits(p, down);
}

}  // namespace

Value pipeline_stages_builtin(Interpreter& in, CallArgs& a);  // pipeline_stages.cpp

void install_plan_select_builtins(Env& env) {
  define_builtins(env, {
                           {"ops_of", b_ops_of, "path"},
                           {"after", b_after, "ops"},
                           {"before", b_before, "ops"},
                           {"between", b_between, "first, last"},
                           {"pipeline_stages", pipeline_stages_builtin, "stages, blocks"},
                       });
}

}  // namespace nns::sema
