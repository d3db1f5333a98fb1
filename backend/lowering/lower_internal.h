// Internal to the lowering library: the whole-plan analysis every rank's
// lowering shares (op order, layouts, edges, gradients, buckets, group
// indices), the table of interned collective groups, and the state of one
// rank under construction (RankBuild) with the passes over it. lower_plan.cpp
// builds the analysis once; lower_rank.cpp runs the passes for each rank.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <functional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/lowering/comm_pieces.h"
#include "backend/lowering/lower_plan.h"

namespace nns::backend::detail {

class KernelCache;
class RankSymmetry;
using sema::OperandSlice;
using sema::Shape;

[[noreturn]] inline void fail(const std::string& msg) { throw LoweringError(msg); }

// The whole-plan analysis every rank shares: op order, layouts, edges,
// which tensors need gradients, buckets, interned groups.
struct PlanAnalysis {
  struct Op {
    int node = -1;
    std::vector<Layout> in_layout, out_layout, grad_in_layout;
    std::vector<const CommEdge*> in_edge, grad_edge;  // per input; null: none
    std::map<int, std::vector<int>> leaves_on;  // device -> its leaves of this op, in leaf order
    bool backward = false;
  };
  const sema::Graph& g;
  const sema::Plan& plan;
  const CommPlan& cp;
  std::vector<Op> ops;
  std::map<int, Layout> storage;  // params and inputs: the layout they live in
  std::vector<bool> requires_grad;
  std::vector<int> op_of_node;  // node -> index into ops (-1: not a top-level op)
  sema::RecomputeRegions regions;  // recompute regions (activation checkpointing), by node
  std::vector<int> readers;        // per tensor: how many op inputs read it through their own edge (not a shared one)
  std::unordered_map<int, size_t> first_reader;  // parameter -> the first op with a backward that reads it
  std::map<const CommEdge*, int> bucket_of;  // deferred parameter-gradient edges -> bucket (key order)
  int buckets = 0;
  std::vector<const AdapterStep*> bucket_step;  // per bucket: the allreduce step of one of its edges (its groups)
  // zero1 (Plan::zero1_params): buckets whose gradients are reduce-scattered
  // into shards instead of allreduced, the dimension each sharded
  // parameter's piece is cut along, and why a zero1 parameter is not sharded.
  std::vector<bool> bucket_zero1;
  std::map<int, int> zero1_dim;  // tensor -> dim of its storage piece cut into group-size shards
  std::vector<std::string> zero1_notes;
  // Per adapter step: the index of the group each device is in (-1: none),
  // built once and shared by every rank (a linear search per rank made a
  // 1024-device lowering quadratic). Read-only while ranks are lowered.
  std::unordered_map<const AdapterStep*, std::vector<int>> group_index;
  void index_groups() {
    for (const CommEdge& e : cp.edges)
      for (const AdapterStep& st : e.adapter.steps) {
        std::vector<int>& idx = group_index[&st];
        for (size_t gi = 0; gi < st.groups.size(); ++gi)
          for (int d : st.groups[gi]) {
            if (d >= static_cast<int>(idx.size())) idx.resize(static_cast<size_t>(d) + 1, -1);
            if (idx[static_cast<size_t>(d)] < 0) idx[static_cast<size_t>(d)] = static_cast<int>(gi);
          }
      }
  }
  const std::vector<int>* devices_of_group(const AdapterStep& st, int device) const {
    auto it = group_index.find(&st);
    if (it == group_index.end()) return nullptr;
    const std::vector<int>& idx = it->second;
    if (device < 0 || device >= static_cast<int>(idx.size()) || idx[static_cast<size_t>(device)] < 0) return nullptr;
    return &st.groups[static_cast<size_t>(idx[static_cast<size_t>(device)])];
  }

  // The plan's rank symmetry (rank_symmetry.h), looked for once.
  mutable std::mutex symmetry_mu;
  mutable bool symmetry_looked = false;
  mutable int symmetry_devices = 0;
  mutable std::shared_ptr<const RankSymmetry> symmetry;

  PlanAnalysis(const sema::Graph& graph, const sema::Plan& p, const CommPlan& c) : g(graph), plan(p), cp(c) {}

  static bool deferrable(const CommEdge& e) { return bucketed(e); }

  void run() {
    for (const CommEdge& e : cp.edges)
      if (!e.note.empty()) fail("plan " + plan.name + ": tensor %" + std::to_string(e.tensor) + " (" + g.tensor(e.tensor).name + "): " + e.note);
    std::vector<int> order;
    for (size_t n = 0; n < plan.root_of_node.size(); ++n)
      if (plan.root_of_node[n] >= 0) order.push_back(static_cast<int>(n));
    sema::GradientFlow flow = sema::gradient_flow(g, plan);
    regions = sema::recompute_regions(g, plan, flow);
    requires_grad = std::move(flow.requires_grad);
    std::map<std::pair<int, int>, const CommEdge*> fwd, bwd;  // (node, input) -> edge
    for (const CommEdge& e : cp.edges) (e.backward ? bwd : fwd)[{e.backward ? e.producer : e.consumer, e.input_index}] = &e;
    op_of_node.assign(g.nodes().size(), -1);
    readers.assign(g.tensors().size(), 0);
    // Every op's input and output layouts, read on all cores and once per
    // distinct content (comm_pieces.h), as the derivation reads them.
    // Those the derivation kept (CommPlan::reads), when it read this plan.
    const OperandReads* kept = cp.reads && cp.reads->of(g, plan) ? cp.reads.get() : nullptr;
    OperandLayouts reads(g, plan);
    if (!kept) reads.read_all(false);
    for (int n : order) {
      op_of_node[static_cast<size_t>(n)] = static_cast<int>(ops.size());
      ops.push_back(analyse_op(n, fwd, bwd, flow, reads, kept));
      // An input that shares another's transfer reads what it received.
      for (size_t k = 0; k < g.node(n).inputs.size(); ++k)
        if (!ops.back().in_edge[k] || ops.back().in_edge[k]->shared_with < 0)
          ++readers[static_cast<size_t>(g.node(n).inputs[k])];
    }
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].backward)
        for (int t : g.node(ops[i].node).inputs)
          if (g.tensor(t).kind == sema::TensorKind::Param) first_reader.emplace(t, i);
    for (auto& [t, l] : storage)
      for (const LayoutFactor& f : l.factors)
        if (f.kind == LayoutFactor::V) fail(g.tensor(t).name + ": a plan that splits a parameter or input by value is not executable");
    // Buckets: numbered in the order of their keys (the device groups);
    // zero1 parameters that can be sharded go to buckets of their own.
    plan_zero1();
    std::map<std::string, std::vector<const CommEdge*>> by_key;
    for (const Op& op : ops)
      for (const CommEdge* e : op.grad_edge)
        if (e && deferrable(*e)) {
          std::string key = zero1_dim.count(e->tensor) ? "zero1 " : "";
          for (const auto& grp : e->adapter.steps[0].groups) key += group_text(grp);
          by_key[key].push_back(e);
        }
    for (auto& [key, edges] : by_key) {
      for (const CommEdge* e : edges) bucket_of[e] = buckets;
      bucket_step.push_back(&edges.front()->adapter.steps[0]);
      bucket_zero1.push_back(zero1_dim.count(edges.front()->tensor) > 0);
      ++buckets;
    }
    index_groups();
  }

  // Which zero1 parameters are sharded, and along which dim: every gradient
  // edge of the parameter is one deferred allreduce, and one dimension of
  // its storage piece divides into as many equal shards as the allreduce
  // groups have devices (the collectives move equal blocks).
  void plan_zero1() {
    for (int t : plan.zero1_params) {
      const std::string& name = g.tensor(t).name;
      std::vector<const CommEdge*> edges;
      for (const Op& op : ops)
        for (size_t k = 0; k < op.grad_edge.size(); ++k)
          if (op.grad_edge[k] && op.grad_edge[k]->tensor == t) edges.push_back(op.grad_edge[k]);
      if (!requires_grad[static_cast<size_t>(t)] || edges.empty()) {
        zero1_notes.push_back("zero1: " + name + " is not sharded: it gets no gradient");
        continue;
      }
      bool all_deferred = std::all_of(edges.begin(), edges.end(), [](const CommEdge* e) { return deferrable(*e); });
      if (!all_deferred) {
        zero1_notes.push_back("zero1: " + name + " is not sharded: its gradient is not allreduced over a data-parallel group");
        continue;
      }
      const Layout& layout = storage.at(t);
      int dim = -1;
      size_t k = 0;
      for (const CommEdge* e : edges)
        for (const auto& grp : e->adapter.steps[0].groups) {
          if (k == 0) k = grp.size();
          if (grp.size() != k) k = 0;
        }
      if (k > 1) {
        Piece pc = piece_of(layout, edges.front()->adapter.steps[0].groups.front().front(), g.tensor(t).shape);
        for (size_t d = 0; d < pc.length.size() && dim < 0; ++d)
          if (pc.length[d] >= static_cast<int64_t>(k) && pc.length[d] % static_cast<int64_t>(k) == 0) dim = static_cast<int>(d);
        if (dim < 0)
          zero1_notes.push_back("zero1: " + name + " is not sharded: no dimension of its piece " + region_text(pc.start, pc.length) +
                                " divides into " + std::to_string(k) + " equal shards");
      } else {
        zero1_notes.push_back("zero1: " + name + " is not sharded: its gradient groups differ in size");
      }
      if (dim >= 0) zero1_dim[t] = dim;
    }
  }

  Op analyse_op(int n, const std::map<std::pair<int, int>, const CommEdge*>& fwd,
                const std::map<std::pair<int, int>, const CommEdge*>& bwd, const sema::GradientFlow& flow,
                OperandLayouts& reads, const OperandReads* kept) {
    const sema::OpNode& node = g.node(n);
    Op op;
    op.node = n;
    auto layout = [&](LayoutRead r, const char* side, size_t k) {
      if (!r.ok) fail(node.name + " " + side + " " + std::to_string(k) + ": " + r.why + " (not executable yet)");
      return std::move(r.layout);
    };
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int t = node.inputs[k];
      const sema::TensorInfo& info = g.tensor(t);
      const LayoutRead* in = kept ? kept->input(n, k) : nullptr;
      op.in_layout.push_back(layout(in ? *in : reads.input(n, k), "input", k));
      auto fe = fwd.find({n, static_cast<int>(k)});
      const CommEdge* in_edge = fe == fwd.end() ? nullptr : fe->second;
      if (info.kind != sema::TensorKind::Activation && !storage.count(t)) {
        if (in_edge) fail("internal: first consumer of " + info.name + " has an edge");
        storage[t] = op.in_layout.back();
      }
      if (info.kind == sema::TensorKind::Activation && !in_edge) fail("internal: no edge into " + node.name);
      op.in_edge.push_back(in_edge);
      bool wants = requires_grad[t] && info.kind != sema::TensorKind::Input;
      auto be = wants ? bwd.find({n, static_cast<int>(k)}) : bwd.end();
      const CommEdge* grad_edge = be == bwd.end() ? nullptr : be->second;
      if (wants && !grad_edge) fail("internal: no gradient edge for input " + std::to_string(k) + " of " + node.name);
      op.grad_edge.push_back(grad_edge);
      op.grad_in_layout.push_back(grad_edge ? grad_edge->from : Layout{});
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const LayoutRead* out = kept ? kept->output(n, o) : nullptr;
      op.out_layout.push_back(layout(out ? *out : reads.output(n, o), "output", o));
    }
    op.backward = flow.backward[static_cast<size_t>(n)];
    for (int leaf : plan.leaves_of(n)) {
      const std::vector<int>& devs = plan.subops[leaf].devices;
      for (size_t i = 0; i < devs.size(); ++i)
        if (std::find(devs.begin(), devs.begin() + static_cast<long>(i), devs[i]) == devs.begin() + static_cast<long>(i)) op.leaves_on[devs[i]].push_back(leaf);
    }
    return op;
  }
};

// Interns collective groups (global ranks) so that every rank's
// instructions name the same group by the same id.
// Ranks are lowered on several threads; interning is serialised.
struct GroupTable {
  std::mutex mu;
  std::vector<std::vector<int>>& groups;
  std::map<std::vector<int>, int> ids;
  struct KeyHash {
    size_t operator()(const std::pair<const std::vector<int>*, int>& k) const {
      return std::hash<const void*>()(k.first) * 31 + static_cast<size_t>(k.second);
    }
  };
  std::unordered_map<std::pair<const std::vector<int>*, int>, int, KeyHash> by_devices;  // (device group of a step, replica) -> id
  int world = -1;
  int intern(const std::vector<int>& g) {
    std::lock_guard<std::mutex> lock(mu);
    return intern_locked(g);
  }
  int intern_locked(const std::vector<int>& g) {
    auto [it, fresh] = ids.emplace(g, static_cast<int>(groups.size()));
    if (fresh) groups.push_back(g);
    return it->second;
  }
};

// ---- which ops a rank walks (lower_walk.cpp) ---------------------------------------------------
// Every rank derives its program from one global sequence (lower_plan.h),
// but most of that sequence is about other ranks: on a 64-stage pipeline a
// rank runs 1/64 of the ops, and walking the rest cost ranks x ops x
// micro-batches, what kept simulating Megatron's deep pipelines at minutes
// (issue 31). A rank walks only the ops it can emit something for. The one
// thing the rest of the walk made was the send/recv tag counter, which must
// agree on both ends of a transfer: it is the same on every rank at every
// point of the sequence, so one walk by a rank that holds nothing records it
// at each op visit, and the others take it from there.
struct WalkPlan {
  enum Phase { Forward = 0, Backward = 1, Recompute = 2 };
  int ops = 0, micro_batches = 0;
  // [device][op]: the device runs a piece of op, holds a piece of one of
  // its operands or input gradients, or takes part in an edge of it (or in
  // an edge sharing a transfer with one of its edges, or in any op of its
  // recompute region). Only such a device can emit anything for the op.
  std::vector<std::vector<char>> walks;
  // The tag counter when every rank's full walk enters op `op` in `phase`
  // of micro-batch mb, and after the last micro-batch.
  // Entries no rank visits (an op without backward, recompute outside a
  // region) stay kUnrecorded.
  std::vector<uint32_t> tag_at;
  uint32_t tag_end = 0;
  static constexpr uint32_t kUnrecorded = 0xffffffffu;
  // Micro-batch replay (lower_replay.cpp): every recorded tag of micro-batch
  // m in 2 .. M-2 is micro-batch 1's plus (m - 1) * middle_tags.
  bool middle_tags_uniform = false;
  uint32_t middle_tags = 0;
  size_t index(int mb, int op, Phase phase) const {
    return (static_cast<size_t>(mb) * static_cast<size_t>(ops) + static_cast<size_t>(op)) * 3 +
           static_cast<size_t>(phase);
  }
};

// ---- one rank under construction ------------------------------------------------------------
// The state the lowering passes of one rank (lower_rank.cpp lists them)
// read and extend: the program so far and the maps that tie the plan's
// tensors to its buffers. Plain data with a few helpers every pass uses,
// so that any pass can be run, dumped and tested on its own.
struct RankBuild {
  RankBuild(const PlanAnalysis& a, const sema::TrainSpec& s, const LowerOptions& o, GroupTable& gt, int devices_per_replica, int rank)
      : A(a), g(a.g), plan(a.plan), spec(s), opts(o), groups(gt), devices(devices_per_replica) {
    P.rank = rank;
    P.device = rank % devices_per_replica;
    P.replica = rank / devices_per_replica;
  }

  const PlanAnalysis& A;
  const sema::Graph& g;
  const sema::Plan& plan;
  const sema::TrainSpec& spec;
  const LowerOptions& opts;
  GroupTable& groups;
  int devices;  // per plan replica
  RankProgram P;
  // lower_walk.cpp: the ops this rank walks and the tags it takes (null:
  // every op, counting tags itself, as the rank recording a WalkPlan and
  // the tests do); `recording`: the walk that fills in walk's tags.
  const WalkPlan* walk = nullptr;
  WalkPlan* recording = nullptr;

  // Kernels (lower_kernels.cpp); the lowering's kernel cache (null: none;
  // kernel_cache.h), used by the one thread that elaborates.
  KernelCache* kernel_cache = nullptr;
  // LowerOptions::shared_kernel_bodies: per kernel key, the kernel of this
  // program whose local tensors and nodes later kernels of the key share.
  std::unordered_map<std::string, int> body_kernel;
  // Kernels (lower_kernels.cpp).
  std::vector<std::vector<int>> op_kernels;      // per analysed op: this rank's kernels
  std::unordered_map<int, int> param_buf;        // parameter tensor -> its Param buffer
  std::map<int, int> slot_of;                    // parameter tensor -> index into P.params
  // Emission (lower_emit.cpp, lower_edges.cpp).
  std::unordered_map<int, int> accum_buf;        // parameter tensor -> its Accum buffer
  std::map<std::pair<int, int>, int> bucket_buf;  // (bucket, tensor) -> buffer
  uint32_t tag = 0;                              // the last send/recv tag
  // Traffic once (CommEdge::shared_with, per_step). What a carrier edge's
  // adapter left on this rank, by (micro-batch, -1 for a per-step edge;
  // edge index): its sharers and later micro-batches read it. Backward: the
  // sharers' gradient shares summed until their carrier runs, by
  // (micro-batch, carrier edge); a parameter gradient edge's shares summed
  // over the micro-batches, by edge.
  std::map<std::pair<int, int>, int> received, pending_share;
  std::map<int, int> step_grad;
  // Recompute regions: the buffer each region op read for an input from
  // outside its region in forward, (mb, node, input) -> buffer, read again
  // by the region's recompute; the forward values of the micro-batch.
  std::map<std::tuple<int, int, int>, int> region_inputs;
  const std::unordered_map<int, int>* fwd_value = nullptr;
  // Blocks: the instructions of one micro-batch's forward (or backward, or
  // weight-gradient backward) of one op, as emission makes them in graph
  // order; the schedule pass then orders them by the plan's schedule.
  struct Block {
    int mb = -1, op = -1;  // op: index into A.ops; -1 for the micro-batch's gradient accumulation
    sema::PipeTask::Phase phase = sema::PipeTask::F;
    int from_op = -1;  // a forward edge's adapter: the producing op (its task owns the block on ranks that run it)
  };
  std::vector<Block> blocks;
  std::vector<int> block_of;  // per instruction (until the schedule pass)
  int cur_block = -1;
  // zero1 (lower_step_end.cpp): a sharded parameter's group and shards
  // (per member of the group, in member order).
  struct Zero1Shards {
    int group = -1;
    std::vector<Piece> shards;
  };
  std::map<int, Zero1Shards> zero1;  // tensor -> its shards
  // Collective geometries by content hash (add_geom): an edge's step has the
  // same blocks in every micro-batch, stored once per program.
  std::unordered_map<uint64_t, std::vector<int>> geom_ids;

  int device() const { return P.device; }
  int grank(int dev) const { return P.replica * devices + dev; }
  // A buffer's current piece: its box never changes; its partial-sum and
  // copy labels do (an allreduce sums the parts in place).
  Piece& label(int b) { return P.buffers[static_cast<size_t>(b)].piece; }
  int new_buffer(BufferDecl::Role role, int tensor, int mb, Piece piece) {
    P.buffers.push_back(BufferDecl{role, tensor, mb, piece});
    return static_cast<int>(P.buffers.size()) - 1;
  }
  PInstr& emit(PInstr::Kind kind, int mb);
  // The index of `geom` in P.geoms, added unless an equal one is there.
  int add_geom(CollectiveGeom&& geom);
  void open_block(int mb, int op, sema::PipeTask::Phase phase, int from_op = -1) {
    close_blocks();
    blocks.push_back({mb, op, phase, from_op});
    cur_block = static_cast<int>(blocks.size()) - 1;
  }
  // Every instruction emitted since the last call belongs to the current block.
  void close_blocks() { block_of.resize(P.instrs.size(), cur_block); }
  // The plan segment (pipeline stage) of a top-level op; -1: none.
  int segment_of(int node) const {
    return node < static_cast<int>(plan.segment_of_node.size()) ? plan.segment_of_node[static_cast<size_t>(node)] : -1;
  }
  // The id of a device group of an adapter step, in global ranks (cached:
  // a 1024-device group is built and compared once per replica, not per rank).
  int group_of(const std::vector<int>& devs);
  int edge_index(const CommEdge& e) const { return static_cast<int>(&e - A.cp.edges.data()); }
  // The member devices of the group of `st` this device is in (null: none).
  const std::vector<int>* my_devices(const AdapterStep& st) const { return A.devices_of_group(st, device()); }
};

// `scale` of reading `want` out of a buffer labelled `have`: a value part
// cut finer is scaled so that the parts sum to the whole (gradients read
// the whole value: ignore_value). `what` builds the message only on failure
// (lowering 1024 ranks runs this millions of times); so does `where`, the
// location of the directive a user-caused failure points at.
struct NoDirective {
  front::SourceLoc operator()() const { return {}; }
};
template <class What, class Where = NoDirective>
float value_scale(const Piece& have, const Piece& want, bool ignore_value, const What& what, const Where& where = {}) {
  if (!contains(have, want.start, want.length))
    fail("internal: " + what() + ": slice " + region_text(want.start, want.length) + " is not inside the piece " + region_text(have.start, have.length) +
         " this rank holds");
  if (ignore_value || want.value_parts == have.value_parts) return 1.f;
  if (want.value_parts % have.value_parts != 0)
    throw LoweringError(what() + ": value part " + std::to_string(want.value_index) + "/" + std::to_string(want.value_parts) +
                            " cannot be cut from a piece split into " + std::to_string(have.value_parts) + " parts",
                        where());
  return static_cast<float>(have.value_parts) / static_cast<float>(want.value_parts);
}

// The directive a sub-op's slice comes from: the nearest split (from the
// leaf up; with `split_id`, the nearest split by that identifier, e.g.
// "value") that has a location, else the leaf's assign.
front::SourceLoc directive_of(const sema::Plan& plan, int leaf, const std::string& split_id = "");

// lower_replay.cpp: micro-batch 1's emission, recorded and checked, copied
// for micro-batches 2 .. M-2 (why that is their emission: the file's
// comment).
struct MicroBatchTemplate {
  bool valid = false;
  int b0 = 0, b1 = 0;              // the buffers micro-batch 1 made
  size_t i0 = 0, i1 = 0;           // its instructions
  size_t k0 = 0, k1 = 0;           // its blocks
  std::vector<Piece> before;       // labels of the buffers made before it, until checked
  std::vector<size_t> persistent;  // sizes of the persistent state before it
  void begin(RankBuild& R);
  void end(RankBuild& R);  // sets valid
  void replay(RankBuild& R, int mb) const;
  std::vector<size_t> persistent_state(const RankBuild& R) const;
};
// Whether R may replay micro-batches (a walk with uniform tags, at least
// four micro-batches, neither every_micro_batch nor walk_every_op).
bool replay_allowed(const RankBuild& R);
// Fills in WalkPlan::middle_tags(_uniform) once its tags are recorded.
void set_middle_tags(WalkPlan& w);

// replica_rename.cpp: the ranks of replica 0 that `wanted` needs (each
// rank's device, in order of first need), and, once they are lowered into
// lp.programs in that order, lp.programs made `wanted`'s: replica 0's
// program of each rank's device, renamed to the rank's replica.
std::vector<int> replica0_ranks(const std::vector<int>& wanted, int devices);
void rename_replicas(LoweredPlan& lp, GroupTable& groups, const std::vector<int>& wanted);

// ---- the passes, in the order lower_rank() runs them -----------------------------------------
// lower_kernels.cpp: this rank's kernels (sub-ops elaborated on their
// slices, backward differentiated, B/W split) and parameter pieces.
void make_kernels(RankBuild& R);
void make_params(RankBuild& R);
// lower_emit.cpp: every micro-batch's forward and backward in graph order,
// as blocks (adapters, send/recv, recompute, loss seed, gradient sums).
void emit_micro_batches(RankBuild& R);
// Adds gradient `from` into the step's sum of parameter `tensor` (made on first use).
void accumulate_param_gradient(RankBuild& R, int tensor, int from, int mb);
void place_replica_averages(RankBuild& R);
// lower_edges.cpp: edge `e`'s adapter applied to `src` (this rank's piece
// in e.from, -1 when it holds none); returns its buffer in e.to (-1: none).
// `stay`: every instruction in the current block (a region's recompute).
int emit_adapter(RankBuild& R, const CommEdge& e, int src, int mb, bool stay = false);
// A copy of `buf` holding exactly `want` (a new buffer), or `buf`
// relabelled when it already holds that box and value split.
int reshape_to(RankBuild& R, int buf, const Piece& want, int tensor, int mb, const std::function<std::string()>& what);
// lower_schedule.cpp: the blocks in the plan's task order, receives posted
// ahead and waited for where read; the task spans.
void order_blocks(RankBuild& R);
// lower_step_end.cpp: buckets, zero1 reduce-scatter, replica average, the
// loss reduction, clipping, updates, zero1 all-gather.
void step_end(RankBuild& R);
// lower_frees.cpp: every micro-batch buffer freed after its last use.
void inject_frees(RankBuild& R);
// lower_releases.cpp (run by inject_frees): each forward Send's release
// point, PInstr::index of the Send: the tag of the peer's gradient message
// of the same tensor and micro-batch, whose Wait tells this rank the send
// is complete (-1: none; the buffer, once freed, is parked until the step's end).
void mark_send_releases(RankBuild& R);

// One pass of lower_rank(), by name (the names NNS_LOG_LOWERING and
// --emit=program:PASS take).
struct LoweringPass {
  const char* name;
  void (*run)(RankBuild&);
};
const std::vector<LoweringPass>& lowering_passes();
// Runs the passes over R (up to opts.stop_after when set), dumping R.P to
// stderr after the passes NNS_LOG_LOWERING names; R.P is then the rank's
// program.
void run_lowering_passes(RankBuild& R);
// Passes [from, to) only; false when LowerOptions::stop_after ended them
// (lower_plan runs the kernels pass, which elaborates through the
// interpreter, on one thread, and the rest on all cores).
bool run_lowering_passes(RankBuild& R, size_t from, size_t to);

// Lowers rank `rank` (device rank % devices of replica rank / devices),
// walking the ops `walk` gives it (null: every op), its kernels made
// through `kernel_cache` (null: each elaborated).
RankProgram lower_rank(const PlanAnalysis& analysis, const sema::TrainSpec& spec, const LowerOptions& opts,
                       GroupTable& groups, int devices, int rank, const WalkPlan* walk = nullptr,
                       KernelCache* kernel_cache = nullptr);

// lower_walk.cpp: the WalkPlan of `analysis` for plan replicas of
// `devices` devices (the tags recorded by lowering a rank that holds nothing).
WalkPlan plan_walk(const PlanAnalysis& analysis, const sema::TrainSpec& spec, const LowerOptions& opts,
                   GroupTable& groups, int devices);
// Whether R walks op i of micro-batch mb in `phase`; sets R.tag to the
// counter every rank has there (or records it, or, with
// LowerOptions::walk_every_op, checks it).
bool visit_op(RankBuild& R, int mb, int i, WalkPlan::Phase phase);
// After the last micro-batch: R.tag as every rank has it there.
void end_walk(RankBuild& R);

}  // namespace nns::backend::detail
