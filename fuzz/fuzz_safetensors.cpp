// fuzz_safetensors: the safetensors reader (backend/runtime/safetensors.h)
// on arbitrary bytes. The reader takes a path, as every caller gives it
// one, so the input is written to a file in a private temporary folder and
// read back; then every tensor the header declares is looked up and, when
// F32, read as floats against its own shape (read_f32, what weights,
// checkpoints and data files go through), and the metadata counts the
// checkpoint readers parse ('step', 'world') are read. A SafetensorsError is
// the expected outcome for a bad file (exit 65 in the CLI).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "backend/runtime/safetensors.h"
#include "fuzz/fuzz_util.h"

namespace {

nns::fuzz::InputFile g_input("fuzz_safetensors", "input.safetensors");

void run() {
  using namespace nns::backend;
  SafetensorsFile f;
  try {
    f = read_safetensors(g_input.path());
  } catch (const SafetensorsError&) {
    return;
  }
  for (const StTensor& t : f.tensors) {
    const StTensor* found = f.find(t.name);
    if (!found) nns::fuzz::internal_error("fuzz_safetensors", "tensor '" + t.name + "' is read but not found by name");
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (t.data.size() != numel * dtype_size(t.dtype))
      nns::fuzz::internal_error("fuzz_safetensors", "tensor '" + t.name + "' holds " + std::to_string(t.data.size()) + " bytes for its shape");
    try {
      if (t.dtype == "F32") (void)read_f32(f, t.name, found->shape, g_input.path());
    } catch (const SafetensorsError&) {
    }
  }
  for (const char* key : {"step", "world"}) {
    try {
      (void)metadata_count(f, key, g_input.path());
    } catch (const SafetensorsError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nns::fuzz::silence_streams();
  g_input.create();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_input.write(data, size);
  nns::fuzz::run_guarded("fuzz_safetensors", run);
  return 0;
}
