// Opening the files nns reads (model sources, device profiles, checkpoint
// shards and manifests, data) without hanging or reading without end: the
// open is non-blocking, so a FIFO with no writer or a device node cannot
// block it, and anything but a regular file (FIFO, /dev/zero, /dev/urandom,
// a folder, a socket) is refused before a byte is read. Symlinks to regular
// files are followed as usual.
#pragma once

#include <cstdint>
#include <string>

namespace nns::front {

// A read-only descriptor of `path` (O_CLOEXEC, blocking again once the type
// is checked), or -1 with `why` set: "cannot open: <errno text>" or "not a
// regular file (a FIFO)". `size` receives the file's size.
int open_regular_file(const std::string& path, std::string& why, int64_t* size = nullptr);

// The whole content of a regular file of at most `max_bytes` bytes; false
// with `why` set otherwise ("... is N bytes, more than the M this reads").
bool read_regular_file(const std::string& path, std::string& out, std::string& why,
                       int64_t max_bytes = int64_t{1} << 30);

// Why `path` cannot be read as a source file (" (not a regular file (a
// FIFO))", " (cannot open: No such file or directory)"), for diagnostics.
std::string why_unreadable(const std::string& path);

}  // namespace nns::front
