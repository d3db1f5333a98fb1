// Shape helpers, thread control and the dropout stream shared by the ref and
// fast kernel namespaces.
#include <oneapi/dnnl/dnnl_config.h>

#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/cpu/philox.h"

// Debian's oneDNN uses OpenMP. Another build (TBB, threadpool, sequential)
// has no per-thread OpenMP setting to change: set_threads is then a no-op
// and get_threads reports 1 for sequential, the hardware count otherwise.
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#define NNS_DNNL_OMP 1
#else
#include <thread>
#define NNS_DNNL_OMP 0
#endif

namespace nns::backend::cpu {

int broadcast_shape(int a_rank, const int64_t* a_dims, int b_rank, const int64_t* b_dims,
                    int64_t* out_dims) {
  if (a_rank < 0 || b_rank < 0 || a_rank > kMaxRank || b_rank > kMaxRank) return -1;
  int rank = a_rank > b_rank ? a_rank : b_rank;
  for (int i = 0; i < rank; ++i) {
    // Right-aligned: dim i of the result meets dim i - (rank - r) of an operand.
    int ia = i - (rank - a_rank), ib = i - (rank - b_rank);
    int64_t da = ia >= 0 ? a_dims[ia] : 1;
    int64_t db = ib >= 0 ? b_dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return -1;
    out_dims[i] = da == 1 ? db : da;
  }
  return rank;
}

#if NNS_DNNL_OMP
namespace {
// The OpenMP default captured before the first set_threads, to restore it.
int default_threads() {
  static const int n = omp_get_max_threads();
  return n;
}
}  // namespace

void set_threads(int n) {
  int fallback = default_threads();
  omp_set_num_threads(n > 0 ? n : fallback);
}

int get_threads() { return omp_get_max_threads(); }
#else
void set_threads(int) {}

int get_threads() {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_SEQ
  return 1;
#else
  return static_cast<int>(std::thread::hardware_concurrency());
#endif
}
#endif

float dropout_uniform(uint64_t seed, uint64_t element_index) { return philox_uniform(seed, element_index); }

}  // namespace nns::backend::cpu
