#include "backend/planner/tp_overlap.h"

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "backend/planner/comm_cost.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/topology_comm.h"

namespace nns::planner {

using backend::PInstr;
using backend::RankProgram;

double pipelined_time(double gemm_chunk, double ring_step, int chunks) {
  if (chunks < 1) chunks = 1;
  return gemm_chunk + (chunks - 1) * std::max(gemm_chunk, ring_step);
}

namespace {

bool kernel_instr(const PInstr& in) {
  return in.kind == PInstr::Forward || in.kind == PInstr::Backward || in.kind == PInstr::BackwardW;
}

bool is_gemm(const sema::Graph& g, int id) {
  const std::string c = op_class(g.node(id).kind);
  return c == "matmul" || c == "matmul_backward";
}

// One GEMM node of a kernel instruction: its time as charged, and at the
// chunk shape (1/chunks of its FLOPs and bytes).
struct Gemm {
  int instr = -1, node = -1;
  double full = 0, chunk = 0;
};

using Claimed = std::set<std::pair<int, int>>;  // (instruction, node): GEMMs that already serve a half

// The last (or first) matrix-product node of kernel instruction `at` that
// `claimed` does not list (none given: the last or first of all).
Gemm gemm_of(const DeviceProfile& p, const RankProgram& prog, int at, bool last, int chunks, int bpe,
             const std::string& dtype, const Claimed* claimed = nullptr) {
  Gemm out;
  const PInstr& in = prog.instrs[static_cast<size_t>(at)];
  std::vector<std::pair<int, double>> nodes = kernel_node_times(p, prog, in, bpe, dtype);
  if (last) std::reverse(nodes.begin(), nodes.end());
  for (const auto& [id, t] : nodes) {
    if (!is_gemm(prog.local, id) || (claimed && claimed->count({at, id}))) continue;
    NodeWork w = node_work(prog.local, prog.local.node(id));
    if (!dtype.empty() && w.dtype == "fp32") {  // as nns simulate --precision costs it (program_cost.cpp)
      w.dtype = dtype;
      w.bytes = w.bytes * bpe / 4.0;
    }
    w.flops /= chunks;
    w.bytes /= chunks;
    out = Gemm{at, id, t, node_time(p, w)};
    break;
  }
  return out;
}

// The kernel instruction whose output the AllReduce at `i` reduces: the
// kernel of the CollectOut / CollectGrad into its buffer, at that kernel's
// nearest Forward / Backward before it. -1: none (an adapter's copy made it).
int producer(const RankProgram& prog, int i) {
  const PInstr& ar = prog.instrs[static_cast<size_t>(i)];
  for (int j = i - 1; j >= 0; --j) {
    const PInstr& in = prog.instrs[static_cast<size_t>(j)];
    if (in.b != ar.a && in.a != ar.a) continue;
    if (in.kind != PInstr::CollectOut && in.kind != PInstr::CollectGrad) return -1;
    for (int q = j - 1; q >= 0; --q) {
      const PInstr& k = prog.instrs[static_cast<size_t>(q)];
      if (kernel_instr(k) && k.kernel == in.kernel) return q;
    }
    return -1;
  }
  return -1;
}

// The next kernel instruction with a matrix product after `i`, before any
// communication other than all-gathers (its input must not wait for
// another transfer; gathers for the same kernel, e.g. a backward's output
// gradient and its regathered input, each pipeline with a GEMM of their
// own, as Megatron-LM pipelines the input's gather with the input
// gradient's GEMM). -1: none.
int consumer(const DeviceProfile& p, const RankProgram& prog, int i, int bpe, const std::string& dtype) {
  for (size_t j = static_cast<size_t>(i) + 1; j < prog.instrs.size(); ++j) {
    const PInstr& in = prog.instrs[j];
    if ((in.is_collective() && in.kind != PInstr::AllGather) || in.kind == PInstr::Send || in.kind == PInstr::Wait)
      return -1;
    if (kernel_instr(in) && gemm_of(p, prog, static_cast<int>(j), false, 1, bpe, dtype).node >= 0)
      return static_cast<int>(j);
  }
  return -1;
}

// Per instruction of `prog`: the overlapped AllReduce's charge, or -1 (not
// overlapped: the base cost). GEMMs are claimed in program order.
std::vector<double> plan_overlaps(const DeviceProfile& p, const backend::LoweredPlan& lp, const RankProgram& prog,
                                  int bpe, const std::string& dtype) {
  std::vector<double> out(prog.instrs.size(), -1.0);
  Claimed claimed;
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const PInstr& in = prog.instrs[i];
    const bool ar = in.kind == PInstr::AllReduce, scatter = in.kind == PInstr::ReduceScatter,
               gather = in.kind == PInstr::AllGather;
    if (!(ar || scatter || gather) || in.edge < 0 || in.group < 0 || static_cast<size_t>(in.group) >= lp.groups.size())
      continue;
    const std::vector<int>& group = lp.groups[static_cast<size_t>(in.group)];
    const int k = static_cast<int>(group.size());
    if (k < 2) continue;
    // The whole tensor's bytes: an allreduce's and a reduce-scatter's
    // input, an all-gather's result.
    const double bytes = comm_bytes(prog, in, bpe);
    const double rs = ar || scatter ? topology_collective_time(p, Collective::ReduceScatter, bytes, group) : 0.0;
    const double ag = ar || gather ? topology_collective_time(p, Collective::AllGather, bytes, group) : 0.0;
    // One step of the ring: a hop's latency and 1/k of the bytes.
    const double rs_chunk = rs / (k - 1);
    const double ag_chunk = ag / (k - 1);
    double charge = rs + ag;
    bool any = false;
    auto use = [&](int at, bool last, double whole, double chunk) {
      if (at < 0) return;
      // A reduce-scatter pipelines with the GEMM that makes its data (the
      // last); a gather with the first its kernel has not given to another.
      Gemm g = gemm_of(p, prog, at, last, k, bpe, dtype, last ? nullptr : &claimed);
      if (g.node < 0 || !claimed.insert({g.instr, g.node}).second) return;
      charge += std::max(0.0, pipelined_time(g.chunk, chunk, k) - g.full) - whole;
      any = true;
    };
    if (rs > 0) use(producer(prog, static_cast<int>(i)), true, rs, rs_chunk);
    if (ag > 0) use(consumer(p, prog, static_cast<int>(i), bpe, dtype), false, ag, ag_chunk);
    if (any) out[i] = charge;
  }
  return out;
}

}  // namespace

InstrCost tp_overlap_cost(const DeviceProfile& p, const backend::LoweredPlan& lp, int bytes_per_element,
                          const std::string& dtype, InstrCost base) {
  auto plans = std::make_shared<std::unordered_map<const RankProgram*, std::vector<double>>>();
  return [&p, &lp, bytes_per_element, dtype, base, plans](const RankProgram& prog, const PInstr& in) {
    const auto& v = prog.instrs;
    const bool tp = in.kind == PInstr::AllReduce || in.kind == PInstr::ReduceScatter || in.kind == PInstr::AllGather;
    if (!tp || in.edge < 0 || v.empty() || &in < v.data() || &in >= v.data() + v.size()) return base(prog, in);
    auto it = plans->find(&prog);
    if (it == plans->end()) it = plans->emplace(&prog, plan_overlaps(p, lp, prog, bytes_per_element, dtype)).first;
    const double c = it->second[static_cast<size_t>(&in - v.data())];
    return c >= 0 ? c : base(prog, in);
  };
}

}  // namespace nns::planner
