// Safetensors reader and writer; the format and the guarantees are described
// in safetensors.h. No third-party JSON library: the header uses a tiny JSON
// subset (objects, arrays, strings, integers) and a strict parser for just
// that subset is shorter than the glue to a general one.
#include "backend/runtime/safetensors.h"

#include "backend/runtime/atomic_file.h"
#include "backend/runtime/safetensors_json.h"
#include "frontend/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <set>
#include <tuple>
#include <utility>

#include "semantics/graph.h"  // shape_to_string

namespace nns::backend {

namespace {

// The reference implementation's limit. Checked before allocating, so that a
// corrupt length field cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Known dtypes in the reference implementation's enum order (increasing
// alignment). The writer sorts tensors by decreasing rank, as it does.
struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"C64", 8}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

int dtype_rank(const std::string& dtype) {
  for (size_t i = 0; i < std::size(kDtypes); ++i)
    if (dtype == kDtypes[i].name) return static_cast<int>(i);
  return -1;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors file '" + path + "': " + what);
}

std::string errno_text() { return std::strerror(errno); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes of a tensor of `shape` and element size `elem`; false on a negative
// dim or on overflow (a hostile header can claim 2^40 x 2^40 elements).
bool tensor_bytes(const std::vector<int64_t>& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *out = n;
  return true;
}

// Offset of the first byte of `s` that is not valid UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF included), or npos.
size_t invalid_utf8_at(const std::string& s) {
  static const uint32_t kMinForLen[] = {0, 0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80             ? 1
              : (c & 0xE0) == 0xC0 ? 2
              : (c & 0xF0) == 0xE0 ? 3
              : (c & 0xF8) == 0xF0 ? 4
                                   : 0;
    if (len == 0 || i + len > s.size()) return i;
    if (len > 1) {
      uint32_t cp = c & (0x7F >> len);
      for (int k = 1; k < len; ++k) {
        const auto cc = static_cast<unsigned char>(s[i + k]);
        if ((cc & 0xC0) != 0x80) return i;
        cp = (cp << 6) | (cc & 0x3F);
      }
      if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// ---- reading --------------------------------------------------------------

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at `offset`; false if the file ends first.
bool pread_all(int fd, void* buf, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(path, "read error: " + errno_text());
    if (r == 0) return false;
    p += r, n -= static_cast<size_t>(r), offset += static_cast<uint64_t>(r);
  }
  return true;
}

struct Entry {
  StTensor tensor;
  uint64_t begin, end;
};

// One header entry: exactly the fields dtype, shape and data_offsets, with
// the offsets spanning exactly numel * dtype size bytes.
Entry parse_tensor_entry(const std::string& name, const Json& v, const std::string& path) {
  const std::string who = "tensor '" + name + "': ";
  if (v.kind != Json::Object) fail(path, who + "entry is " + kind_name(v.kind) + ", not an object");
  const Json* field[3] = {nullptr, nullptr, nullptr};
  static const char* const kFields[3] = {"dtype", "shape", "data_offsets"};
  static const Json::Kind kKinds[3] = {Json::String, Json::Array, Json::Array};
  for (size_t k = 0; k < v.keys.size(); ++k) {
    const auto* f = std::find(kFields, kFields + 3, v.keys[k]);
    if (f == kFields + 3) fail(path, who + "unexpected field '" + v.keys[k] + "'");
    field[f - kFields] = &v.items[k];
  }
  for (int k = 0; k < 3; ++k) {
    if (!field[k]) fail(path, who + "missing field '" + kFields[k] + "'");
    if (field[k]->kind != kKinds[k])
      fail(path, who + "'" + kFields[k] + "' is " + kind_name(field[k]->kind) + ", expected " +
                     kind_name(kKinds[k]));
  }
  Entry e{{name, field[0]->s, {}, {}}, 0, 0};
  const size_t elem = dtype_size(e.tensor.dtype);
  if (elem == 0) fail(path, who + "unknown dtype '" + e.tensor.dtype + "'");
  for (const Json& d : field[1]->items) {
    if (d.kind != Json::Int)
      fail(path, who + "shape holds " + kind_name(d.kind) + ", expected integers");
    e.tensor.shape.push_back(d.i);
  }
  for (int64_t d : e.tensor.shape)
    if (d < 0) fail(path, who + "negative dimension in shape " + shape_text(e.tensor.shape));
  uint64_t nbytes = 0;
  if (!tensor_bytes(e.tensor.shape, elem, &nbytes))
    fail(path, who + "shape " + shape_text(e.tensor.shape) + " overflows");
  const auto& offs = field[2]->items;
  if (offs.size() != 2 || offs[0].kind != Json::Int || offs[1].kind != Json::Int)
    fail(path, who + "data_offsets must be [begin, end], two integers");
  if (offs[0].i < 0 || offs[1].i < offs[0].i)
    fail(path, who + "invalid data_offsets [" + std::to_string(offs[0].i) + ", " +
                   std::to_string(offs[1].i) + "]");
  e.begin = static_cast<uint64_t>(offs[0].i), e.end = static_cast<uint64_t>(offs[1].i);
  if (e.end - e.begin != nbytes)
    fail(path, who + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "] span " + std::to_string(e.end - e.begin) + " bytes, but " + e.tensor.dtype +
                   " " + shape_text(e.tensor.shape) + " needs " + std::to_string(nbytes));
  return e;
}

// The tensors must tile the data buffer [0, data_len) exactly, in offset order.
void check_layout(const std::vector<Entry>& entries, uint64_t data_len, const std::string& path) {
  uint64_t expect = 0;  // where the next tensor must begin
  const std::string* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string who = "tensor '" + e.tensor.name + "': ";
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < expect)
      fail(path, who + "data_offsets " + range + " overlap tensor '" + *prev + "' (which ends at " +
                     std::to_string(expect) + ")");
    if (e.begin > expect && e.begin > data_len)
      fail(path, who + "data_offsets " + range + " lie outside the data buffer (" +
                     std::to_string(data_len) + " bytes)");
    if (e.begin > expect)
      fail(path, who + "hole of " + std::to_string(e.begin - expect) + " bytes before its data " +
                     range +
                     (prev ? " (tensor '" + *prev + "' ends at " + std::to_string(expect) + ")"
                           : " (data buffer starts at 0)"));
    expect = e.end, prev = &e.tensor.name;
  }
  for (const Entry& e : entries)
    if (e.end > data_len)
      fail(path, "file truncated: tensor '" + e.tensor.name + "' needs data bytes [" +
                     std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     ") but the data buffer holds only " + std::to_string(data_len) + " bytes");
  if (expect < data_len)
    fail(path, std::to_string(data_len - expect) +
                   " trailing bytes after the last tensor's data (tensors end at " +
                   std::to_string(expect) + ", data buffer is " + std::to_string(data_len) +
                   " bytes)");
}

// ---- writing --------------------------------------------------------------

// JSON string literal, escaped exactly as serde_json (the reference writer)
// does, so that our bytes match its bytes.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const char* esc = c == '"'    ? "\\\""
                      : c == '\\' ? "\\\\"
                      : c == '\b' ? "\\b"
                      : c == '\f' ? "\\f"
                      : c == '\n' ? "\\n"
                      : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t"
                                  : nullptr;
    if (esc) {
      out += esc;
    } else if (u < 0x20) {
      out += "\\u00";
      out += "0123456789abcdef"[u >> 4];
      out += "0123456789abcdef"[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}


}  // namespace

const StTensor* SafetensorsFile::find(const std::string& name) const {
  for (const StTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name, const std::vector<int64_t>& shape, const std::string& path) {
  const StTensor* t = f.find(name);
  if (!t) throw SafetensorsError(path + ": missing tensor '" + name + "'");
  if (t->dtype != "F32") throw SafetensorsError(path + ": tensor '" + name + "' is " + t->dtype + ", expected F32");
  if (t->shape != shape)
    throw SafetensorsError(path + ": tensor '" + name + "' has shape " + sema::shape_to_string(t->shape) + ", expected " +
                           sema::shape_to_string(shape));
  std::vector<float> out(t->data.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), t->data.data(), t->data.size());  // an empty tensor's data() may be null
  return out;
}

StTensor f32_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data, size_t n) {
  StTensor t{name, "F32", shape, std::vector<uint8_t>(n * 4)};
  if (n) std::memcpy(t.data.data(), data, n * 4);
  return t;
}

size_t dtype_size(const std::string& dtype) {
  const int r = dtype_rank(dtype);
  return r < 0 ? 0 : kDtypes[r].size;
}

int64_t metadata_count(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) throw SafetensorsError(path + ": no '" + key + "' metadata");
  const std::string& v = it->second;
  int64_t n = 0;
  if (!parse_count(v, n) || (v.size() > 1 && v[0] == '0'))
    throw SafetensorsError(path + ": metadata '" + key + "' must be a non-negative integer (got '" + v + "')");
  return n;
}

bool parse_count(const std::string& text, int64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  int64_t n = 0;
  for (char c : text)
    if (c < '0' || c > '9' || __builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, c - '0', &n)) return false;
  out = n;
  return true;
}

namespace {

// Opens `path` (a regular file, non-blocking) and parses and checks its
// header; the data is not read. `fd` stays open for the caller.
SafetensorsHeader parse_header(const std::string& path, Fd& f) {
  // Non-blocking open and a type check first: a shard that is a FIFO or a
  // link to /dev/zero is refused, not read forever.
  std::string why;
  int64_t size = 0;
  f.fd = front::open_regular_file(path, why, &size);
  if (f.fd < 0) fail(path, why);
  const auto file_size = static_cast<uint64_t>(size);
  if (file_size < 8)
    fail(path,
         "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");

  unsigned char len_bytes[8];
  if (!pread_all(f.fd, len_bytes, 8, 0, path)) fail(path, "unexpected end of file");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | len_bytes[k];  // little-endian on any host
  if (n > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(n) + " is absurd (limit " +
                   std::to_string(kMaxHeaderBytes) + ")");
  if (n > file_size - 8)
    fail(path, "header length " + std::to_string(n) + " exceeds the file (" +
                   std::to_string(file_size) + " bytes)");

  std::string header(n, '\0');
  if (!pread_all(f.fd, header.data(), n, 8, path))
    fail(path, "unexpected end of file in the header");
  if (size_t bad = invalid_utf8_at(header); bad != std::string::npos)
    fail(path, "header is not valid UTF-8 at byte " + std::to_string(bad));
  const Json root = parse_header_json(header, path);
  if (root.kind != Json::Object)
    fail(path, std::string("header is ") + kind_name(root.kind) + ", not an object");

  SafetensorsHeader out;
  out.path = path;
  out.data_start = 8 + n;
  std::vector<Entry> entries;
  for (size_t k = 0; k < root.keys.size(); ++k) {
    const Json& v = root.items[k];
    if (root.keys[k] != "__metadata__") {
      entries.push_back(parse_tensor_entry(root.keys[k], v, path));
      continue;
    }
    if (v.kind != Json::Object)
      fail(path, "__metadata__ is " + std::string(kind_name(v.kind)) + ", not an object");
    for (size_t m = 0; m < v.keys.size(); ++m) {
      if (v.items[m].kind != Json::String)
        fail(path, "__metadata__ entry '" + v.keys[m] + "' is " + kind_name(v.items[m].kind) +
                       ", not a string");
      out.metadata[v.keys[m]] = v.items[m].s;
    }
  }
  // Offset order; the name breaks ties between empty tensors at one offset.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.tensor.name) < std::tie(b.begin, b.end, b.tensor.name);
  });
  check_layout(entries, file_size - 8 - n, path);
  for (Entry& e : entries)
    out.entries.push_back(
        StEntry{std::move(e.tensor.name), std::move(e.tensor.dtype), std::move(e.tensor.shape), e.begin, e.end});
  return out;
}

std::vector<uint8_t> read_entry(int fd, const SafetensorsHeader& h, const StEntry& e) {
  // Every size was checked against the file size by parse_header: allocate.
  std::vector<uint8_t> data(e.end - e.begin);
  if (!pread_all(fd, data.data(), data.size(), h.data_start + e.begin, h.path))
    fail(h.path, "tensor '" + e.name + "': unexpected end of file (file changed while reading?)");
  return data;
}

}  // namespace

const StEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const StEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  Fd f{-1};
  return parse_header(path, f);
}

std::vector<uint8_t> read_tensor_data(const SafetensorsHeader& h, const StEntry& e) {
  Fd f{-1};
  SafetensorsHeader again = parse_header(h.path, f);  // the file as it is now: it may have changed
  const StEntry* now = again.find(e.name);
  if (!now || now->begin != e.begin || now->end != e.end || now->dtype != e.dtype)
    fail(h.path, "tensor '" + e.name + "' changed since its header was read");
  return read_entry(f.fd, again, *now);
}

SafetensorsFile read_safetensors(const std::string& path) {
  Fd f{-1};
  SafetensorsHeader h = parse_header(path, f);
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const StEntry& e : h.entries) out.tensors.push_back(StTensor{e.name, e.dtype, e.shape, read_entry(f.fd, h, e)});
  return out;
}

void write_safetensors_atomic(const std::string& path, const std::vector<StTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  auto bad = [&](const std::string& what) {
    throw SafetensorsError("cannot write safetensors file '" + path + "': " + what);
  };
  // Validate everything first: the reader must accept whatever we write.
  std::set<std::string> names;
  for (const StTensor& t : tensors) {
    const std::string who = "tensor '" + t.name + "': ";
    if (t.name == "__metadata__") bad(who + "the name is reserved");
    if (!names.insert(t.name).second) bad(who + "duplicate name");
    if (invalid_utf8_at(t.name) != std::string::npos) bad(who + "name is not valid UTF-8");
    const size_t elem = dtype_size(t.dtype);
    if (elem == 0) bad(who + "unknown dtype '" + t.dtype + "'");
    uint64_t nbytes = 0;
    if (!tensor_bytes(t.shape, elem, &nbytes)) bad(who + "invalid shape " + shape_text(t.shape));
    if (t.data.size() != nbytes)
      bad(who + "holds " + std::to_string(t.data.size()) + " bytes, but " + t.dtype + " " +
          shape_text(t.shape) + " needs " + std::to_string(nbytes));
  }
  for (const auto& [k, v] : metadata)
    if (invalid_utf8_at(k) != std::string::npos || invalid_utf8_at(v) != std::string::npos)
      bad("__metadata__ entry '" + k + "' is not valid UTF-8");

  // The reference order: decreasing dtype alignment, then name. Each tensor
  // then starts at a multiple of its element size.
  std::vector<const StTensor*> order;
  for (const StTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StTensor* a, const StTensor* b) {
    const int ra = dtype_rank(a->dtype), rb = dtype_rank(b->dtype);
    return ra != rb ? ra > rb : a->name < b->name;
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata)
      header += (header.back() == '{' ? "" : ",") + json_string(k) + ":" + json_string(v);
    header += "}";
  }
  uint64_t offset = 0;
  for (const StTensor* t : order) {
    std::string dims;
    for (int64_t d : t->shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + json_string(t->name) + ":{\"dtype\":\"" + t->dtype +
              "\",\"shape\":[" + dims + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t->data.size()) + "]}";
    offset += t->data.size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-aligned
  std::string prefix(8, '\0');
  for (int k = 0; k < 8; ++k)
    prefix[k] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * k));
  header.insert(0, prefix);

  std::vector<std::pair<const void*, size_t>> parts{{header.data(), header.size()}};
  for (const StTensor* t : order) parts.emplace_back(t->data.data(), t->data.size());
  try {
    write_file_atomic(path, parts);
  } catch (const FileWriteError& e) {
    throw SafetensorsError(e.what());
  }
}

}  // namespace nns::backend
