// Helpers shared by the builtins that act on the plan being evaluated: the
// plan primitives (plan_builtins.cpp: select, trans, assign...) and the
// constraint tables (checker/table_builtins.cpp: same_split, split_only...).
// One copy, so both read arguments and match op names the same way.
#pragma once

#include <string>
#include <vector>

#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::sema::builtin_args {

// The plan being evaluated (Interpreter::evaluate_plan, or the REPL
// session's). Outside a plan block the call fails at its site with
// "<fn>() <what>: use it inside a plan block".
inline Plan& active_plan(Interpreter& in, CallArgs& a, const char* fn, const char* what) {
  Plan* p = in.active_plan();
  if (!p) in.fail(a.loc, std::string(fn) + "() " + what + ": use it inside a plan block");
  return *p;
}

// Argument `i` by position, else by keyword `name`; null when not given.
inline const Value* arg(CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.get(name);
}

// The sub-ops a value designates: one op or a (nested) list of them.
inline void collect_subops(Interpreter& in, const Value& v, front::SourceLoc loc, const char* fn, std::vector<int>& out) {
  if (v.is<OpHandle>()) {
    // A handle kept in a REPL variable outlives an undo or reset that
    // removed its sub-op (the session marks such handles -1).
    int sub = v.as<OpHandle>().subop;
    const Plan* p = in.active_plan();
    if (!p || sub < 0 || sub >= static_cast<int>(p->subops.size()))
      in.fail(loc, std::string(fn) + "(): this op handle no longer exists (its sub-op was undone or reset); select the op again");
    out.push_back(sub);
  } else if (v.is<std::shared_ptr<List>>()) {
    for (const Value& item : *v.as<std::shared_ptr<List>>()) collect_subops(in, item, loc, fn, out);
  } else {
    in.fail(loc, std::string(fn) + "() expects an op or a list of ops, got " + type_name(v));
  }
}

// Op-name patterns: '*' matches any run of characters (dots included), '?'
// one character, anything else itself. Iterative, going back only to the
// last '*' on a mismatch: a later '*' can absorb whatever an earlier one
// would, so no other choice can succeed where this fails. Linear on the
// usual patterns ("*.mlp.fc1.linear#*"), where the recursive form retried
// every split of the name at each '*' (matches() runs once per op and
// device group in large plans).
inline bool glob(const char* p, const char* s) {
  const char* star = nullptr;  // the last '*' seen
  const char* resume = s;      // where the text it absorbs ends
  while (*s) {
    if (*p == '*') {
      star = p++;
      resume = s;
    } else if (*p == '?' || *p == *s) {
      ++p;
      ++s;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return !*p;
}

}  // namespace nns::sema::builtin_args
