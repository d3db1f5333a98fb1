// cuBLASLt, opened when the first product needs it (library nns_cuda only).
//
// Linking libcublasLt (541 MB) into nns made every process start cost about
// 0.42 s and 210 MB of resident memory before main(): the loader maps and
// relocates the library and runs its constructors, even for `nns check`,
// which never runs a kernel (a C program that only links it: 0.44 s against
// 0.00 s; docs/status.md, "check at scale, part 12"). So nns_cuda compiles
// against cuBLASLt's headers but does not link the library: the functions it
// calls are looked up here with dlopen/dlsym, once, by the first Gemm.
#pragma once

#include <cublasLt.h>

#include <string>

namespace nns::backend::cuda {

// The cuBLASLt entry points nns calls (gemm_cublaslt.cpp, cuda_backend.cpp),
// typed from the header's own declarations.
struct CublasLt {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtGetVersion) get_version = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set_attribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) layout_set_attribute = nullptr;
};

// The library's entry points, opened on the first call (thread-safe), or
// nullptr with `why` saying which library or symbol was not found. The
// library is looked for by its soname (LD_LIBRARY_PATH, the executable's
// run path, the system's), then at the path CMake found at configure time.
const CublasLt* cublaslt(std::string& why);

// As cublaslt(), but a library that cannot be opened throws RuntimeError.
const CublasLt& cublaslt_or_throw();

}  // namespace nns::backend::cuda
