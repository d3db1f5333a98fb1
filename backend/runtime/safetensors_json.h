// The JSON subset of a safetensors header (objects, arrays, strings,
// integers), parsed by nlohmann-json's SAX interface with limits a hostile
// file cannot get past (nesting, array length, duplicate keys; syntax
// errors carry their byte offset). Internal to safetensors.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nns::backend {

struct Json {
  enum Kind { Object, Array, String, Int };
  explicit Json(Kind k) : kind(k) {}
  Kind kind;
  int64_t i = 0;                  // Int
  std::string s;                  // String
  std::vector<std::string> keys;  // Object: keys[k] names items[k]
  std::vector<Json> items;        // Object values, Array elements
};


// "an object", "an array", ...
const char* kind_name(Json::Kind k);

// Parses `text` (the header of file `path`); throws SafetensorsError naming
// the file and the byte offset.
Json parse_header_json(const std::string& text, const std::string& path);

}  // namespace nns::backend
