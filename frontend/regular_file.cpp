#include "frontend/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nns::front {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

int open_regular_file(const std::string& path, std::string& why, int64_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = std::string("not a regular file (") + kind_of(st.st_mode) + ")";
    ::close(fd);
    return -1;
  }
  // Regular files ignore O_NONBLOCK, but the descriptor may be handed on.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size) *size = static_cast<int64_t>(st.st_size);
  return fd;
}

bool read_regular_file(const std::string& path, std::string& out, std::string& why, int64_t max_bytes) {
  int64_t size = 0;
  int fd = open_regular_file(path, why, &size);
  if (fd < 0) return false;
  if (size > max_bytes) {
    why = std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) + " this file may have";
    ::close(fd);
    return false;
  }
  out.clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      why = std::string("read failed: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (r == 0) break;
    // Bounded even if the file grows while it is read.
    if (static_cast<int64_t>(out.size()) + r > max_bytes) {
      why = "grew past " + std::to_string(max_bytes) + " bytes while being read";
      ::close(fd);
      return false;
    }
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return true;
}

std::string why_unreadable(const std::string& path) {
  std::string why;
  int fd = open_regular_file(path, why);
  if (fd >= 0) {
    ::close(fd);
    return "";
  }
  return " (" + why + ")";
}

}  // namespace nns::front
