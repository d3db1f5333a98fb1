// JSON for the planner (device profiles, traces it reads back) on the
// Debian package nlohmann-json3-dev. parse_json adds what the planner needs
// on top: no exception escapes (nlohmann throws), errors say where (line,
// column and byte offset) and nesting is bounded, so a malformed or hostile
// profile is a clear error and never a crash.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace nns::planner {

using Json = nlohmann::json;

// Deepest nesting parse_json accepts (profiles need 4).
constexpr int kMaxJsonDepth = 64;

// Parses text; on error returns false and sets err ("offset N: message").
bool parse_json(const std::string& text, Json& out, std::string& err);

// The member `key` of an object; nullptr when absent or `j` is no object.
const Json* field(const Json& j, const std::string& key);
// A number's value, else `fallback`; a string's value, else "".
double number_or(const Json* j, double fallback = 0);
std::string string_or(const Json* j);

}  // namespace nns::planner
