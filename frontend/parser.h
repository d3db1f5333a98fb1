// Parsing: .nns text → AST. The ANTLR-generated lexer/parser stay private
// to parser.cpp; callers see only the AST and diagnostics.
#pragma once

#include <memory>
#include <string>

#include "frontend/ast.h"
#include "frontend/diagnostics.h"

namespace nns::front {

// Parses one loaded file. Syntax errors (several per file, with recovery)
// go to `diags`; the returned Program is only meaningful when no error was
// reported for this file.
std::unique_ptr<Program> parse_program(const SourceManager& sources, int file,
                                       DiagnosticEngine& diags);

// --emit=tokens: one token per line, "line:col KIND 'text'" (deterministic).
std::string dump_tokens(const SourceManager& sources, int file);

}  // namespace nns::front
