// The tested backend's twin with cuDNN switched off (NNS_CUDNN=0), defined
// by each device test binary: on a GPU (tested_cuda.cpp), the backend as
// nns runs it has the own-kernel backend as its twin; in the emulation
// (tested_emulation.cpp), which has no cuDNN, nothing has one (null).
// Cases use it to tell that cuDNN took a shape (results differ from the
// own kernels') or declined it (results equal to the bit).
#pragma once

#include "backend/runtime/backend.h"

namespace nns::backend::test {

Backend* cudnn_off_twin(const Backend& b);

}  // namespace nns::backend::test
