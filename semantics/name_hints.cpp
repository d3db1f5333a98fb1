#include "semantics/name_hints.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "frontend/suggest.h"

namespace nns::sema {

namespace {

// Every top-level model, fn and op of the stdlib modules: name -> module
// (file stem). Only the declarations' heads are read (a line starting with
// model, fn or op), so this stays cheap and needs no parse.
std::map<std::string, std::string> stdlib_names(const std::vector<std::string>& dirs) {
  const std::regex head("^(model|fn|op)[ \t]+([A-Za-z_][A-Za-z0-9_]*)");
  std::map<std::string, std::string> out;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".nns" || !entry.is_regular_file(ec)) continue;
      std::ifstream in(entry.path());
      std::string line;
      std::smatch m;
      while (std::getline(in, line))
        if (std::regex_search(line, m, head)) out.emplace(m[2], entry.path().stem().string());
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> stdlib_modules(const std::vector<std::string>& stdlib_dirs) {
  std::vector<std::string> out;
  for (const std::string& dir : stdlib_dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.path().extension() == ".nns" && entry.is_regular_file(ec)) out.push_back(entry.path().stem().string());
  }
  return out;
}

std::string undefined_name_hint(const std::string& name, Env& env, const std::vector<std::string>& stdlib_dirs) {
  if (Value* cfg = env.find("cfg"); cfg && cfg->is<std::shared_ptr<Record>>() && cfg->as<std::shared_ptr<Record>>()->get(name))
    return " (did you mean 'cfg." + name + "'?)";
  std::set<std::string> seen;
  std::vector<std::string> names;
  for (Env* e = &env; e; e = e->parent.get())
    for (const auto& [n, v] : e->vars)
      if (seen.insert(n).second) names.push_back(n);
  // The exact name in a stdlib module beats a near name in scope ("Linear"
  // without import "nn" is not a misspelt "linear"); a near name that only
  // a stdlib module has needs that module's import too ("Lienar").
  const std::map<std::string, std::string> stdlib = stdlib_names(stdlib_dirs);
  auto import_hint = [&](const std::string& module) { return "it is in stdlib module '" + module + "': add import \"" + module + "\""; };
  if (auto it = stdlib.find(name); it != stdlib.end() && !seen.count(name)) return " (" + import_hint(it->second) + ")";
  std::vector<std::string> library;
  for (const auto& [n, module] : stdlib)
    if (!seen.count(n)) library.push_back(n);
  const std::string in_scope = front::nearest_name(name, names), in_library = front::nearest_name(name, library);
  // The nearer of the two; a tie goes to the name already in scope.
  if (!in_library.empty() &&
      (in_scope.empty() || front::edit_distance(name, in_library) < front::edit_distance(name, in_scope)))
    return " (did you mean '" + in_library + "'? " + import_hint(stdlib.at(in_library)) + ")";
  return in_scope.empty() ? "" : " (did you mean '" + in_scope + "'?)";
}

}  // namespace nns::sema
