// The kernels pass: this rank's sub-ops elaborated on their slices (their
// local graphs, backward differentiated and, for a zero-bubble segment,
// split into B and W), and the parameter pieces the rank holds. Runs first:
// emission names kernels and parameter buffers by the indices made here.
#include <set>

#include "backend/lowering/kernel_cache.h"
#include "backend/lowering/lower_internal.h"
#include "semantics/op_registry.h"
#include "semantics/output_grads.h"

namespace nns::backend::detail {

namespace {

// What a kernel's body is made from besides its op (make_kernel gathers it).
struct ElaborationInputs {
  std::vector<Shape> ins, outs;        // slice shapes
  std::map<std::string, int64_t> div;  // split identifier -> how many parts along the parent chain
  bool backward = false;
  std::vector<bool> wrt;    // per input: its gradient is computed
  std::vector<bool> param;  // per input: a parameter (the B/W split reads it)
  bool split_w = false;     // the segment splits B from W
};

// Runs f, a step that elaborates sub-op `leaf` or places it: an error
// there is the plan's (the op cannot run on its slice), located at the
// directive that made the slice.
template <class F>
auto located(RankBuild& R, int leaf, const F& f) {
  try {
    return f();
  } catch (const LoweringError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw LoweringError("plan " + R.plan.name + ": " + e.what(), directive_of(R.plan, leaf));
  }
}

bool has_slice_rule(const sema::OpNode& n) {
  const sema::OpRow* row = sema::find_op_row(n.kind);
  return row && row->slice_attrs;
}

// Splits a kernel's backward into B (gradients of its activation inputs)
// and W (gradients of its weights). A backward node that computes both
// (linear_backward: dx and dW) becomes two nodes with complementary
// gradient masks; W nodes only feed weight gradients, so B never waits
// for them and W can run later (zero-bubble schedules).
void split_weight_gradient(RankBuild& R, SubOpKernel& kn, const sema::OpNode& node) {
  sema::Graph& L = R.P.local;
  std::set<int> weights;  // local tensors of the weight inputs
  for (size_t k = 0; k < node.inputs.size() && k < kn.inst.inputs.size(); ++k)
    if (R.g.tensor(node.inputs[k]).kind == sema::TensorKind::Param) weights.insert(kn.inst.inputs[k]);
  if (weights.empty()) return;
  std::vector<int> b_nodes, w_nodes;
  std::set<int> w_tensors;  // gradients (and partial sums) that only weights need
  for (int id : kn.bwd.nodes) {
    sema::OpNode bn = L.node(id);  // a copy: adding nodes may reallocate
    auto mask_it = bn.attrs.find("grad_mask");
    if (bn.kind == "add_n") {
      bool all_w = true;
      for (int t : bn.inputs) all_w = all_w && w_tensors.count(t);
      (all_w ? w_nodes : b_nodes).push_back(id);
      if (all_w) w_tensors.insert(bn.outputs[0]);
      continue;
    }
    if (mask_it == bn.attrs.end() || bn.forward_of < 0) {
      b_nodes.push_back(id);
      continue;
    }
    std::vector<int64_t> mask = std::get<std::vector<int64_t>>(mask_it->second);
    const std::vector<int>& fin = L.node(bn.forward_of).inputs;
    std::vector<int64_t> bmask(mask.size(), 0), wmask(mask.size(), 0);
    std::vector<int> bouts, wouts;
    size_t slot = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      if (!mask[i]) continue;
      bool w = weights.count(fin[i]) > 0;
      (w ? wmask : bmask)[i] = 1;
      (w ? wouts : bouts).push_back(bn.outputs[slot++]);
    }
    if (bouts.empty() || wouts.empty()) {
      (bouts.empty() ? w_nodes : b_nodes).push_back(id);
      if (bouts.empty()) w_tensors.insert(wouts.begin(), wouts.end());
      continue;
    }
    // Both: this node keeps the activation gradients, a copy computes the weights'.
    L.node(id).attrs["grad_mask"] = bmask;
    L.node(id).outputs = bouts;
    sema::OpNode wn = bn;
    wn.attrs["grad_mask"] = wmask;
    wn.outputs = wouts;
    wn.name = bn.name + ".w";
    int wid = L.add_node(std::move(wn));
    for (int t : wouts) L.tensor(t).producer = wid;
    w_nodes.push_back(wid);
    b_nodes.push_back(id);
    w_tensors.insert(wouts.begin(), wouts.end());
  }
  // B must not read what only W computes (then the split would be wrong).
  for (int id : b_nodes)
    for (int t : L.node(id).inputs)
      if (w_tensors.count(t)) fail("internal: the B part of " + node.name + " reads a weight gradient");
  kn.bwd.nodes = std::move(b_nodes);
  kn.wgrad_nodes = std::move(w_nodes);
}

// The kernel's body as without the cache: the op elaborated on its slice
// into R.P.local, its position attrs applied, differentiated (the inputs in
// `wrt`), split into B and W, its releases planned. `positioned` (not
// null): the forward nodes with a slice rule, as elaborated, for the cache.
void elaborate_kernel(RankBuild& R, SubOpKernel& kn, const ElaborationInputs& in, KernelCache::Positioned* positioned) {
  const sema::SubOp& s = R.plan.subops[kn.subop];
  const sema::OpNode& node = R.g.node(s.node);
  located(R, kn.subop, [&] {
    kn.inst = R.opts.elaborate(s.node, in.ins, in.outs, in.div, R.P.local);
    for (size_t i = 0; i < kn.inst.nodes.size(); ++i) {
      sema::OpNode& ln = R.P.local.node(kn.inst.nodes[i]);
      if (positioned && has_slice_rule(ln)) positioned->emplace_back(i, ln);
      sema::apply_slice_position(R.g, node, s, ln);
    }
  });
  kn.elaborated = true;
  if (!in.backward) {
    plan_releases(R.P.local, kn);
    return;
  }
  std::map<int, int> seeds = sema::add_output_gradients(R.P.local, kn.inst.outputs, kn.dy);
  std::vector<int> wrt;
  for (size_t k = 0; k < kn.inst.inputs.size(); ++k)
    if (in.wrt[k]) wrt.push_back(kn.inst.inputs[k]);
  kn.bwd = sema::differentiate(R.P.local, kn.inst.nodes, seeds, wrt);
  if (in.split_w) split_weight_gradient(R, kn, node);
  plan_releases(R.P.local, kn);
}

// The rest of a kernel's key after its elaboration key: its position
// attrs (each forward node with a slice rule, positioned for this sub-op:
// the backward nodes copy them) and what its backward depends on.
std::string kernel_key(RankBuild& R, const SubOpKernel& kn, const ElaborationInputs& in,
                       const KernelCache::Positioned& nodes) {
  const sema::SubOp& s = R.plan.subops[kn.subop];
  std::vector<sema::OpNode> placed;
  placed.reserve(nodes.size());
  for (const auto& [index, n] : nodes) {
    placed.push_back(n);
    sema::apply_slice_position(R.g, R.g.node(s.node), s, placed.back());
  }
  std::vector<const sema::OpNode*> ptrs;
  for (const sema::OpNode& n : placed) ptrs.push_back(&n);
  std::string key = attrs_key(ptrs);
  key += in.backward ? 'B' : 'F';
  key += in.split_w ? 'W' : '-';
  key += kn.recompute ? 'R' : '-';
  for (char c : kn.regather_inputs) key += c ? 'a' : '-';
  for (size_t k = 0; k < in.wrt.size(); ++k) {
    key += in.wrt[k] ? 'g' : '-';
    key += in.param[k] ? 'p' : '-';
  }
  return key;
}

// regather() (sema::SubOp::regather): the inputs of a kernel with a
// backward, outside recompute, whose edge is regatherable (comm_plan.h).
std::vector<char> regather_inputs(RankBuild& R, const sema::SubOp& s, bool backward, const PlanAnalysis::Op* op) {
  std::vector<char> out;
  if (!s.regather || !backward || !op || s.recompute || R.A.regions.region_of_node[static_cast<size_t>(s.node)] >= 0)
    return out;
  out.reserve(op->in_edge.size());
  for (const CommEdge* e : op->in_edge) out.push_back(e && regatherable(R.g, *e));
  return out;
}

SubOpKernel make_kernel(RankBuild& R, int leaf, bool backward, const PlanAnalysis::Op* op) {
  const sema::SubOp& s = R.plan.subops[leaf];
  const sema::OpNode& node = R.g.node(s.node);
  SubOpKernel kn;
  kn.subop = leaf;
  kn.node = s.node;
  kn.recompute = s.recompute;
  kn.regather_inputs = regather_inputs(R, s, backward, op);
  for (const OperandSlice& sl : s.inputs) kn.in_slices.push_back(piece_of_slice(sl));
  for (const OperandSlice& sl : s.outputs) kn.out_slices.push_back(piece_of_slice(sl));
  kn.scale = sema::slice_loss_share(R.g, node, s);
  kn.row_strided_inputs = node.kind == "linear" || node.kind == "linear_bias";
  if (!R.opts.elaborate) return kn;
  ElaborationInputs in;
  for (const OperandSlice& sl : s.inputs) in.ins.push_back(sl.length);
  for (const OperandSlice& sl : s.outputs) in.outs.push_back(sl.length);
  // The split identifiers along the parent chain: an attention split on
  // `h` twice in two gets h / 4 heads.
  for (int c = leaf; c >= 0 && R.plan.subops[c].parent >= 0; c = R.plan.subops[c].parent)
    if (R.plan.subops[c].split_id != "value") {
      auto [it, fresh] = in.div.emplace(R.plan.subops[c].split_id, 1);
      it->second *= R.plan.subops[c].split_num;
    }
  in.backward = backward;
  // Gradients only of the inputs that need one (a gradient edge): the
  // kernel computes and holds no gradient of a constant input (a mask).
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    in.wrt.push_back(!op || k >= op->grad_edge.size() || op->grad_edge[k]);
    in.param.push_back(R.g.tensor(node.inputs[k]).kind == sema::TensorKind::Param);
  }
  int seg = R.segment_of(s.node);
  in.split_w = seg >= 0 && R.plan.segments[static_cast<size_t>(seg)].split_w;
  KernelCache* cache = R.kernel_cache;
  if (!cache) {
    elaborate_kernel(R, kn, in, nullptr);
    return kn;
  }
  const std::string key = located(R, leaf, [&] { return R.opts.elaboration_key(s.node, in.ins, in.outs, in.div); });
  if (const KernelCache::Positioned* seen = cache->positioned(key)) {
    const std::string full = key + located(R, leaf, [&] { return kernel_key(R, kn, in, *seen); });
    if (const KernelTemplate* t = cache->find(full)) {
      ++cache->hits;
      if (R.opts.shared_kernel_bodies) {
        auto [at, first] = R.body_kernel.emplace(full, static_cast<int>(R.P.kernels.size()));
        if (!first) {
          set_body(kn, R.P.kernels[static_cast<size_t>(at->second)]);  // the same ids
          return kn;
        }
      }
      paste_template(*t, R.P.local, kn, node.loc);
      return kn;
    }
  }
  ++cache->misses;
  const int tensor_base = static_cast<int>(R.P.local.tensors().size());
  const int node_base = static_cast<int>(R.P.local.nodes().size());
  const size_t obligations = R.P.local.sym_obligations.size(), symbols = R.P.local.symbols.size();
  KernelCache::Positioned positioned;
  elaborate_kernel(R, kn, in, &positioned);
  // A body that recorded symbolic facts into the local graph is not a
  // range of tensors and nodes alone: made again each time.
  if (R.P.local.sym_obligations.size() != obligations || R.P.local.symbols.size() != symbols) return kn;
  std::string full = key + kernel_key(R, kn, in, positioned);
  if (R.opts.shared_kernel_bodies) R.body_kernel.emplace(full, static_cast<int>(R.P.kernels.size()));
  cache->add(std::move(full), cut_template(R.P.local, tensor_base, node_base, kn, node.loc));
  if (!cache->positioned(key)) cache->set_positioned(key, std::move(positioned));
  return kn;
}

}  // namespace

void make_kernels(RankBuild& R) {
  for (const PlanAnalysis::Op& op : R.A.ops) {
    std::vector<int> ks;
    auto mine = op.leaves_on.find(R.device());
    // A communication-only lowering skips the kernels, unless it is asked
    // for their buffer instructions (program verification's buffer check)
    // or runs under a schedule: their reads of received tensors place the
    // receives, so without them the order would not be the one that runs.
    if (mine != op.leaves_on.end() &&
        (!R.opts.communication_only || R.opts.kernel_buffers || !R.plan.task_orders.empty()))
      for (int leaf : mine->second) {
        ks.push_back(static_cast<int>(R.P.kernels.size()));
        R.P.kernels.push_back(make_kernel(R, leaf, op.backward, &op));
      }
    R.op_kernels.push_back(std::move(ks));
  }
}

// Parameters: the pieces this rank holds, in tensor order.
void make_params(RankBuild& R) {
  for (int p : R.g.params()) {
    auto it = R.A.storage.find(p);
    if (it == R.A.storage.end() || !holds(it->second, R.device())) continue;
    ParamSlot slot;
    slot.tensor = p;
    slot.param = R.new_buffer(BufferDecl::Param, p, -1, piece_of(it->second, R.device(), R.g.tensor(p).shape));
    slot.trainable = R.A.requires_grad[p];
    R.param_buf[p] = slot.param;
    R.slot_of[p] = static_cast<int>(R.P.params.size());
    R.P.params.push_back(slot);
  }
}

}  // namespace nns::backend::detail
