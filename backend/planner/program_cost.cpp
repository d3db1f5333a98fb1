#include "backend/planner/program_cost.h"

#include <algorithm>

#include "backend/planner/comm_cost.h"

namespace nns::planner {

using backend::PInstr;

std::string op_class(const std::string& kind) {
  for (const char* m : {"linear", "matmul", "bmm", "einsum", "conv"})
    if (kind.find(m) != std::string::npos) return "matmul";
  if (kind.find("softmax") != std::string::npos) return "softmax";
  if (kind.find("norm") != std::string::npos) return "layer_norm";
  return "elementwise";
}

namespace {

// `as` (--precision) recosts fp32 nodes in that dtype: its peak, `bpe` bytes an element.
double nodes_time(const DeviceProfile& p, const sema::Graph& g, const std::vector<int>& nodes, const std::string& as = "",
                  int bpe = 4) {
  double t = 0;
  for (int id : nodes) {
    if (id < 0 || static_cast<size_t>(id) >= g.nodes().size()) continue;
    const sema::OpNode& n = g.node(id);
    if (n.composite) continue;  // its children are listed on their own
    double bytes = 0, out_elems = 0;
    std::string dtype = "fp32";
    for (int tid : n.inputs) bytes += static_cast<double>(g.tensor(tid).bytes());
    for (int tid : n.outputs) {
      bytes += static_cast<double>(g.tensor(tid).bytes());
      out_elems += static_cast<double>(sema::numel(g.tensor(tid).shape));
      sema::DType dt = g.tensor(tid).dtype;
      if (dt == sema::DType::F16) dtype = "fp16";
      if (dt == sema::DType::BF16) dtype = "bf16";
    }
    double macs = static_cast<double>(n.macs);
    // (helper-megatron) A backward node ("linear_backward") has no macs rule
    // of its own: each input gradient it computes for a matmul-class op is a
    // product of the forward's size (dX = dY W, dW = dY^T X).
    if (macs == 0 && n.forward_of >= 0 && static_cast<size_t>(n.forward_of) < g.nodes().size() &&
        op_class(n.kind) == "matmul")
      macs = static_cast<double>(g.node(n.forward_of).macs) * static_cast<double>(n.outputs.size());
    // Ops without a macs rule do about one operation per output element.
    double flops = std::max(2.0 * macs, out_elems);
    if (!as.empty() && dtype == "fp32") {
      dtype = as;
      bytes = bytes * bpe / 4.0;
    }
    t += compute_time(p, op_class(n.kind), dtype, flops, bytes);
  }
  return t;
}

double buffer_bytes(const backend::RankProgram& prog, int buf, int bpe) {
  if (buf < 0 || static_cast<size_t>(buf) >= prog.buffers.size()) return 0;
  return static_cast<double>(prog.buffers[static_cast<size_t>(buf)].piece.numel()) * bpe;
}

}  // namespace

double instr_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                  const PInstr& in, int bytes_per_element, const std::string& dtype) {
  const backend::SubOpKernel* k = nullptr;
  if (in.kernel >= 0 && static_cast<size_t>(in.kernel) < prog.kernels.size())
    k = &prog.kernels[static_cast<size_t>(in.kernel)];
  switch (in.kind) {
    case PInstr::Forward:
      return k ? nodes_time(p, prog.local, k->inst.nodes, dtype, bytes_per_element) : 0.0;
    case PInstr::Backward: {
      if (!k) return 0.0;
      std::vector<int> b;
      for (int id : k->bwd.nodes)
        if (std::find(k->wgrad_nodes.begin(), k->wgrad_nodes.end(), id) == k->wgrad_nodes.end()) b.push_back(id);
      return nodes_time(p, prog.local, b, dtype, bytes_per_element);
    }
    case PInstr::BackwardW:
      return k ? nodes_time(p, prog.local, k->wgrad_nodes, dtype, bytes_per_element) : 0.0;
    case PInstr::Extract:
    case PInstr::AddTo:
    case PInstr::Insert:
    case PInstr::SliceIn:
    case PInstr::SliceGrad:
    case PInstr::CollectOut:
    case PInstr::CollectGrad:
    case PInstr::LoadInput: {
      // Read one side, write the other: twice the larger buffer involved.
      double bytes = 2 * std::max(buffer_bytes(prog, in.a, bytes_per_element), buffer_bytes(prog, in.b, bytes_per_element));
      return bytes / p.memory_bandwidth;
    }
    case PInstr::Update:
      // AdamW reads parameter, gradient and two moments and writes three.
      return 7 * buffer_bytes(prog, in.a, bytes_per_element) / p.memory_bandwidth;
    default:
      return comm_time(p, lp, prog, in, bytes_per_element);
  }
}

InstrCost profile_cost(const DeviceProfile& p, const backend::LoweredPlan& lp, int bytes_per_element,
                       const std::string& dtype) {
  return [&p, &lp, bytes_per_element, dtype](const backend::RankProgram& prog, const PInstr& in) {
    return instr_time(p, lp, prog, in, bytes_per_element, dtype);
  };
}

}  // namespace nns::planner
