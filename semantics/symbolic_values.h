// Symbolic sizes inside the interpreter (symbolic.h explains the design):
// the few hooks the evaluator calls, kept out of interpreter*.cpp.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "semantics/graph.h"
#include "semantics/value.h"

namespace nns::sema {

bool is_sym(const Value& v);
// The expression of an int or symbolic int (null for anything else).
SymPtr sym_of(const Value& v);
// a op b when one side is symbolic and both are ints: + - * // % (and unary
// minus with a null b); nullopt when the operator is not arithmetic.
std::optional<Value> sym_arith(const std::string& op, const Value& a, const Value& b);
// The error for a symbolic value used where a plain number is needed.
std::string sym_misuse(const Value& v, const std::string& what);

// After an op call became node `node` (outputs created): the symbolic size
// of each annotation identifier and the symbolic shape of each output,
// from the inputs' symbolic shapes, symbolic int arguments (`given`: the
// identifier sizes the call passed) and, for reshape/view, the symbolic
// target shape. Records what must hold for every size in
// g.sym_obligations. `generated`: the annotation came from a registry rule
// (its literal sizes were computed from witness values and are not trusted
// for other values: they become Opaque). No-op when nothing is symbolic.
void bind_symbolic(Graph& g, int node, const std::map<std::string, SymPtr>& given, bool generated);

// Names the symbols of config entry `key` (symbolic(...) returns an
// unnamed one) and, once the config is evaluated, registers every symbol
// with its constraints (checked at the witness values). Both return an
// error message, empty when fine.
std::string name_symbol(Value& v, const std::string& key, front::SourceLoc loc);
std::string register_symbols(const Record& cfg, Graph& g);

void install_symbolic_builtins(Env& env);  // symbolic(witness, "constraint", ...)

}  // namespace nns::sema
