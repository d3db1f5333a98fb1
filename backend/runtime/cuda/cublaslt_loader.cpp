#include "backend/runtime/cuda/cublaslt_loader.h"

#include <dlfcn.h>

#include "backend/runtime/backend.h"

namespace nns::backend::cuda {
namespace {

struct Loaded {
  CublasLt api;
  std::string why;  // empty when every entry point was found
};

void* open_library(std::string& why) {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  if (void* h = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  why = soname + ": " + ::dlerror();
#ifdef NNS_CUBLASLT_PATH
  if (void* h = ::dlopen(NNS_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL)) return h;
  why += "; " + std::string(NNS_CUBLASLT_PATH) + ": " + ::dlerror();
#endif
  return nullptr;
}

template <class F>
void bind(void* library, const char* name, F& slot, std::string& why) {
  slot = reinterpret_cast<F>(::dlsym(library, name));
  if (!slot && why.empty()) why = std::string("cuBLASLt has no symbol ") + name;
}

Loaded load() {
  Loaded l;
  void* h = open_library(l.why);
  if (!h) {
    l.why = "cannot open cuBLASLt (" + l.why + ")";
    return l;
  }
  CublasLt& a = l.api;
  bind(h, "cublasLtCreate", a.create, l.why);
  bind(h, "cublasLtDestroy", a.destroy, l.why);
  bind(h, "cublasLtGetVersion", a.get_version, l.why);
  bind(h, "cublasLtMatmul", a.matmul, l.why);
  bind(h, "cublasLtMatmulAlgoGetHeuristic", a.algo_get_heuristic, l.why);
  bind(h, "cublasLtMatmulDescCreate", a.desc_create, l.why);
  bind(h, "cublasLtMatmulDescDestroy", a.desc_destroy, l.why);
  bind(h, "cublasLtMatmulDescSetAttribute", a.desc_set_attribute, l.why);
  bind(h, "cublasLtMatmulPreferenceCreate", a.preference_create, l.why);
  bind(h, "cublasLtMatmulPreferenceDestroy", a.preference_destroy, l.why);
  bind(h, "cublasLtMatmulPreferenceSetAttribute", a.preference_set_attribute, l.why);
  bind(h, "cublasLtMatrixLayoutCreate", a.layout_create, l.why);
  bind(h, "cublasLtMatrixLayoutDestroy", a.layout_destroy, l.why);
  bind(h, "cublasLtMatrixLayoutSetAttribute", a.layout_set_attribute, l.why);
  // The library stays open for the life of the process: its handles and
  // device code are in use until exit.
  return l;
}

}  // namespace

const CublasLt* cublaslt(std::string& why) {
  static const Loaded loaded = load();
  if (!loaded.why.empty()) {
    why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

const CublasLt& cublaslt_or_throw() {
  std::string why;
  const CublasLt* api = cublaslt(why);
  if (!api) throw RuntimeError(why);
  return *api;
}

}  // namespace nns::backend::cuda
