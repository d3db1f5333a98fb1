#include "backend/planner/json.h"

namespace nns::planner {

namespace {

struct TooDeep {
  int depth;
};

}  // namespace

bool parse_json(const std::string& text, Json& out, std::string& err) {
  // nlohmann's parser is not recursive, but a bound keeps a hostile file
  // from building an absurd tree; the callback sees each value's depth.
  auto bound = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{depth};
    return true;
  };
  try {
    out = Json::parse(text, bound);
    return true;
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (size_t cut = what.find("] "); what.rfind("[json.exception.", 0) == 0 && cut != std::string::npos) what.erase(0, cut + 2);
    err = "offset " + std::to_string(e.byte) + ": " + what;
  } catch (const TooDeep& d) {
    err = "nesting too deep (more than " + std::to_string(kMaxJsonDepth) + " levels)";
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
