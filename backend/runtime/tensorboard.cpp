#include "backend/runtime/tensorboard.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "backend/runtime/backend.h"  // RuntimeError

namespace nns::backend {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// --- protobuf wire format: a key is (field << 3) | wire type -------------------
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire));
}
template <typename T>
void put_fixed(std::string& out,
               T v) {  // little-endian, as protobuf's fixed32/fixed64 (the hosts nns runs on are little-endian)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
// Event's header fields: wall_time (1, fixed64 double) and step (2, varint).
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string r;
  const uint64_t len = payload.size();
  put_fixed(r, len);
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += payload;
  put_fixed(r, masked_crc32c(payload.data(), payload.size()));
  return r;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;  // Summary.Value: tag (1), simple_value (2, fixed32 float)
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed(v, value);
  std::string summary;  // Summary: value (1)
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw RuntimeError("--tensorboard " + dir + ": cannot create the folder: " + std::strerror(errno));
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double t = now_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host + ".nns";
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) throw RuntimeError("--tensorboard " + dir + ": cannot create " + path_ + ": " + std::strerror(errno));
  std::string e = event_head(t, 0);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version: what TensorBoard expects first
  const std::string r = tfrecord(e);
  std::fwrite(r.data(), 1, r.size(), f_);
  std::fflush(f_);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  const std::string r = tfrecord(scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
  if (std::fwrite(r.data(), 1, r.size(), f_) != r.size()) throw RuntimeError("--tensorboard: cannot write " + path_);
}

void TensorBoardWriter::flush() { std::fflush(f_); }

}  // namespace nns::backend
