// fuzz_parser: the lexer and parser of the .nns language on arbitrary bytes
// (frontend/parser.h). A syntax error is the expected outcome; each one must
// point into the file. When the input parses, its AST is printed (what
// --emit=ast does); --emit=tokens runs on every input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontend/ast_printer.h"
#include "frontend/diagnostics.h"
#include "frontend/parser.h"
#include "frontend/source.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nns::fuzz::silence_streams();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nns::front;
  nns::fuzz::run_guarded("fuzz_parser", [&] {
    SourceManager sources;
    DiagnosticEngine diags(sources);
    const int file = sources.add("fuzz.nns", std::string(reinterpret_cast<const char*>(data), size));
    std::unique_ptr<Program> prog = parse_program(sources, file, diags);
    if (!prog) nns::fuzz::internal_error("fuzz_parser", "parse_program returned no program");
    const int lines = static_cast<int>(sources.file(file).line_starts.size());
    for (const Diagnostic& d : diags.all()) {
      if (d.severity == Severity::Error && (!d.loc.valid() || d.loc.line < 1 || d.loc.line > lines || d.loc.col < 1))
        nns::fuzz::internal_error("fuzz_parser", "a syntax error without a location in the file: " + d.message);
      (void)diags.format(d, false);
    }
    if (!diags.has_errors()) (void)dump_ast(*prog);
    // `nns check FILE --emit=tokens`: the UTF-8 check, then the lexer alone.
    DiagnosticEngine token_diags(sources);
    if (check_utf8(sources, file, token_diags)) (void)dump_tokens(sources, file);
  });
  return 0;
}
