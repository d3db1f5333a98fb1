// Parsing: .nns text → AST. The ANTLR-generated lexer/parser stay private
// to parser.cpp; callers see only the AST and diagnostics.
#pragma once

#include <memory>
#include <string>
#include <vector>

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

// The parser's largest lookahead (in tokens) at each grammar decision while
// parsing `file` with ANTLR's profiler: what a grammar change can make
// slow. One entry per decision the parse reached, in decision order;
// `ll_max_look` is 0 unless the SLL parse failed and full LL ran.
struct DecisionLookahead {
  std::string rule;  // the grammar rule the decision is in
  size_t decision = 0;
  long long invocations = 0;
  long long sll_max_look = 0, ll_max_look = 0;
};
std::vector<DecisionLookahead> lookahead_profile(const SourceManager& sources, int file);

// --emit=tokens: one token per line, "line:col KIND 'text'" (deterministic).
// The file must be valid UTF-8 (check_utf8).
std::string dump_tokens(const SourceManager& sources, int file);

}  // namespace nns::front
