#include "semantics/name_hints.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "frontend/suggest.h"

namespace nns::sema {

namespace {

// The stdlib module (file stem) that declares `name` at top level, or "".
// Only the declarations' heads are read (a line starting with model, fn or
// op), so this stays cheap and needs no parse.
std::string stdlib_module_of(const std::string& name, const std::vector<std::string>& dirs) {
  const std::regex head("^(model|fn|op)[ \t]+([A-Za-z_][A-Za-z0-9_]*)");
  for (const std::string& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".nns" || !entry.is_regular_file(ec)) continue;
      std::ifstream in(entry.path());
      std::string line;
      std::smatch m;
      while (std::getline(in, line))
        if (std::regex_search(line, m, head) && m[2] == name) return entry.path().stem().string();
    }
  }
  return "";
}

}  // namespace

std::string undefined_name_hint(const std::string& name, Env& env, const std::vector<std::string>& stdlib_dirs) {
  if (Value* cfg = env.find("cfg"); cfg && cfg->is<std::shared_ptr<Record>>() && cfg->as<std::shared_ptr<Record>>()->get(name))
    return " (did you mean 'cfg." + name + "'?)";
  std::set<std::string> seen;
  std::vector<std::string> names;
  for (Env* e = &env; e; e = e->parent.get())
    for (const auto& [n, v] : e->vars)
      if (seen.insert(n).second) names.push_back(n);
  // The exact name in a stdlib module beats a near name in scope ("Linear"
  // without import "nn" is not a misspelt "linear").
  std::string module = stdlib_module_of(name, stdlib_dirs);
  if (!module.empty()) return " (defined in stdlib module '" + module + "': add import \"" + module + "\")";
  return front::did_you_mean(name, names);
}

}  // namespace nns::sema
