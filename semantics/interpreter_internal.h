// Internals shared by the files that implement the Interpreter
// (interpreter*.cpp, session_input.cpp); nothing outside them includes it.
#pragma once

#include <memory>
#include <string>

#include "frontend/ast.h"
#include "semantics/interpreter.h"
#include "semantics/value.h"

namespace nns::sema {

// One parsed file (the main file, an import, the prelude).
struct Interpreter::Loaded {
  std::string path;
  int file = -1;
  std::unique_ptr<front::Program> program;
  std::shared_ptr<Env> env;  // set once evaluated
  bool running = false;
};

// A number in arithmetic: an int, a float or a bool.
inline bool is_number(const Value& v) { return v.is<int64_t>() || v.is<double>() || v.is<bool>(); }

// Unwinds evaluation after errors that were already reported.
struct StopEvaluation {};

}  // namespace nns::sema
