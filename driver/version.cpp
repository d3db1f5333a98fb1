#include "driver/version.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/cuda/cuda_backend.h"

namespace nns::driver {

extern const char* const kCommit;      // generated: scripts/cmake/version_info.cmake
extern const char* const kCommitDate;

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "SSE4.1";
    case dnnl::cpu_isa::avx: return "AVX";
    case dnnl::cpu_isa::avx2: return "AVX2";
    case dnnl::cpu_isa::avx2_vnni: return "AVX2 VNNI";
    case dnnl::cpu_isa::avx512_core: return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni: return "AVX-512 VNNI";
    case dnnl::cpu_isa::avx512_core_bf16: return "AVX-512 BF16";
    case dnnl::cpu_isa::avx512_core_amx: return "AVX-512 with AMX";
    default: return "other";
  }
}

}  // namespace

std::string version_text() {
  const dnnl_version_t* v = dnnl_version();
  std::string text = std::string("nns ") + NNS_VERSION + " (commit " + kCommit + (*kCommitDate ? std::string(", ") + kCommitDate : "") +
                     ", " + NNS_BUILD_TYPE + " build)\n";
  text += "  CPU kernels: oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
          ", running " + isa_name(dnnl::get_effective_cpu_isa()) + " code on this CPU; bf16 products " +
          (backend::cpu::fast::bf16_emulated() ? "emulated (fp32 products of bf16-rounded operands)" : "native (oneDNN bf16 matmul)") + "\n";
  text += "  collectives: Gloo (TCP)";
#if NNS_HAVE_NCCL
  text += ", NCCL";
#endif
  text += "\n";
#if NNS_HAVE_CUDA
  text += "  CUDA backend: built (cuBLASLt products, own kernels";
#if NNS_HAVE_CUDNN
  text += ", cuDNN convolutions and pooling";
#endif
  text += "); used with --device cuda where a GPU is visible\n";
  text += "  CUDA libraries loaded: " + backend::cuda_libraries() + "\n";
#else
  text += "  CUDA backend: not built (no CUDA toolkit at configure time)\n";
#endif
  return text;
}

}  // namespace nns::driver
