// Shape helpers, thread control and the dropout stream shared by the ref and
// fast kernel namespaces.
#include <omp.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/philox.h"

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

float dropout_uniform(uint64_t seed, uint64_t element_index) {
  Philox4 r = philox4x32_10(element_index >> 2, seed);
  return uniform_from_bits(r.v[element_index & 3]);
}

}  // namespace nns::backend::cpu
