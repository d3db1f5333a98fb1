// device.h emulated on the host (library nns_cuda_emu): memory is malloc'd,
// streams are a flag saying in which order for_each runs its indices, and
// every "asynchronous" operation completes at once.
#include <cstdlib>
#include <cstring>

#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

namespace {
struct EmulatedStream {
  bool reversed = false;
};
}  // namespace

// The emulation's stream constructor with an order (emulation.h).
Stream create_emulated_stream(bool reversed) { return new EmulatedStream{reversed}; }

bool emulation_reversed(Stream s) { return s && static_cast<EmulatedStream*>(s)->reversed; }

int device_count() { return 1; }
void set_device(int) {}
Stream create_stream() { return create_emulated_stream(false); }
void destroy_stream(Stream s) { delete static_cast<EmulatedStream*>(s); }
void synchronize(Stream) {}

void* device_malloc(size_t bytes) { return std::malloc(bytes ? bytes : 1); }
void device_free(void* p) { std::free(p); }

void memset_async(void* p, int byte, size_t bytes, Stream) {
  if (bytes) std::memset(p, byte, bytes);
}
void copy_device_async(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes) std::memmove(dst, src, bytes);
}
void copy_to_device(void* dst, const void* host, size_t bytes, Stream) {
  if (bytes) std::memcpy(dst, host, bytes);
}
void copy_to_host(void* host, const void* src, size_t bytes, Stream) {
  if (bytes) std::memcpy(host, src, bytes);
}
void check_launch(const char*) {}

}  // namespace nns::backend::NNS_DEV
