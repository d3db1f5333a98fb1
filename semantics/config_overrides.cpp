#include "semantics/config_overrides.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace nns::sema {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end) return false;
  out = v;
  return true;
}

bool parse_float(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno || *end || !std::isfinite(v)) return false;
  out = v;
  return true;
}

}  // namespace

std::string parse_config_overrides(const std::vector<std::string>& sets, std::vector<ConfigOverride>& out) {
  for (const std::string& s : sets) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) return "--set needs KEY=VALUE (got '" + s + "')";
    std::string key = s.substr(0, eq);
    for (const ConfigOverride& o : out)
      if (o.key == key) return "--set " + key + " is given twice";
    out.push_back(ConfigOverride{key, s.substr(eq + 1)});
  }
  return "";
}

bool typed_override(const Value& current, const ConfigOverride& o, Value& out, std::string& err) {
  const std::string want = "--set " + o.key + "=" + o.text + ": ";
  if (current.is<bool>()) {
    if (o.text != "true" && o.text != "false") return err = want + "'" + o.key + "' is a bool (true or false)", false;
    out = Value(o.text == "true");
  } else if (current.is<int64_t>()) {
    int64_t v;
    if (!parse_int(o.text, v)) return err = want + "'" + o.key + "' is an int", false;
    out = Value(v);
  } else if (current.is<double>()) {
    double v;
    if (!parse_float(o.text, v)) return err = want + "'" + o.key + "' is a float", false;
    out = Value(v);
  } else if (current.is<std::string>()) {
    out = Value(o.text);
  } else {
    return err = want + "'" + o.key + "' is a " + type_name(current) + "; --set gives int, float, bool and string entries only", false;
  }
  return true;
}

std::string unknown_override_message(const std::string& key, const std::vector<std::string>& entries, const std::string& config) {
  std::string msg = "--set " + key + ": config '" + config + "' has no entry '" + key + "'";
  std::string best;
  size_t best_d = std::string::npos;
  for (const std::string& e : entries) {
    size_t d = edit_distance(key, e);
    if (d < best_d) best_d = d, best = e;
  }
  // Close enough to be a misspelling: at most a third of the name wrong.
  if (!best.empty() && best_d <= std::max<size_t>(2, key.size() / 3)) msg += "; did you mean '" + best + "'?";
  return msg;
}

}  // namespace nns::sema
