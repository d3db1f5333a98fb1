#include "backend/runtime/data/mapped_file.h"

#include "frontend/regular_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nns::backend::data {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  std::string why;
  int64_t size = 0;
  int fd = front::open_regular_file(path, why, &size);  // a FIFO or device is refused, not waited on
  if (fd < 0) throw DataError(path + ": " + why);
  size_ = static_cast<size_t>(size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw DataError(path + ": cannot map (" + std::strerror(err) + ")");
    }
    bytes_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() {
  if (bytes_) ::munmap(const_cast<uint8_t*>(bytes_), size_);
}

}  // namespace nns::backend::data
