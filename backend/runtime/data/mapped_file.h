// Read-only memory maps of data files, and the error every data reader
// throws. A token corpus can be far larger than memory: the readers map
// it and touch only the windows a step reads, never the whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/runtime/safetensors.h"

namespace nns::backend::data {

// A data file that is not what it must be (missing, truncated, wrong magic,
// a token outside the vocabulary). It is a SafetensorsError so that the
// driver reports it as every other bad input file: one line naming the
// file, exit 65.
class DataError : public SafetensorsError {
 public:
  using SafetensorsError::SafetensorsError;
};

class MappedFile {
 public:
  // Maps `path` whole; throws DataError naming the file if it cannot be
  // opened or mapped. An empty file maps to size() == 0.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* bytes() const { return bytes_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nns::backend::data
