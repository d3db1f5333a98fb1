#include "backend/planner/memory.h"

#include <map>
#include <utility>
#include <vector>

namespace nns::planner {

using backend::BufferDecl;
using backend::PInstr;

namespace {

double outputs_bytes(const sema::Graph& g, const std::vector<int>& nodes, double scale) {
  double b = 0;
  for (int id : nodes) {
    if (id < 0 || static_cast<size_t>(id) >= g.nodes().size()) continue;
    const sema::OpNode& n = g.node(id);
    if (n.composite) continue;
    for (int t : n.outputs) b += static_cast<double>(g.tensor(t).bytes()) * scale;
  }
  return b;
}

}  // namespace

MemoryPeak peak_memory(const backend::RankProgram& prog, int bpe) {
  MemoryPeak out;
  const size_t nb = prog.buffers.size();
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
      out.persistent += elems * 4 * (bpe < 4 ? 3 : 2);  // two moments (+ fp32 master weights)
    }
  // Kernel tensors are fp32 in the local graph: scale them to the costed element size.
  const double kscale = bpe / 4.0;
  std::vector<char> live(nb, 0);
  // Per (kernel, micro-batch): each micro-batch in flight keeps its own tensors.
  std::map<std::pair<int, int>, double> kfwd, kbwd;
  double cur = out.persistent, kern = 0;
  out.peak = cur;
  auto touch = [&](int buf) {
    if (buf < 0 || static_cast<size_t>(buf) >= nb || live[static_cast<size_t>(buf)] || persistent(buf)) return;
    live[static_cast<size_t>(buf)] = 1;
    cur += bytes(buf);
  };
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const PInstr& in = prog.instrs[i];
    const backend::SubOpKernel* k =
        in.kernel >= 0 && static_cast<size_t>(in.kernel) < prog.kernels.size() ? &prog.kernels[static_cast<size_t>(in.kernel)] : nullptr;
    switch (in.kind) {
      case PInstr::Free:
        if (in.a >= 0 && static_cast<size_t>(in.a) < nb && live[static_cast<size_t>(in.a)]) {
          live[static_cast<size_t>(in.a)] = 0;
          cur -= bytes(in.a);
        }
        break;
      case PInstr::Forward:
        if (k) {
          kern -= kfwd[{in.kernel, in.mb}];
          kfwd[{in.kernel, in.mb}] = outputs_bytes(prog.local, k->inst.nodes, kscale);
          kern += kfwd[{in.kernel, in.mb}];
        }
        break;
      case PInstr::Backward:
        if (k) {
          kern -= kbwd[{in.kernel, in.mb}];
          kbwd[{in.kernel, in.mb}] = outputs_bytes(prog.local, k->bwd.nodes, kscale);
          kern += kbwd[{in.kernel, in.mb}];
        }
        break;
      case PInstr::DropForward:
        if (k) {
          kern -= kfwd[{in.kernel, in.mb}];
          kfwd[{in.kernel, in.mb}] = 0;
        }
        break;
      case PInstr::FreeKernel:
        if (k) {
          kern -= kfwd[{in.kernel, in.mb}] + kbwd[{in.kernel, in.mb}];
          kfwd[{in.kernel, in.mb}] = kbwd[{in.kernel, in.mb}] = 0;
        }
        break;
      default:
        touch(in.a);
        touch(in.b);
    }
    if (cur + kern > out.peak) {
      out.peak = cur + kern;
      out.at_instr = static_cast<int>(i);
      out.buffers_at_peak = cur - out.persistent;
      out.kernels_at_peak = kern;
      out.roles_at_peak.clear();
      for (size_t b = 0; b < nb; ++b)
        if (live[b]) out.roles_at_peak[prog.buffers[b].role] += bytes(static_cast<int>(b));
    }
  }
  return out;
}

}  // namespace nns::planner
