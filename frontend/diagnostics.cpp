#include "frontend/diagnostics.h"

#include <cstdlib>
#include <unistd.h>

namespace nns::front {

Diagnostic& DiagnosticEngine::error(SourceLoc loc, std::string message) {
  report(Diagnostic{Severity::Error, loc, std::move(message), {}});
  return diags_.back();
}

Diagnostic& DiagnosticEngine::warning(SourceLoc loc, std::string message) {
  report(Diagnostic{Severity::Warning, loc, std::move(message), {}});
  return diags_.back();
}

void DiagnosticEngine::report(Diagnostic d) {
  if (d.severity == Severity::Error) ++error_count_;
  diags_.push_back(std::move(d));
}

static const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Error: return "error";
    case Severity::Warning: return "warning";
    case Severity::Note: return "note";
  }
  return "error";
}

static const char* severity_colour(Severity s) {
  switch (s) {
    case Severity::Error: return "\033[1;31m";
    case Severity::Warning: return "\033[1;35m";
    case Severity::Note: return "\033[1;36m";
  }
  return "";
}

void DiagnosticEngine::format_one(std::string& out, const Diagnostic& d, bool colour) const {
  const char* bold = colour ? "\033[1m" : "";
  const char* reset = colour ? "\033[0m" : "";
  out += bold;
  if (d.loc.valid()) {
    const SourceFile& f = sources_.file(d.loc.file);
    out += f.path + ":" + std::to_string(d.loc.line) + ":" + std::to_string(d.loc.col) + ": ";
  } else {
    out += "nns: ";
  }
  out += reset;
  if (colour) out += severity_colour(d.severity);
  out += severity_name(d.severity);
  out += ": ";
  out += reset;
  out += bold;
  out += d.message;
  out += reset;
  out += "\n";
  if (d.loc.valid()) {
    const SourceFile& f = sources_.file(d.loc.file);
    std::string_view line = f.line(d.loc.line);
    // A very long line is quoted around the column only (with "..." where
    // cut), so that the caret stays on screen.
    constexpr int kWindow = 60;
    int col = d.loc.col;
    std::string head, tail;
    if (static_cast<int>(line.size()) > 3 * kWindow) {
      int from = std::max(0, col - 1 - kWindow), to = std::min(static_cast<int>(line.size()), col - 1 + kWindow);
      if (from > 0) head = "...";
      if (to < static_cast<int>(line.size())) tail = "...";
      line = line.substr(static_cast<size_t>(from), static_cast<size_t>(to - from));
      col = col - from + static_cast<int>(head.size());
    }
    out += "  " + head;
    out += line;
    out += tail + "\n  ";
    // Tabs in the prefix keep the caret aligned with the quoted text.
    for (int i = 1; i < col && i - 1 < static_cast<int>(head.size() + line.size()); ++i) {
      int k = i - 1 - static_cast<int>(head.size());
      out += k >= 0 && line[static_cast<size_t>(k)] == '\t' ? '\t' : ' ';
    }
    if (colour) out += "\033[1;32m";
    out += '^';
    int max_len = static_cast<int>(head.size() + line.size()) - col + 1;
    int len = std::min(d.loc.length, std::max(1, max_len));
    for (int i = 1; i < len; ++i) out += '~';
    out += reset;
    out += "\n";
  }
  for (const Diagnostic& n : d.notes) format_one(out, n, colour);
}

std::string DiagnosticEngine::format(const Diagnostic& d, bool colour) const {
  std::string out;
  format_one(out, d, colour);
  return out;
}

void DiagnosticEngine::print(std::ostream& out, bool colour) const {
  for (const Diagnostic& d : diags_) out << format(d, colour);
  if (error_count_ > 1)
    out << error_count_ << " errors generated.\n";
}

bool want_colour() {
  const char* no_colour = std::getenv("NO_COLOR");
  if (no_colour && *no_colour) return false;
  return isatty(STDERR_FILENO);
}

}  // namespace nns::front
