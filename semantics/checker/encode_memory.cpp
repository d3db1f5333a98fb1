// Memory: what each device holds during a training step must fit.
//
// The model (per device d, one training step) bounds what the plan
// executor allocates (nns run --plan's "peak piece memory", which
// `nns simulate` replays exactly, planner/memory.h):
//  - weights: the union of the parameter slices that sub-ops on d read
//    (a slice read by several ops, e.g. a tied embedding, counts once);
//    kernels read them in place; zero1 adds the shard d updates;
//  - gradients: the accumulated gradient (zero1: of the shard) and one
//    micro-batch's contributions (lowering adds them in at the end of each
//    micro-batch's backward, so all of them are live at once then);
//  - optimizer state: AdamW 2 more copies, SGD with momentum 1, plain SGD 0;
//  - activations: every slice of a data input or activation that a
//    sub-op on d reads or writes in forward is kept until its backward (the
//    buffers), and each sub-op's kernel keeps its own copy of its outputs
//    and, for a composite op (attention), the tensors its body makes,
//    scaled by the part of the op it computes — except for recomputed
//    sub-ops, whose inputs are kept instead and whose outputs come back
//    for a moment in backward (the largest such moment is added: a
//    recompute region's values all at once, kernel copies and buffers);
//    plus the largest backward working set of one kernel (gradients of its
//    outputs, body and inputs, the last twice: in the kernel and collected
//    into a buffer): the transient peak is a max over instructions, not a
//    sum. Pipelines (orders spanning micro-batches) keep up to
//    min(micro-batches, devices) micro-batches in flight.
// Not modeled: collectives' scratch (the executor does not count it
// either), allocator fragmentation.
// Each byte is attributed to the directive that placed the first sub-op
// touching it, and the capacity check is, per device d,
//     sum over directives s of ite(l_s, bytes(s, d), 0) <= capacity,
// so an unsat core names the placements that together overflow a device.
#include <algorithm>
#include "semantics/check_deadline.h"
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "semantics/checker/encoder.h"

namespace nns::sema::check {

namespace {

// Volume of the union of boxes (slices of one tensor), exact: coordinate
// compression over the (few) distinct boundaries.
int64_t union_volume(std::vector<const OperandSlice*>& boxes) {
  auto same = [](const OperandSlice* a, const OperandSlice* b) { return a == b || (a->start == b->start && a->length == b->length); };
  // The common case: one slice, or one slice read and written by several sub-ops.
  if (std::all_of(boxes.begin() + 1, boxes.end(), [&](const OperandSlice* b) { return same(boxes[0], b); })) {
    int64_t v = 1;
    for (int64_t l : boxes[0]->length) v *= l;
    return v;
  }
  std::sort(boxes.begin(), boxes.end(), [](const OperandSlice* a, const OperandSlice* b) {
    return std::tie(a->start, a->length) < std::tie(b->start, b->length);
  });
  boxes.erase(std::unique(boxes.begin(), boxes.end(),
                          [](const OperandSlice* a, const OperandSlice* b) { return a->start == b->start && a->length == b->length; }),
              boxes.end());
  auto volume = [](const OperandSlice* s) {
    int64_t v = 1;
    for (int64_t l : s->length) v *= l;
    return v;
  };
  if (boxes.size() == 1) return volume(boxes[0]);
  size_t rank = boxes[0]->start.size();
  bool disjoint = true;
  for (size_t i = 0; i < boxes.size() && disjoint; ++i)
    for (size_t j = 0; j < i && disjoint; ++j) {
      bool apart = false;
      for (size_t d = 0; d < rank; ++d)
        if (boxes[i]->start[d] >= boxes[j]->start[d] + boxes[j]->length[d] || boxes[j]->start[d] >= boxes[i]->start[d] + boxes[i]->length[d])
          apart = true;
      disjoint = apart;
    }
  int64_t total = 0;
  if (disjoint) {
    for (const OperandSlice* b : boxes) total += volume(b);
    return total;
  }
  std::vector<std::vector<int64_t>> cuts(rank);
  for (const OperandSlice* b : boxes)
    for (size_t d = 0; d < rank; ++d) {
      cuts[d].push_back(b->start[d]);
      cuts[d].push_back(b->start[d] + b->length[d]);
    }
  for (auto& c : cuts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  std::vector<size_t> cell(rank, 0);
  while (true) {
    bool inside_any = false;
    for (const OperandSlice* b : boxes) {
      bool in = true;
      for (size_t d = 0; d < rank && in; ++d) in = b->start[d] <= cuts[d][cell[d]] && cuts[d][cell[d]] < b->start[d] + b->length[d];
      if (in) {
        inside_any = true;
        break;
      }
    }
    if (inside_any) {
      int64_t v = 1;
      for (size_t d = 0; d < rank; ++d) v *= cuts[d][cell[d] + 1] - cuts[d][cell[d]];
      total += v;
    }
    size_t d = 0;
    while (d < rank && ++cell[d] + 1 >= cuts[d].size()) cell[d++] = 0;
    if (d == rank) break;
  }
  return total;
}

struct Touch {
  int tensor;
  int leaf;
  const OperandSlice* slice;
  bool operator<(const Touch& o) const { return std::tie(tensor, leaf) < std::tie(o.tensor, o.leaf); }
};

}  // namespace

void encode_memory(Encoder& e, std::vector<DeviceMemory>& per_device) {
  const Graph& g = e.g;
  const Plan& p = e.plan;
  const int64_t ndev = p.ngpus;
  per_device.assign(static_cast<size_t>(std::max<int64_t>(ndev, 0)), {});
  if (ndev <= 0 || ndev > (int64_t{1} << 20)) return;

  // Bytes per element: the tensor's dtype, or under mixed precision
  // (--precision fp16/bf16) 2 for every weight, gradient and activation.
  const int64_t mixed = e.opts.bytes_per_element;
  auto elem = [&](const TensorInfo& t) -> int64_t { return mixed > 0 ? mixed : dtype_bytes(t.dtype); };
  // Bytes a composite op's body makes (its own outputs excluded).
  std::unordered_map<int, int64_t> internal;
  auto internal_bytes = [&](int node) -> int64_t {
    auto it = internal.find(node);
    if (it != internal.end()) return it->second;
    const OpNode& n = g.node(node);
    int64_t total = 0;
    std::vector<int> stack(n.children.begin(), n.children.end());
    while (!stack.empty()) {
      const OpNode& c = g.node(stack.back());
      stack.pop_back();
      for (int ch : c.children) stack.push_back(ch);
      if (c.composite) continue;
      for (int t : c.outputs)
        if (std::find(n.outputs.begin(), n.outputs.end(), t) == n.outputs.end()) total += numel(g.tensor(t).shape) * elem(g.tensor(t));
    }
    internal[node] = total;
    return total;
  };
  auto share = [&](int leaf) {  // the fraction of its op's iteration space a leaf computes
    double f = 1;
    for (int x = leaf; p.subops[x].parent >= 0; x = p.subops[x].parent) f /= p.subops[x].split_num;
    return f;
  };
  int64_t slots = e.opts.optimizer == "adamw" ? 2 : (e.opts.momentum > 0 ? 1 : 0);
  const int64_t in_flight = e.pipelined ? std::max<int64_t>(1, std::min<int64_t>(e.opts.micro_batches, ndev)) : 1;

  // What each device touches, then per (tensor, device) the union.
  std::vector<std::vector<Touch>> params(ndev), acts(ndev);
  std::vector<std::map<int, int64_t>> by_directive(ndev);  // directive -> bytes
  std::vector<int64_t> transient(ndev, 0), working(ndev, 0);
  std::vector<int> transient_dir(ndev, -1), working_dir(ndev, -1);
  // Activation bytes of device d kept over a step, attributed to the
  // directive that placed them; a task schedule's extra micro-batches in
  // flight go to the schedule (so that an overflow names it).
  auto keep = [&](int64_t d, int dir, int64_t bytes) {
    if (e.stash_factor.empty()) {
      per_device[d].activations += bytes * in_flight;
      by_directive[d][dir] += bytes * in_flight;
      return;
    }
    double f = std::max(1.0, e.stash_factor[static_cast<size_t>(d)]);
    int64_t extra = static_cast<int64_t>(static_cast<double>(bytes) * (f - 1.0) + 0.5);
    per_device[d].activations += bytes + extra;
    by_directive[d][dir] += bytes;
    if (extra > 0) by_directive[d][e.stash_directive] += extra;
  };
  // Recompute regions (sema::recompute_regions, as lowering makes them):
  // a region keeps only the inputs it reads from outside itself; its
  // values all come back at once before the backward of its last op.
  const GradientFlow flow = gradient_flow(g, p);
  const RecomputeRegions regions = recompute_regions(g, p, flow);
  // Per device, the leaves of recompute regions: their values made again
  // by the region's replay and the moment of their own backward.
  // An op's backward on a device: every piece's backward runs before
  // their input gradients are collected, so the pieces' working sets add
  // up; a piece recomputed on its own frees its values after its backward,
  // so only the largest of those is live at once.
  struct Moment {
    int64_t input_grads = 0;  // every piece's, until they are collected
    int64_t piece = 0;        // the largest piece's own working set
    int64_t collected = 0;    // the buffers they are collected into: the pieces' parts,
    int64_t whole = 0;        // at most the whole inputs
    int64_t grad_in = 0;      // the output gradient's buffer the pieces read
    int dir = -1;
    void add(const Moment& m) {
      input_grads += m.input_grads;
      piece = std::max(piece, m.piece);
      collected += m.collected;
      whole = std::max(whole, m.whole);
      grad_in = std::max(grad_in, m.grad_in);
      dir = m.dir;
    }
    int64_t total() const { return input_grads + piece + std::min(collected, whole) + grad_in; }
  };
  struct RegionOp {
    int region, node;
    int64_t values;
    Moment moment;
    std::vector<std::pair<int, int64_t>> inputs;  // activations it reads: (tensor, bytes of its slice)
  };
  std::vector<std::vector<RegionOp>> region_ops(ndev);
  std::map<std::pair<int, int>, Moment> moments;  // (node, device), outside regions
  // Pieces of one op on one device (coshard): lowering recomputes each
  // such recomputed piece on its own, right before its backward, even
  // inside a region (lower_rank.cpp, own_recompute).
  std::map<std::pair<int, int>, int> pieces;  // (node, device) -> leaves
  for (int leaf : p.leaves())
    for (int d : p.subops[leaf].devices) ++pieces[{p.subops[leaf].node, d}];
  for (int leaf : p.leaves()) {
    CheckDeadline::poll();
    const SubOp& s = p.subops[leaf];
    const OpNode& n = g.node(s.node);
    const int region = regions.region_of_node[static_cast<size_t>(s.node)];
    int64_t inner = n.composite ? static_cast<int64_t>(static_cast<double>(internal_bytes(s.node)) * share(leaf)) : 0;
    int64_t out_bytes = 0, in_bytes = 0, in_whole = 0, in_grads = 0;
    for (size_t k = 0; k < s.outputs.size() && k < n.outputs.size(); ++k) {
      const OperandSlice& sl = s.outputs[k];
      if (!sl.tensor) continue;
      int64_t v = elem(g.tensor(n.outputs[k]));
      for (int64_t l : sl.length) v *= l;
      out_bytes += v;
    }
    for (size_t k = 0; k < s.inputs.size() && k < n.inputs.size(); ++k) {
      const OperandSlice& sl = s.inputs[k];
      // A weight is read in place, and its gradient is counted with the gradients.
      if (!sl.tensor || g.tensor(n.inputs[k]).kind == TensorKind::Param) continue;
      int64_t v = elem(g.tensor(n.inputs[k]));
      for (int64_t l : sl.length) v *= l;
      in_bytes += v;
      // Only an input that needs a gradient gets one (lowering differentiates for those).
      if (g.tensor(n.inputs[k]).kind == TensorKind::Activation && flow.requires_grad[static_cast<size_t>(n.inputs[k])]) {
        in_grads += v;
        in_whole += numel(g.tensor(n.inputs[k]).shape) * elem(g.tensor(n.inputs[k]));
      }
    }
    // The working set of the kernel's backward beyond what is kept for it:
    // its output gradients and its body's (freed after their last reader),
    // and its input gradients (kept until every piece of the op on the
    // device has run its backward, then collected into one buffer); a
    // sub-op recomputed on its own has its values back then too (its
    // outputs, in the kernel and a buffer, and its body's).
    const int64_t work = out_bytes + inner;
    // A piece reading part of an activation that the op's other pieces on
    // its device read too holds a copy of its part (a kernel reads in place
    // only a buffer's whole piece; backend/lowering slice_in_place).
    int64_t part_copies = 0;
    for (size_t k = 0; k < s.inputs.size() && k < n.inputs.size(); ++k) {
      const OperandSlice& sl = s.inputs[k];
      if (!sl.tensor || g.tensor(n.inputs[k]).kind == TensorKind::Param) continue;
      int64_t v = 1;
      for (int64_t l : sl.length) v *= l;
      if (v < numel(g.tensor(n.inputs[k]).shape)) part_copies += v * elem(g.tensor(n.inputs[k]));
    }
    for (int d : s.devices) {
      if (d < 0 || d >= ndev) continue;  // reported by the split pass
      const bool several = pieces[{s.node, d}] > 1;
      const bool own = s.recompute && (region < 0 || several);
      const int64_t again = own ? 2 * out_bytes + inner : 0;
      const int64_t copies = several ? part_copies : 0;
      if (region >= 0) {
        // The kernel's outputs and the buffers they go to, its body's
        // values; a piece recomputed on its own leaves only the buffer.
        std::vector<std::pair<int, int64_t>> reads;
        for (size_t k = 0; k < s.inputs.size() && k < n.inputs.size(); ++k) {
          const OperandSlice& sl = s.inputs[k];
          if (!sl.tensor || g.tensor(n.inputs[k]).kind != TensorKind::Activation) continue;
          int64_t v = elem(g.tensor(n.inputs[k]));
          for (int64_t l : sl.length) v *= l;
          reads.emplace_back(n.inputs[k], v);
        }
        region_ops[static_cast<size_t>(d)].push_back({region, s.node, (own ? out_bytes : 2 * out_bytes + inner) + copies,
                                                      Moment{in_grads, work + again, in_grads, in_whole, out_bytes, e.place_of(leaf)}, std::move(reads)});
      } else {
        moments[{s.node, d}].add(Moment{in_grads, work + again, in_grads, in_whole, out_bytes, e.place_of(leaf)});
      }
      for (size_t k = 0; k < s.inputs.size() && k < n.inputs.size(); ++k) {
        if (!s.inputs[k].tensor) continue;
        const TensorInfo& t = g.tensor(n.inputs[k]);
        if (t.kind != TensorKind::Param && region >= 0 && t.producer >= 0 && regions.region_of_node[static_cast<size_t>(t.producer)] == region)
          continue;  // made again by the region's recompute
        (t.kind == TensorKind::Param ? params : acts)[d].push_back({t.id, leaf, &s.inputs[k]});
      }
      if (region >= 0) continue;
      if (copies > 0) keep(d, e.place_of(leaf), copies);
      if (s.recompute) continue;  // its moment is in `working`
      for (size_t k = 0; k < s.outputs.size() && k < n.outputs.size(); ++k)
        if (s.outputs[k].tensor) acts[d].push_back({n.outputs[k], leaf, &s.outputs[k]});
      // The kernel keeps its own copy of its outputs (and its body's values)
      // for its backward, beside the buffer its consumers read.
      if (out_bytes + inner > 0) keep(d, e.place_of(leaf), out_bytes + inner);
    }
  }
  // zero1: a parameter box held by c devices keeps 1/c of its optimizer
  // state on each (lowering shards it when a dimension divides by c).
  std::map<std::tuple<int, std::vector<int64_t>, std::vector<int64_t>>, std::set<int64_t>> holders;
  if (!p.zero1_params.empty())
    for (int64_t d = 0; d < ndev; ++d)
      for (const Touch& t : params[d])
        if (p.zero1(t.tensor)) holders[{t.tensor, t.slice->start, t.slice->length}].insert(d);
  auto zero1_copies = [&](int tensor, const std::vector<const OperandSlice*>& boxes) -> int64_t {
    if (!p.zero1(tensor)) return 1;
    for (const OperandSlice* b : boxes)
      if (b->start != boxes[0]->start || b->length != boxes[0]->length) return 1;
    auto it = holders.find({tensor, boxes[0]->start, boxes[0]->length});
    int64_t c = it == holders.end() ? 1 : static_cast<int64_t>(it->second.size());
    for (int64_t l : boxes[0]->length)
      if (c > 1 && l >= c && l % c == 0) return c;
    return 1;
  };
  auto add_unions = [&](std::vector<Touch>& touches, int d, bool is_param) {
    std::sort(touches.begin(), touches.end());
    for (size_t i = 0; i < touches.size();) {
      size_t j = i;
      std::vector<const OperandSlice*> boxes;
      while (j < touches.size() && touches[j].tensor == touches[i].tensor) boxes.push_back(touches[j++].slice);
      const TensorInfo& t = g.tensor(touches[i].tensor);
      const int64_t elems = union_volume(boxes);
      int64_t bytes = elems * elem(t);
      int dir = e.place_of(touches[i].leaf);  // the first leaf touching it
      if (is_param && (t.buffer || g.inference)) {
        per_device[d].weights += bytes;  // a buffer (or any weight under --eval) has no gradient and no optimizer state
        by_directive[d][dir] += bytes;
      } else if (is_param) {
        // The accumulated gradient (zero1: of the shard this device
        // updates) and a micro-batch's contribution to it (lowering adds
        // the contributions in at the end of each micro-batch's backward,
        // so all of them are live at once then); zero1 keeps the shard it
        // updates beside the piece.
        DeviceMemory& m = per_device[d];
        const int64_t copies = zero1_copies(t.id, boxes);
        const int64_t shard = copies > 1 ? bytes / copies : 0;
        m.weights += bytes + shard;
        m.gradients += bytes + bytes / copies;
        // fp32 moments; under mixed precision an fp32 master copy too.
        int64_t state = (slots + (mixed > 0 && mixed < 4 ? 1 : 0)) * elems * 4 / copies;
        m.optimizer += state;
        by_directive[d][dir] += 2 * bytes + shard + bytes / copies + state;
      } else {
        keep(d, dir, bytes);
      }
      i = j;
    }
  };
  for (const auto& [key, m] : moments) {
    const int64_t d = key.second;
    if (d < 0 || d >= ndev) continue;
    if (m.total() > working[d]) {
      working[d] = m.total();
      working_dir[d] = m.dir;
    }
  }
  // A region's backward runs its ops in reverse, each freeing its kernels
  // after its backward: while op i's backward runs, the values of the ops
  // up to i are live beside i's moment, and so are the gradients of
  // tensors made before i and read after it (a residual's gradient waits
  // for the op that made the residual). The peak is the largest such sum.
  for (int64_t d = 0; d < ndev; ++d) {
    std::vector<RegionOp>& ops = region_ops[static_cast<size_t>(d)];
    std::stable_sort(ops.begin(), ops.end(), [](const RegionOp& a, const RegionOp& b) { return std::tie(a.region, a.node) < std::tie(b.region, b.node); });
    for (size_t i = 0; i < ops.size();) {
      // The region's ops in order, and each activation's gradient span.
      std::map<int, int> pos;  // node -> position
      size_t end = i;
      for (; end < ops.size() && ops[end].region == ops[i].region; ++end) pos.emplace(ops[end].node, static_cast<int>(pos.size()));
      std::map<int, std::pair<int, int64_t>> last;  // tensor -> (its last reader's position, gradient bytes)
      for (size_t x = i; x < end; ++x)
        for (const auto& [t, bytes] : ops[x].inputs) {
          auto& l = last[t];
          l.first = std::max(l.first, pos[ops[x].node]);
          l.second = std::max(l.second, bytes);
        }
      auto frontier = [&](int q) {
        int64_t live = 0;
        for (const auto& [t, l] : last) {
          int producer = g.tensor(t).producer;
          auto it = producer >= 0 ? pos.find(producer) : pos.end();
          int made = it == pos.end() ? -1 : it->second;
          if (made < q && q < l.first) live += l.second;
        }
        return live;
      };
      int64_t prefix = 0;
      size_t j = i;
      for (; j < ops.size() && ops[j].region == ops[i].region;) {
        size_t k = j;
        Moment op;
        for (; k < ops.size() && ops[k].region == ops[i].region && ops[k].node == ops[j].node; ++k) {
          prefix += ops[k].values;
          op.add(ops[k].moment);
        }
        const int64_t moment = op.total() + frontier(pos[ops[j].node]);
        const int dir = op.dir;
        if (prefix + moment > transient[d]) {
          transient[d] = prefix + moment;
          transient_dir[d] = dir;
        }
        j = k;
      }
      i = j;
    }
  }
  for (int64_t d = 0; d < ndev; ++d) {
    add_unions(params[d], static_cast<int>(d), true);
    add_unions(acts[d], static_cast<int>(d), false);
    std::vector<Touch>().swap(params[d]);
    std::vector<Touch>().swap(acts[d]);
    // One moment at a time: a region's backward, or another kernel's.
    if (working_dir[d] >= 0 && working[d] > transient[d]) {
      per_device[d].activations += working[d];
      by_directive[d][working_dir[d]] += working[d];
    } else if (transient_dir[d] >= 0) {
      per_device[d].activations += transient[d];
      by_directive[d][transient_dir[d]] += transient[d];
    }
  }

  if (e.opts.device_memory < 0) return;
  const int64_t cap = e.opts.device_memory;
  auto shared = std::make_shared<std::vector<std::map<int, int64_t>>>(std::move(by_directive));
  for (int64_t d = 0; d < ndev; ++d) {
    z3::expr sum = e.ctx.int_val(0);
    for (const auto& [dir, bytes] : (*shared)[d]) sum = sum + z3::ite(e.literal(dir), e.ctx.int_val(bytes), e.ctx.int_val(0));
    e.solver.add(sum <= e.ctx.int_val(cap));
    ++e.stats.tracked;
  }
  std::vector<DeviceMemory> totals = per_device;
  std::string cap_label = e.opts.memory_label.empty() ? format_bytes(cap) : e.opts.memory_label;
  std::vector<double> flight = e.stash_factor;
  e.explain_with([&e, shared, totals, cap, cap_label, flight](const std::set<int>& core) -> std::optional<Conflict> {
    // The device whose core-attributed bytes exceed the capacity most.
    int worst = -1;
    int64_t worst_bytes = cap;
    for (size_t d = 0; d < shared->size(); ++d) {
      int64_t in_core = 0;
      for (const auto& [dir, bytes] : (*shared)[d])
        if (core.count(dir)) in_core += bytes;
      if (in_core > worst_bytes) {
        worst_bytes = in_core;
        worst = static_cast<int>(d);
      }
    }
    if (worst < 0) return std::nullopt;
    const DeviceMemory& m = totals[worst];
    Conflict c;
    c.message = "device " + std::to_string(worst) + " needs " + format_bytes(m.total()) + " (weights " + format_bytes(m.weights) +
                ", gradients " + format_bytes(m.gradients) + ", optimizer state " + format_bytes(m.optimizer) + ", activations " +
                format_bytes(m.activations) +
                (flight.empty() ? std::string()
                                : ", " + std::to_string(static_cast<int>(std::max(1.0, flight[static_cast<size_t>(worst)]) * 10 + 0.5) / 10) + "." +
                                      std::to_string(static_cast<int>(std::max(1.0, flight[static_cast<size_t>(worst)]) * 10 + 0.5) % 10) +
                                      " micro-batch(es) of them in flight under the schedule") +
                ") but has " + cap_label;
    for (const auto& [dir, bytes] : (*shared)[worst])
      if (core.count(dir)) {
        c.directives.push_back(dir);
        c.notes[dir] = "places " + format_bytes(bytes) + " on device " + std::to_string(worst);
      }
    c.cite_first = true;
    (void)e;
    return c;
  });
}

}  // namespace nns::sema::check
