// Symbolic sizes: a config may leave a size open,
//
//   config any_batch extends gpt3_1_3b {
//     batch = symbolic(8, "batch % 8 == 0", "batch <= 4096")
//   }
//
// The interpreter elaborates the program with the witness value (8) — every
// shape stays concrete, nothing downstream changes — while the value also
// carries an expression over the symbols (a SymInt). Arithmetic keeps the
// expression (+ - * // %), tensor shapes declared from it keep it per
// dimension, op calls propagate it through their annotations
// (bind_symbolic), so the checker knows every identifier's size as an
// expression and proves the plan's obligations for every admissible value
// with Z3 (semantics/checker/symbolic_check.cpp).
//
// A symbolic value used where the program's structure would depend on it
// (a comparison, a loop bound, an index, a builtin that needs a number) is
// an error at that use: the proof would not cover the other values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frontend/source.h"

namespace nns::sema {

struct SymExpr;
using SymPtr = std::shared_ptr<const SymExpr>;

struct SymExpr {
  enum Op {
    Const, Var,
    Add, Sub, Mul, FloorDiv, Mod,            // integer arithmetic
    Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not,    // constraints (0/1 valued)
    Opaque,                                  // a size the checker does not track (see bind_symbolic)
  } op = Const;
  int64_t value = 0;      // Const; Opaque: the witness
  std::string name;       // Var: the symbol; Opaque: what it stands for
  SymPtr a, b;
};

SymPtr sym_const(int64_t v);
SymPtr sym_var(const std::string& name);
SymPtr sym_opaque(int64_t witness, const std::string& what);
// a op b, folded when both are constants.
SymPtr sym_binary(SymExpr::Op op, const SymPtr& a, const SymPtr& b);
bool sym_is_const(const SymPtr& e);
bool sym_has_opaque(const SymPtr& e);
bool sym_same(const SymPtr& a, const SymPtr& b);  // structurally equal
std::string sym_text(const SymPtr& e);            // "batch * seq"
void sym_symbols(const SymPtr& e, std::vector<std::string>& out);  // the Var names in it (appended, no duplicates)
// Evaluates with the given symbol values; Opaque uses its witness. Throws
// std::runtime_error on an unknown symbol or a division by zero.
int64_t sym_eval(const SymPtr& e, const std::map<std::string, int64_t>& values);

// Parses a constraint or size expression over symbols: ints, names,
// + - * // % ( ), comparisons, and / or / not. Throws std::runtime_error
// with a message naming the problem.
SymPtr sym_parse(const std::string& text);

// A symbolic int as the interpreter holds it (a Value alternative).
struct SymInt {
  int64_t witness = 0;
  SymPtr expr;
  std::string pending_name;  // set by symbolic() until the config entry names it
  std::vector<std::string> constraints;
  front::SourceLoc loc;
};

// A size declared symbolic by a config.
struct SymbolDecl {
  std::string name;
  int64_t witness = 0;
  std::vector<std::string> constraint_text;
  std::vector<SymPtr> constraints;
  front::SourceLoc loc;
};

// A size fact the model itself needs for every admissible size (an op's
// identifier bound to two different expressions, a bracket that must
// divide), recorded while elaborating and proved by the checker.
struct SymObligation {
  SymPtr holds;           // a 0/1 expression
  std::string message;    // what fails when it does not hold
  int node = -1;          // the op call that needs it
  front::SourceLoc loc;
};

}  // namespace nns::sema
