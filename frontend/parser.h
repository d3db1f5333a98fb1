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

// False, with the error "invalid UTF-8: byte 0xFF at offset N" at that
// byte, when the file is not valid UTF-8 (parse_program checks it first;
// the lexer's input stream throws on such text).
bool check_utf8(const SourceManager& sources, int file, DiagnosticEngine& diags);

// --emit=tokens: one token per line, "line:col KIND 'text'" (deterministic).
// The file must be valid UTF-8 (check_utf8).
std::string dump_tokens(const SourceManager& sources, int file);

}  // namespace nns::front
