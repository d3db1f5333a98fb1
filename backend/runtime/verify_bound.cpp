#include "backend/runtime/verify_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "semantics/autograd.h"
#include "semantics/graph.h"

namespace nns::backend {

double gamma_n(int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu >= 1 ? std::numeric_limits<double>::infinity() : nu / (1 - nu);
}

namespace {

using IdSet = std::set<std::string>;

IdSet ids_of(const sema::OperandAnno& o) {
  IdSet s;
  for (const sema::DimAnno& d : o.dims)
    for (const sema::DimId& id : d.ids)
      if (!id.numeric) s.insert(id.name);
  return s;
}

// The reduction length of one output of an op from its annotation: the
// identifiers in `others` but not in `self` are summed over (a matrix
// product's k, a weight gradient's tokens), all their combinations at once
// (a convolution's c kh kw): the product of their sizes. An identifier
// marked '^' is read as a reduction inside the op along it (softmax, layer
// norm, cross-entropy's logsumexp, attention's scores), counted once, and
// once more when it is also summed over (attention's t: the softmax, then
// the product with v). Every op rounds at least once.
int64_t reduction_length(const sema::BoundAnno& b, const IdSet& self, const IdSet& others) {
  IdSet frozen;
  for (const auto* side : {&b.anno.inputs, &b.anno.outputs})
    for (const sema::OperandAnno& o : *side)
      for (const sema::DimAnno& d : o.dims)
        for (const sema::DimId& id : d.ids)
          if (!id.numeric && id.reduce == sema::Reduce::Frozen) frozen.insert(id.name);
  auto size = [&b](const std::string& id) {
    auto it = b.sizes.find(id);
    return it == b.sizes.end() ? int64_t{1} : it->second;
  };
  int64_t product = 1, frozen_sum = 0;
  for (const std::string& id : others)
    if (!self.count(id)) {
      if (frozen.count(id))
        frozen_sum += size(id);
      else
        product *= size(id);
    }
  for (const std::string& id : frozen) frozen_sum += size(id);
  return product + frozen_sum;
}

// The operand annotations of a node's tensor inputs, in the order of
// node.inputs ('?' operands are attributes, not inputs); false when they do
// not line up.
bool tensor_operands(const sema::OpNode& n, std::vector<const sema::OperandAnno*>& out) {
  out.clear();
  for (const sema::OperandAnno& o : n.anno.anno.inputs)
    if (!o.non_tensor) out.push_back(&o);
  return !n.anno.anno.outputs.empty() && out.size() == n.inputs.size();
}

// Reduction lengths of a forward node's outputs (one for all) and of a
// backward node's output that is the gradient of `wrt` (a forward input).
struct Lengths {
  const sema::Graph& g;
  int64_t unanalysed = 0;

  int64_t forward(const sema::OpNode& n) {
    std::vector<const sema::OperandAnno*> ins;
    if (!tensor_operands(n, ins)) return ++unanalysed, 1;
    IdSet in_ids, out_ids;
    for (const auto* o : ins)
      for (const std::string& id : ids_of(*o)) in_ids.insert(id);
    for (const sema::OperandAnno& o : n.anno.anno.outputs)
      for (const std::string& id : ids_of(o)) out_ids.insert(id);
    return reduction_length(n.anno, out_ids, in_ids);
  }

  int64_t backward(const sema::OpNode& f, int wrt) {
    std::vector<const sema::OperandAnno*> ins;
    if (!tensor_operands(f, ins)) return ++unanalysed, 1;
    auto at = std::find(f.inputs.begin(), f.inputs.end(), wrt);
    if (at == f.inputs.end()) return ++unanalysed, 1;
    const size_t j = static_cast<size_t>(at - f.inputs.begin());
    IdSet self = ids_of(*ins[j]), others;
    for (size_t i = 0; i < ins.size(); ++i)
      if (i != j)
        for (const std::string& id : ids_of(*ins[i])) others.insert(id);
    for (const sema::OperandAnno& o : f.anno.anno.outputs)
      for (const std::string& id : ids_of(o)) others.insert(id);
    return reduction_length(f.anno, self, others);
  }
};

}  // namespace

DerivedBounds derive_bounds(const sema::Graph& g, const sema::TrainingGraphInfo& info, const BoundShape& shape) {
  const size_t nt = g.tensors().size();
  // Longest reduction chain ending in each tensor: on one device (ref) and
  // in the plan's order (run), where every reduction may be split into up
  // to plan_devices partial sums added after it (at most plan_devices - 1
  // more additions in its chain; a split shortens the rest).
  std::vector<int64_t> ref(nt, 0), run(nt, 0);
  const int64_t extra = std::max<int64_t>(shape.plan_devices - 1, 0);
  Lengths len{g};
  auto step = [&](const sema::OpNode& n, int out, int64_t k) {
    int64_t r = 0, p = 0;
    for (int in : n.inputs) {
      r = std::max(r, ref[static_cast<size_t>(in)]);
      p = std::max(p, run[static_cast<size_t>(in)]);
    }
    ref[static_cast<size_t>(out)] = std::max(ref[static_cast<size_t>(out)], r + k);
    run[static_cast<size_t>(out)] = std::max(run[static_cast<size_t>(out)], p + k + (k > 1 ? extra : 0));
  };
  for (int id : info.forward) {
    const sema::OpNode& n = g.node(id);
    const int64_t k = len.forward(n);
    for (int out : n.outputs) step(n, out, k);
  }
  for (int id : info.backward) {
    const sema::OpNode& n = g.node(id);
    for (int out : n.outputs) {
      int64_t k = 1;
      if (n.kind == "add_n")
        k = static_cast<int64_t>(n.inputs.size());  // n - 1 additions, then at most one rounding more
      else if (n.kind == "fill")
        k = 0;
      else if (n.forward_of >= 0)
        k = len.backward(g.node(n.forward_of), g.tensor(out).grad_of);
      else
        ++len.unanalysed;
      step(n, out, k);
    }
  }
  const int64_t m = std::max<int64_t>(shape.micro_batches, 1), r = std::max<int64_t>(shape.replicas, 1);
  // Accumulation over micro-batches (each scaled by 1/m: the factor and the
  // product round once each) and, for the run, the replicas' allreduce
  // (r - 1 additions) and its scale.
  const int64_t acc_ref = m * r + 2, acc_run = m + 2 + (r > 1 ? r - 1 + 2 : 0);
  DerivedBounds b;
  b.unanalysed_nodes = len.unanalysed;
  const double u = DerivedBounds::kUnitRoundoff;
  double worst = 0;
  for (const auto& [param, grad] : info.param_grads) {
    const int64_t lr = ref[static_cast<size_t>(grad)] + acc_ref, lp = run[static_cast<size_t>(grad)] + acc_run;
    const std::string& name = g.tensor(param).name;
    b.gradient[name] = b.chain[name] = gamma_n(lr, u) + gamma_n(lp, u);
    b.length[name] = std::max(lr, lp);
    worst = std::max(worst, b.gradient[name]);
  }
  if (shape.clip) {
    // Clipping multiplies every gradient by clip / ||g||. The norm's
    // relative error is at most the gradients' own (normwise: ||e|| <=
    // max_t bound_t ||g||) plus half the sum of squares' rounding on each
    // side (squares: no cancellation; float partials of at most 512 terms
    // (cpu/fast_train.cpp), then at most one more term per tensor and per
    // device), and the factor's cast and the product round once each side.
    const int64_t terms = 512 + static_cast<int64_t>(info.param_grads.size()) + shape.plan_devices * r;
    b.clip = true;
    b.clip_extra = gamma_n(terms, u) + 4 * u;
    for (auto& [name, v] : b.gradient) v += worst + b.clip_extra;
  }
  if (g.loss >= 0) {
    // The loss: averaged over the micro-batches (and the replicas).
    const int64_t lr = ref[static_cast<size_t>(g.loss)] + m * r + 1, lp = run[static_cast<size_t>(g.loss)] + m + 1 + r;
    b.loss = gamma_n(lr, u) + gamma_n(lp, u);
    b.loss_length = std::max(lr, lp);
  }
  return b;
}

std::map<std::string, double> conditioned_bounds(const DerivedBounds& b, const std::map<std::string, double>& kappa,
                                                 const std::map<std::string, double>& norms) {
  std::map<std::string, double> out;
  double worst = 0, err2 = 0, norm2 = 0;
  for (const auto& [name, v] : b.chain) {
    auto k = kappa.find(name);
    out[name] = v * (k == kappa.end() ? 1.0 : std::max(1.0, k->second));
    worst = std::max(worst, out[name]);
    auto n = norms.find(name);
    const double gn = n == norms.end() ? 0 : n->second;
    err2 += out[name] * out[name] * gn * gn;
    norm2 += gn * gn;
  }
  // The global norm's relative error: sqrt(sum_t bound_t^2 ||g_t||^2) /
  // ||g||, each tensor weighted by its norm (a tensor with a tiny gradient
  // may have a huge condition, but its error is small in the global norm);
  // without norms, the largest bound (an upper bound of the same).
  const double norm_error = norms.empty() || norm2 <= 0 ? worst : std::sqrt(err2 / norm2);
  if (b.clip)
    for (auto& [name, v] : out) v += norm_error + b.clip_extra;
  return out;
}

}  // namespace nns::backend
