// Builds the AST from the ANTLR parse tree of a file that parsed without
// errors (parse_program in parser.cpp runs the parser and calls this). Private
// to frontend/: it names the generated parser's types.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "NnsParser.h"
#include "frontend/ast.h"

namespace nns::front {

struct BuiltAst {
  std::unique_ptr<Program> program;
  std::vector<SourceLoc> overflow;                             // integer literals too large for 64 bits
  std::vector<std::pair<SourceLoc, std::string>> float_range;  // float literals out of range, with the message
};

BuiltAst build_ast(nns_grammar::NnsParser::ProgramContext* tree, int file);

}  // namespace nns::front
