// The TensorBoard writer's pieces against values from the formats'
// definitions: CRC-32C's check value, TFRecord framing and an Event's bytes.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "backend/runtime/tensorboard.h"

using namespace nns;

TEST_CASE("crc32c: the Castagnoli check value and TFRecord's mask", "[tensorboard]") {
  const char* check = "123456789";
  CHECK(backend::crc32c(check, 9) == 0xE3069283u);  // CRC-32C's standard check value
  CHECK(backend::crc32c("", 0) == 0u);
  const uint32_t c = 0xE3069283u;
  CHECK(backend::masked_crc32c(check, 9) == static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST_CASE("tfrecord frames a payload: length, its CRC, data, data CRC", "[tensorboard]") {
  const std::string payload = "abc";
  const std::string r = backend::tfrecord(payload);
  REQUIRE(r.size() == 8 + 4 + 3 + 4);
  uint64_t len = 0;
  std::memcpy(&len, r.data(), 8);
  CHECK(len == 3);
  uint32_t head = 0, tail = 0;
  std::memcpy(&head, r.data() + 8, 4);
  std::memcpy(&tail, r.data() + 15, 4);
  CHECK(head == backend::masked_crc32c(r.data(), 8));
  CHECK(r.substr(12, 3) == "abc");
  CHECK(tail == backend::masked_crc32c("abc", 3));
}

TEST_CASE("scalar_event encodes wall_time, step and a Summary.Value", "[tensorboard]") {
  const std::string e = backend::scalar_event(0.0, 300, "a", 1.0f);
  // wall_time: key 0x09 + 8 zero bytes; step 300: key 0x10, varint ac 02;
  // summary: key 0x2a, length 10: value key 0x0a, length 8: tag 0a 01 'a',
  // simple_value key 0x15 + float 1.0 (00 00 80 3f).
  const unsigned char want[] = {0x09, 0,    0,    0,    0,    0,    0,   0,    0,    0x10, 0xac, 0x02,
                                0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a', 0x15, 0x00, 0x00, 0x80, 0x3f};
  CHECK(e == std::string(reinterpret_cast<const char*>(want), sizeof want));
}
