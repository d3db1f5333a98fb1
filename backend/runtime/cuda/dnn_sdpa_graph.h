// The operations of the fused attention graphs (dnn_sdpa.cpp), apart from
// building their execution plans: adding them needs no device, as cuDNN
// checks each operation's tensors when it is finalized, so a host test
// (tests/cuda/dnn_sdpa_graph_test.cpp) checks every attribute sequence and
// shape of the graphs here; only the operation graph, its engines and the
// execution need the GPU.
#pragma once

#include <memory>
#include <string>

#include "backend/runtime/attention_cudnn_plan.h"
#include "backend/runtime/cuda/dnn_graph.h"

namespace nns::backend::NNS_DEV {

// A built attention graph and its plan, or why cuDNN would not build one.
struct SdpaGraph {
  std::unique_ptr<dnn_graph::Graph> graph;
  bool usable = false;
  std::string why;  // when not usable
  // The uids execute() binds.
  int64_t q = 0, k = 0, v = 0, o = 0, d_o = 0, stats = 0, scale = 0, dq = 0, dk = 0, dv = 0, row_sum = 0;
  int64_t bias = 0, dbias = 0;  // p.bias only
};

// Adds the forward graph of `p` to `g` (Q K^T, scale, the bias, causal mask, softmax
// with statistics, P V) and records the uids execute() binds in `r`.
void add_forward_ops(dnn_graph::Graph& g, const CudnnSdpaPlan& p, SdpaGraph& r);
// Adds the backward graph (P recomputed from the statistics; dV, dK, dQ;
// with a bias, dBias: the scores' gradient before the scale, summed over B).
void add_backward_ops(dnn_graph::Graph& g, const CudnnSdpaPlan& p, SdpaGraph& r);

}  // namespace nns::backend::NNS_DEV
