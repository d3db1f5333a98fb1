// --tensorboard DIR: the training scalars as TensorBoard event files,
// written from the formats' definitions (no TensorFlow or protobuf library):
//   - a TFRecord file: each record is uint64 length, uint32 masked CRC-32C of
//     the length bytes, the data, uint32 masked CRC-32C of the data (all
//     little-endian); mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8;
//   - each record an Event protobuf (tensorflow/core/util/event.proto):
//     wall_time (1, double), step (2, int64), then file_version (3, string)
//     for the first record or summary (5, Summary); a Summary holds repeated
//     value (1, Summary.Value) with tag (1, string) and simple_value (2, float).
// tests/data/read_tfevents.py reads them back the same way.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nns::backend {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord around `payload`.
std::string tfrecord(const std::string& payload);
// An Event with a Summary of one scalar, encoded as protobuf.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

class TensorBoardWriter {
 public:
  // Creates DIR if needed and DIR/events.out.tfevents.<seconds>.<host>,
  // starting with the file_version event. Throws RuntimeError when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  void scalar(const std::string& tag, double value, int64_t step);
  void flush();  // after each step, so that TensorBoard sees a live run
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace nns::backend
