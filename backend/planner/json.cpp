#include "backend/planner/json.h"

#include <cstdlib>

namespace nns::planner {

const Json* Json::find(const std::string& key) const {
  if (kind != Object) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &it->second;
}

namespace {

struct Reader {
  explicit Reader(const std::string& text) : s(text) {}
  const std::string& s;
  size_t i = 0;
  std::string err;
  int depth = 0;

  bool fail(const std::string& m) {
    if (err.empty()) err = "offset " + std::to_string(i) + ": " + m;
    return false;
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool lit(const char* w) {
    size_t n = std::char_traits<char>::length(w);
    if (s.compare(i, n, w) != 0) return false;
    i += n;
    return true;
  }
  bool string(std::string& out) {
    if (i >= s.size() || s[i] != '"') return fail("expected a string");
    ++i;
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (c != '\\') { out += c; continue; }
      if (i >= s.size()) break;
      char e = s[i++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          // Profiles are ASCII; a \u escape keeps its code point if it fits one byte.
          if (i + 4 > s.size()) return fail("bad \\u escape");
          long cp = std::strtol(s.substr(i, 4).c_str(), nullptr, 16);
          i += 4;
          out += cp < 128 ? static_cast<char>(cp) : '?';
          break;
        }
        default: out += e;
      }
    }
    if (i >= s.size()) return fail("unterminated string");
    ++i;
    return true;
  }
  bool value(Json& v) {
    if (++depth > 64) return fail("nesting too deep");
    ws();
    if (i >= s.size()) return fail("unexpected end of input");
    char c = s[i];
    bool ok = true;
    if (c == '{') {
      v.kind = Json::Object;
      ++i;
      ws();
      if (i < s.size() && s[i] == '}') { ++i; --depth; return true; }
      while (ok) {
        ws();
        std::string key;
        if (!string(key)) return false;
        ws();
        if (i >= s.size() || s[i] != ':') return fail("expected ':'");
        ++i;
        if (!value(v.obj[key])) return false;
        ws();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == '}') { ++i; break; }
        return fail("expected ',' or '}'");
      }
    } else if (c == '[') {
      v.kind = Json::Array;
      ++i;
      ws();
      if (i < s.size() && s[i] == ']') { ++i; --depth; return true; }
      while (true) {
        v.arr.emplace_back();
        if (!value(v.arr.back())) return false;
        ws();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == ']') { ++i; break; }
        return fail("expected ',' or ']'");
      }
    } else if (c == '"') {
      v.kind = Json::String;
      ok = string(v.str);
    } else if (lit("true")) {
      v.kind = Json::Bool; v.b = true;
    } else if (lit("false")) {
      v.kind = Json::Bool;
    } else if (lit("null")) {
      v.kind = Json::Null;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const char* start = s.c_str() + i;
      char* end = nullptr;
      v.kind = Json::Number;
      v.num = std::strtod(start, &end);
      if (end == start) return fail("bad number");
      i += static_cast<size_t>(end - start);
    } else {
      return fail(std::string("unexpected character '") + c + "'");
    }
    --depth;
    return ok;
  }
};

}  // namespace

bool parse_json(const std::string& text, Json& out, std::string& err) {
  Reader r(text);
  out = Json{};
  if (!r.value(out)) { err = r.err; return false; }
  r.ws();
  if (r.i != text.size()) { r.fail("trailing characters"); err = r.err; return false; }
  return true;
}

}  // namespace nns::planner
