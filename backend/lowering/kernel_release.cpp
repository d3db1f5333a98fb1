// plan_releases (rank_program.h): when a kernel's local tensors can go.
//
// Without release lists a kernel keeps every tensor it made until its
// FreeKernel (after its backward): the attention scores, the softmax and
// every intermediate gradient of a window-attention body all at once, for
// every micro-batch in flight. A tensor is only needed until its last
// reader, unless something after the node list reads it: CollectOut (the
// kernel's outputs), the backward (what it reads of the forward's values:
// OpRow::backward_reads; what it needs the shape of only may go), BackwardW
// run later (what the weight-gradient nodes read) and CollectGrad (the
// gradients of the kernel's inputs).
#include <algorithm>
#include <set>
#include <unordered_map>

#include "backend/lowering/rank_program.h"
#include "semantics/op_registry.h"

namespace nns::backend {

namespace {

// For nodes[i] in order: the tensors in `candidates` whose last reader
// among `nodes` is nodes[i], minus `keep`. A candidate no node reads goes
// right after the node that makes it.
std::vector<std::vector<int>> last_readers(const sema::Graph& L, const std::vector<int>& nodes, const std::set<int>& keep) {
  std::unordered_map<int, size_t> last;  // tensor -> position of its last reader (or maker)
  for (size_t i = 0; i < nodes.size(); ++i) {
    const sema::OpNode& n = L.node(nodes[i]);
    for (int t : n.outputs) last.emplace(t, i);  // made here: at least until here
    for (int t : n.inputs) last[t] = i;
  }
  std::vector<std::vector<int>> out(nodes.size());
  std::set<int> seen;
  for (const auto& [t, i] : last)
    if (!keep.count(t) && seen.insert(t).second) out[i].push_back(t);
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

// The tensors backward node `node` reads the values of: not those it
// needs for their shapes only (OpRow::backward_reads: an add's operands,
// a reshape's input, a linear's output), which may go after the forward.
std::vector<int> value_reads(const sema::Graph& L, int node) {
  const sema::OpNode& n = L.node(node);
  std::vector<int> out;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (sema::backward_reads_value(L, n, i)) out.push_back(n.inputs[i]);
  return out;
}

}  // namespace

void plan_releases(const sema::Graph& L, SubOpKernel& kn) {
  std::set<int> keep(kn.inst.outputs.begin(), kn.inst.outputs.end());
  std::set<int> inputs(kn.inst.inputs.begin(), kn.inst.inputs.end());
  keep.insert(inputs.begin(), inputs.end());
  std::set<int> grads;  // the gradients the backward gives the kernel's inputs
  for (const auto& [input, grad] : kn.bwd.grads)
    if (grad >= 0) grads.insert(grad);
  keep.insert(grads.begin(), grads.end());
  // What the backward and W read the values of.
  std::set<int> read_back;
  for (const std::vector<int>* list : {&kn.bwd.nodes, &kn.wgrad_nodes})
    for (int b : *list)
      for (int x : value_reads(L, b)) read_back.insert(x);
  // What W reads stays until FreeKernel (BackwardW runs later, after other kernels).
  for (int w : kn.wgrad_nodes) {
    for (int x : value_reads(L, w)) keep.insert(x);
    const sema::OpNode& n = L.node(w);
    keep.insert(n.outputs.begin(), n.outputs.end());
  }
  // The forward: what the backward reads stays too.
  std::set<int> fkeep = keep;
  fkeep.insert(read_back.begin(), read_back.end());
  // What the backward reads of the kernel's outputs stays; the rest goes
  // once CollectOut has copied it into its buffer.
  kn.drop_after_collect.assign(kn.inst.outputs.size(), 0);
  for (size_t o = 0; o < kn.inst.outputs.size(); ++o) {
    int t = kn.inst.outputs[o];
    bool needed = inputs.count(t) > 0 || kn.bwd.grads.count(t) > 0 || read_back.count(t) > 0;
    kn.drop_after_collect[o] = !needed;
  }
  // A recomputed kernel keeps its inputs for the forward that runs again;
  // any other kernel keeps only the input copies its backward reads, and
  // not those it gets again (regather(): the backward slices them in anew).
  // (An input's gradient is a tensor of its own, kept above: the input
  // itself stays only if something reads it, or if it is itself a
  // gradient, passed through.)
  if (!kn.recompute)
    for (size_t i = 0; i < kn.inst.inputs.size(); ++i) {
      const int t = kn.inst.inputs[i];
      if ((!read_back.count(t) || kn.regathers(i)) && !grads.count(t) &&
          !std::count(kn.inst.outputs.begin(), kn.inst.outputs.end(), t))
        fkeep.erase(t);
    }
  // Only tensors the forward makes or the kernel's inputs are the
  // forward's to release.
  kn.fwd_release = last_readers(L, kn.inst.nodes, fkeep);
  // The backward releases what it reads or makes after its last reader:
  // forward tensors, output gradients (dy) and intermediate gradients.
  kn.bwd_release = last_readers(L, kn.bwd.nodes, keep);
}

}  // namespace nns::backend

namespace nns::backend {

namespace {

// Where a SliceIn or SliceGrad reads its buffer in place: the element
// offset of the slice and, for a row-strided one, the buffer's row length
// (0: contiguous). False: a copy.
bool slice_view(const RankProgram& prog, const PInstr& in, int64_t& offset, int64_t& row_stride) {
  const bool grad = in.kind == PInstr::SliceGrad;
  if ((in.kind != PInstr::SliceIn && !grad) || in.scale != 1.f || in.a < 0 ||
      static_cast<size_t>(in.a) >= prog.buffers.size())
    return false;
  if (in.kernel < 0 || static_cast<size_t>(in.kernel) >= prog.kernels.size()) return false;
  const SubOpKernel& k = prog.kernels[static_cast<size_t>(in.kernel)];
  const std::vector<Piece>& slices = grad ? k.out_slices : k.in_slices;
  if (in.index < 0 || static_cast<size_t>(in.index) >= slices.size()) return false;
  const BufferDecl& b = prog.buffers[static_cast<size_t>(in.a)];
  // Nothing writes the buffer while a kernel reads it: parameters, inputs,
  // values and received pieces once made; an output gradient once its
  // producer's backward reads it (every consumer has contributed by then).
  // Not the step's sums (accumulated gradients, buckets, zero1 shards).
  const BufferDecl::Role r = b.role;
  const bool read_only =
      grad ? r != BufferDecl::Param && r != BufferDecl::Accum && r != BufferDecl::Shard && r != BufferDecl::Bucket
           : r == BufferDecl::Param || r == BufferDecl::Input || r == BufferDecl::Value || r == BufferDecl::Transit;
  if (!read_only) return false;
  // Contiguous in the buffer (region_view), or row-strided: read by
  // linears (x, w, and the backward's dy) as columns of the buffer's rows
  // (a contraction split, coshard). A linear's x or w
  // (SubOpKernel::row_strided_inputs), or its dy (the SliceGrad of its one
  // output: its backward reads it as a matrix, as it reads x). A backend
  // that does not read such a view (Backend::reads_row_strided) gets a
  // packed copy from the executor, node by node: copies there, never a
  // wrong value.
  if (!region_view(b.piece, slices[static_cast<size_t>(in.index)], offset, row_stride)) return false;
  if (row_stride != 0 && ((grad ? in.index != 0 : in.index > 1) || !k.row_strided_inputs)) return false;
  return true;
}

}  // namespace

int64_t slice_in_place(const RankProgram& prog, const PInstr& in) {
  int64_t offset = -1, row_stride = 0;
  return slice_view(prog, in, offset, row_stride) ? offset : -1;
}

int64_t slice_row_stride(const RankProgram& prog, const PInstr& in) {
  int64_t offset = -1, row_stride = 0;
  return slice_view(prog, in, offset, row_stride) ? row_stride : 0;
}

bool collect_out_whole(const RankProgram& prog, const PInstr& in) {
  if (in.kind != PInstr::CollectOut || in.scale != 1.f || in.b < 0 || static_cast<size_t>(in.b) >= prog.buffers.size())
    return false;
  if (in.kernel < 0 || static_cast<size_t>(in.kernel) >= prog.kernels.size()) return false;
  const SubOpKernel& k = prog.kernels[static_cast<size_t>(in.kernel)];
  if (in.index < 0 || static_cast<size_t>(in.index) >= k.out_slices.size()) return false;
  const Piece& have = prog.buffers[static_cast<size_t>(in.b)].piece;
  return have.value_parts <= 1 && k.out_slices[static_cast<size_t>(in.index)].same_box(have);
}

}  // namespace nns::backend
