// save's choice between a plan parametric in ngpus and one pinned to the
// session's device count. The parametric text (plan_text.h) is kept only
// when a fresh evaluation of the saved file shows it is the session's plan
// at the session's count and a complete, legal-to-evaluate plan at another
// count; otherwise save writes the pinned text and names the directive
// that fails at the other count, with the evaluator's own message.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "repl/plan_text.h"
#include "repl/session.h"

namespace nns::repl {

namespace fs = std::filesystem;

namespace {

// Line `line` (1-based) of `text`, trimmed of leading blanks.
std::string line_of(const std::string& text, int line) {
  std::istringstream in(text);
  std::string s;
  for (int i = 1; std::getline(in, s); ++i)
    if (i == line) return s.substr(std::min(s.size(), s.find_first_not_of(' ')));
  return "";
}

struct Evaluated {
  bool ok = false;
  std::string pinned_text;  // the evaluated plan written back pinned (to compare with the session's)
  int unplaced = 0;
  std::string error;  // the first error: "`directive`: message"
};

Evaluated evaluate_file(const SessionOptions& o, const std::string& config, const std::string& path,
                        const std::string& text, const std::string& name, int64_t ngpus) {
  front::SourceManager sources;
  front::DiagnosticEngine diags(sources);
  sema::Interpreter interp(sources, diags, sema::EvalOptions{config, o.stdlib_dirs, o.budget});
  sema::Plan plan;
  Evaluated e;
  e.ok = interp.parse(path) && interp.evaluate() && interp.evaluate_plan(name, ngpus, plan);
  if (!e.ok) {
    for (const front::Diagnostic& d : diags.all())
      if (d.severity == front::Severity::Error) {
        std::string where = d.loc.valid() ? line_of(text, d.loc.line) : "";
        e.error = (where.empty() ? "" : "`" + where + "`: ") + d.message;
        break;
      }
    if (e.error.empty()) e.error = "the plan does not evaluate";
    return e;
  }
  e.pinned_text = plan_to_nns(interp.graph(), plan, name);
  for (const sema::SubOp& s : plan.subops)
    if (s.leaf() && s.devices.empty()) ++e.unplaced;
  return e;
}

}  // namespace

std::string Session::parametric_plan(const std::string& name, std::string& why_pinned) const {
  why_pinned.clear();
  if (opts_.file.empty()) {
    why_pinned = "no model file to check it against";
    return "";
  }
  const int64_t n = plan_.ngpus, other = n == 2 ? 4 : 2;
  std::string body = plan_to_nns(interp_->graph(), plan_, name, /*parametric=*/true);
  // The check evaluates model + plan as saved, beside the model so that its
  // imports resolve as the model's do.
  static int checks = 0;
  fs::path dir = fs::absolute(opts_.file).parent_path();
  std::string base = ".nns_save_check_" + std::to_string(getpid()) + "_" + std::to_string(++checks) + ".nns";
  fs::path path = dir / base;
  std::string error;
  if (!write_runnable(path.string(), name, false, error, &body)) {
    why_pinned = "could not check a parametric plan (" + error + ")";
    return "";
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string config = interp_->config_name();
  Evaluated same = evaluate_file(opts_, config, path.string(), text, name, n);
  Evaluated moved = same.ok ? evaluate_file(opts_, config, path.string(), text, name, other) : Evaluated{};
  std::error_code ec;
  fs::remove(path, ec);
  if (!same.ok || same.pinned_text != plan_to_nns(interp_->graph(), plan_, name)) {
    why_pinned = "its parametric form is not the same plan at " + std::to_string(n) + " device(s)";
    return "";
  }
  if (!moved.ok) {
    why_pinned = "at " + std::to_string(other) + " device(s) " + moved.error;
    return "";
  }
  if (moved.unplaced > 0) {
    why_pinned =
        "at " + std::to_string(other) + " device(s) " + std::to_string(moved.unplaced) + " sub-op(s) get no device";
    return "";
  }
  return body;
}

}  // namespace nns::repl
