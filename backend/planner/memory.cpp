#include "backend/planner/memory.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

namespace nns::planner {

using backend::BufferDecl;
using backend::PInstr;

MemoryPeak peak_memory(const backend::RankProgram& prog, int bpe, int optimizer_slots) {
  MemoryPeak out;
  const size_t nb = prog.buffers.size();
  const sema::Graph& L = prog.local;
  auto bytes = [&](int buf) {
    return static_cast<double>(prog.buffers[static_cast<size_t>(buf)].piece.numel()) * bpe;
  };
  auto persistent = [&](int buf) {
    BufferDecl::Role r = prog.buffers[static_cast<size_t>(buf)].role;
    return r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard;
  };
  for (size_t b = 0; b < nb; ++b)
    if (persistent(static_cast<int>(b))) out.persistent += bytes(static_cast<int>(b));
  for (const backend::ParamSlot& s : prog.params)
    if (s.trainable && s.state() >= 0 && static_cast<size_t>(s.state()) < nb) {
      double elems = static_cast<double>(prog.buffers[static_cast<size_t>(s.state())].piece.numel());
      out.persistent += elems * 4 * (optimizer_slots + (bpe < 4 ? 1 : 0));  // fp32 state (+ fp32 master weights)
    }
  // Kernel tensors are fp32 in the local graph (the CPU executor keeps any
  // dtype in 4-byte slots): scale them to the costed element size.
  const double kscale = bpe / 4.0;
  auto tbytes = [&](int t) { return static_cast<double>(sema::numel(L.tensor(t).shape)) * 4 * kscale; };
  std::vector<char> live(nb, 0);
  std::set<int> sending;  // buffers with a Send posted this step: a Free parks them until the step ends
  // Per (micro-batch, local tensor): its bytes while it is held.
  std::map<std::pair<int, int>, double> local;
  double cur = out.persistent, kern = 0;
  out.peak = cur;
  int at = -1;
  auto note = [&]() {
    if (cur + kern <= out.peak) return;
    out.peak = cur + kern;
    out.at_instr = at;
    out.buffers_at_peak = cur - out.persistent;
    out.kernels_at_peak = kern;
    out.roles_at_peak.clear();
    for (size_t b = 0; b < nb; ++b)
      if (live[b]) out.roles_at_peak[prog.buffers[b].role] += bytes(static_cast<int>(b));
  };
  auto make = [&](int buf) {
    if (buf < 0 || static_cast<size_t>(buf) >= nb || live[static_cast<size_t>(buf)] || persistent(buf)) return;
    live[static_cast<size_t>(buf)] = 1;
    cur += bytes(buf);
  };
  // Kernel inputs read in place: (micro-batch, local tensor) -> buffer, the
  // readers of each buffer, and the buffers freed while still read.
  std::map<std::pair<int, int>, int> alias;
  std::vector<int> refs(nb, 0);
  std::vector<char> free_later(nb, 0);
  auto release = [&](int buf) {
    if (!live[static_cast<size_t>(buf)] || sending.count(buf)) return;
    live[static_cast<size_t>(buf)] = 0;
    cur -= bytes(buf);
  };
  auto unalias = [&](int mb, int t) {
    auto it = alias.find({mb, t});
    if (it == alias.end()) return;
    int b = it->second;
    alias.erase(it);
    if (--refs[static_cast<size_t>(b)] == 0 && free_later[static_cast<size_t>(b)]) {
      free_later[static_cast<size_t>(b)] = 0;
      release(b);
    }
  };
  auto lset = [&](int mb, int t) {
    if (t < 0 || static_cast<size_t>(t) >= L.tensors().size()) return;
    unalias(mb, t);
    double& held = local[{mb, t}];
    kern += tbytes(t) - held;
    held = tbytes(t);
  };
  auto ldrop = [&](int mb, int t) {
    unalias(mb, t);
    auto it = local.find({mb, t});
    if (it == local.end()) return;
    kern -= it->second;
    local.erase(it);
  };
  // A node list as the executor runs it: each node's outputs made (the
  // peak may fall here, mid-instruction), then what it was last to read dropped.
  auto run_nodes = [&](int mb, const std::vector<int>& nodes, const std::vector<std::vector<int>>& release) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int t : L.node(nodes[i]).outputs) lset(mb, t);
      note();
      if (i < release.size())
        for (int t : release[i]) ldrop(mb, t);
    }
  };
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const PInstr& in = prog.instrs[i];
    at = static_cast<int>(i);
    const backend::SubOpKernel* k =
        in.kernel >= 0 && static_cast<size_t>(in.kernel) < prog.kernels.size() ? &prog.kernels[static_cast<size_t>(in.kernel)] : nullptr;
    switch (in.kind) {
      case PInstr::Free:
        if (in.a < 0 || static_cast<size_t>(in.a) >= nb) break;
        if (refs[static_cast<size_t>(in.a)] > 0) free_later[static_cast<size_t>(in.a)] = 1;
        else release(in.a);
        break;
      case PInstr::Send:
        sending.insert(in.a);
        break;
      case PInstr::Alloc:
      case PInstr::LoadInput:
      case PInstr::Extract:
      case PInstr::Recv:
      case PInstr::AllGather:
      case PInstr::ReduceScatter:
      case PInstr::AllToAll:
        make(in.b);
        break;
      case PInstr::SliceIn:
        if (k && in.index >= 0 && static_cast<size_t>(in.index) < k->inst.inputs.size()) {
          int t = k->inst.inputs[static_cast<size_t>(in.index)];
          if (backend::slice_in_place(prog, in) >= 0) {  // read where it lives
            ldrop(in.mb, t);
            alias[{in.mb, t}] = in.a;
            ++refs[static_cast<size_t>(in.a)];
          } else {
            lset(in.mb, t);
          }
        }
        break;
      case PInstr::CollectOut:
        if (k && in.index >= 0 && static_cast<size_t>(in.index) < k->drop_after_collect.size() && k->drop_after_collect[static_cast<size_t>(in.index)])
          ldrop(in.mb, k->inst.outputs[static_cast<size_t>(in.index)]);
        break;
      case PInstr::SliceGrad:
        if (k && in.index >= 0 && static_cast<size_t>(in.index) < k->dy.size()) lset(in.mb, k->dy[static_cast<size_t>(in.index)]);
        break;
      case PInstr::Forward:
        if (k) run_nodes(in.mb, k->inst.nodes, k->fwd_release);
        break;
      case PInstr::Backward:
        if (k) run_nodes(in.mb, k->bwd.nodes, k->bwd_release);
        break;
      case PInstr::BackwardW:
        if (k) run_nodes(in.mb, k->wgrad_nodes, {});
        break;
      case PInstr::DropForward:
        if (k)
          for (int n : k->inst.nodes)
            for (int t : L.node(n).outputs) ldrop(in.mb, t);
        break;
      case PInstr::FreeKernel:
        if (k) {
          for (int t : k->inst.inputs) ldrop(in.mb, t);
          for (const std::vector<int>* list : {&k->inst.nodes, &k->bwd.nodes, &k->wgrad_nodes})
            for (int n : *list)
              for (int t : L.node(n).outputs) ldrop(in.mb, t);
          for (int t : k->dy) ldrop(in.mb, t);
        }
        break;
      default:
        break;
    }
    note();
  }
  return out;
}

}  // namespace nns::planner
