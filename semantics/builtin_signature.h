// A builtin's parameters, declared once where it is registered, and the
// binder that holds every call to that declaration before the builtin runs:
// no extra positional argument, no unknown or misspelt keyword (refused with
// the nearest parameter name), no argument given twice. The builtins then
// read their arguments by position or keyword (builtin_args.h) knowing that
// nothing was passed that they would silently ignore.
//
// The declaration is a short spec, Python-like:
//   "op, dim, num, *, idx"   op, dim, num by position or keyword; idx keyword only
//   "value, /"               value by position only
//   "values..."              any number of positional arguments, no keywords
//   ""                       no arguments at all
// A new builtin (plan structure, tables, ...) adds one row {name, fn, spec}
// to its file's table and gets the checks for free.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace nns::sema {

struct Env;
struct CallArgs;
class Interpreter;
struct Value;
using BuiltinFn = Value (*)(Interpreter&, CallArgs&);

struct BuiltinParam {
  std::string name;
  bool positional = true;  // may be passed by position
  bool keyword = true;     // may be passed by keyword
};

struct BuiltinSignature {
  std::vector<BuiltinParam> params;  // in positional order
  bool variadic = false;             // the last positional parameter repeats
  // False for a Builtin made without define_builtins (Builtin{name, fn}):
  // its calls go unchecked rather than all refused, and the unit test that
  // walks every builtin fails, naming it.
  bool declared = false;

  // Parses the spec above; throws std::logic_error on a malformed spec (a
  // programming error, caught by the unit test that walks every builtin).
  static BuiltinSignature parse(const std::string& spec);
  size_t max_positional() const;                   // SIZE_MAX when variadic
  std::vector<std::string> keyword_names() const;  // in declaration order
};

// Refuses a call that does not fit the signature, at the offending
// argument: "fn() takes at most N positional argument(s), M given",
// "fn() has no parameter 'x' (did you mean 'y'?)", "fn(): argument 'x'
// given twice".
void check_builtin_call(Interpreter& in, const std::string& fn, const BuiltinSignature& sig, const CallArgs& args);

struct BuiltinDecl {
  const char* name;
  BuiltinFn fn;
  const char* params;  // the spec above
};

// Defines each builtin in `env` with its parsed signature.
void define_builtins(Env& env, std::initializer_list<BuiltinDecl> decls);

}  // namespace nns::sema
