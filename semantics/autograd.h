// Autograd: extends a forward Graph (with a loss) into the training graph —
// forward, backward and optimizer update — by reverse-mode differentiation
// over the primitive ops (composite ops are differentiated through their
// bodies).
//
// Conventions of the nodes it adds (the backend's kernels follow them):
//  - "fill" (Backward): one output filled with attr `value` — the loss seed
//    d(loss)/d(loss) = 1, and zero gradients of unused outputs;
//  - "<kind>_backward" (Backward), forward_of = the forward node:
//      inputs  = forward inputs, forward outputs, then one gradient per
//                forward output;
//      outputs = gradients of the forward inputs whose attr `grad_mask`
//                entry is 1 (float inputs that depend on a parameter);
//    the forward node's attrs are copied so the kernel sees them;
//  - "add_n" (Backward): sums the gradient contributions of a tensor used
//    by several ops;
//  - "<optimizer>_update" (Optimizer): inputs = a parameter and its
//    gradient; updates the parameter in place, no outputs.
// Every gradient tensor has grad_of = the tensor it differentiates.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "semantics/graph.h"

namespace nns::sema {

struct TrainingGraphInfo {
  std::vector<int> forward;    // primitive forward nodes, in order
  std::vector<int> backward;   // backward nodes, in order
  std::vector<int> optimizer;  // optimizer nodes, one per trained parameter
  std::vector<std::pair<int, int>> param_grads;  // (param tensor, its gradient tensor)
};

// Appends the backward and optimizer nodes for `g.loss` to `g`.
// `optimizer` is "sgd" or "adamw". Parameters the loss does not depend on
// get no gradient and no update.
TrainingGraphInfo build_training_graph(Graph& g, const std::string& optimizer);

// Reverse mode over `forward` (primitive nodes of g, in execution order)
// from given gradients of some of their outputs (`seeds`: tensor -> its
// gradient tensor): appends the backward nodes and returns them with the
// gradient of each tensor in `wrt` (-1 where none flows). Per-rank lowering
// differentiates each sub-op's ops this way.
struct Backward {
  std::vector<int> nodes;
  std::map<int, int> grads;
};
Backward differentiate(Graph& g, const std::vector<int>& forward, const std::map<int, int>& seeds, const std::vector<int>& wrt);

}  // namespace nns::sema
