// The plan executor's gradient chains: partial sums of one gradient added
// up by their kernels. Where several kernels' gradients of the same whole
// tensor are collected, one after the other, into a buffer allocated just
// before (the value-split pieces of coshard's fc1, whose x gradients are
// partial sums), the program computes each in its own block and then adds
// the blocks into the buffer. Instead each kernel after the first adds its
// gradient to the first kernel's block as it computes it (the gemm's
// beta = 1, Backend::writes_in_place), in the order the collects would add
// them, so that the first collect takes the finished sum (whole_write) and
// the others have nothing left to add. The later kernels' blocks are still
// allocated, unwritten, so memory is what the program counts.
#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "backend/runtime/plan_executor.h"

namespace nns::backend {

namespace {

// The local gradient tensor that CollectGrad `c` collects, -1 when none, or
// when it is shared with another input (the block is then not its alone).
int lone_grad(const SubOpKernel& kn, const PInstr& c) {
  const int x = kn.inst.inputs[static_cast<size_t>(c.index)];
  auto gt = kn.bwd.grads.find(x);
  if (gt == kn.bwd.grads.end() || gt->second < 0) return -1;
  int sharing = 0;
  for (int y : kn.inst.inputs)
    if (auto g = kn.bwd.grads.find(y); g != kn.bwd.grads.end() && g->second == gt->second) ++sharing;
  return sharing == 1 ? gt->second : -1;
}

}  // namespace

void PlanExecutor::plan_grad_chains() {
  grad_chains_.assign(P.instrs.size(), {});
  chained_.assign(P.instrs.size(), 0);
  // How often each (kernel, micro-batch, input) gradient is collected: a
  // chain's gradients are collected once, by the run (else another collect
  // would read a sum, or an unwritten block).
  std::map<std::tuple<int, int, int>, int> collects;
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::CollectGrad) ++collects[{in.kernel, in.mb, in.index}];
  // The latest Backward and FreeKernel of each (kernel, micro-batch) so far.
  std::map<std::pair<int, int>, int> last_backward, last_free;
  for (size_t i = 0; i < P.instrs.size(); ++i) {
    const PInstr& in = P.instrs[i];
    if (in.kind == PInstr::Backward) last_backward[{in.kernel, in.mb}] = static_cast<int>(i);
    if (in.kind == PInstr::FreeKernel) last_free[{in.kernel, in.mb}] = static_cast<int>(i);
    if (in.kind != PInstr::Alloc || in.b < 0) continue;
    // The run of whole-buffer gradient collects right after the Alloc.
    std::vector<int> run;
    for (size_t j = i + 1; j < P.instrs.size(); ++j) {
      const PInstr& c = P.instrs[j];
      if (c.kind != PInstr::CollectGrad || c.b != in.b || c.kernel < 0) break;
      const SubOpKernel& kn = P.kernels[static_cast<size_t>(c.kernel)];
      if (!kn.elaborated || lone_grad(kn, c) < 0 || !kn.in_slices[static_cast<size_t>(c.index)].same_box(piece(in.b)) ||
          collects[{c.kernel, c.mb, c.index}] != 1)
        break;
      run.push_back(static_cast<int>(j));
    }
    if (run.size() < 2) continue;
    // Each kernel's Backward before the run, in the run's order, and the
    // first kernel's gradient not dropped before its collect.
    const PInstr& first = P.instrs[static_cast<size_t>(run[0])];
    auto backward_of = [&](const PInstr& c) {
      auto it = last_backward.find({c.kernel, c.mb});
      return it == last_backward.end() ? -1 : it->second;
    };
    const int b1 = backward_of(first);
    auto freed = last_free.find({first.kernel, first.mb});
    if (b1 < 0 || (freed != last_free.end() && freed->second > b1)) continue;
    const SubOpKernel& k1 = P.kernels[static_cast<size_t>(first.kernel)];
    const int64_t n1 = sema::numel(P.local.tensor(lone_grad(k1, first)).shape);
    int prev = b1;
    for (size_t m = 1; m < run.size(); ++m) {
      const PInstr& c = P.instrs[static_cast<size_t>(run[m])];
      const int bm = backward_of(c);
      if (c.kernel == first.kernel || bm <= prev) break;
      const SubOpKernel& kn = P.kernels[static_cast<size_t>(c.kernel)];
      const int g = lone_grad(kn, c);
      if (sema::numel(P.local.tensor(g).shape) != n1) break;
      // Its one producer in the backward, read by nothing after it.
      GradChain link;
      link.collect = run[m];
      link.carrier = run[0];
      bool ok = true, after = false;
      for (const std::vector<int>* list : {&kn.bwd.nodes, &kn.wgrad_nodes})
        for (int n : *list) {
          const sema::OpNode& node = P.local.node(n);
          if (after && std::count(node.inputs.begin(), node.inputs.end(), g) > 0) ok = false;
          for (size_t x = 0; x < node.outputs.size(); ++x)
            if (node.outputs[x] == g) {
              ok = ok && link.node < 0;
              link.node = n;
              link.output = x;
              after = true;
            }
        }
      if (!ok || link.node < 0 || !be.writes_in_place(P.local.node(link.node), link.output, true)) break;
      grad_chains_[static_cast<size_t>(bm)].push_back(link);
      prev = bm;
    }
  }
}

// A Backward whose gradient joins a chain: its node adds it into the first
// kernel's block (which that kernel's Backward filled, in this step).
void PlanExecutor::prepare_grad_chains(const PInstr& in) {
  active_outs_.clear();
  plan_views();
  const size_t i = instr_index(in);
  if (i >= grad_chains_.size()) return;
  for (const GradChain& link : grad_chains_[i]) {
    const PInstr& first = P.instrs[static_cast<size_t>(link.carrier)];
    const PInstr& c = P.instrs[static_cast<size_t>(link.collect)];
    const int g1 = lone_grad(P.kernels[static_cast<size_t>(first.kernel)], first);
    const int g = lone_grad(P.kernels[static_cast<size_t>(c.kernel)], c);
    DeviceBuffer& carrier = (*lbuf_cur)[static_cast<size_t>(g1)];
    const bool half =
        !bf16_local_.empty() && (bf16_local_[static_cast<size_t>(g1)] || bf16_local_[static_cast<size_t>(g)]);
    if (carrier.empty() || half || (*alias_cur)[static_cast<size_t>(g1)] >= 0 ||
        carrier.numel() != sema::numel(P.local.tensor(g).shape))
      continue;
    active_outs_.push_back({g, static_cast<float*>(carrier.data()), 0, !fault_in_place_overwrite});
    chained_[static_cast<size_t>(link.collect)] = 1;
  }
}

bool PlanExecutor::chained(const PInstr& in) {
  plan_views();
  const size_t i = instr_index(in);
  return i < chained_.size() && std::exchange(chained_[i], 0) != 0;
}

}  // namespace nns::backend
