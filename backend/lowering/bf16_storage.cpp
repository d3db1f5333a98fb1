#include "backend/lowering/bf16_storage.h"

#include <algorithm>
#include <set>

namespace nns::backend {

namespace {
// An f32 tensor with more than one element: a scalar saves nothing, and
// the loss is one (a plan's local graph does not name its loss).
bool storable(const sema::TensorInfo& t) { return t.dtype == sema::DType::F32 && sema::numel(t.shape) > 1; }
// A sum of gradient contributions (autograd's add_n) stays f32, as a plan's
// gradient buffers sum the contributions its kernels collect: the one
// device and the plans then round at the same places, which --verify's
// comparison of the two needs.
bool storable_node(const sema::OpNode& n) { return n.kind != "add_n"; }
}  // namespace

std::vector<char> bf16_graph_tensors(const sema::Graph& g, const std::vector<int>& keep_f32) {
  std::vector<char> out(g.tensors().size(), 0);
  for (const sema::OpNode& n : g.nodes())
    for (int t : n.outputs) {
      if (!storable_node(n)) continue;
      const sema::TensorInfo& info = g.tensor(t);
      if (!storable(info) || t == g.loss || info.kind != sema::TensorKind::Activation) continue;
      // Parameter gradients feed the optimizer; the loss gradient is seeded
      // in f32 (loss_scale.h).
      if (info.grad_of >= 0 && (info.grad_of == g.loss || g.tensor(info.grad_of).kind == sema::TensorKind::Param))
        continue;
      out[static_cast<size_t>(t)] = 1;
    }
  for (int t : keep_f32)
    if (t >= 0 && static_cast<size_t>(t) < out.size()) out[static_cast<size_t>(t)] = 0;
  return out;
}

namespace {
// Per kernel, per input position: whether the input is a parameter's (its
// SliceIn reads a buffer of a parameter's tensor: the piece itself, a zero1
// gather, an adapter's transit).
std::vector<std::vector<char>> parameter_inputs(const RankProgram& prog) {
  std::set<int> params;
  for (const ParamSlot& s : prog.params) params.insert(s.tensor);
  std::vector<std::vector<char>> out(prog.kernels.size());
  for (const PInstr& in : prog.instrs) {
    if (in.kind != PInstr::SliceIn || in.kernel < 0 || static_cast<size_t>(in.kernel) >= out.size() || in.index < 0 ||
        in.a < 0 || static_cast<size_t>(in.a) >= prog.buffers.size())
      continue;
    std::vector<char>& k = out[static_cast<size_t>(in.kernel)];
    if (k.size() <= static_cast<size_t>(in.index)) k.resize(static_cast<size_t>(in.index) + 1, 0);
    if (params.count(prog.buffers[static_cast<size_t>(in.a)].tensor)) k[static_cast<size_t>(in.index)] = 1;
  }
  return out;
}

// A partial sum stays f32 until its reduction: a tensor-parallel product's
// output part, a replicated input's gradient contribution, or anything
// collected into a buffer that an allreduce or reduce-scatter sums.
// Rounding each part before the sum keeps less than rounding the sum, where
// the parts cancel. Calls fn(the collect, its local tensor) for each.
template <class Fn>
void for_each_partial(const RankProgram& prog, Fn&& fn) {
  std::set<int> reduced;
  for (const PInstr& in : prog.instrs)
    if (in.kind == PInstr::AllReduce || in.kind == PInstr::ReduceScatter) reduced.insert(in.a);
  for (const PInstr& in : prog.instrs) {
    if ((in.kind != PInstr::CollectOut && in.kind != PInstr::CollectGrad) || in.kernel < 0 ||
        static_cast<size_t>(in.kernel) >= prog.kernels.size() || in.index < 0)
      continue;
    const SubOpKernel& kn = prog.kernels[static_cast<size_t>(in.kernel)];
    const size_t i = static_cast<size_t>(in.index);
    int t = -1;
    bool partial = reduced.count(in.b) > 0;
    if (in.kind == PInstr::CollectOut && i < kn.inst.outputs.size()) {
      t = kn.inst.outputs[i];
      partial = partial || (i < kn.out_slices.size() && kn.out_slices[i].value_parts > 1);
    }
    if (in.kind == PInstr::CollectGrad && i < kn.inst.inputs.size()) {
      if (auto g = kn.bwd.grads.find(kn.inst.inputs[i]); g != kn.bwd.grads.end()) t = g->second;
      partial =
          partial || (i < kn.in_slices.size() && (kn.in_slices[i].replicas > 1 || kn.in_slices[i].value_parts > 1));
    }
    if (partial) fn(in, t);
  }
}

}  // namespace

Bf16KernelTensors bf16_kernel_tensors(const RankProgram& prog) {
  const sema::Graph& L = prog.local;
  Bf16KernelTensors out;
  out.half.assign(L.tensors().size(), 0);
  out.kept_f32.resize(prog.kernels.size());
  const std::vector<std::vector<char>> param_in = parameter_inputs(prog);
  auto mark = [&](const std::vector<int>& nodes, char value) {
    for (int n : nodes)
      for (int t : L.node(n).outputs)
        if (t >= 0 && static_cast<size_t>(t) < out.half.size())
          out.half[static_cast<size_t>(t)] = value && storable(L.tensor(t)) && storable_node(L.node(n));
  };
  auto keep = [&](size_t k, int t) {
    if (t >= 0 && static_cast<size_t>(t) < out.half.size()) out.kept_f32[k].push_back(t);
  };
  for (size_t k = 0; k < prog.kernels.size(); ++k) {
    const SubOpKernel& kn = prog.kernels[k];
    if (!kn.elaborated) continue;
    mark(kn.inst.nodes, 1);
    mark(kn.bwd.nodes, 1);
    mark(kn.wgrad_nodes, 0);
    // A parameter's gradient leaves the kernel in f32 (into its Accum or
    // bucket); an activation's in bf16, widened as it is collected.
    for (size_t i = 0; i < kn.inst.inputs.size(); ++i) {
      auto g = kn.bwd.grads.find(kn.inst.inputs[i]);
      const bool param = i < param_in[k].size() && param_in[k][i];
      if (param && g != kn.bwd.grads.end()) keep(k, g->second);
    }
  }
  for_each_partial(prog, [&](const PInstr& in, int t) { keep(static_cast<size_t>(in.kernel), t); });
  for (std::vector<int>& v : out.kept_f32) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  return out;
}

bool Bf16KernelTensors::bf16(int kernel, int t) const {
  if (t < 0 || static_cast<size_t>(t) >= half.size() || !half[static_cast<size_t>(t)]) return false;
  if (kernel < 0 || static_cast<size_t>(kernel) >= kept_f32.size()) return true;
  const std::vector<int>& kept = kept_f32[static_cast<size_t>(kernel)];
  return !std::binary_search(kept.begin(), kept.end(), t);
}

std::vector<char> bf16_local_tensors(const RankProgram& prog) {
  Bf16KernelTensors k = bf16_kernel_tensors(prog);
  for (const std::vector<int>& kept : k.kept_f32)
    for (int t : kept) k.half[static_cast<size_t>(t)] = 0;
  return std::move(k.half);
}

std::vector<int> partial_sum_tensors(const RankProgram& prog, const sema::Graph& g) {
  std::set<int> out;
  for_each_partial(prog, [&](const PInstr& in, int) {
    if (in.b < 0 || static_cast<size_t>(in.b) >= prog.buffers.size()) return;
    const BufferDecl& b = prog.buffers[static_cast<size_t>(in.b)];
    if (in.kind == PInstr::CollectOut) {
      out.insert(b.tensor);
      return;
    }
    for (const sema::TensorInfo& t : g.tensors())  // a gradient's buffer names the tensor it is the gradient of
      if (t.grad_of == b.tensor) out.insert(t.id);
  });
  return {out.begin(), out.end()};
}

}  // namespace nns::backend
