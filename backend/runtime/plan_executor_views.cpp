// The plan executor's kernel views: what a node's operands point at. A
// kernel input is its own block or a slice of a rank buffer read in place
// (SliceIn, SliceGrad: slice_in_place, row-strided for a linear's operands).
// A forward output that the next instructions collect into a rank buffer,
// and that the kernel does not read again, may be written there by the
// kernel itself (a row-strided
// view of the buffer's columns, or the whole buffer), added to what the
// buffer holds when the collect accumulates a partial sum: the collect's
// copy (and its read of the buffer) is gone. And a fresh buffer that its
// collects tile (disjoint regions covering all of it, nothing else touching
// it in between) is neither zero-filled nor added to: each collect writes
// its region. Values are those of the program as written (0 + x is x; an
// accumulating kernel adds its product as the collect would); memory is
// counted as the program says (the output keeps its block, untouched).
#include <algorithm>
#include <utility>

#include "backend/runtime/plan_executor.h"
#include "semantics/op_registry.h"

namespace nns::backend {

namespace {

bool disjoint(const Piece& p, const Piece& q) {
  for (size_t x = 0; x < p.start.size() && x < q.start.size(); ++x)
    if (p.start[x] + p.length[x] <= q.start[x] || q.start[x] + q.length[x] <= p.start[x]) return true;
  return false;
}

}  // namespace

// The collect regions of a fresh buffer, in program order, until they
// cover it or something else touches it: one pass with an open list per
// freshly allocated buffer.
void PlanExecutor::plan_tiles() {
  tile_.assign(P.instrs.size(), 0);
  std::vector<std::vector<int>> open(P.buffers.size());  // collect instructions so far, by buffer
  std::vector<char> is_open(P.buffers.size(), 0);
  std::vector<int> open_list, touched;
  auto region = [&](const PInstr& c) -> const Piece* {
    const SubOpKernel& kn = P.kernels[static_cast<size_t>(c.kernel)];
    if (c.kind == PInstr::CollectOut) return &kn.out_slices[static_cast<size_t>(c.index)];
    auto gt = kn.bwd.grads.find(kn.inst.inputs[static_cast<size_t>(c.index)]);
    if (gt == kn.bwd.grads.end() || gt->second < 0) return nullptr;  // writes nothing: its region stays zero
    return &kn.in_slices[static_cast<size_t>(c.index)];
  };
  for (size_t i = 0; i < P.instrs.size(); ++i) {
    const PInstr& in = P.instrs[i];
    bool all = false;
    instr_buffers(P, in, touched, all);
    if (all) {
      for (int b : open_list) is_open[static_cast<size_t>(b)] = 0;
      open_list.clear();
    }
    for (int b : touched) {
      if (b < 0 || static_cast<size_t>(b) >= P.buffers.size() || !is_open[static_cast<size_t>(b)]) continue;
      std::vector<int>& runs = open[static_cast<size_t>(b)];
      const bool collect =
          (in.kind == PInstr::CollectOut || in.kind == PInstr::CollectGrad) && in.b == b && in.kernel >= 0;
      const Piece* r = collect ? region(in) : nullptr;
      bool ok = r != nullptr;
      for (size_t k = 0; ok && k < runs.size(); ++k) ok = disjoint(*r, *region(P.instrs[static_cast<size_t>(runs[k])]));
      int64_t off = 0, ld = 0;
      ok = ok && region_view(piece(b), *r, off, ld);  // inside the buffer
      if (ok) {
        runs.push_back(static_cast<int>(i));
        int64_t covered = 0;
        for (int k : runs) covered += region(P.instrs[static_cast<size_t>(k)])->numel();
        if (covered != piece(b).numel()) continue;
        for (int k : runs) tile_[static_cast<size_t>(k)] = 1;
      }
      is_open[static_cast<size_t>(b)] = 0;
      runs.clear();
    }
    if (in.kind == PInstr::Alloc && in.b >= 0) {
      if (!is_open[static_cast<size_t>(in.b)]) open_list.push_back(in.b);
      is_open[static_cast<size_t>(in.b)] = 1;
      open[static_cast<size_t>(in.b)].clear();
    }
    if (open_list.size() > 64)  // drop the closed ones now and then
      open_list.erase(
          std::remove_if(open_list.begin(), open_list.end(), [&](int b) { return !is_open[static_cast<size_t>(b)]; }),
          open_list.end());
  }
}

// Whether the kernel reads forward output t after its producer `node` ran:
// a later node of its forward, or its backward other than as the forward
// output its own backward node is handed and does not read (a linear's
// backward reads x, w and dy: Backend::writes_in_place's contract).
static bool read_later(const RankProgram& P, const SubOpKernel& kn, int node, int t) {
  bool after = false;
  for (int n : kn.inst.nodes) {
    if (after && std::count(P.local.node(n).inputs.begin(), P.local.node(n).inputs.end(), t) > 0) return true;
    after = after || n == node;
  }
  const sema::OpNode& fwd = P.local.node(node);
  for (const std::vector<int>* list : {&kn.bwd.nodes, &kn.wgrad_nodes})
    for (int n : *list) {
      const sema::OpNode& b = P.local.node(n);
      for (size_t x = 0; x < b.inputs.size(); ++x)
        if (b.inputs[x] == t && (b.kind != fwd.kind + "_backward" || x != fwd.inputs.size())) return true;
    }
  return false;
}

// A Forward's outputs that the instructions right after it collect (scale
// 1) into a rank buffer, and that the kernel does not read afterwards
// (read_later): the kernel may write them there. The output keeps its own
// block, unwritten, until the kernel drops it (memory as the program says).
void PlanExecutor::plan_out_writes() {
  out_writes_.assign(P.instrs.size(), {});
  wrote_.assign(P.instrs.size(), 0);
  for (size_t i = 0; i < P.instrs.size(); ++i) {
    const PInstr& f = P.instrs[i];
    if (f.kind != PInstr::Forward || f.kernel < 0) continue;
    const SubOpKernel& kn = P.kernels[static_cast<size_t>(f.kernel)];
    if (!kn.elaborated) continue;
    for (size_t j = i + 1; j < P.instrs.size(); ++j) {
      const PInstr& c = P.instrs[j];
      if (c.kind != PInstr::CollectOut || c.kernel != f.kernel || c.mb != f.mb) break;
      const size_t o = static_cast<size_t>(c.index);
      if (c.scale != 1.f || c.b < 0 || o >= kn.inst.outputs.size()) continue;
      const int t = kn.inst.outputs[o];
      if (std::count(kn.inst.outputs.begin(), kn.inst.outputs.end(), t) != 1 ||
          std::count(kn.inst.inputs.begin(), kn.inst.inputs.end(), t) != 0 || kn.bwd.grads.count(t) > 0)
        continue;
      // Its one producer.
      OutWrite w;
      bool ok = true;
      for (int n : kn.inst.nodes) {
        const sema::OpNode& node = P.local.node(n);
        for (size_t x = 0; x < node.outputs.size(); ++x)
          if (node.outputs[x] == t) {
            ok = ok && w.node < 0;
            w.node = n;
            w.output = x;
          }
      }
      const Piece& sl = kn.out_slices[o];
      if (!ok || w.node < 0 || read_later(P, kn, w.node, t) || !region_view(piece(c.b), sl, w.offset, w.row_stride))
        continue;
      if (!be.writes_in_place(P.local.node(w.node), w.output, false)) continue;
      w.collect = static_cast<int>(j);
      w.whole = sl.same_box(piece(c.b));
      out_writes_[i].push_back(w);
    }
  }
}

void PlanExecutor::plan_views() {
  if (views_base_ == P.instrs.data() && tile_.size() == P.instrs.size()) return;
  views_base_ = P.instrs.data();  // a new program (the profile swaps bodies)
  plan_tiles();
  plan_out_writes();
  plan_grad_chains();
}

size_t PlanExecutor::instr_index(const PInstr& in) const {
  const bool listed = &in >= P.instrs.data() && &in < P.instrs.data() + P.instrs.size();
  return listed ? static_cast<size_t>(&in - P.instrs.data()) : P.instrs.size();
}

bool PlanExecutor::tile_write(const PInstr& in) {
  plan_views();
  const size_t i = instr_index(in);
  return i < tile_.size() && tile_[i];
}

int PlanExecutor::written_in_place(const PInstr& in) {
  plan_views();
  const size_t i = instr_index(in);
  if (i >= wrote_.size()) return 0;
  return std::exchange(wrote_[i], 0);
}

// Decides, for a Forward, which listed outputs the kernel writes in place
// and how: into a tile or a fresh buffer's whole (write), into a fresh
// buffer's part (zeros first, then write), else adding to what the buffer
// holds, where the backend can.
void PlanExecutor::prepare_out_writes(const PInstr& in) {
  active_outs_.clear();
  plan_views();
  const size_t i = instr_index(in);
  if (i >= out_writes_.size()) return;
  const SubOpKernel& kn = P.kernels[static_cast<size_t>(in.kernel)];
  for (const OutWrite& w : out_writes_[i]) {
    const PInstr& c = P.instrs[static_cast<size_t>(w.collect)];
    const int b = c.b;
    DeviceBuffer& dst = bufs[static_cast<size_t>(b)];
    const int t = kn.inst.outputs[static_cast<size_t>(c.index)];
    if (dst.empty() || (!bf16_local_.empty() && bf16_local_[static_cast<size_t>(t)]))
      continue;  // (bf16: widened by the copy)
    // The kernel must not read the buffer it writes.
    bool reads_b = false;
    for (int x : kn.inst.inputs) reads_b = reads_b || (*alias_cur)[static_cast<size_t>(x)] == b;
    if (reads_b) continue;
    const bool fresh = tile_[static_cast<size_t>(w.collect)] || zero_pending_[static_cast<size_t>(b)];
    if (!be.writes_in_place(P.local.node(w.node), w.output, !fresh)) continue;
    if (!pending_.empty()) pending_.settle(P, c);  // a posted operation on the buffer completes first
    if (take_zero(b) && !w.whole && !tile_[static_cast<size_t>(w.collect)])
      be.fill(dst.data(), dst.numel(), 0.f);  // a part of a fresh buffer whose collects do not tile it
    active_outs_.push_back(
        {t, static_cast<float*>(dst.data()) + w.offset, w.row_stride, !fresh && !fault_in_place_overwrite});
    wrote_[static_cast<size_t>(w.collect)] = fresh ? 2 : 1;
  }
}

void PlanExecutor::lview_into(int t, TensorView& v, const sema::OpNode* backward, size_t input) {
  const sema::TensorInfo& info = P.local.tensor(t);
  v.dtype = info.dtype;
  v.shape = info.shape;
  v.row_stride = 0;
  v.accumulate = false;
  if (int b = (*alias_cur)[static_cast<size_t>(t)]; b >= 0) {  // read in place: the slice's address in buffer b
    v.data = static_cast<char*>(bufs[static_cast<size_t>(b)].data()) + 4 * (*alias_at_cur)[static_cast<size_t>(t)];
    v.row_stride = (*alias_stride_cur)[static_cast<size_t>(t)];
    return;
  }
  const DeviceBuffer& b = (*lbuf_cur)[static_cast<size_t>(t)];
  // Dropped after the forward: the backward reads its shape only.
  if (b.empty() && backward && !sema::backward_reads_value(P.local, *backward, input)) {
    v.data = nullptr;
    return;
  }
  if (b.empty() && sema::numel(info.shape) > 0)
    throw RuntimeError("internal: local tensor %" + std::to_string(t) + " not computed");
  v.data = b.data();
  if (local_bf16(t)) v.dtype = sema::DType::BF16;
}

void PlanExecutor::run_local(int n) {
  const sema::OpNode& node = P.local.node(n);
  // The views are assigned in place: a node's views reuse the storage the
  // previous node's left (no allocation per view per node).
  ins_.resize(node.inputs.size());
  outs_.resize(node.outputs.size());
  packed_.clear();
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    lview_into(node.inputs[i], ins_[i], node.phase == sema::Phase::Forward ? nullptr : &node, i);
    // A row-strided view (columns of a buffer) to a kernel that reads it
    // packed: a copy for this node (on the CPU backend, fp32 linears read
    // it as it is).
    if (ins_[i].row_stride > 0 && !be.reads_row_strided(node, i)) {
      TensorView& v = ins_[i];
      const int64_t cols = v.shape.back(), rows = v.numel() / std::max<int64_t>(cols, 1);
      BoxCopy box;
      box.length = {rows, cols};
      box.src_dims = {rows, v.row_stride};
      box.src_at = {0, 0};
      box.dst_dims = {rows, cols};
      box.dst_at = {0, 0};
      packed_.push_back(alloc_uninit(v.numel()));
      be.copy_box(packed_.back().data(), v.data, box, false, 1.f);
      v.data = packed_.back().data();
      v.row_stride = 0;
    }
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const int t = node.outputs[i];
    const sema::TensorInfo& info = P.local.tensor(t);
    if (sema::dtype_bytes(info.dtype) != 4) throw RuntimeError(node.name + ": only 4-byte dtypes run on plan ranks");
    // Every kernel writes all of its outputs (node_conformance.h); a bf16 activation takes 2 bytes an element.
    const bool half = !bf16_local_.empty() && bf16_local_[static_cast<size_t>(t)];
    const int64_t n_el = sema::numel(info.shape);
    // (An output written in place keeps its block too, untouched: memory
    // as the program counts it.)
    lset(t, half ? DeviceBuffer(be, static_cast<size_t>(n_el) * 2, DeviceBuffer::Uninit{}) : alloc_uninit(n_el));
    TensorView& v = outs_[i];
    v.data = (*lbuf_cur)[static_cast<size_t>(t)].data();
    v.dtype = half ? sema::DType::BF16 : info.dtype;
    v.shape = info.shape;
    v.row_stride = 0;
    v.accumulate = false;
    for (const ActiveOut& a : active_outs_)
      if (a.t == t) {
        v.data = a.data;
        v.row_stride = a.row_stride;
        v.accumulate = a.accumulate;
      }
  }
  be.run_node(P.local, node, ins_, outs_);
}

}  // namespace nns::backend
