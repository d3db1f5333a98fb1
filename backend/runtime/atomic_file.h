// Files that are either whole or absent: written under a temporary name
// (PATH.tmp.<pid>.<nonce>, created exclusively and never through a
// symlink), fsync'ed, then renamed over PATH (which must be absent, a
// regular file or a symlink: never a device or FIFO), and the rename made
// durable by an fsync of the folder. A crash at any moment leaves the old
// PATH intact; the temporary a killed writer left behind is removed by the
// next write of the same PATH (when its pid is no longer running here).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nns::backend {

struct FileWriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes the concatenation of `parts` to `path` atomically. Throws
// FileWriteError "cannot write 'PATH': ..." (the temporary removed).
void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts);
void write_text_atomic(const std::string& path, const std::string& text);

// Removes PATH.tmp.<pid>[.<nonce>] files whose writer is gone (no such process on this
// machine); returns how many. write_file_atomic calls it first.
int remove_stale_temporaries(const std::string& path);

// Why nns could not save to `path` (a checkpoint file or a shard folder),
// "" when it could: an existing path must be a regular file or a folder
// (never a device or FIFO) and writable; a new one needs an existing,
// writable parent folder. Asked before the first training step, so a bad
// --save fails at once instead of after the whole run.
std::string save_target_problem(const std::string& path);

// fsync of a folder (best effort: false if it cannot be opened or synced).
bool sync_directory(const std::string& dir);
// The folder part of a path ("." for a bare name).
std::string parent_directory(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace nns::backend
