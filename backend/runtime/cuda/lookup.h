// Indexed reads shared by the nn and indexing kernel files: the check that
// positions a program computed lie in range (kernels_index.cu), and the row
// gather of embedding / index_select (kernels_nn.cu).
#pragma once

#include <cstdint>

#include "backend/runtime/cuda/call.h"

namespace nns::backend::NNS_DEV {

// Whether some ids[i], i < n, lies outside [0, bound); *bad gets the first
// such value in element order (what the CPU backend reports). The scan runs
// on the device; its per-group results (at most 256 int64) come back to
// the host so that the node can fail before any kernel reads out of range,
// as on the CPU backend. That is one small device-to-host copy (a stream
// synchronisation) per indexed node: the price of an exact diagnostic.
bool find_out_of_range(const int32_t* ids, int64_t n, int64_t bound, Scratch& scratch, Stream s, int32_t* bad);

// embedding(ids, table) and index_select(table, ids): the same row gather
// (cpu/ops_nn.cpp's gather_fwd / gather_bwd contract, vocab-split shards
// included).
void lookup_fwd(const Call& c);
void lookup_bwd(const Call& c);

}  // namespace nns::backend::NNS_DEV
