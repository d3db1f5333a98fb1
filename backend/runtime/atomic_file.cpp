#include "backend/runtime/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "backend/runtime/fault.h"
#include "backend/runtime/safetensors.h"  // parse_count

namespace nns::backend {
namespace {

std::string errno_text() { return std::strerror(errno); }

// False with errno set when the data could not all be written.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    if (w == 0) {
      errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string parent_directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

int remove_stale_temporaries(const std::string& path) {
  const std::string dir = parent_directory(path), prefix = base_name(path) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) != 0) continue;
    int64_t pid = 0;
    if (!parse_count(n.substr(prefix.size()), pid) || pid <= 0 || pid > 0x7fffffff) continue;
    // A writer that still runs (ours included) keeps its temporary. A pid on
    // another host of a shared folder cannot be checked from here and may be
    // mistaken for a live one of ours: then the file stays, which is safe.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlink((dir + "/" + n).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
  auto fail = [&](const std::string& what) { throw FileWriteError("cannot write '" + path + "': " + what); };
  remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '" + tmp + "': " + errno_text());
  try {
    for (const auto& [data, n] : parts)
      if (!write_all(fd, data, n)) fail("write to '" + tmp + "' failed: " + errno_text());
    // fsync before rename: otherwise a crash can leave the new name pointing
    // at a file whose data never reached the disk.
    if (::fsync(fd) != 0) fail("fsync of '" + tmp + "' failed: " + errno_text());
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) fail("close of '" + tmp + "' failed: " + errno_text());
    fault_point("before-rename");
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename from '" + tmp + "' failed: " + errno_text());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable. Best effort: the new file is already in
  // place and complete, so a folder that cannot be synced is not an error.
  sync_directory(parent_directory(path));
}

void write_text_atomic(const std::string& path, const std::string& text) { write_file_atomic(path, {{text.data(), text.size()}}); }

}  // namespace nns::backend
