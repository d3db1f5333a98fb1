#include "semantics/autograd.h"

#include <map>
#include <stdexcept>

#include "semantics/op_registry.h"

namespace nns::sema {

namespace {

int add_grad_tensor(Graph& g, int of, int producer) {
  TensorInfo t;
  t.kind = TensorKind::Activation;
  t.shape = g.tensor(of).shape;
  t.dtype = g.tensor(of).dtype;
  t.grad_of = of;
  t.producer = producer;
  t.name = "grad_" + std::to_string(of);
  t.loc = g.tensor(of).loc;
  return g.add_tensor(std::move(t));
}

int add_backward_node(Graph& g, const std::string& kind, int forward_of, Phase phase = Phase::Backward) {
  OpNode n;
  n.kind = kind;
  n.phase = phase;
  n.forward_of = forward_of;
  if (forward_of >= 0) {
    const OpNode& f = g.node(forward_of);
    n.name = f.name + ".backward";
    n.attrs = f.attrs;
    n.loc = f.loc;
  }
  return g.add_node(std::move(n));
}

// The reverse sweep both entry points share: gradient contributions per
// tensor (summed with add_n when there are several), backward nodes appended
// to `nodes` in execution order.
struct Sweep {
  Graph& g;
  std::vector<int>& nodes;
  std::map<int, std::vector<int>> contributions;

  int gradient_of(int t) {
    auto it = contributions.find(t);
    if (it == contributions.end() || it->second.empty()) return -1;
    if (it->second.size() == 1) return it->second[0];
    int node = add_backward_node(g, "add_n", -1);
    g.node(node).name = "grad_sum." + g.tensor(t).name;
    g.node(node).inputs = it->second;
    int sum = add_grad_tensor(g, t, node);
    g.node(node).outputs = {sum};
    nodes.push_back(node);
    it->second = {sum};
    return sum;
  }
  int fill(int of, double value) {
    int node = add_backward_node(g, "fill", -1);
    g.node(node).name = "fill." + g.tensor(of).name;
    g.node(node).attrs["value"] = value;
    int t = add_grad_tensor(g, of, node);
    g.node(node).outputs = {t};
    nodes.push_back(node);
    return t;
  }
  // Differentiates `forward` in reverse; requires_grad is indexed by tensor id.
  void run(const std::vector<int>& forward, std::vector<bool> requires_grad) {
    requires_grad.resize(g.tensors().size(), false);
    for (int id : forward) {
      const OpNode& n = g.node(id);
      bool any = false;
      // detach, comparisons...: no gradient flows back through them (op_registry.h).
      for (size_t i = 0; i < n.inputs.size(); ++i) any = any || (requires_grad[n.inputs[i]] && passes_gradient(n, i));
      for (int out : n.outputs) requires_grad[out] = any && dtype_is_float(g.tensor(out).dtype);
    }
    for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
      const int fid = *it;
      // detach passes no gradient back, even to a seed on its output.
      if (g.node(fid).kind == "detach") continue;
      // Copy what we need: adding nodes may reallocate the arena.
      const std::vector<int> inputs = g.node(fid).inputs;
      const std::vector<int> outputs = g.node(fid).outputs;
      const std::string kind = g.node(fid).kind;
      std::vector<int64_t> mask;
      bool any_input = false;
      for (size_t i = 0; i < inputs.size(); ++i) {
        bool wanted = requires_grad[inputs[i]] && passes_gradient(g.node(fid), i);
        mask.push_back(wanted ? 1 : 0);
        any_input = any_input || wanted;
      }
      if (!any_input) continue;
      std::vector<int> out_grads;
      bool any_output_grad = false;
      for (int out : outputs) {
        int gr = gradient_of(out);
        any_output_grad = any_output_grad || gr >= 0;
        out_grads.push_back(gr);
      }
      if (!any_output_grad) continue;  // the loss does not depend on this op
      for (size_t i = 0; i < outputs.size(); ++i)
        if (out_grads[i] < 0) out_grads[i] = fill(outputs[i], 0.0);

      int bid = add_backward_node(g, kind + "_backward", fid);
      OpNode& b = g.node(bid);
      b.attrs["grad_mask"] = mask;
      b.inputs = inputs;
      b.inputs.insert(b.inputs.end(), outputs.begin(), outputs.end());
      b.inputs.insert(b.inputs.end(), out_grads.begin(), out_grads.end());
      std::vector<int> grads;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!mask[i]) continue;
        int gt = add_grad_tensor(g, inputs[i], bid);
        grads.push_back(gt);
        contributions[inputs[i]].push_back(gt);
      }
      g.node(bid).outputs = grads;
      nodes.push_back(bid);
    }
  }
};

}  // namespace

Backward differentiate(Graph& g, const std::vector<int>& forward, const std::map<int, int>& seeds, const std::vector<int>& wrt) {
  Backward out;
  Sweep sweep{g, out.nodes, {}};
  for (const auto& [t, grad] : seeds) sweep.contributions[t].push_back(grad);
  std::vector<bool> requires_grad(g.tensors().size(), false);
  for (int t : wrt) requires_grad[t] = dtype_is_float(g.tensor(t).dtype);
  sweep.run(forward, requires_grad);
  for (int t : wrt) out.grads[t] = sweep.gradient_of(t);
  return out;
}

TrainingGraphInfo build_training_graph(Graph& g, const std::string& optimizer) {
  if (g.loss < 0) throw std::logic_error("build_training_graph: the graph has no loss");
  TrainingGraphInfo info;
  info.forward = g.flat_forward();
  Sweep sweep{g, info.backward, {}};
  // Which tensors depend on a trainable parameter (only those need gradients).
  std::vector<bool> requires_grad(g.tensors().size(), false);
  for (int p : g.params()) requires_grad[p] = dtype_is_float(g.tensor(p).dtype) && !g.tensor(p).buffer && !g.inference;
  sweep.contributions[g.loss].push_back(sweep.fill(g.loss, 1.0));
  sweep.run(info.forward, requires_grad);

  for (int p : g.params()) {
    int gr = sweep.gradient_of(p);
    if (gr < 0) continue;
    info.param_grads.emplace_back(p, gr);
    int node = add_backward_node(g, optimizer + "_update", -1, Phase::Optimizer);
    g.node(node).name = "update." + g.tensor(p).name;
    g.node(node).inputs = {p, gr};
    info.optimizer.push_back(node);
  }
  return info;
}

}  // namespace nns::sema
