// nns --version: what this binary is and what it was built with.
#pragma once

#include <string>

namespace nns::driver {

// The version, the commit it was built from, the build type and the
// backends compiled in (the CPU kernels' oneDNN and the ISA it runs on
// here, the bf16 path, CUDA with cuBLAS/cuDNN/NCCL where built).
std::string version_text();

}  // namespace nns::driver
