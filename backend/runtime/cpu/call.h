// What a kernel wrapper of the CPU backend gets for one node: the node and its
// operands (node_call.h) and how this backend runs it (fast or reference
// kernels, the step, the matrix products' precision). The wrappers map each
// graph node kind, forward and backward, onto the kernel library (kernels.h);
// each ops_*.cpp file registers its family by node kind, as the CUDA backend's
// kernel files do (cuda/call.h).
#pragma once

#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/runtime/backend.h"
#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/node_call.h"

namespace nns::backend::cpu_ops {

using sema::Attr;
using sema::OpNode;
using sema::Shape;
namespace ref = cpu::ref;
namespace fast = cpu::fast;

struct Call : NodeCall {
  bool reference;
  int64_t step;
  Precision precision;  // BF16 / F16: the matrix products' operands rounded to bfloat16 / binary16
};

using KernelFn = void (*)(const Call&);
using KernelTable = std::unordered_map<std::string, KernelFn>;

// One per wrapper file: adds that file's node kinds.
void register_core_kernels(KernelTable& table);         // ops_core.cpp: products, fill, add_n, identity gradients
void register_elementwise_kernels(KernelTable& table);  // ops_elementwise.cpp: unary, binary, comparisons, where, dropout
void register_nn_kernels(KernelTable& table);           // ops_nn.cpp: softmax, layer_norm, masks, embedding, losses
void register_reduce_kernels(KernelTable& table);       // ops_reduce.cpp: reductions, constants, Swin constants
void register_index_kernels(KernelTable& table);        // ops_index.cpp: scans, topk, gather, scatter_add, casts
void register_layout_kernels(KernelTable& table);       // ops_layout.cpp: reshape, permute, roll, pad, concat, split
void register_conv_kernels(KernelTable& table);         // ops_conv.cpp: conv2d, pooling
void register_attention_kernels(KernelTable& table);    // ops_attention.cpp: sdpa (fused attention)

// The fast or the reference kernel, as the backend was made.
#define KERNEL(name) (c.reference ? &ref::name : &fast::name)
// The matrix products honour the backend's precision.
#define MATMUL_KERNEL(name)                                                                                       \
  (c.precision == Precision::BF16  ? KERNEL(name##_bf16)                                                         \
   : c.precision == Precision::F16 ? KERNEL(name##_fp16)                                                         \
                                   : KERNEL(name))

// Helpers the wrapper files share.
inline int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

inline void copy(const TensorView& src, const TensorView& dst) {
  std::memcpy(dst.data, src.data, static_cast<size_t>(src.numel() * sema::dtype_bytes(src.dtype)));
}

// x as [outer, len, inner] around attr `dim` (reductions and scans).
inline void reduce_dims(const Call& c, const Shape& x, int64_t& outer, int64_t& len, int64_t& inner) {
  int64_t d = norm_axis(c.attr_int("dim"), x.size());
  outer = prod(x, 0, d);
  len = x[d];
  inner = prod(x, d + 1, x.size());
}

// dx = dy, for ops whose gradient passes through unchanged (ops_core.cpp).
void identity_bwd(const Call& c);

}  // namespace nns::backend::cpu_ops
