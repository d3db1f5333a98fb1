#include "repl/input.h"

#include <algorithm>
#include <cctype>

namespace nns::repl {

bool input_complete(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\' && i + 1 < text.size()) ++i;
      else if (c == '"' || c == '\n') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;  // comment to the end of the line
    } else if (c == '(' || c == '[' || c == '{') ++depth;
    else if (c == ')' || c == ']' || c == '}') --depth;
  }
  return depth <= 0;
}

const std::vector<std::string>& command_names() {
  static const std::vector<std::string> names = {"help",     "ops",  "show", "status", "comm",
                                                 "schedule", "plan", "undo", "reset",  "gpus",
                                                 "config",   "save", "run",  "quit",   "exit"};
  return names;
}

namespace {

bool is_command(const std::string& w) {
  const auto& n = command_names();
  return std::find(n.begin(), n.end(), w) != n.end();
}

// Does `rest` (what follows the first word) continue a .nns statement? An
// assignment, call, index, member access or binary operator does.
bool continues_statement(const std::string& rest) {
  if (rest.empty()) return false;
  char c = rest[0];
  if (c == '=' || c == '(' || c == '[' || c == '.' || c == ',' || c == ';' || c == ')' || c == ']' || c == '}') return true;
  // An operator followed by a space (`ops * 2`, `run += 1`) is arithmetic;
  // `ops *.linear#*` or `save /tmp/p.nns` are arguments.
  static const char* ops[] = {"**", "//", "+=", "-=", "*=", "/=", "==", "!=", "<=", ">=", "..",
                              "+",  "-",  "*",  "/",  "%",  "@",  "<",  ">"};
  for (const char* op : ops) {
    std::string o = op;
    if (rest.compare(0, o.size(), o) == 0) {
      if (o.size() == 2 && o[1] == '=') return true;  // compound assignment / comparison
      return rest.size() == o.size() ? false : std::isspace(static_cast<unsigned char>(rest[o.size()])) != 0;
    }
  }
  // A keyword operator: `run if x else y`, `plan and x`, `ops in l`.
  for (const char* kw : {"and ", "or ", "in ", "if "})
    if (rest.compare(0, std::string(kw).size(), kw) == 0) return true;
  return false;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size()) break;
    std::string w;
    if (s[i] == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') w += s[i++];
      if (i < s.size()) ++i;
    } else {
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) w += s[i++];
    }
    words.push_back(w);
  }
  return words;
}

}  // namespace

bool parse_command(const std::string& line, Command& out) {
  size_t i = 0;
  while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
  bool forced = i < line.size() && line[i] == ':';
  if (forced) ++i;
  size_t start = i;
  while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
  std::string word = line.substr(start, i - start);
  if (!is_command(word)) return false;
  std::string rest = line.substr(i);
  size_t j = 0;
  while (j < rest.size() && std::isspace(static_cast<unsigned char>(rest[j]))) ++j;
  rest = rest.substr(j);
  // `plan NAME(ngpus) {` declares a plan; `plan NAME` uses one.
  if (!forced) {
    if (continues_statement(rest)) return false;
    if (word == "plan" && rest.find('(') != std::string::npos) return false;
    if (i < line.size() && j == 0 && !rest.empty()) return false;  // `ops2`, `run"x"`: not the command word
  }
  // Drop a trailing comment.
  size_t hash = std::string::npos;
  bool quoted = false;
  for (size_t k = 0; k < rest.size(); ++k) {
    if (rest[k] == '"') quoted = !quoted;
    // '#' inside an op name (`linear#0`) is part of the word: only a '#'
    // that starts a word begins a comment.
    if (!quoted && rest[k] == '#' && (k == 0 || std::isspace(static_cast<unsigned char>(rest[k - 1])))) {
      hash = k;
      break;
    }
  }
  if (hash != std::string::npos) rest = rest.substr(0, hash);
  out.name = word == "exit" ? "quit" : word;
  out.args = split_words(rest);
  return true;
}

}  // namespace nns::repl
