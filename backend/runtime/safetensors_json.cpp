// The safetensors header on nlohmann-json (Debian's nlohmann-json3-dev),
// through its SAX interface: nlohmann's lexer does the JSON (strings,
// escapes, surrogates, numbers, what follows the value) and reports a
// syntax error with its byte offset; this handler builds the small tree
// the reader needs and refuses, as it goes, what a safetensors header
// cannot hold: values other than objects, arrays, strings and 64-bit
// integers, nesting beyond header > tensor > shape, arrays longer than
// 1,024 elements (each 2-byte "0," would otherwise become a tree node) and
// duplicate keys (nlohmann's tree would keep the last silently; the header
// would be ambiguous).
#include "backend/runtime/safetensors_json.h"

#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/runtime/safetensors.h"

namespace nns::backend {

const char* kind_name(Json::Kind k) {
  static const char* const kNames[] = {"an object", "an array", "a string", "an integer"};
  return kNames[k];
}

namespace {

constexpr int kMaxDepth = 3;  // header object > tensor object > shape array
constexpr size_t kMaxArrayLen = 1024;

class HeaderSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit HeaderSax(std::string& error) : error_(error) {}
  Json root{Json::Object};

  bool null() override { return refuse("unsupported JSON value 'null'"); }
  bool boolean(bool v) override {
    return refuse(std::string("unsupported JSON value '") + (v ? "true" : "false") + "'");
  }
  bool number_integer(number_integer_t v) override { return add_int(v); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max()))
      return refuse("integer " + std::to_string(v) + " out of the 64-bit range");
    return add_int(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t& text) override {
    return refuse("non-integer number " + text + " (a safetensors header holds only integers in the 64-bit range)");
  }
  bool string(string_t& v) override {
    Json s{Json::String};
    s.s = std::move(v);
    return add(std::move(s));
  }
  bool binary(binary_t&) override { return refuse("unsupported JSON value (binary)"); }
  bool start_object(std::size_t) override { return open(Json::Object); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::Array); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    if (!f.keys.insert(k).second)
      return refuse((stack_.size() == 1 && k != "__metadata__" ? "duplicate tensor name '" : "duplicate key '") + k +
                    "'");
    f.node->keys.push_back(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (size_t cut = what.find("] "); what.rfind("[json.exception.", 0) == 0 && cut != std::string::npos)
      what.erase(0, cut + 2);
    if (size_t cut = what.find(": "); what.rfind("parse error at line ", 0) == 0 && cut != std::string::npos)
      what.erase(0, cut + 2);
    // nlohmann counts the offending character as read: the byte before it.
    const size_t at = position > 0 ? position - 1 : 0;
    error_ = "malformed JSON header at byte " + std::to_string(at) + " (file offset " + std::to_string(at + 8) +
             "): " + what;
    return false;
  }

 private:
  struct Frame {
    Json* node;
    std::set<std::string> keys;
  };
  std::vector<Frame> stack_;
  bool started_ = false;
  std::string& error_;

  bool refuse(const std::string& what) {
    error_ = "malformed JSON header: " + what;
    return false;
  }
  bool add_int(int64_t v) {
    Json i{Json::Int};
    i.i = v;
    return add(std::move(i));
  }
  // A value into the open object or array (the root is the first value).
  bool add(Json v) {
    if (stack_.empty()) {
      if (started_) return refuse("more than one value");
      started_ = true;
      root = std::move(v);
      return true;
    }
    Json& parent = *stack_.back().node;
    if (parent.kind == Json::Array && parent.items.size() == kMaxArrayLen)
      return refuse("array longer than " + std::to_string(kMaxArrayLen) + " elements");
    parent.items.push_back(std::move(v));
    return true;
  }
  bool open(Json::Kind kind) {
    if (static_cast<int>(stack_.size()) == kMaxDepth)
      return refuse("nesting deeper than the safetensors header allows");
    if (!add(Json{kind})) return false;
    Json* made = stack_.empty() ? &root : &stack_.back().node->items.back();
    stack_.push_back(Frame{made, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
};

}  // namespace

Json parse_header_json(const std::string& text, const std::string& path) {
  std::string error;
  HeaderSax sax(error);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text, &sax, nlohmann::json::input_format_t::json, true);
  } catch (const std::exception& e) {
    error = std::string("malformed JSON header: ") + e.what();
  }
  if (!ok)
    throw SafetensorsError("safetensors file '" + path + "': " + (error.empty() ? "malformed JSON header" : error));
  return std::move(sax.root);
}

}  // namespace nns::backend
