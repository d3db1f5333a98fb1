#include "backend/planner/json.h"

namespace nns::planner {

namespace {

// The offset where `text` nests deeper than `limit` brackets, or npos. A
// scan of its own: nlohmann's parse with a callback (which could see the
// depth) re-walks the enclosing array at every value it closes, quadratic
// on a trace's 600,000 events.
size_t too_deep_at(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

}  // namespace

bool parse_json(const std::string& text, Json& out, std::string& err) {
  out = Json{};
  if (size_t at = too_deep_at(text, kMaxJsonDepth); at != std::string::npos) {
    err = "offset " + std::to_string(at) + ": nesting too deep (more than " + std::to_string(kMaxJsonDepth) + " levels)";
    return false;
  }
  try {
    out = Json::parse(text);
    return true;
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (size_t cut = what.find("] "); what.rfind("[json.exception.", 0) == 0 && cut != std::string::npos) what.erase(0, cut + 2);
    err = "offset " + std::to_string(e.byte) + ": " + what;
  } catch (const std::exception& e) {
    err = std::string("bad JSON: ") + e.what();
  }
  out = Json{};
  return false;
}

const Json* field(const Json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

double number_or(const Json* j, double fallback) { return j && j->is_number() ? j->get<double>() : fallback; }

std::string string_or(const Json* j) { return j && j->is_string() ? j->get<std::string>() : std::string(); }

}  // namespace nns::planner
