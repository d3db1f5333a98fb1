// The JSON subset of a safetensors header (objects, arrays, strings,
// integers), parsed with limits a hostile file cannot get past (nesting,
// array length, byte offsets in every message). Internal to safetensors.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nns::backend {

struct Json {
  enum Kind { Object, Array, String, Int };
  Json(Kind k, size_t offset) : kind(k), at(offset) {}
  Kind kind;
  size_t at;                      // byte offset in the header, for messages
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
