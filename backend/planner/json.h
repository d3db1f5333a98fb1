// A small JSON reader for the planner's device profiles. The runtime has one
// (backend/runtime/safetensors_json.*) but the planner must not depend on the
// runtime (DESIGN.md: planner sits beside lowering), so it reads its own:
// objects, arrays, numbers, strings, true/false/null; errors name the byte
// offset so a profile's author finds the mistake.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nns::planner {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;
  const Json* find(const std::string& key) const;  // nullptr when absent or not an object
};

// Parses text; on error returns false and sets err ("offset N: message").
bool parse_json(const std::string& text, Json& out, std::string& err);

}  // namespace nns::planner
