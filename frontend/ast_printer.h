// --emit=ast: a deterministic, indented dump of the AST with line:col of
// every node. Golden tests compare it.
#pragma once

#include <string>

#include "frontend/ast.h"

namespace nns::front {

std::string dump_ast(const Program& program);
std::string expr_to_string(const Expr& e);  // compact source-like text

}  // namespace nns::front
