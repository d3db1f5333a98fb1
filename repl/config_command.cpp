// The REPL's `config [NAME]`: shows the session's config, or switches to
// another preset of the model file. Switching evaluates the file again with
// that config (shapes, layer counts and so op names may all differ), so the
// plan starts over on the same device count; the undo history and the
// session's own definitions go with the old evaluation. A config that does
// not exist or does not evaluate leaves the session as it was.
#include <algorithm>
#include <ostream>

#include "frontend/suggest.h"
#include "repl/session.h"

namespace nns::repl {

bool Session::cmd_config(const Command& c) {
  if (c.args.size() > 1) return usage("config");
  const std::vector<std::string> names = interp_->config_names();
  if (c.args.empty()) {
    out_ << "config " << (interp_->config_name().empty() ? std::string("(none)") : interp_->config_name());
    if (!names.empty()) {
      out_ << "; the file's configs:";
      for (const std::string& n : names) out_ << " " << n;
    }
    out_ << "\n";
    return true;
  }
  const std::string& name = c.args[0];
  if (opts_.file.empty()) {
    err_ << "nns: error: config switches the model file's preset; this session has no model file\n";
    return false;
  }
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    err_ << "nns: error: " << opts_.file << " has no config '" << name << "'" << front::did_you_mean(name, names)
         << "\n";
    return false;
  }
  auto sources = std::make_unique<front::SourceManager>();
  auto diags = std::make_unique<front::DiagnosticEngine>(*sources);
  auto interp =
      std::make_unique<sema::Interpreter>(*sources, *diags, sema::EvalOptions{name, opts_.stdlib_dirs, opts_.budget});
  const bool ok = interp->parse(opts_.file) && interp->evaluate();
  out_.flush();
  for (const front::Diagnostic& d : diags->all()) err_ << diags->format(d, opts_.colour);
  if (!ok) {
    err_ << "nns: error: config " << name << " does not evaluate; the session stays on config "
         << interp_->config_name() << "\n";
    return false;
  }
  diags->clear();
  // The interpreter refers to its sources and diagnostics: replace it first.
  interp_ = std::move(interp);
  diags_ = std::move(diags);
  sources_ = std::move(sources);
  opts_.config = name;
  model_nodes_ = interp_->graph().nodes().size();
  undo_.clear();
  completion_ = CompletionData{};
  completion_ready_ = false;
  plan_ = interp_->new_plan("session", opts_.ngpus);
  facts_ = analyse(plan_);
  define_ngpus();
  const sema::GraphSummary s = sema::summarize(interp_->graph());
  out_ << "config " << name << ": " << s.top_level_ops << " ops, "
       << sema::format_count(static_cast<double>(s.param_count)) << " parameters; a new plan for " << plan_.ngpus
       << " device(s) (the old plan, its undo history and the session's definitions are gone)\n";
  return true;
}

}  // namespace nns::repl
