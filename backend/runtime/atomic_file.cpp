#include "backend/runtime/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
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

// The pid of a temporary's name, PATH.tmp.<pid>.<nonce> (or the older
// PATH.tmp.<pid>); false for any other name.
bool temporary_pid(const std::string& suffix, int64_t& pid) {
  const size_t dot = suffix.find('.');
  return parse_count(suffix.substr(0, dot), pid) && pid > 0 && pid <= 0x7fffffff;
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
    if (!temporary_pid(n.substr(prefix.size()), pid)) continue;
    // A writer that still runs (ours included) keeps its temporary. A pid on
    // another host of a shared folder cannot be checked from here and may be
    // mistaken for a live one of ours: then the file stays, which is safe.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlink((dir + "/" + n).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

namespace {

// Refuses to replace anything but a regular file (or a symlink, which the
// rename replaces, leaving its target alone): renaming over /dev/full or a
// FIFO would replace the node itself when run as root.
void check_output_target(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // absent: created
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return;
  throw FileWriteError("cannot write '" + path +
                       "': it exists and is not a regular file (nns writes regular files only)");
}

// Creates the temporary PATH.tmp.<pid>.<nonce> exclusively (O_EXCL |
// O_NOFOLLOW, in the target's folder): a file or symlink planted under a
// predictable name makes the open fail, never redirects the write.
int create_temporary(const std::string& path, std::string& tmp) {
  static uint64_t counter = 0;
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint64_t nonce = (static_cast<uint64_t>(::getpid()) << 32) ^
                     static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                     (++counter * 0x9e3779b97f4a7c15ull);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + hex;
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
  auto fail = [&](const std::string& what) { throw FileWriteError("cannot write '" + path + "': " + what); };
  check_output_target(path);
  remove_stale_temporaries(path);
  std::string tmp;
  int fd = create_temporary(path, tmp);
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

std::string save_target_problem(const std::string& path) {
  if (path.empty()) return "the path is empty";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
      return "'" + path + "' exists and is neither a regular file nor a folder";
    if (S_ISDIR(st.st_mode) && ::access(path.c_str(), W_OK | X_OK) != 0)
      return "the folder '" + path + "' is not writable: " + errno_text();
    if (S_ISREG(st.st_mode) && ::access(parent_directory(path).c_str(), W_OK | X_OK) != 0)
      return "the folder of '" + path + "' is not writable: " + errno_text();
    return "";
  }
  const std::string parent = parent_directory(path);
  if (!is_directory(parent)) return "the folder '" + parent + "' does not exist";
  if (::access(parent.c_str(), W_OK | X_OK) != 0) return "the folder '" + parent + "' is not writable: " + errno_text();
  return "";
}

void write_text_atomic(const std::string& path, const std::string& text) { write_file_atomic(path, {{text.data(), text.size()}}); }

}  // namespace nns::backend
