// Annotation generators of the argument-dependent primitive ops, by family:
// shapes and layout (op_generators_shape.cpp), convolution, pooling, indexing,
// constants, scans and casts (op_generators_other.cpp). op_registry.cpp puts
// them on the ops' rows. They follow nnScaler's conventions: a reduced dim is
// '+', dims an op moves data along (roll, concat, pad) are '^', everything
// else spatial; reshape groups dims by matching products, as nnScaler does.
#pragma once

#include <string>
#include <vector>

#include "semantics/op_registry.h"

namespace nns::sema::op_generators {

// Helpers the generators share (op_generators_shape.cpp).
std::string id_name(int i);  // fresh identifier names: a..z, then a1..z1, ...
std::string join(const std::vector<std::string>& dims);
int64_t norm_axis(int64_t axis, size_t rank, const char* what);
const Shape& tensor_shape(const OpCall& c, size_t i);

// Elementwise, reductions, shapes and layout (op_generators_shape.cpp).
GeneratedAnno broadcast_binary(const OpCall& c);
GeneratedAnno broadcast_ternary(const OpCall& c);
GeneratedAnno reduce_dim(const OpCall& c);
GeneratedAnno reduce_dim_frozen(const OpCall& c);
GeneratedAnno reshape(const OpCall& c);
GeneratedAnno permute(const OpCall& c);
GeneratedAnno transpose(const OpCall& c);
GeneratedAnno roll(const OpCall& c);
GeneratedAnno concat(const OpCall& c);
GeneratedAnno split(const OpCall& c);
GeneratedAnno chunk(const OpCall& c);
GeneratedAnno pad(const OpCall& c);

// Convolution, pooling, indexing, losses, constants, scans, casts (op_generators_other.cpp).
GeneratedAnno conv2d(const OpCall& c);
GeneratedAnno conv2d_bias(const OpCall& c);
GeneratedAnno pool2d(const OpCall& c);
int64_t pool_macs(const BoundAnno& b, const OpCall& c);
GeneratedAnno index_select(const OpCall& c);
GeneratedAnno mse(const OpCall& c);
GeneratedAnno swin_relative_index(const OpCall& c);
GeneratedAnno swin_shift_mask(const OpCall& c);
GeneratedAnno full(const OpCall& c);
GeneratedAnno arange(const OpCall& c);
GeneratedAnno t5_relative_bucket(const OpCall& c);
GeneratedAnno sdpa_bias(const OpCall& c);
GeneratedAnno cumsum(const OpCall& c);
GeneratedAnno topk(const OpCall& c);
GeneratedAnno gather(const OpCall& c);
GeneratedAnno scatter_add(const OpCall& c);
GeneratedAnno cast(const OpCall& c);

}  // namespace nns::sema::op_generators
