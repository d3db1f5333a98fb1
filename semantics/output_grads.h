// The seeds of an op's backward: one gradient tensor per float output,
// added to the op's local graph. Lowering's kernels and nns verify-op
// differentiate an elaborated op the same way.
#pragma once

#include <map>
#include <vector>

#include "semantics/graph.h"

namespace nns::sema {

// For each of `outputs` in `g`: a new tensor "dy.NAME" of its shape and dtype
// (grad_of the output) appended to `dy`, or -1 for a non-float output.
// Returns output -> its gradient tensor, the seeds differentiate() takes.
inline std::map<int, int> add_output_gradients(Graph& g, const std::vector<int>& outputs, std::vector<int>& dy) {
  std::map<int, int> seeds;
  for (int out : outputs) {
    const TensorInfo& t = g.tensor(out);
    if (!dtype_is_float(t.dtype)) {
      dy.push_back(-1);
      continue;
    }
    TensorInfo d;
    d.shape = t.shape;
    d.dtype = t.dtype;
    d.grad_of = out;
    d.name = "dy." + t.name;
    int id = g.add_tensor(std::move(d));
    dy.push_back(id);
    seeds[out] = id;
  }
  return seeds;
}

}  // namespace nns::sema
