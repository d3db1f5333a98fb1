// The CUDA backend's Backend implementation, written against device.h and
// so compiled both for the GPU and as its host emulation.
#pragma once

#include <memory>
#include <string>

#include "backend/runtime/backend.h"
#include "backend/runtime/cuda/device.h"

namespace nns::backend::NNS_DEV {

// A backend running on `stream` (it takes ownership) of the current
// device, named `name` ("cuda:0", "cuda-emulation"). `native_stream`: the
// stream is a CUDA stream that Backend::native_stream() may hand out (the
// GPU build); the emulation's streams are not. `attention_model`: Dnn's
// (dnn.h; the emulation only).
std::unique_ptr<Backend> make_device_backend(Stream stream, std::string name, bool native_stream = false,
                                             bool attention_model = false);

}  // namespace nns::backend::NNS_DEV
