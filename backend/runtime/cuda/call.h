// What a kernel wrapper of the CUDA backend gets for one node: the node and
// its operands (node_call.h), the matrix-product engine, cuDNN, the stream, and
// scratch memory that lives until the node's work is enqueued (the stream
// orders its reuse). Kernel files register their wrappers by node kind.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/runtime/cuda/caching_allocator.h"
#include "backend/runtime/cuda/device.h"
#include "backend/runtime/cuda/dnn.h"
#include "backend/runtime/cuda/gemm.h"
#include "backend/runtime/node_call.h"

namespace nns::backend::NNS_DEV {

// Device memory for one node's temporaries, given back when the node is
// enqueued: later work on the same stream runs after this node's.
class Scratch {
 public:
  explicit Scratch(CachingAllocator& alloc) : alloc_(alloc) {}
  ~Scratch() {
    for (auto& [p, bytes] : held_) alloc_.release(p, bytes);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* get(int64_t count) {
    size_t bytes = sizeof(T) * static_cast<size_t>(count > 0 ? count : 1);
    void* p = alloc_.allocate(bytes);
    held_.emplace_back(p, bytes);
    return static_cast<T*>(p);
  }

 private:
  CachingAllocator& alloc_;
  std::vector<std::pair<void*, size_t>> held_;
};

struct Call : NodeCall {
  Gemm& gemm;
  Dnn& dnn;  // cuDNN's convolutions, pooling and fused attention, when it takes the shape (dnn.h)
  Stream stream;
  Scratch& scratch;
  ProductInput products = ProductInput::F32;  // autocast: the matrix products round their operands to bf16 / fp16
  int64_t step = 0;  // the training step (Backend::step): dropout's stream is keyed by it
  // Under bf16 storage: the inputs as stored (in[i] is their f32 widening).
  // Where stored_bf16(i), rounding in[i] to bf16 again is exact, and
  // bf16_input(i) is those bits: cuDNN's fused attention, which reads bf16,
  // is used only on such operands (kernels_attention.cu).
  const std::vector<TensorView>* stored = nullptr;
  bool stored_bf16(size_t i) const { return stored && i < stored->size() && (*stored)[i].dtype == sema::DType::BF16; }
  const uint16_t* bf16_input(size_t i) const { return static_cast<const uint16_t*>((*stored)[i].data); }
};

using KernelFn = void (*)(const Call&);
using KernelTable = std::unordered_map<std::string, KernelFn>;

// One per kernel file: adds that file's node kinds.
void register_core_kernels(KernelTable& table);  // ops_core.cpp: products, fill, add_n
void register_elementwise_kernels(KernelTable& table);  // kernels_elementwise.cu: unary, binary, comparisons, where, casts
void register_reduce_kernels(KernelTable& table);  // kernels_reduce.cu: reductions, constructors
void register_layout_kernels(KernelTable& table);  // kernels_layout.cu: reshape, permute, roll, pad, concat, split
void register_nn_kernels(KernelTable& table);      // kernels_nn.cu: softmax, layer_norm, embedding, losses, dropout
void register_conv_kernels(KernelTable& table);    // kernels_conv.cu: conv2d, pooling
void register_attention_kernels(KernelTable& table);  // kernels_attention.cu: sdpa
void register_index_kernels(KernelTable& table);   // kernels_index.cu: gathers, scans, topk, constant tables

}  // namespace nns::backend::NNS_DEV
