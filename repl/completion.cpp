#include "repl/completion.h"

#include <algorithm>
#include <cctype>
#include <dirent.h>
#include <set>

#include "repl/input.h"

namespace nns::repl {

namespace {

const std::vector<std::string>& keywords() {
  static const std::vector<std::string> k = {"let", "fn", "for", "in", "if", "else", "return", "break", "continue", "true", "false",
                                             "none", "and", "or", "not", "import", "op", "model", "plan", "param", "buffer", "input"};
  return k;
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<std::string> with_prefix(const std::string& typed, const std::vector<std::string>& words, const std::string& suffix) {
  std::set<std::string> out;
  for (const std::string& w : words)
    if (w.compare(0, typed.size(), typed) == 0) out.insert(w + suffix);
  return {out.begin(), out.end()};
}

// Files and folders for `save FILE`.
std::vector<std::string> complete_path(const std::string& typed) {
  std::string dir = ".", base = typed, shown_dir;
  size_t slash = typed.rfind('/');
  if (slash != std::string::npos) {
    shown_dir = typed.substr(0, slash + 1);
    dir = shown_dir.empty() ? "/" : shown_dir;
    base = typed.substr(slash + 1);
  }
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || n.compare(0, base.size(), base) != 0) continue;
    if (n[0] == '.' && (base.empty() || base[0] != '.')) continue;
    bool is_dir = e->d_type == DT_DIR;
    out.push_back(shown_dir + n + (is_dir ? "/" : " "));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string open_call_first_arg(const std::string& before) {
  std::vector<size_t> open;  // positions of the brackets open so far
  for (size_t i = 0; i < before.size(); ++i) {
    char ch = before[i];
    if (ch == '"') {  // skip the string (an unterminated one runs to the end)
      for (++i; i < before.size() && before[i] != '"'; ++i)
        if (before[i] == '\\') ++i;
    } else if (ch == '#' && !(i > 0 && ident_char(before[i - 1]))) {
      while (i < before.size() && before[i] != '\n') ++i;
    } else if (ch == '(' || ch == '[' || ch == '{') {
      open.push_back(i);
    } else if ((ch == ')' || ch == ']' || ch == '}') && !open.empty()) {
      open.pop_back();
    }
  }
  if (open.empty() || before[open.back()] != '(') return "";
  const size_t from = open.back() + 1;
  int depth = 0;
  size_t end = from;
  for (; end < before.size(); ++end) {
    char ch = before[end];
    if (ch == '"') {
      for (++end; end < before.size() && before[end] != '"'; ++end)
        if (before[end] == '\\') ++end;
    } else if (ch == '(' || ch == '[' || ch == '{') {
      ++depth;
    } else if (ch == ')' || ch == ']' || ch == '}') {
      --depth;
    } else if (ch == ',' && depth == 0) {
      break;
    }
  }
  std::string arg = before.substr(from, end - from);
  size_t a = arg.find_first_not_of(" \t\n"), b = arg.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : arg.substr(a, b - a + 1);
}

std::vector<std::string> complete_dotted(const std::string& typed, const std::vector<std::string>& names, const std::string& suffix) {
  std::set<std::string> out;
  for (const std::string& n : names) {
    if (n.compare(0, typed.size(), typed) != 0) continue;
    size_t dot = n.find('.', typed.size());
    out.insert(dot == std::string::npos ? n + suffix : n.substr(0, dot + 1));
  }
  return {out.begin(), out.end()};
}

Completion complete_input(const std::string& before, bool first_line, const CompletionData& data) {
  Completion c;
  // Inside a string literal? Quotes outside comments, escapes honoured.
  bool in_string = false;
  size_t quote = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    char ch = before[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
      quote = i;
    } else if (ch == '#' && !(i > 0 && ident_char(before[i - 1]))) {
      return c;  // a comment: nothing to complete
    }
  }
  if (in_string) {
    c.from = quote + 1;
    std::string typed = before.substr(c.from);
    // dim = "..." names an annotation identifier; any other string an op or parameter.
    size_t k = quote;
    while (k > 0 && std::isspace(static_cast<unsigned char>(before[k - 1]))) --k;
    bool after_dim = k > 0 && before[k - 1] == '=';
    if (after_dim) {
      size_t e = k - 1;
      while (e > 0 && std::isspace(static_cast<unsigned char>(before[e - 1]))) --e;
      size_t s = e;
      while (s > 0 && ident_char(before[s - 1])) --s;
      after_dim = before.substr(s, e - s) == "dim";
    }
    if (after_dim) {
      // The op's own identifiers when the call's first argument names it
      // (trans(op, dim = "...")); every op's otherwise.
      std::vector<std::string> ids;
      if (data.op_anno_ids) {
        std::string arg = open_call_first_arg(before.substr(0, quote));
        if (!arg.empty()) ids = data.op_anno_ids(arg);
      }
      if (ids.empty()) ids = data.anno_ids;
      ids.push_back("value");
      ids.push_back("batch");
      c.candidates = with_prefix(typed, ids, "\"");
    } else {
      std::vector<std::string> all = data.op_names;
      all.insert(all.end(), data.param_names.begin(), data.param_names.end());
      c.candidates = complete_dotted(typed, all, "\"");
    }
    return c;
  }

  // A command's arguments.
  Command cmd;
  size_t first_space = before.find_first_of(" \t");
  if (first_line && first_space != std::string::npos && parse_command(before.substr(0, first_space), cmd)) {
    size_t start = before.find_last_of(" \t") + 1;
    c.from = start;
    std::string typed = before.substr(start);
    // Only the first argument is completed, except run's flags.
    bool first_arg = before.find_first_not_of(" \t", first_space) == std::string::npos ||
                     before.find_first_of(" \t", before.find_first_not_of(" \t", first_space)) == std::string::npos;
    if (cmd.name == "show" || cmd.name == "ops") {
      if (!first_arg) return c;
      std::vector<std::string> all = data.op_names;
      if (cmd.name == "show") all.insert(all.end(), data.param_names.begin(), data.param_names.end());
      c.candidates = complete_dotted(typed, all, " ");
    } else if (cmd.name == "help") {
      if (first_arg) c.candidates = with_prefix(typed, data.help_topics, " ");
    } else if (cmd.name == "plan") {
      if (first_arg) c.candidates = with_prefix(typed, data.plan_names, " ");
    } else if (cmd.name == "save") {
      if (first_arg) c.candidates = complete_path(typed);
      else c.candidates = with_prefix(typed, {"--plan-only"}, " ");
    } else if (cmd.name == "run") {
      if (!first_arg) c.candidates = with_prefix(typed, {"--verify"}, " ");
    }
    return c;
  }

  // An identifier, or a member after a dotted chain.
  size_t start = before.size();
  while (start > 0 && (ident_char(before[start - 1]) || before[start - 1] == '.')) --start;
  std::string word = before.substr(start);
  if (!word.empty() && std::isdigit(static_cast<unsigned char>(word[0]))) return c;  // a number
  size_t dot = word.rfind('.');
  if (dot != std::string::npos) {
    c.from = start + dot + 1;
    if (data.members) c.candidates = with_prefix(word.substr(dot + 1), data.members(word.substr(0, dot)), "");
    return c;
  }
  c.from = start;
  std::vector<std::string> words = data.names;
  words.insert(words.end(), keywords().begin(), keywords().end());
  c.candidates = with_prefix(word, words, "");
  bool at_start = before.find_first_not_of(" \t") == start;
  if (first_line && at_start) {
    // A command is a whole line: offer it with the space its argument needs.
    for (const std::string& cmd_name : with_prefix(word, data.commands, " ")) {
      std::string bare = cmd_name.substr(0, cmd_name.size() - 1);
      c.candidates.erase(std::remove(c.candidates.begin(), c.candidates.end(), bare), c.candidates.end());
      c.candidates.push_back(cmd_name);
    }
    std::sort(c.candidates.begin(), c.candidates.end());
  }
  return c;
}

}  // namespace nns::repl
