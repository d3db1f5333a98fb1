#include "backend/planner/program_cost.h"

#include <unordered_map>

#include <memory>

#include <algorithm>
#include <set>
#include <variant>

#include "backend/planner/comm_cost.h"

namespace nns::planner {

using backend::PInstr;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_matrix_product(const std::string& cls) { return cls == "matmul" || cls == "attention"; }

// The attention composite (attention, gqa_attention) a primitive node of
// the score path belongs to, or null. A backward node is placed by the
// forward node it differentiates.
const sema::OpNode* enclosing_attention(const sema::Graph& g, const sema::OpNode& n) {
  const sema::OpNode* f = &n;
  if (n.forward_of >= 0 && static_cast<size_t>(n.forward_of) < g.nodes().size()) f = &g.node(n.forward_of);
  static const std::set<std::string> score_path = {"matmul", "mul", "causal_mask", "softmax"};
  if (!score_path.count(f->kind)) return nullptr;
  for (int up = f->parent; up >= 0 && static_cast<size_t>(up) < g.nodes().size(); up = g.node(up).parent) {
    const sema::OpNode& c = g.node(up);
    if (c.kind == "attention" || c.kind == "gqa_attention") return &c;
  }
  return nullptr;
}

bool attr_true(const sema::OpNode& n, const std::string& key) {
  auto it = n.attrs.find(key);
  return it != n.attrs.end() && std::holds_alternative<bool>(it->second) && std::get<bool>(it->second);
}

}  // namespace

std::string op_class(const std::string& kind) {
  const std::string suffix = "_backward";
  if (ends_with(kind, suffix)) return op_class(kind.substr(0, kind.size() - suffix.size())) + suffix;
  if (kind == "matmul" || kind == "bmm" || kind == "sdpa" || kind == "sdpa_bias") return "attention";
  for (const char* m : {"linear", "matmul", "bmm", "einsum", "conv"})
    if (kind.find(m) != std::string::npos) return "matmul";
  if (kind.find("softmax") != std::string::npos) return "softmax";
  if (kind.find("norm") != std::string::npos) return "layer_norm";
  return "elementwise";
}

NodeWork node_work(const sema::Graph& g, const sema::OpNode& n) {
  NodeWork w;
  w.op = op_class(n.kind);
  w.kind = n.kind;
  double out_elems = 0;
  for (int tid : n.inputs) w.bytes += static_cast<double>(g.tensor(tid).bytes());
  for (int tid : n.outputs) {
    w.bytes += static_cast<double>(g.tensor(tid).bytes());
    out_elems += static_cast<double>(sema::numel(g.tensor(tid).shape));
    sema::DType dt = g.tensor(tid).dtype;
    if (dt == sema::DType::F16) w.dtype = "fp16";
    if (dt == sema::DType::BF16) w.dtype = "bf16";
  }
  double macs = static_cast<double>(n.macs);
  // A matrix product's backward node has no macs of its own: each gradient
  // it computes (dx = dy w, dw = dy^T x) is one forward's worth.
  if (macs == 0 && ends_with(w.op, "_backward") && n.forward_of >= 0 &&
      static_cast<size_t>(n.forward_of) < g.nodes().size()) {
    const sema::OpNode& f = g.node(n.forward_of);
    if (is_matrix_product(op_class(f.kind))) macs = static_cast<double>(f.macs) * static_cast<double>(n.outputs.size());
    // sdpa's backward recomputes q kt, then computes dv, dp, dq and dkt:
    // three products of q kt's size and two of p v's, 2.5 forwards at e = f.
    if (f.kind == "sdpa" || f.kind == "sdpa_bias") macs = 2.5 * static_cast<double>(f.macs);
  }
  // Ops without a macs rule do about one operation per output element.
  w.flops = std::max(2.0 * macs, out_elems);
  const sema::OpNode& fwd =
      n.forward_of >= 0 && static_cast<size_t>(n.forward_of) < g.nodes().size() ? g.node(n.forward_of) : n;
  // The fused op itself: its products at the fused kernel's curve, where a profile has one.
  w.backward = n.forward_of >= 0;
  if (fwd.kind == "sdpa" || fwd.kind == "sdpa_bias") {
    w.attention_part = NodeWork::AttentionPart::Product;
    w.causal = attr_true(fwd, "causal");
  } else if (const sema::OpNode* att = enclosing_attention(g, n)) {
    const sema::OpNode& f = n.forward_of >= 0 ? g.node(n.forward_of) : n;
    w.attention_part = f.kind == "matmul" ? NodeWork::AttentionPart::Product : NodeWork::AttentionPart::Inner;
    w.causal = attr_true(*att, "causal");
  }
  return w;
}

double node_time(const DeviceProfile& p, const NodeWork& w) {
  if (w.attention_part != NodeWork::AttentionPart::None && p.efficiency.count("fused_attention")) {
    // One fused kernel: the scores never reach memory, so the products are
    // compute-bound at the kernel's own efficiency and the scaling, mask
    // and softmax between them cost nothing of their own.
    if (w.attention_part == NodeWork::AttentionPart::Inner) return 0;
    double flops = w.causal ? w.flops / 2 : w.flops;
    // (A profile without a backward curve costs it at the forward's: cost_model.cpp curve_of.)
    const char* curve = w.backward ? "fused_attention_backward" : "fused_attention";
    return kernel_overhead_for(p, "fused_attention") / 2 + compute_time(p, curve, w.dtype, flops, 0);
  }
  // A kind's own curve is stored as "op:<kind>" (kind and class names
  // overlap: the kind "matmul" is of class "attention").
  const std::string own = "op:" + w.kind;
  auto it = p.efficiency.find(own);
  const std::string& curve = it != p.efficiency.end() && !it->second.empty() ? own : w.op;
  return kernel_overhead_for(p, curve) + compute_time(p, curve, w.dtype, w.flops, w.bytes);
}

namespace {

// `as` (nns simulate --precision; empty: each tensor's own dtype) costs
// every fp32 node at that dtype's peak with `bpe` bytes per element.
// Appends (node, seconds) for each primitive node of `nodes` to `out` when
// given; returns the sum.
double nodes_time(const DeviceProfile& p, const sema::Graph& g, const std::vector<int>& nodes, const std::string& as,
                  int bpe, bool cold, std::vector<std::pair<int, double>>* out = nullptr) {
  double t = 0;
  for (int id : nodes) {
    if (id < 0 || static_cast<size_t>(id) >= g.nodes().size()) continue;
    const sema::OpNode& n = g.node(id);
    if (n.composite) continue;  // its children are listed on their own
    NodeWork w = node_work(g, n);
    if (!as.empty() && w.dtype == "fp32") {
      w.dtype = as;
      w.bytes = w.bytes * bpe / 4.0;
    }
    double nt = node_time(p, w);
    // A kernel streams from memory when its own operands and results do
    // not fit the rank's cache share; smaller ones mostly find their
    // operands where the kernel before them left them (a program walks
    // its activations in order), whatever the whole program's size.
    if (cold && p.memory_bandwidth_cold > 0 && !(p.cache_bytes > 0 && w.bytes <= p.cache_bytes))
      nt = std::max(nt, kernel_overhead_for(p, w.op) + w.bytes / p.memory_bandwidth_cold);
    t += nt;
    if (out) out->emplace_back(id, nt);
  }
  return t;
}

// The nodes a kernel instruction runs: Forward its forward nodes,
// Backward its backward nodes but the weight-gradient ones, BackwardW
// those; none for any other instruction.
std::vector<int> kernel_nodes(const backend::SubOpKernel& k, PInstr::Kind kind) {
  if (kind == PInstr::Forward) return k.inst.nodes;
  if (kind == PInstr::BackwardW) return k.wgrad_nodes;
  std::vector<int> b;
  if (kind != PInstr::Backward) return b;
  for (int id : k.bwd.nodes)
    if (std::find(k.wgrad_nodes.begin(), k.wgrad_nodes.end(), id) == k.wgrad_nodes.end()) b.push_back(id);
  return b;
}

double numel(const backend::RankProgram& prog, int buf) {
  if (buf < 0 || static_cast<size_t>(buf) >= prog.buffers.size()) return 0;
  return static_cast<double>(prog.buffers[static_cast<size_t>(buf)].piece.numel());
}

double slice_numel(const std::vector<backend::Piece>& slices, int index) {
  if (index < 0 || static_cast<size_t>(index) >= slices.size()) return 0;
  return static_cast<double>(slices[static_cast<size_t>(index)].numel());
}

// The elements a copy-type instruction moves (the region it reads and
// writes) and whether it accumulates.
double moved_elements(const backend::RankProgram& prog, const backend::SubOpKernel* k, const PInstr& in, bool& add) {
  add = false;
  switch (in.kind) {
    case PInstr::SliceIn: return k ? slice_numel(k->in_slices, in.index) : numel(prog, in.a);
    case PInstr::SliceGrad: return k ? slice_numel(k->out_slices, in.index) : numel(prog, in.a);
    case PInstr::CollectOut: add = true; return k ? slice_numel(k->out_slices, in.index) : numel(prog, in.b);
    case PInstr::CollectGrad: add = true; return k ? slice_numel(k->in_slices, in.index) : numel(prog, in.b);
    case PInstr::AddTo: add = true; return numel(prog, in.b);
    case PInstr::Insert: return std::min(numel(prog, in.a), numel(prog, in.b));
    default: return numel(prog, in.b);  // Extract, LoadInput, Alloc, Recv: the new buffer
  }
}

// Local work of a communication instruction on a measured profile: the
// executor's staging copies around the transfer (bytes of the buffers it
// packs and unpacks), and the gradient norm's read of every accumulated
// gradient before the loss allreduce.
double comm_local_time(const DeviceProfile& p, const backend::RankProgram& prog, const PInstr& in, int bpe) {
  if (!p.copy.present()) return 0.0;
  switch (in.kind) {
    case PInstr::AllGather:
    case PInstr::ReduceScatter:
    case PInstr::AllToAll: return p.copy.time(numel(prog, in.b) * bpe);  // staged into / out of one flat buffer
    case PInstr::BucketAllReduce: {
      double elems = 0;
      if (in.index >= 0 && static_cast<size_t>(in.index) < prog.buckets.size())
        for (int b : prog.buckets[static_cast<size_t>(in.index)]) elems += numel(prog, b);
      return 2 * p.copy.time(elems * bpe);  // flattened, then copied back
    }
    case PInstr::LossAllReduce:
    case PInstr::Clip: {
      double elems = 0;
      for (const backend::ParamSlot& s : prog.params) elems += numel(prog, s.accum);
      return p.copy.time(elems * bpe);
    }
    case PInstr::Recv: return p.copy.time(numel(prog, in.b) * bpe);  // the zero-filled receive buffer
    default: return 0.0;
  }
}

}  // namespace

namespace {

// `on_line`: set when a measured copy line priced the instruction (the
// line holds its dispatch already).
double work_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                 const PInstr& in, int bytes_per_element, const std::string& dtype, bool cold, bool& on_line) {
  on_line = false;
  const LineCost& copy = cold ? p.copy_cold : p.copy;
  const LineCost& accumulate = cold ? p.accumulate_cold : p.accumulate;
  const backend::SubOpKernel* k = nullptr;
  if (in.kernel >= 0 && static_cast<size_t>(in.kernel) < prog.kernels.size())
    k = &prog.kernels[static_cast<size_t>(in.kernel)];
  switch (in.kind) {
    case PInstr::Forward:
    case PInstr::Backward:
    case PInstr::BackwardW:
      return k ? nodes_time(p, prog.local, kernel_nodes(*k, in.kind), dtype, bytes_per_element, cold) : 0.0;
    case PInstr::SliceIn:
    case PInstr::SliceGrad:
      // A whole, unscaled piece (or a contiguous part of one) the kernel
      // reads where it lives: the executor copies nothing.
      if (backend::slice_in_place(prog, in) >= 0) return 0.0;
      [[fallthrough]];
    case PInstr::Extract:
    case PInstr::AddTo:
    case PInstr::Insert:
    case PInstr::CollectOut:
    case PInstr::CollectGrad:
    case PInstr::LoadInput: {
      if (copy.present()) {
        on_line = true;
        bool add = false;
        double bytes = moved_elements(prog, k, in, add) * bytes_per_element;
        return add && accumulate.present() ? accumulate.time(bytes) : copy.time(bytes);
      }
      // Read one side, write the other: twice the larger buffer involved.
      double bytes = 2 * std::max(numel(prog, in.a), numel(prog, in.b)) * bytes_per_element;
      return bytes / p.memory_bandwidth;
    }
    case PInstr::Alloc:
      on_line = p.copy.present();
      return on_line ? p.copy.time(numel(prog, in.b) * bytes_per_element) : 0.0;
    case PInstr::Update:
      if (p.update.present()) return p.update.time(numel(prog, in.a) * bytes_per_element);
      // AdamW reads parameter, gradient and two moments and writes three.
      return 7 * numel(prog, in.a) * bytes_per_element / p.memory_bandwidth;
    case PInstr::Clip: return comm_local_time(p, prog, in, bytes_per_element);
    default: return comm_local_time(p, prog, in, bytes_per_element) + comm_time(p, lp, prog, in, bytes_per_element);
  }
}

}  // namespace

bool out_of_cache(const DeviceProfile& p, const backend::RankProgram& prog, int bytes_per_element) {
  if (!(p.cache_bytes > 0) || !p.copy_cold.present()) return false;
  double bytes = 0;
  for (const backend::BufferDecl& b : prog.buffers) bytes += static_cast<double>(b.piece.numel()) * bytes_per_element;
  for (const sema::TensorInfo& t : prog.local.tensors()) bytes += static_cast<double>(t.bytes());
  return bytes > p.cache_bytes;
}

namespace {

// The in-situ extra of `in` in its program, once per instruction: a
// one-node kernel's by its node's kind ("forward:add") where the profile
// has it, else by the instruction's kind ("forward"). Once, not per node: a
// composite kernel's nodes run back to back, each finding the state the one
// before left (t5 tiny's 16-node attention kernels were 1.5x over with the
// extra added per node).
double situ_extra(const DeviceProfile& p, const backend::RankProgram& prog, const PInstr& in) {
  const double length = static_cast<double>(prog.instrs.size());
  const std::string kind = backend::instr_name(in.kind);
  const bool kernel = in.kind == PInstr::Forward || in.kind == PInstr::Backward || in.kind == PInstr::BackwardW;
  if (!kernel || in.kernel < 0 || static_cast<size_t>(in.kernel) >= prog.kernels.size())
    return in_situ_extra(p, kind, length);
  int primitive = -1, count = 0;
  for (int id : kernel_nodes(prog.kernels[static_cast<size_t>(in.kernel)], in.kind))
    if (id >= 0 && static_cast<size_t>(id) < prog.local.nodes().size() && !prog.local.node(id).composite)
      primitive = id, ++count;
  if (count == 1) {
    const std::string own = kind + ":" + prog.local.node(primitive).kind;
    if (p.in_situ_extra.count(own)) return in_situ_extra(p, own, length);
  }
  return in_situ_extra(p, kind, length);
}

double instr_time_in(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                     const PInstr& in, int bytes_per_element, const std::string& dtype, bool cold) {
  bool on_line = false;
  double t = work_time(p, lp, prog, in, bytes_per_element, dtype, cold, on_line);
  if (!on_line) t += p.instr_overhead;
  if (!p.in_situ_extra.empty())  // what a running program adds (cost_model.h: in_situ); never below nothing
    t = std::max(0.0, t + situ_extra(p, prog, in));
  return t;
}

}  // namespace

double instr_time(const DeviceProfile& p, const backend::LoweredPlan& lp, const backend::RankProgram& prog,
                  const PInstr& in, int bytes_per_element, const std::string& dtype) {
  return instr_time_in(p, lp, prog, in, bytes_per_element, dtype, out_of_cache(p, prog, bytes_per_element));
}

std::vector<std::pair<int, double>> kernel_node_times(const DeviceProfile& p, const backend::RankProgram& prog,
                                                      const PInstr& in, int bytes_per_element,
                                                      const std::string& dtype) {
  std::vector<std::pair<int, double>> out;
  if (in.kernel < 0 || static_cast<size_t>(in.kernel) >= prog.kernels.size()) return out;
  nodes_time(p, prog.local, kernel_nodes(prog.kernels[static_cast<size_t>(in.kernel)], in.kind), dtype,
             bytes_per_element, out_of_cache(p, prog, bytes_per_element), &out);
  return out;
}

InstrCost profile_cost(const DeviceProfile& p, const backend::LoweredPlan& lp, int bytes_per_element,
                       const std::string& dtype) {
  // Whether each program is out of cache, decided once per program.
  auto regime = std::make_shared<std::unordered_map<const backend::RankProgram*, bool>>();
  // A kernel's forward or backward costs the same in every micro-batch
  // (its nodes, the program's regime and length): costed once per
  // (program, kernel, kind), where a 1,000-micro-batch replay costed each
  // of its nodes every time.
  struct KernelKey {
    const backend::RankProgram* prog;
    int kernel, kind;
    bool operator==(const KernelKey& o) const { return prog == o.prog && kernel == o.kernel && kind == o.kind; }
  };
  struct KernelKeyHash {
    size_t operator()(const KernelKey& k) const {
      return std::hash<const void*>()(k.prog) ^ (static_cast<size_t>(k.kernel) * 0x9e3779b97f4a7c15ULL) ^
             static_cast<size_t>(k.kind);
    }
  };
  auto kernel_times = std::make_shared<std::unordered_map<KernelKey, double, KernelKeyHash>>();
  return [&p, &lp, bytes_per_element, dtype, regime, kernel_times](const backend::RankProgram& prog, const PInstr& in) {
    auto it = regime->find(&prog);
    if (it == regime->end()) it = regime->emplace(&prog, out_of_cache(p, prog, bytes_per_element)).first;
    const bool kernel = in.kind == PInstr::Forward || in.kind == PInstr::Backward || in.kind == PInstr::BackwardW;
    if (!kernel) return instr_time_in(p, lp, prog, in, bytes_per_element, dtype, it->second);
    auto [t, fresh] = kernel_times->emplace(KernelKey{&prog, in.kernel, static_cast<int>(in.kind)}, 0.0);
    if (fresh) t->second = instr_time_in(p, lp, prog, in, bytes_per_element, dtype, it->second);
    return t->second;
  };
}

}  // namespace nns::planner
