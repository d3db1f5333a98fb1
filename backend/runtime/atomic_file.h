// Files that are either whole or absent: written under a temporary name
// (PATH.tmp.<pid>), fsync'ed, then renamed over PATH, and the rename made
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

// Removes PATH.tmp.<pid> files whose writer is gone (no such process on this
// machine); returns how many. write_file_atomic calls it first.
int remove_stale_temporaries(const std::string& path);

// fsync of a folder (best effort: false if it cannot be opened or synced).
bool sync_directory(const std::string& dir);
// The folder part of a path ("." for a bare name).
std::string parent_directory(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace nns::backend
