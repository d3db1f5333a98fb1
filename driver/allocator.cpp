#include "driver/allocator.h"

#include <sys/types.h>
#include <cstddef>
#include <cstdlib>
#include <string>

// jemalloc's control interface, present when jemalloc is linked into the
// executable (driver/CMakeLists.txt); weak, so that binaries on the C
// library's malloc link and see a null pointer.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) __attribute__((weak));

namespace nns::driver {
namespace {

// jemalloc's defaults (jemalloc 5: opt.dirty_decay_ms 10000, opt.muzzy_decay_ms 0).
constexpr ssize_t kDirtyDecayMs = 10000;
constexpr ssize_t kMuzzyDecayMs = 0;

bool set_decay(const char* name, ssize_t ms) { return mallctl(name, nullptr, nullptr, &ms, sizeof ms) == 0; }

}  // namespace

void return_freed_memory() {
  if (!mallctl || std::getenv("MALLOC_CONF")) return;
  // The default of arenas created later (the thread pool's workers get
  // their own; the arena for huge allocations is made at first use and
  // then purges at once, as jemalloc does whenever the default is above 0).
  if (!set_decay("arenas.dirty_decay_ms", kDirtyDecayMs) || !set_decay("arenas.muzzy_decay_ms", kMuzzyDecayMs)) return;
  // Each arena that exists now (arena.<MALLCTL_ARENAS_ALL> does not take
  // decay settings); slots not yet initialised refuse, and take the
  // default above when they are.
  unsigned narenas = 0;
  size_t len = sizeof narenas;
  if (mallctl("arenas.narenas", &narenas, &len, nullptr, 0) != 0) return;
  for (unsigned i = 0; i < narenas; ++i) {
    const std::string arena = "arena." + std::to_string(i);
    if (set_decay((arena + ".dirty_decay_ms").c_str(), kDirtyDecayMs))
      set_decay((arena + ".muzzy_decay_ms").c_str(), kMuzzyDecayMs);
  }
}

std::string allocator_decay_text() {
  if (!mallctl) return "";
  ssize_t dirty = 0, muzzy = 0;
  size_t len = sizeof dirty;
  if (mallctl("arena.0.dirty_decay_ms", &dirty, &len, nullptr, 0) != 0) return "";
  len = sizeof muzzy;
  if (mallctl("arena.0.muzzy_decay_ms", &muzzy, &len, nullptr, 0) != 0) return "";
  return "dirty decay " + std::to_string(dirty) + " ms, muzzy decay " + std::to_string(muzzy) + " ms";
}

}  // namespace nns::driver
