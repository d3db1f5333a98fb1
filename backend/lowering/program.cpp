#include "backend/lowering/program.h"

#include <algorithm>
#include <unordered_map>

namespace nns::backend {

Program lower_single_device(const sema::Graph& g, const sema::TrainingGraphInfo& info) {
  Program p;
  std::vector<int> order = info.forward;
  order.insert(order.end(), info.backward.begin(), info.backward.end());
  std::vector<bool> persistent(g.tensors().size(), false);
  for (const sema::TensorInfo& t : g.tensors())
    if (t.kind != sema::TensorKind::Activation) persistent[t.id] = true;
  persistent[g.loss] = true;  // the trainer reads it after the step
  for (int t = 0; t < static_cast<int>(persistent.size()); ++t)
    if (persistent[t]) p.persistent.push_back(t);

  // Last instruction index that reads or writes each transient tensor.
  std::unordered_map<int, size_t> last_use;
  for (size_t i = 0; i < order.size(); ++i) {
    const sema::OpNode& n = g.node(order[i]);
    for (int t : n.inputs) last_use[t] = i;
    for (int t : n.outputs) last_use[t] = i;
  }
  // Gradients of parameters live until the optimizer has used them.
  size_t end = order.size();
  for (int u : info.optimizer)
    for (int t : g.node(u).inputs) last_use[t] = end;

  std::vector<std::vector<int>> frees_after(order.size() + 1);
  for (const auto& [t, i] : last_use)
    if (!persistent[t]) frees_after[i].push_back(t);
  for (auto& f : frees_after) std::sort(f.begin(), f.end());  // deterministic

  for (size_t i = 0; i < order.size(); ++i) {
    p.instrs.push_back({Instr::Run, order[i], -1});
    for (int t : frees_after[i]) p.instrs.push_back({Instr::Free, -1, t});
  }
  for (int u : info.optimizer) p.instrs.push_back({Instr::Update, u, -1});
  for (int t : frees_after[end]) p.instrs.push_back({Instr::Free, -1, t});
  return p;
}

}  // namespace nns::backend
