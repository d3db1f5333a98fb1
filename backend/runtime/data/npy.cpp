#include "backend/runtime/data/npy.h"

#include <cmath>
#include <cstring>

namespace nns::backend::data {
namespace {

// The value of `key` in the header dict's text: what follows "'key':" up
// to the next top-level comma or closing brace.
std::string header_field(const std::string& h, const std::string& key, const std::string& path) {
  size_t at = h.find("'" + key + "'");
  if (at == std::string::npos) throw DataError(path + ": bad .npy header (no '" + key + "')");
  at = h.find(':', at);
  if (at == std::string::npos) throw DataError(path + ": bad .npy header (no value for '" + key + "')");
  ++at;
  while (at < h.size() && h[at] == ' ') ++at;
  size_t end = at;
  int depth = 0;
  while (end < h.size() && (depth > 0 || (h[end] != ',' && h[end] != '}'))) {
    if (h[end] == '(') ++depth;
    if (h[end] == ')') --depth;
    ++end;
  }
  return h.substr(at, end - at);
}

double half_to_double(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY) : std::ldexp(mant + 1024, exp - 25);
  return (h & 0x8000) ? -v : v;
}

}  // namespace

NpyArray::NpyArray(const std::string& path) : file_(path) {
  const uint8_t* b = file_.bytes();
  const size_t n = file_.size();
  if (n < 10 || std::memcmp(b, "\x93NUMPY", 6) != 0) throw DataError(path + ": not a .npy file (wrong magic)");
  const int major = b[6];
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) throw DataError(path + ": truncated .npy header");
    header_len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8 | static_cast<size_t>(b[10]) << 16 | static_cast<size_t>(b[11]) << 24;
    start = 12;
  } else {
    throw DataError(path + ": .npy format version " + std::to_string(major) + " (1, 2 and 3 are known)");
  }
  if (header_len > n - start) throw DataError(path + ": truncated .npy header");
  const std::string h(reinterpret_cast<const char*>(b + start), header_len);
  std::string descr = header_field(h, "descr", path);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"')) throw DataError(path + ": bad .npy descr " + descr);
  descr = descr.substr(1, descr.size() - 2);
  static const char* known[][2] = {{"<f4", "f4"}, {"<f2", "f2"}, {"<i4", "i4"}, {"<i8", "i8"}, {"|u1", "u1"}, {"<u1", "u1"}, {"<u2", "u2"}};
  for (auto& k : known)
    if (descr == k[0]) dtype_ = k[1];
  if (dtype_.empty())
    throw DataError(path + ": dtype '" + descr + "' is not one of f32, f16, i32, i64, u8, u16 (little-endian: <f4 <f2 <i4 <i8 |u1 <u2)");
  width_ = dtype_ == "i8" ? 8 : dtype_ == "f4" || dtype_ == "i4" ? 4 : dtype_ == "u1" ? 1 : 2;
  if (header_field(h, "fortran_order", path) != "False") throw DataError(path + ": Fortran-order array (C order only; save it with np.ascontiguousarray)");
  std::string shape = header_field(h, "shape", path);
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') throw DataError(path + ": bad .npy shape " + shape);
  int64_t count = 1;
  for (size_t i = 1; i + 1 < shape.size();) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    size_t used = 0;
    long long d = -1;
    try { d = std::stoll(shape.substr(i), &used); } catch (...) {}
    if (used == 0 || d < 0) throw DataError(path + ": bad .npy shape " + shape);
    shape_.push_back(d);
    count *= d;
    i += used;
  }
  const size_t data_start = start + header_len;
  if (static_cast<size_t>(count) * static_cast<size_t>(width_) != n - data_start)
    throw DataError(path + ": " + std::to_string(n - data_start) + " data bytes, but shape " + shape + " of " + descr + " needs " +
                    std::to_string(count * width_) + " (a truncated file?)");
  data_ = b + data_start;
}

int64_t NpyArray::row_elements() const {
  int64_t e = 1;
  for (size_t d = 1; d < shape_.size(); ++d) e *= shape_[d];
  return e;
}

double NpyArray::at(int64_t i) const {
  const uint8_t* p = data_ + i * width_;
  switch (width_) {
    case 1: return *p;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return dtype_ == "f2" ? half_to_double(v) : v;
    }
    case 4:
      if (dtype_ == "f4") { float f; std::memcpy(&f, p, 4); return f; }
      else { int32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
  }
}

}  // namespace nns::backend::data
