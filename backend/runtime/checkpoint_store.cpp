#include "backend/runtime/checkpoint_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/runtime/atomic_file.h"
#include "backend/runtime/safetensors.h"
#include "frontend/regular_file.h"

namespace nns::backend {
namespace {

constexpr const char* kManifestFormat = "nns-shards-2";

std::string rank_file(int64_t r) { return "rank-" + std::to_string(r) + ".safetensors"; }

// The folder DIR/latest names, "" when there is none. Strict: one line, a
// plain folder name of ours (never a path out of DIR).
std::string latest_folder(const std::string& dir, bool strict) {
  std::string text, why;
  if (!front::read_regular_file(dir + "/latest", text, why, 4096)) {
    if (strict && ::access((dir + "/latest").c_str(), F_OK) == 0) throw SafetensorsError(dir + "/latest: " + why);
    return "";
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  bool ok = text.rfind("step-", 0) == 0 && text.size() < 64 && text.find('/') == std::string::npos && text.find('\n') == std::string::npos;
  if (!ok) {
    if (strict) throw SafetensorsError(dir + "/latest: does not name a checkpoint folder (got '" + text.substr(0, 64) + "')");
    return "";
  }
  return text;
}

// Whether `path` itself is a folder: a symlink to one is not (lstat), so
// that cleanup never follows a planted link out of the save folder.
bool is_real_directory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Removes a folder a save of ours wrote: only the files such a save makes,
// so that anything else a user put there survives (and keeps the folder).
// A symlinked step-* entry is left alone, its target untouched.
void remove_save_folder(const std::string& path) {
  if (!is_real_directory(path)) return;
  DIR* d = ::opendir(path.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.push_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    bool ours = (n.rfind("rank-", 0) == 0 && n.find(".safetensors") != std::string::npos) || n.rfind("manifest", 0) == 0;
    if (ours) ::unlink((path + "/" + n).c_str());
  }
  ::rmdir(path.c_str());
}

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw FileWriteError("cannot create the checkpoint folder '" + path + "': " + std::strerror(errno));
  if (!is_directory(path))
    throw FileWriteError("cannot use '" + path + "' as a checkpoint folder: it exists and is not a folder");
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

uint64_t file_checksum(const std::string& path, int64_t& bytes) {
  bytes = -1;
  std::string why;
  int fd = front::open_regular_file(path, why);  // a shard linked to /dev/zero or a FIFO counts as missing
  if (fd < 0) return 0;
  uint64_t h = 1469598103934665603ull;
  int64_t total = 0;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ::close(fd);
      return 0;
    }
    if (r == 0) break;
    for (ssize_t i = 0; i < r; ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
    total += r;
  }
  ::close(fd);
  bytes = total;
  return h;
}

std::string next_shard_folder(const std::string& dir, int64_t step) {
  std::string name = "step-" + std::to_string(step);
  return latest_folder(dir, false) == name ? name + ".1" : name;
}

void prepare_shard_folder(const std::string& dir, const std::string& folder) {
  make_dir(dir);
  const std::string keep = latest_folder(dir, false);
  remove_stale_temporaries(dir + "/latest");
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("step-", 0) == 0 && n != keep && is_real_directory(dir + "/" + n)) stale.push_back(n);
    }
    ::closedir(d);
    for (const std::string& n : stale) remove_save_folder(dir + "/" + n);
  }
  make_dir(dir + "/" + folder);
}

void publish_shards(const std::string& dir, const std::string& folder, ShardManifest m) {
  const std::string path = dir + "/" + folder;
  std::ostringstream text;
  text << kManifestFormat << "\nstep " << m.step << "\nworld " << m.world << "\noptimizer " << m.optimizer << "\nplan " << m.plan << "\n";
  m.files.clear();
  for (int64_t r = 0; r < m.world; ++r) {
    ShardFile f;
    f.name = rank_file(r);
    f.checksum = file_checksum(path + "/" + f.name, f.bytes);
    if (f.bytes < 0) throw FileWriteError(path + "/" + f.name + ": the shard of rank " + std::to_string(r) + " is missing; the save is not published");
    text << "file " << f.name << " " << f.bytes << " " << hex64(f.checksum) << "\n";
  }
  // The shards' renames first, then the manifest, then `latest`: each step
  // durable before the next makes it reachable.
  sync_directory(path);
  write_text_atomic(path + "/manifest", text.str());
  const std::string previous = latest_folder(dir, false);
  write_text_atomic(dir + "/latest", folder + "\n");
  if (!previous.empty() && previous != folder) remove_save_folder(dir + "/" + previous);
}

ShardManifest read_latest_shards(const std::string& dir) {
  if (!is_directory(dir)) throw SafetensorsError(dir + ": not a checkpoint folder");
  const std::string folder = latest_folder(dir, true);
  if (folder.empty()) {
    bool old_layout = false;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) old_layout = old_layout || std::string(e->d_name).rfind("rank-", 0) == 0;
      ::closedir(d);
    }
    throw SafetensorsError(dir + ": no complete checkpoint (no 'latest' file: " +
                           (old_layout ? std::string("rank-*.safetensors directly in the folder is the layout before nns-shards-2, which cannot prove a save finished")
                                       : std::string("no save into this folder has finished")) +
                           ")");
  }
  ShardManifest m;
  m.folder = dir + "/" + folder;
  const std::string mpath = m.folder + "/manifest";
  std::string manifest_text, why;
  if (!front::read_regular_file(mpath, manifest_text, why, int64_t{64} << 20))
    throw SafetensorsError(
        mpath + ": " +
        (::access(mpath.c_str(), F_OK) == 0 ? why : "missing (the checkpoint '" + folder + "' is torn)"));
  std::istringstream in(manifest_text);
  auto bad = [&](const std::string& what) -> SafetensorsError { return SafetensorsError(mpath + ": " + what); };
  std::string line;
  if (!std::getline(in, line) || line != kManifestFormat) throw bad("not an nns shard manifest (first line must be '" + std::string(kManifestFormat) + "')");
  auto field = [&](const char* key) {
    if (!std::getline(in, line) || line.rfind(std::string(key) + " ", 0) != 0) throw bad(std::string("expected the '") + key + "' line");
    return line.substr(std::strlen(key) + 1);
  };
  if (!parse_count(field("step"), m.step)) throw bad("'step' must be a non-negative integer");
  if (!parse_count(field("world"), m.world) || m.world < 1 || m.world > 65536) throw bad("'world' must be 1 to 65536");
  m.optimizer = field("optimizer");
  m.plan = field("plan");
  for (int64_t r = 0; r < m.world; ++r) {
    std::istringstream fl(field("file"));
    ShardFile f;
    std::string bytes, sum, extra;
    fl >> f.name >> bytes >> sum;
    if (f.name != rank_file(r) || !parse_count(bytes, f.bytes) || sum.size() != 16 || sum.find_first_not_of("0123456789abcdef") != std::string::npos ||
        (fl >> extra))
      throw bad("file line " + std::to_string(r + 1) + " must be 'file " + rank_file(r) + " BYTES CHECKSUM'");
    f.checksum = std::stoull(sum, nullptr, 16);
    int64_t got = 0;
    uint64_t h = file_checksum(m.folder + "/" + f.name, got);
    if (got < 0)
      throw SafetensorsError(m.folder + "/" + f.name + ": " +
                             (::access((m.folder + "/" + f.name).c_str(), F_OK) == 0
                                  ? "not a regular file, or unreadable"
                                  : "missing (the checkpoint '" + folder + "' is torn)"));
    if (got != f.bytes || h != f.checksum)
      throw SafetensorsError(m.folder + "/" + f.name + ": " + std::to_string(got) + " bytes, checksum " + hex64(h) + "; the manifest says " + bytes +
                             " bytes, checksum " + sum + " (the file changed after the save)");
    m.files.push_back(f);
  }
  if (std::getline(in, line)) throw bad("unexpected line after the last file: '" + line.substr(0, 60) + "'");
  return m;
}

}  // namespace nns::backend
