#include "backend/runtime/safetensors_json.h"

#include <cctype>
#include <cstring>
#include <set>

#include "backend/runtime/safetensors.h"

namespace nns::backend {

const char* kind_name(Json::Kind k) {
  static const char* const kNames[] = {"an object", "an array", "a string", "an integer"};
  return kNames[k];
}

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors file '" + path + "': " + what);
}

// Appends code point `cp` (at most 0x10FFFF, not a surrogate) as UTF-8.
void append_utf8(std::string& out, uint32_t cp) {
  static const unsigned char kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  const int len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  out += static_cast<char>(len == 1 ? cp : kLead[len] | cp >> (6 * (len - 1)));
  for (int k = len - 2; k >= 0; --k) out += static_cast<char>(0x80 | (cp >> (6 * k) & 0x3F));
}

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& path) : t_(text), path_(path) {}

  Json parse() {
    Json v = value(0);
    skip_ws();  // the header is space-padded
    if (p_ != t_.size()) error("unexpected " + describe() + " after the header object");
    return v;
  }

 private:
  // Deepest legal nesting: header object > tensor object > shape array. A
  // limit also keeps "[[[[..." from overflowing the stack.
  static constexpr int kMaxDepth = 3;
  // Arrays are shapes and offsets. Capping their length keeps a hostile
  // header from turning each 2-byte "0," into a ~100-byte Json node.
  static constexpr size_t kMaxArrayLen = 1024;

  [[noreturn]] void error(const std::string& what) const { error_at(p_, what); }
  [[noreturn]] void error_at(size_t at, const std::string& what) const {
    fail(path_, "malformed JSON header at byte " + std::to_string(at) + " (file offset " +
                    std::to_string(at + 8) + "): " + what);
  }
  std::string describe() const {
    if (p_ >= t_.size()) return "end of header";
    const auto c = static_cast<unsigned char>(t_[p_]);
    if (c >= 0x20 && c < 0x7F) return std::string("character '") + t_[p_] + "'";
    return "byte 0x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
  }
  bool at_char(char c) const { return p_ < t_.size() && t_[p_] == c; }
  bool consume(char c) { return at_char(c) ? (++p_, true) : false; }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  void skip_ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r'))
      ++p_;
  }

  Json value(int depth) {
    skip_ws();
    if (at_char('{') || at_char('[')) {
      if (depth == kMaxDepth) error("nesting deeper than the safetensors header allows");
      return at_char('{') ? object(depth + 1) : array(depth + 1);
    }
    if (at_char('"')) {
      Json v{Json::String, p_};
      v.s = string();
      return v;
    }
    if (at_char('-') || (p_ < t_.size() && is_digit(t_[p_]))) return integer();
    if (p_ < t_.size() && std::isalpha(static_cast<unsigned char>(t_[p_]))) {
      size_t start = p_;
      while (p_ < t_.size() && std::isalpha(static_cast<unsigned char>(t_[p_]))) ++p_;
      error_at(start,
               "unsupported JSON value '" + t_.substr(start, p_ - start) +
                   "' (a safetensors header holds only objects, arrays, strings and integers)");
    }
    error("expected a value, found " + describe());
  }

  Json object(int depth) {
    Json v{Json::Object, p_++};
    std::set<std::string> seen;  // duplicate keys make the header ambiguous
    skip_ws();
    if (consume('}')) return v;
    for (;;) {
      skip_ws();
      if (!at_char('"')) error("expected a string key, found " + describe());
      const size_t key_at = p_;
      std::string key = string();
      if (!seen.insert(key).second)
        error_at(key_at, (depth == 1 && key != "__metadata__" ? "duplicate tensor name '"
                                                              : "duplicate key '") +
                             key + "'");
      skip_ws();
      if (!consume(':')) error("expected ':', found " + describe());
      v.keys.push_back(std::move(key));
      v.items.push_back(value(depth));
      skip_ws();
      if (consume('}')) return v;
      if (!consume(',')) error("expected ',' or '}', found " + describe());
    }
  }

  Json array(int depth) {
    Json v{Json::Array, p_++};
    skip_ws();
    if (consume(']')) return v;
    for (;;) {
      if (v.items.size() == kMaxArrayLen)
        error("array longer than " + std::to_string(kMaxArrayLen) + " elements");
      v.items.push_back(value(depth));
      skip_ws();
      if (consume(']')) return v;
      if (!consume(',')) error("expected ',' or ']', found " + describe());
    }
  }

  Json integer() {
    Json v{Json::Int, p_};
    const bool neg = consume('-');
    if (p_ >= t_.size() || !is_digit(t_[p_])) error("expected a digit, found " + describe());
    if (t_[p_] == '0' && p_ + 1 < t_.size() && is_digit(t_[p_ + 1]))
      error("leading zeros are not allowed");
    const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    uint64_t mag = 0;
    for (; p_ < t_.size() && is_digit(t_[p_]); ++p_) {
      const uint64_t d = t_[p_] - '0';
      if (mag > (limit - d) / 10) error_at(v.at, "integer out of the 64-bit range");
      mag = mag * 10 + d;
    }
    if (at_char('.') || at_char('e') || at_char('E'))
      error_at(v.at, "non-integer number (a safetensors header holds only integers)");
    v.i = neg ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);  // two's complement
    return v;
  }

  uint32_t hex4(size_t esc_at) {
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k, ++p_) {
      const int c = p_ < t_.size() ? static_cast<unsigned char>(t_[p_]) : 0;
      const int d = is_digit(c) ? c - '0' : std::isxdigit(c) ? (c | 0x20) - 'a' + 10 : -1;
      if (d < 0) error_at(esc_at, "\\u escape needs 4 hex digits");
      cp = cp << 4 | static_cast<uint32_t>(d);
    }
    return cp;
  }

  // A string at p_ (on its opening quote), unescaped. Raw bytes were already
  // checked to be valid UTF-8; escapes are decoded to UTF-8.
  std::string string() {
    const size_t start = p_++;
    std::string out;
    for (;;) {
      if (p_ >= t_.size()) error_at(start, "unterminated string");
      const char c = t_[p_];
      if (c == '"') return ++p_, out;
      if (static_cast<unsigned char>(c) < 0x20) error("unescaped control character in string");
      if (c != '\\') {
        out += c, ++p_;
        continue;
      }
      const size_t esc_at = p_++;
      const char e = p_ < t_.size() ? t_[p_++] : '\0';
      static const char kEscapes[] = "\"\\/bfnrt", kDecoded[] = "\"\\/\b\f\n\r\t";
      if (const char* hit = e != '\0' ? std::strchr(kEscapes, e) : nullptr) {
        out += kDecoded[hit - kEscapes];
        continue;
      }
      if (e != 'u') error_at(esc_at, "invalid escape sequence");
      uint32_t cp = hex4(esc_at);
      if (cp >= 0xDC00 && cp <= 0xDFFF) error_at(esc_at, "\\u escape is a lone low surrogate");
      if (cp >= 0xD800 && cp <= 0xDBFF) {  // must pair with a low surrogate
        if (t_.compare(p_, 2, "\\u") != 0)
          error_at(esc_at, "\\u high surrogate without a low surrogate");
        p_ += 2;
        const uint32_t lo = hex4(esc_at);
        if (lo < 0xDC00 || lo > 0xDFFF)
          error_at(esc_at, "\\u high surrogate without a low surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      append_utf8(out, cp);
    }
  }

  const std::string& t_;
  const std::string& path_;
  size_t p_ = 0;
};

}  // namespace

Json parse_header_json(const std::string& text, const std::string& path) { return JsonParser(text, path).parse(); }

}  // namespace nns::backend
