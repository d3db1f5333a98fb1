// Hooks of the cuDNN cases, defined by each device test binary.
//
// cudnn_off_twin: the tested backend's twin without cuDNN. On a GPU
// (tested_cuda.cpp) the backend as nns runs it has the own-kernel backend
// (NNS_CUDNN=0) as its twin; in the emulation (tested_emulation.cpp) the
// backend with the host model of cuDNN's fused attention (dnn_none.cpp)
// has the plain emulation. Others have none (null). Cases use it to tell
// that the cuDNN path took a shape (results differ from the own kernels')
// or declined it (equal to the bit).
//
// attention_backends: the backends the attention cases run: the tested
// backends, plus the attention-model emulation in the emulation binary.
#pragma once

#include <vector>

#include "backend/runtime/backend.h"

namespace nns::backend::test {

Backend* cudnn_off_twin(const Backend& b);
std::vector<Backend*> attention_backends();

}  // namespace nns::backend::test
