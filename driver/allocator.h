// How the nns process's allocator (jemalloc, driver/main.cpp's malloc_conf)
// treats freed memory, per command. The start-up settings keep every freed
// page mapped (decays of -1): `nns check` at scale is a few seconds of
// allocating and first-touching memory, and on a VM that hands freed pages
// back to its host a page faulted in again costs about 2 ms per MB. A
// command that runs for many seconds and is judged by its resident set
// (`nns simulate` of SC'21's 1T row: 2.19 GB kept against 1.90 GB returned)
// asks for jemalloc's own defaults instead.
#pragma once

#include <string>

namespace nns::driver {

// Freed pages go back to the system after jemalloc's default decay (dirty
// pages 10 s, then purged at once), for the arenas that exist and those
// made later. Does nothing without jemalloc (sanitized builds, the test
// binaries) or when MALLOC_CONF is set: the user's settings win; changes
// nothing where jemalloc refuses (a build without these controls).
void return_freed_memory();

// "dirty decay D ms, muzzy decay M ms" of arena 0 (the main thread's,
// made before any command ran), read back from jemalloc; "" without it.
// main prints it on stderr at exit when NNS_ALLOCATOR_REPORT is set
// (ctest allocator_decay).
std::string allocator_decay_text();

}  // namespace nns::driver
