// User-facing diagnostics: "file:line:col: error: message", the source line
// and a caret under the span, notes after. Phases report into a
// DiagnosticEngine and keep going (several errors per phase); the driver
// stops between phases when has_errors().
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "frontend/source.h"

namespace nns::front {

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  SourceLoc loc;
  std::string message;
  std::vector<Diagnostic> notes;  // attached notes, printed after
};

// Thrown by phases that cannot continue past an error (the interpreter
// unwinds a whole evaluation); carries the diagnostic to report.
struct UserError {
  Diagnostic diag;
};

class DiagnosticEngine {
 public:
  explicit DiagnosticEngine(const SourceManager& sources) : sources_(sources) {}

  Diagnostic& error(SourceLoc loc, std::string message);
  Diagnostic& warning(SourceLoc loc, std::string message);
  void report(Diagnostic d);

  bool has_errors() const { return error_count_ > 0; }
  int error_count() const { return error_count_; }
  const std::vector<Diagnostic>& all() const { return diags_; }
  // Forgets everything reported (the REPL prints each input's diagnostics
  // and starts the next input with none).
  void clear() {
    diags_.clear();
    error_count_ = 0;
  }

  // Prints every diagnostic in the order reported. Colour only when asked
  // (the driver decides: a terminal and no NO_COLOR in the environment).
  void print(std::ostream& out, bool colour) const;
  std::string format(const Diagnostic& d, bool colour) const;

 private:
  void format_one(std::string& out, const Diagnostic& d, bool colour) const;
  const SourceManager& sources_;
  std::vector<Diagnostic> diags_;
  int error_count_ = 0;
};

// True when stderr is a terminal and NO_COLOR is unset.
bool want_colour();

}  // namespace nns::front
