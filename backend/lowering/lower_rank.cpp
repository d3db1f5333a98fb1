// Lowering of one rank: its kernels (sub-ops elaborated on their slices),
// its buffers and its instruction list for one step (lower_plan.h says
// what the sequence is and why every rank derives it the same way).
#include <algorithm>
#include "semantics/check_deadline.h"
#include <functional>
#include <set>
#include <tuple>

#include "backend/lowering/lower_internal.h"
#include "semantics/op_registry.h"

namespace nns::backend::detail {

namespace {

// Lowers one rank.
class RankLowering {
 public:
  RankLowering(const PlanAnalysis& a, const sema::TrainSpec& spec, const LowerOptions& o, GroupTable& groups, int devices, int rank)
      : A(a), g(a.g), plan(a.plan), spec_(spec), opts_(o), groups_(groups), k_(devices) {
    P.rank = rank;
    P.device = rank % devices;
    P.replica = rank / devices;
  }

  RankProgram run() {
    make_kernels();
    make_params();
    for (int mb = 0; mb < static_cast<int>(spec_.micro_batches); ++mb) micro_batch(mb);
    close_blocks();
    order_blocks();
    step_end();
    inject_frees();
    P.tags = tag_;
    return std::move(P);
  }

 private:
  const PlanAnalysis& A;
  const sema::Graph& g;
  const sema::Plan& plan;
  const sema::TrainSpec& spec_;
  const LowerOptions& opts_;
  GroupTable& groups_;
  int k_;
  RankProgram P;
  std::vector<std::vector<int>> op_kernels_;  // per analysed op: this rank's kernels
  std::unordered_map<int, int> param_buf_, accum_buf_;  // tensor -> buffer
  std::map<int, int> slot_of_;                // tensor -> index into P.params
  std::map<std::pair<int, int>, int> bucket_buf_;  // (bucket, tensor) -> buffer
  uint32_t tag_ = 0;
  // Recompute regions: the buffer each region op read for an input from
  // outside its region in forward, (mb, node, input) -> buffer, read again
  // by the region's recompute; the forward values of the micro-batch.
  std::map<std::tuple<int, int, int>, int> region_inputs_;
  const std::unordered_map<int, int>* fwd_value_ = nullptr;
  // Blocks: the instructions of one micro-batch's forward (or backward, or
  // weight-gradient backward) of one op, as lowering emits them in graph
  // order; order_blocks() then orders them by the plan's schedule.
  struct Block {
    int mb = -1, op = -1;  // op: index into A.ops; -1 for the micro-batch's gradient accumulation
    sema::PipeTask::Phase phase = sema::PipeTask::F;
    int from_op = -1;  // a forward edge's adapter: the producing op (its task owns the block on ranks that run it)
  };
  std::vector<Block> blocks_;
  std::vector<int> block_of_;  // per instruction
  int cur_block_ = -1;

  int device() const { return P.device; }
  // A buffer's current piece: its box never changes; its partial-sum and
  // copy labels do (an allreduce sums the parts in place).
  Piece& label(int b) { return P.buffers[static_cast<size_t>(b)].piece; }
  int grank(int dev) const { return P.replica * k_ + dev; }

  int new_buffer(BufferDecl::Role role, int tensor, int mb, Piece piece) {
    P.buffers.push_back(BufferDecl{role, tensor, mb, piece});
    return static_cast<int>(P.buffers.size()) - 1;
  }
  void open_block(int mb, int op, sema::PipeTask::Phase phase, int from_op = -1) {
    close_blocks();
    blocks_.push_back({mb, op, phase, from_op});
    cur_block_ = static_cast<int>(blocks_.size()) - 1;
  }
  void close_blocks() { block_of_.resize(P.instrs.size(), cur_block_); }
  // The plan segment (pipeline stage) of a top-level op; -1: none.
  int segment_of(int node) const {
    return node < static_cast<int>(plan.segment_of_node.size()) ? plan.segment_of_node[static_cast<size_t>(node)] : -1;
  }
  PInstr& emit(PInstr::Kind kind, int mb) {
    sema::CheckDeadline::poll();
    P.instrs.emplace_back();
    P.instrs.back().kind = kind;
    P.instrs.back().mb = mb;
    return P.instrs.back();
  }
  // The id of a device group of an adapter step, in global ranks (cached:
  // a 1024-device group is built and compared once per replica, not per rank).
  int group_of(const std::vector<int>& devs) {
    std::lock_guard<std::mutex> lock(groups_.mu);
    auto [it, fresh] = groups_.by_devices.emplace(std::make_pair(&devs, P.replica), -1);
    if (!fresh) return it->second;
    std::vector<int> ranks;
    for (int d : devs) ranks.push_back(grank(d));
    it->second = groups_.intern_locked(ranks);
    return it->second;
  }

  // ---- kernels ------------------------------------------------------------------------------
  void make_kernels() {
    for (const PlanAnalysis::Op& op : A.ops) {
      std::vector<int> ks;
      auto mine = op.leaves_on.find(device());
      // A communication-only lowering (verification) skips the kernels,
      // except under a schedule: their reads of received tensors place the
      // receives, so without them the order would not be the one that runs.
      if (mine != op.leaves_on.end() && (!opts_.communication_only || !plan.task_orders.empty()))
        for (int leaf : mine->second) {
          ks.push_back(static_cast<int>(P.kernels.size()));
          P.kernels.push_back(make_kernel(leaf, op.backward, &op));
        }
      op_kernels_.push_back(std::move(ks));
    }
  }

  SubOpKernel make_kernel(int leaf, bool backward, const PlanAnalysis::Op* op = nullptr) {
    const sema::SubOp& s = plan.subops[leaf];
    const sema::OpNode& node = g.node(s.node);
    SubOpKernel kn;
    kn.subop = leaf;
    kn.node = s.node;
    kn.recompute = s.recompute;
    for (const OperandSlice& sl : s.inputs) kn.in_slices.push_back(piece_of_slice(sl));
    for (const OperandSlice& sl : s.outputs) kn.out_slices.push_back(piece_of_slice(sl));
    kn.scale = sema::slice_loss_share(g, node, s);
    if (!opts_.elaborate) return kn;
    std::vector<Shape> ins, outs;
    for (const OperandSlice& sl : s.inputs) ins.push_back(sl.length);
    for (const OperandSlice& sl : s.outputs) outs.push_back(sl.length);
    // The split identifiers along the parent chain: an attention split on
    // `h` twice in two gets h / 4 heads.
    std::map<std::string, int64_t> div;
    for (int c = leaf; c >= 0 && plan.subops[c].parent >= 0; c = plan.subops[c].parent)
      if (plan.subops[c].split_id != "value") {
        auto [it, fresh] = div.emplace(plan.subops[c].split_id, 1);
        it->second *= plan.subops[c].split_num;
      }
    try {
      kn.inst = opts_.elaborate(s.node, ins, outs, div, P.local);
      for (int ln : kn.inst.nodes) sema::apply_slice_position(g, node, s, P.local.node(ln));
    } catch (const LoweringError&) {
      throw;
    } catch (const std::runtime_error& e) {
      fail("plan " + plan.name + ": " + e.what());
    }
    kn.elaborated = true;
    if (!backward) {
      plan_releases(P.local, kn);
      return kn;
    }
    std::map<int, int> seeds;
    for (int out : kn.inst.outputs) {
      const sema::TensorInfo& t = P.local.tensor(out);
      if (!sema::dtype_is_float(t.dtype)) {
        kn.dy.push_back(-1);
        continue;
      }
      sema::TensorInfo dy;
      dy.shape = t.shape;
      dy.dtype = t.dtype;
      dy.grad_of = out;
      dy.name = "dy." + t.name;
      int id = P.local.add_tensor(std::move(dy));
      kn.dy.push_back(id);
      seeds[out] = id;
    }
    // Gradients only of the inputs that need one (a gradient edge): the
    // kernel computes and holds no gradient of a constant input (a mask).
    std::vector<int> wrt;
    for (size_t k = 0; k < kn.inst.inputs.size(); ++k)
      if (!op || k >= op->grad_edge.size() || op->grad_edge[k]) wrt.push_back(kn.inst.inputs[k]);
    kn.bwd = sema::differentiate(P.local, kn.inst.nodes, seeds, wrt);
    int seg = segment_of(s.node);
    if (seg >= 0 && plan.segments[static_cast<size_t>(seg)].split_w) split_weight_gradient(kn, node);
    plan_releases(P.local, kn);
    return kn;
  }

  // Splits a kernel's backward into B (gradients of its activation inputs)
  // and W (gradients of its weights). A backward node that computes both
  // (linear_backward: dx and dW) becomes two nodes with complementary
  // gradient masks; W nodes only feed weight gradients, so B never waits
  // for them and W can run later (zero-bubble schedules).
  void split_weight_gradient(SubOpKernel& kn, const sema::OpNode& node) {
    sema::Graph& L = P.local;
    std::set<int> weights;  // local tensors of the weight inputs
    for (size_t k = 0; k < node.inputs.size() && k < kn.inst.inputs.size(); ++k)
      if (g.tensor(node.inputs[k]).kind == sema::TensorKind::Param) weights.insert(kn.inst.inputs[k]);
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

  // Parameters: the pieces this rank holds, in tensor order.
  void make_params() {
    for (int p : g.params()) {
      auto it = A.storage.find(p);
      if (it == A.storage.end() || !holds(it->second, device())) continue;
      ParamSlot slot;
      slot.tensor = p;
      slot.param = new_buffer(BufferDecl::Param, p, -1, piece_of(it->second, device(), g.tensor(p).shape));
      slot.trainable = A.requires_grad[p];
      param_buf_[p] = slot.param;
      slot_of_[p] = static_cast<int>(P.params.size());
      P.params.push_back(slot);
    }
  }

  // ---- adapters -----------------------------------------------------------------------------
  // `scale` of reading `want` out of a buffer labelled `have`: a value part
  // cut finer is scaled so that the parts sum to the whole (gradients read
  // the whole value: ignore_value).
  // `what` builds the message only on failure (lowering 1024 ranks runs
  // this millions of times).
  template <class What>
  static float value_scale(const Piece& have, const Piece& want, bool ignore_value, const What& what) {
    if (!contains(have, want.start, want.length))
      fail("internal: " + what() + ": slice " + region_text(want.start, want.length) + " is not inside the piece " + region_text(have.start, have.length) +
           " this rank holds");
    if (ignore_value || want.value_parts == have.value_parts) return 1.f;
    if (want.value_parts % have.value_parts != 0)
      fail(what() + ": value part " + std::to_string(want.value_index) + "/" + std::to_string(want.value_parts) + " cannot be cut from a piece split into " +
           std::to_string(have.value_parts) + " parts");
    return static_cast<float>(have.value_parts) / static_cast<float>(want.value_parts);
  }

  // A copy of `buf` holding exactly `want` (a new buffer), or `buf`
  // relabelled when it already holds that box and value split.
  template <class What>
  int reshape_to(int buf, const Piece& want, int tensor, int mb, const What& what) {
    const Piece have = label(buf);
    if (have.same_box(want) && have.value_parts == want.value_parts) {
      label(buf) = want;
      return buf;
    }
    float scale = value_scale(have, want, false, what);
    int nb = new_buffer(BufferDecl::Transit, tensor, mb, want);
    PInstr& in = emit(PInstr::Extract, mb);
    in.a = buf;
    in.b = nb;
    in.scale = scale;
    return nb;
  }

  // The member devices of the group of `st` this device is in (null: none).
  const std::vector<int>* my_devices(const AdapterStep& st) const { return A.devices_of_group(st, device()); }

  // A send/recv step: each pair {s, d} moves the part of s's piece that d
  // holds afterwards (transfer_parts). This device sends its parts (cut out
  // of its piece where smaller), then receives its own and assembles them
  // (with the part it keeps, if any). Returns its buffer after the step.
  int send_recv(const CommEdge& e, const AdapterStep& st, size_t si, const Layout& cur, int buf, int mb, const std::function<void()>& before_receiving) {
    const Shape& shape = g.tensor(e.tensor).shape;
    const int edge = static_cast<int>(&e - A.cp.edges.data());
    auto what = [&] { return std::string(prim_name(st.prim)) + " of %" + std::to_string(e.tensor); };
    uint32_t t = ++tag_;
    auto transfer = [&](PInstr::Kind kind, int a, int b, int peer, int s, int d) {
      PInstr& in = emit(kind, mb);
      in.a = a;
      in.b = b;
      in.peer = grank(peer);
      in.tag = t;
      in.edge = edge;
      in.step = static_cast<int>(si);
      in.group = groups_.intern({grank(s), grank(d)});
    };
    if (holds(cur, device())) {
      const Piece mine = label(buf);
      for (const auto& pair : st.groups) {
        if (pair[0] != device() || pair[1] == device()) continue;
        Piece want = piece_of(st.after, pair[1], shape), part = want;
        if (want.value_index != mine.value_index || want.value_parts != mine.value_parts || !intersect(mine, want, part.start, part.length)) {
          // Only a corrupted step (a seeded bug) gets here; the program
          // verifier, which lowers in communication-only mode, names it.
          if (!opts_.communication_only)
            fail("internal: " + what() + ": device " + std::to_string(device()) + " has nothing device " + std::to_string(pair[1]) + " needs");
          part = mine;
        }
        transfer(PInstr::Send, part.same_box(mine) ? buf : reshape_to(buf, part, e.tensor, mb, what), -1, pair[1], device(), pair[1]);
      }
    }
    before_receiving();
    if (!holds(st.after, device())) return -1;
    const Piece want = piece_of(st.after, device(), shape);
    std::vector<TransferPart> parts = transfer_parts(st, cur, device(), shape);
    if (!tiles(want, parts) && !opts_.communication_only)
      fail("internal: " + what() + ": the parts device " + std::to_string(device()) + " receives do not make its piece");
    std::vector<std::pair<int, Piece>> got;  // buffer, box
    for (const TransferPart& p : parts) {
      if (p.from == device()) {
        got.push_back({buf, p.box});
        continue;
      }
      int received = new_buffer(BufferDecl::Transit, e.tensor, mb, p.box);
      transfer(PInstr::Recv, -1, received, p.from, p.from, device());
      got.push_back({received, p.box});
    }
    if (got.size() == 1 && got[0].second.same_box(want)) return reshape_to(got[0].first, want, e.tensor, mb, what);
    int whole = new_buffer(BufferDecl::Transit, e.tensor, mb, want);
    emit(PInstr::Alloc, mb).b = whole;
    for (const auto& [b, box] : got) {
      PInstr& in = emit(PInstr::Insert, mb);
      in.a = b;
      in.b = whole;
    }
    return whole;
  }

  // Emits edge `e`'s adapter applied to `src` (this rank's piece in e.from,
  // -1 when it holds none); returns its buffer in e.to (-1 if none).
  // `stay`: every instruction in the current block (a region's recompute).
  int adapter(const CommEdge& e, int src, int mb, bool stay = false) {
    const Shape& shape = g.tensor(e.tensor).shape;
    Layout cur = e.from;
    int buf = holds(cur, device()) ? src : -1;
    if (holds(cur, device()) && buf < 0) fail("internal: rank " + std::to_string(P.rank) + " holds no piece of %" + std::to_string(e.tensor) + " for its adapter");
    int edge = static_cast<int>(&e - A.cp.edges.data());
    const Block entry = blocks_.empty() ? Block{} : blocks_[static_cast<size_t>(cur_block_)];
    bool switched = false;
    for (size_t si = 0; si < e.adapter.steps.size(); ++si) {
      const AdapterStep& st = e.adapter.steps[si];
      const Layout& after = st.after;
      auto what = [&] { return std::string(prim_name(st.prim)) + " of %" + std::to_string(e.tensor); };
      if (st.prim == AdapterStep::SendRecv) {
        // Collectives after the transfer run on the destination devices, at
        // the same point on each: in the task of the op that reads the
        // tensor there (the consumer; in backward, the producer's backward
        // or, for a parameter, the gradient accumulation). The receives go
        // with them.
        buf = send_recv(e, st, si, cur, buf, mb, [&] {
          if (si + 1 == e.adapter.steps.size() || stay) return;
          if (!e.backward) open_block(mb, A.op_of_node[static_cast<size_t>(e.consumer)], sema::PipeTask::F);
          else open_block(mb, e.consumer >= 0 ? A.op_of_node[static_cast<size_t>(e.consumer)] : -1, sema::PipeTask::B);
          switched = true;
        });
        cur = after;
        continue;
      }
      if (!holds(cur, device())) {
        cur = after;
        continue;
      }
      Piece want = piece_of(after, device(), shape);
      if (st.prim == AdapterStep::Chunk || st.prim == AdapterStep::ValueSplit) {
        buf = reshape_to(buf, want, e.tensor, mb, what);
        cur = after;
        continue;
      }
      const std::vector<int>* devs = my_devices(st);
      if (!devs) fail("internal: " + what() + ": this rank is in no group");
      PInstr in;
      in.mb = mb;
      in.edge = edge;
      in.step = static_cast<int>(si);
      in.group = group_of(*devs);
      in.a = buf;
      CollectiveGeom geom;
      switch (st.prim) {
        case AdapterStep::AllReduce:
          if (!label(buf).same_box(want)) fail("internal: " + what() + " changes the region");
          if (buf == src && !e.backward && A.readers[static_cast<size_t>(e.tensor)] > 1) {
            // In place on a value another consumer also reads (and reduces
            // through its own edge): reduce a copy, or it would sum twice.
            int copy = new_buffer(BufferDecl::Transit, e.tensor, mb, label(buf));
            PInstr& cp = emit(PInstr::Extract, mb);
            cp.a = buf;
            cp.b = copy;
            buf = copy;
            in.a = buf;
          }
          in.kind = PInstr::AllReduce;
          label(buf) = want;
          break;
        case AdapterStep::AllGather: {
          in.kind = PInstr::AllGather;
          if (opts_.communication_only) break;  // member boxes: what the executor needs, not the verifier
          int64_t covered = 0;
          for (int d : *devs) {
            Piece bp = piece_of(cur, d, shape);
            if (!contains(want, bp.start, bp.length)) fail("internal: " + what() + ": gathered blocks are not contiguous");
            covered += bp.numel();
            geom.recv.push_back(bp);
          }
          if (covered != want.numel()) fail("internal: " + what() + ": gathered blocks do not cover the result");
          break;
        }
        case AdapterStep::ReduceScatter:
          in.kind = PInstr::ReduceScatter;
          if (opts_.communication_only) break;
          for (int d : *devs) {
            Piece ap = piece_of(after, d, shape);
            if (!contains(label(buf), ap.start, ap.length)) fail("internal: " + what() + ": a block lies outside the piece");
            geom.send.push_back(ap);
          }
          break;
        case AdapterStep::AllToAll: {
          in.kind = PInstr::AllToAll;
          int64_t chunk = -1;
          for (int d : *devs) {
            if (opts_.communication_only && chunk >= 0) break;  // the block size is all the verifier needs
            Piece theirs_after = piece_of(after, d, shape), theirs_before = piece_of(cur, d, shape), s, r;
            if (!intersect(label(buf), theirs_after, s.start, s.length) || !intersect(theirs_before, want, r.start, r.length))
              fail("internal: " + what() + ": blocks do not meet");
            if (chunk < 0) chunk = s.numel();
            if (s.numel() != chunk || r.numel() != chunk) fail("internal: " + what() + ": uneven blocks");
            geom.send.push_back(s);
            geom.recv.push_back(r);
          }
          in.count = chunk;
          break;
        }
        default:
          fail("internal: " + what() + ": unexpected primitive");
      }
      if (in.kind != PInstr::AllReduce) {
        in.b = new_buffer(BufferDecl::Transit, e.tensor, mb, want);
        in.geom = static_cast<int>(P.geoms.size());
        P.geoms.push_back(std::move(geom));
        buf = in.b;
      }
      P.instrs.push_back(in);
      cur = after;
    }
    int out = holds(e.to, device()) ? reshape_to(buf, piece_of(e.to, device(), shape), e.tensor, mb, [&] { return "layout of %" + std::to_string(e.tensor); }) : -1;
    if (switched) open_block(entry.mb, entry.op, entry.phase, entry.from_op);
    return out;
  }

  // ---- one micro-batch ----------------------------------------------------------------------
  void micro_batch(int mb) {
    std::unordered_map<int, int> value, grad;  // tensor -> buffer
    fwd_value_ = &value;
    int loss_op = -1;
    for (size_t i = 0; i < A.ops.size(); ++i) {
      open_block(mb, static_cast<int>(i), sema::PipeTask::F);
      forward_op(A.ops[i], op_kernels_[i], mb, value);
      if (loss_op < 0 && g.loss >= 0 && g.tensor(g.loss).producer == A.ops[i].node) {
        loss_op = static_cast<int>(i);
        if (auto it = value.find(g.loss); it != value.end() && label(it->second).replica_index == 0) emit(PInstr::LossShare, mb).a = it->second;
      }
    }
    for (size_t i = A.ops.size(); i-- > 0;) {
      if (static_cast<int>(i) == loss_op) {
        open_block(mb, static_cast<int>(i), sema::PipeTask::B);
        seed_loss_gradient(mb, grad);
      }
      if (A.ops[i].backward) backward_op(static_cast<int>(i), op_kernels_[i], mb, grad);
    }
    // Parameter gradients that arrived by an adapter: into the step's sum.
    open_block(mb, -1, sema::PipeTask::B);
    for (const ParamSlot& slot : P.params) {
      auto gi = grad.find(slot.tensor);
      if (gi == grad.end() || !slot.trainable) continue;
      accumulate_param_gradient(slot.tensor, gi->second, mb);
    }
  }

  void accumulate_param_gradient(int tensor, int from, int mb) {
    auto [it, fresh] = accum_buf_.emplace(tensor, -1);
    if (fresh) {
      const ParamSlot& slot = P.params[static_cast<size_t>(slot_of_.at(tensor))];
      Piece storage = P.buffers[static_cast<size_t>(slot.state())].piece;  // a copy: new_buffer grows the vector
      it->second = new_buffer(BufferDecl::Accum, tensor, -1, storage);
      P.params[static_cast<size_t>(slot_of_.at(tensor))].accum = it->second;
    }
    if (!label(from).same_box(label(it->second)))
      fail("internal: the gradient of " + g.tensor(tensor).name + " " + region_text(label(from).start, label(from).length) + " is not in its storage piece " + region_text(label(it->second).start, label(it->second).length));
    if (fresh) emit(PInstr::Alloc, -1).b = it->second;
    PInstr& in = emit(PInstr::AddTo, mb);
    in.a = from;
    in.b = it->second;
    in.scale = 1.f / static_cast<float>(spec_.micro_batches);
  }

  // A data input's piece for micro-batch mb, loaded by its first consumer
  // (so that a pipeline stage loads only what it reads, when it reads it).
  int load_input(int t, int mb) {
    auto it = A.storage.find(t);
    if (it == A.storage.end() || !holds(it->second, device())) return -1;
    int b = new_buffer(BufferDecl::Input, t, mb, piece_of(it->second, device(), g.tensor(t).shape));
    emit(PInstr::LoadInput, mb).b = b;
    return b;
  }

  // `again`: the recompute of a region (region_forward): inputs from
  // outside the region are read where the first forward left them (their
  // adapters ran then), and the op's kernels stay for its backward.
  void forward_op(const PlanAnalysis::Op& op, const std::vector<int>& ks, int mb, std::unordered_map<int, int>& value, bool again = false) {
    const sema::OpNode& n = g.node(op.node);
    const int region = A.regions.region_of_node[static_cast<size_t>(op.node)];
    for (size_t kk = 0; kk < n.inputs.size(); ++kk) {
      int t = n.inputs[kk];
      const int producer = g.tensor(t).producer;
      const bool outside = producer < 0 || A.regions.region_of_node[static_cast<size_t>(producer)] != region;
      if (again && outside) {
        auto kept = region_inputs_.find({mb, op.node, static_cast<int>(kk)});
        int in = kept == region_inputs_.end() ? -1 : kept->second;
        if (!ks.empty() && in < 0) fail("internal: no kept input of %" + std::to_string(t) + " for the recompute of " + n.name);
        slice_in(n, ks, kk, in, mb);
        continue;
      }
      int src = -1;
      if (auto it = param_buf_.find(t); it != param_buf_.end()) src = it->second;
      else if (auto v = value.find(t); v != value.end()) src = v->second;
      else if (g.tensor(t).kind == sema::TensorKind::Input) src = value[t] = load_input(t, mb);
      // An edge without steps leaves the piece as it is: read it in place.
      int in = src;
      if (op.in_edge[kk] && !op.in_edge[kk]->adapter.steps.empty() && again) {
        // Inside a region's recompute: the adapter runs again on the
        // recomputed value, in the backward task that recomputes.
        in = adapter(*op.in_edge[kk], src, mb, /*stay=*/true);
      } else if (op.in_edge[kk] && !op.in_edge[kk]->adapter.steps.empty()) {
        // The adapter is a block of its own: on a rank that runs the
        // producer it belongs to the producer's task (a send as soon as
        // the value exists; a collective at the same point on every
        // member), elsewhere to the consumer's.
        const Block here = blocks_[static_cast<size_t>(cur_block_)];
        int prod = op.in_edge[kk]->producer;
        open_block(mb, here.op, here.phase, prod >= 0 ? A.op_of_node[static_cast<size_t>(prod)] : -1);
        in = adapter(*op.in_edge[kk], src, mb);
        open_block(mb, here.op, here.phase);
      }
      if (!ks.empty() && in < 0) fail("internal: no piece of %" + std::to_string(t) + " for " + n.name);
      if (region >= 0 && outside && !again) region_inputs_[{mb, op.node, static_cast<int>(kk)}] = in;
      slice_in(n, ks, kk, in, mb);
    }
    // The output buffers, then each kernel in turn: its forward, its
    // outputs collected and, for a recomputed piece, its forward values
    // dropped before the next piece runs (co-located coshard pieces hold
    // one working set at a time).
    std::vector<int> out_buf(n.outputs.size(), -1);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (!holds(op.out_layout[o], device())) continue;
      out_buf[o] = new_buffer(BufferDecl::Value, n.outputs[o], mb, piece_of(op.out_layout[o], device(), g.tensor(n.outputs[o]).shape));
      emit(PInstr::Alloc, mb).b = out_buf[o];
      value[n.outputs[o]] = out_buf[o];
    }
    for (int k : ks) {
      emit(PInstr::Forward, mb).kernel = k;
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        if (out_buf[o] < 0) continue;
        PInstr& c = emit(PInstr::CollectOut, mb);
        c.b = out_buf[o];
        c.kernel = k;
        c.index = static_cast<int>(o);
        c.scale = P.kernels[k].scale;
      }
      // What stays of the kernel, decided before the next piece runs. An op
      // without backward needs nothing of it any more; in a region nothing
      // stays either (the region's recompute reads the inputs again), but
      // in the region's replay the backward that follows needs it;
      // recompute(...): the sub-op keeps only its inputs until its
      // backward runs its forward again (dropout masks are counter-based,
      // so the recomputed values are the same).
      if (!op.backward || (region >= 0 && !again)) emit(PInstr::FreeKernel, mb).kernel = k;
      else if (own_recompute(k, region, ks)) emit(PInstr::DropForward, mb).kernel = k;
    }
  }

  // Whether kernel k runs its forward again right before its own backward
  // (and keeps only its inputs until then): a recomputed sub-op outside a
  // recompute region, or inside one a piece co-located with other pieces of
  // its op (coshard), so that the region's replay holds one piece's working
  // set at a time, not every piece's. Any other kernel of a region is made
  // again by the region's replay only.
  bool own_recompute(int k, int region, const std::vector<int>& ks) const {
    return P.kernels[k].recompute && (region < 0 || ks.size() > 1);
  }

  void slice_in(const sema::OpNode& n, const std::vector<int>& ks, size_t kk, int in, int mb) {
    for (int k : ks) {
      PInstr& si = emit(PInstr::SliceIn, mb);
      si.a = in;
      si.kernel = k;
      si.index = static_cast<int>(kk);
      si.scale = value_scale(label(in), P.kernels[k].in_slices[kk], false, [&] { return n.name + " input " + std::to_string(kk); });
    }
  }

  // A recompute region's forward again, whole, at the start of the
  // backward of its last op: its values are made anew from the inputs it
  // kept, in the current (backward) task.
  void region_forward(int region, int mb) {
    std::unordered_map<int, int> again = *fwd_value_;  // outside values stay as the forward left them
    for (int node : A.regions.ops[static_cast<size_t>(region)]) {
      int i = A.op_of_node[static_cast<size_t>(node)];
      // (an op without backward is made again only for the ops after it:
      // forward_op frees its kernels at once)
      forward_op(A.ops[static_cast<size_t>(i)], op_kernels_[static_cast<size_t>(i)], mb, again, true);
    }
  }

  // The loss gradient is 1 wherever the loss (or a part of it) lives.
  void seed_loss_gradient(int mb, std::unordered_map<int, int>& grad) {
    if (g.loss < 0) return;
    int last = g.tensor(g.loss).producer;
    for (const PlanAnalysis::Op& op : A.ops) {
      if (op.node != last) continue;
      const sema::OpNode& n = g.node(last);
      size_t o = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), g.loss) - n.outputs.begin());
      Layout gl = gradient_layout(op.out_layout[o]);
      if (!holds(gl, device())) continue;
      int b = new_buffer(BufferDecl::Grad, g.loss, mb, piece_of(gl, device(), g.tensor(g.loss).shape));
      emit(PInstr::Alloc, mb).b = b;
      emit(PInstr::SeedGrad, mb).b = b;
      grad[g.loss] = b;
    }
  }

  // Whether op i's backward runs as B then W on this rank: its segment's
  // W tasks are scheduled and some kernel of it has weight-gradient nodes.
  bool split_w(int i) const {
    int seg = segment_of(A.ops[static_cast<size_t>(i)].node);
    return seg >= 0 && plan.segments[static_cast<size_t>(seg)].split_w;
  }

  void backward_op(int i, const std::vector<int>& ks, int mb, std::unordered_map<int, int>& grad) {
    const PlanAnalysis::Op& op = A.ops[static_cast<size_t>(i)];
    const sema::OpNode& n = g.node(op.node);
    bool split = split_w(i);
    open_block(mb, i, sema::PipeTask::B);
    const int region = A.regions.region_of_node[static_cast<size_t>(op.node)];
    if (region >= 0 && A.regions.ops[static_cast<size_t>(region)].back() == op.node) region_forward(region, mb);
    // A recomputed piece runs its forward right before its own backward,
    // so that co-located pieces (coshard) hold one working set at a time.
    for (int k : ks) {
      if (own_recompute(k, region, ks)) emit(PInstr::Forward, mb).kernel = k;
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        auto gi = grad.find(n.outputs[o]);
        PInstr& in = emit(PInstr::SliceGrad, mb);
        in.a = gi == grad.end() ? -1 : gi->second;
        in.kernel = k;
        in.index = static_cast<int>(o);
        in.scale = P.kernels[k].scale;
        if (in.a >= 0) value_scale(label(in.a), P.kernels[k].out_slices[o], true, [&] { return n.name + " output gradient"; });
      }
      emit(PInstr::Backward, mb).kernel = k;
    }
    // B: the gradients of activations (what the previous stage waits for)
    // first; with a B/W split the weights' gradients follow in the W block.
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1 && split) {
        open_block(mb, i, sema::PipeTask::W);
        for (int k : ks)
          if (!P.kernels[k].wgrad_nodes.empty()) emit(PInstr::BackwardW, mb).kernel = k;
      }
      for (size_t kk = 0; kk < n.inputs.size(); ++kk) {
        bool weight = g.tensor(n.inputs[kk]).kind == sema::TensorKind::Param;
        if (weight != (pass == 1)) continue;
        backward_input(op, ks, kk, mb, grad);
      }
    }
    for (int k : ks) emit(PInstr::FreeKernel, mb).kernel = k;
  }

  // The gradient of input kk of an op: collected from its kernels, then
  // through its adapter (or into a bucket) to where the tensor lives.
  void backward_input(const PlanAnalysis::Op& op, const std::vector<int>& ks, size_t kk, int mb, std::unordered_map<int, int>& grad) {
    const sema::OpNode& n = g.node(op.node);
    const CommEdge* e = op.grad_edge[kk];
    if (!e) return;
    int t = n.inputs[kk];
    int contrib = -1;
    if (holds(op.grad_in_layout[kk], device())) {
      contrib = new_buffer(BufferDecl::Contrib, t, mb, piece_of(op.grad_in_layout[kk], device(), g.tensor(t).shape));
      emit(PInstr::Alloc, mb).b = contrib;
      for (int k : ks) {
        PInstr& c = emit(PInstr::CollectGrad, mb);
        c.b = contrib;
        c.kernel = k;
        c.index = static_cast<int>(kk);
      }
    }
    if (auto bk = A.bucket_of.find(e); bk != A.bucket_of.end()) {
      // Summed locally over the step's micro-batches; one fused allreduce
      // per device group at the end of the step.
      if (contrib < 0) return;
      auto [it, fresh] = bucket_buf_.emplace(std::make_pair(bk->second, t), -1);
      if (fresh) {
        Piece p = label(contrib);
        p.value_index = 0;
        p.value_parts = 1;
        it->second = new_buffer(BufferDecl::Bucket, t, -1, p);
        emit(PInstr::Alloc, mb).b = it->second;
      }
      PInstr& add = emit(PInstr::AddTo, mb);
      add.a = contrib;
      add.b = it->second;
      return;
    }
    int moved = adapter(*e, contrib, mb);
    if (!holds(e->to, device())) return;
    auto gi = grad.find(t);
    if (gi == grad.end()) {
      grad[t] = moved;
    } else {
      PInstr& add = emit(PInstr::AddTo, mb);
      add.a = moved;
      add.b = gi->second;
    }
  }

  // ---- the schedule -------------------------------------------------------------------------
  // The Wait that completes receive `in` (named like it for the matching).
  static PInstr wait_for(const PInstr& in) {
    PInstr w;
    w.kind = PInstr::Wait;
    w.a = in.b;
    w.mb = in.mb;
    w.peer = in.peer;
    w.tag = in.tag;
    w.edge = in.edge;
    w.step = in.step;
    w.group = in.group;
    return w;
  }

  // Orders the blocks of the step. Without task orders the result is the
  // emission order (micro-batch by micro-batch, graph order). With them,
  // this rank's tasks (segments it runs a kernel of, per phase and
  // micro-batch) run in the order the plan gives (a topological order of
  // its task orders), each block of a task once every block it depends on
  // has run. Dependencies: accesses to one buffer, one kernel or the loss
  // keep their emission order, so every buffer sees the same sequence of
  // reads and writes as in the unscheduled program. Blocks of no task on
  // this rank (sends of a tensor another stage consumes, ops of no segment)
  // run as soon as they can, except those that receive, which run when a
  // task needs them: a receive waits, and waiting early would block the
  // tasks before it. Receives are posted one task ahead and waited for
  // where their data is read (Recv ... Wait), so a stage computes while
  // its neighbours' tensors are in flight.
  void order_blocks() {
    const size_t nb = blocks_.size();
    if (nb == 0) return;
    if (plan.task_orders.empty()) {
      // No schedule: the emission order is the program (what the general
      // path below would return); each receive is waited for at once.
      std::vector<PInstr> out;
      out.reserve(P.instrs.size() + static_cast<size_t>(tag_) + 1);
      for (const PInstr& in : P.instrs) {
        out.push_back(in);
        if (in.kind == PInstr::Recv) out.push_back(wait_for(in));
      }
      P.instrs = std::move(out);
      return;
    }
    std::vector<char> runs_segment(plan.segments.size(), 0);  // per plan segment: this rank runs a part of it
    // From the plan, not from the kernels: a communication-only lowering
    // (program verification) has none, and must order blocks the same way.
    for (const PlanAnalysis::Op& op : A.ops) {
      int seg = segment_of(op.node);
      if (seg >= 0 && op.leaves_on.count(device())) runs_segment[static_cast<size_t>(seg)] = 1;
    }
    // Block extents (blocks are contiguous in emission order).
    std::vector<int> first(nb, -1), last(nb, -1);
    for (size_t i = 0; i < P.instrs.size(); ++i) {
      int b = block_of_[i];
      if (b < 0) fail("internal: an instruction outside every block");
      if (first[b] < 0) first[b] = static_cast<int>(i);
      last[b] = static_cast<int>(i) + 1;
    }
    // Dependencies: read after write, write after read or write, per
    // buffer, per kernel instance (a kernel's local tensors for one
    // micro-batch) and for the step loss. Reads of one value (a weight read
    // by every micro-batch) need no order among themselves.
    std::vector<std::vector<int>> preds(nb);
    {
      const int mbs = static_cast<int>(spec_.micro_batches);
      const size_t nbuf = P.buffers.size(), loss_res = nbuf + P.kernels.size() * static_cast<size_t>(mbs);
      std::vector<int> writer(loss_res + 1, -1);
      std::vector<std::vector<int>> readers(loss_res + 1);
      auto dep = [&](int from, int b) {
        if (from >= 0 && from != b) preds[static_cast<size_t>(b)].push_back(from);
      };
      auto access = [&](size_t r, int b, bool write) {
        dep(writer[r], b);
        if (!write) {
          readers[r].push_back(b);
          return;
        }
        for (int x : readers[r]) dep(x, b);
        readers[r].clear();
        writer[r] = b;
      };
      for (size_t i = 0; i < P.instrs.size(); ++i) {
        const PInstr& in = P.instrs[i];
        int b = block_of_[i];
        bool reads_a = true, kernel_read = false;
        switch (in.kind) {
          case PInstr::AllReduce:
          case PInstr::Free:
            reads_a = false;  // written in place
            break;
          case PInstr::CollectOut:
          case PInstr::CollectGrad:
            kernel_read = true;
            break;
          default:
            break;
        }
        if (in.a >= 0) access(static_cast<size_t>(in.a), b, !reads_a);
        if (in.b >= 0) access(static_cast<size_t>(in.b), b, true);
        if (in.kernel >= 0) {
          if (in.mb < 0 || in.mb >= mbs) fail("internal: a kernel instruction outside a micro-batch");
          access(nbuf + static_cast<size_t>(in.kernel) * static_cast<size_t>(mbs) + static_cast<size_t>(in.mb), b, !kernel_read);
        }
        if (in.kind == PInstr::LossShare) access(loss_res, b, true);
      }
      for (auto& v : preds) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
      }
    }
    // This rank's tasks.
    std::map<sema::TaskRef, int> task_id;
    std::vector<sema::TaskRef> task_ref;
    std::vector<std::vector<int>> task_blocks;
    std::vector<int> task_of(nb, -1);
    std::vector<char> lazy(nb, 0);
    for (size_t b = 0; b < nb; ++b) {
      for (int i = first[b]; i >= 0 && i < last[b]; ++i)
        if (P.instrs[static_cast<size_t>(i)].kind == PInstr::Recv) lazy[b] = 1;
      const Block& bl = blocks_[b];
      if (bl.op < 0 || plan.task_orders.empty()) continue;
      auto seg_of = [&](int op) {
        int s2 = segment_of(A.ops[static_cast<size_t>(op)].node);
        return s2 >= 0 && runs_segment[static_cast<size_t>(s2)] ? s2 : -1;
      };
      int seg = bl.from_op >= 0 ? seg_of(bl.from_op) : -1;
      if (seg < 0) seg = seg_of(bl.op);
      if (seg < 0) continue;
      sema::TaskRef t{seg, bl.phase, bl.mb};
      auto [it, fresh] = task_id.emplace(t, static_cast<int>(task_ref.size()));
      if (fresh) {
        task_ref.push_back(t);
        task_blocks.emplace_back();
      }
      task_of[b] = it->second;
      task_blocks[static_cast<size_t>(it->second)].push_back(static_cast<int>(b));
    }
    const size_t nt = task_ref.size();
    // The task sequence: the plan's task orders among this rank's tasks,
    // ties broken by emission order.
    std::vector<int> seq_pos(nt, -1), seq;
    {
      std::vector<std::vector<int>> succ(nt);
      std::vector<int> indeg(nt, 0);
      for (const sema::TaskOrder& o : plan.task_orders) {
        auto x = task_id.find(o.before), y = task_id.find(o.after);
        if (x == task_id.end() || y == task_id.end()) continue;
        succ[static_cast<size_t>(x->second)].push_back(y->second);
        ++indeg[static_cast<size_t>(y->second)];
      }
      std::set<std::pair<int, int>> ready;  // (first block, task)
      for (size_t t = 0; t < nt; ++t)
        if (indeg[t] == 0) ready.insert({task_blocks[t].front(), static_cast<int>(t)});
      while (!ready.empty()) {
        int t = ready.begin()->second;
        ready.erase(ready.begin());
        seq_pos[static_cast<size_t>(t)] = static_cast<int>(seq.size());
        seq.push_back(t);
        for (int u : succ[static_cast<size_t>(t)])
          if (--indeg[static_cast<size_t>(u)] == 0) ready.insert({task_blocks[static_cast<size_t>(u)].front(), u});
      }
      if (seq.size() != nt)
        fail("plan " + plan.name + ": the task orders on rank " + std::to_string(P.rank) + " form a cycle (nns check --plan names the directives)");
    }
    // Emission.
    std::vector<char> done(nb, 0);
    std::vector<int> order, owner(nb, -1);
    order.reserve(nb);
    int current = -1;  // position in seq of the running task
    // Emits b after its not yet emitted predecessors (depth first, iterative).
    auto pull = [&](int root, int own) {
      std::vector<std::pair<int, size_t>> stack{{root, 0}};
      while (!stack.empty()) {
        auto& [b, next] = stack.back();
        if (done[static_cast<size_t>(b)]) {
          stack.pop_back();
          continue;
        }
        const std::vector<int>& ps = preds[static_cast<size_t>(b)];
        while (next < ps.size() && done[static_cast<size_t>(ps[next])]) ++next;
        if (next < ps.size()) {
          int p = ps[next];
          int pt = task_of[static_cast<size_t>(p)];
          if (own >= 0 && pt >= 0 && seq_pos[static_cast<size_t>(pt)] > own)
            fail("plan " + plan.name + ": on rank " + std::to_string(P.rank) + " the schedule runs " + plan.task_text(task_ref[static_cast<size_t>(seq[static_cast<size_t>(own)])]) +
                 " before " + plan.task_text(task_ref[static_cast<size_t>(pt)]) + ", which it needs");
          stack.push_back({p, 0});
          continue;
        }
        done[static_cast<size_t>(b)] = 1;
        order.push_back(b);
        owner[static_cast<size_t>(b)] = own;
        stack.pop_back();
      }
    };
    // Whether float block b could run now: its predecessors ran, or are
    // receiving floats that could.
    // Memo of ready(), valid for one generation (bumped whenever blocks are emitted).
    std::vector<uint32_t> memo_gen(nb, 0);
    std::vector<char> memo_val(nb, 0);
    uint32_t gen = 1;
    std::function<bool(int)> ready = [&](int b) -> bool {
      if (done[static_cast<size_t>(b)]) return true;
      if (memo_gen[static_cast<size_t>(b)] == gen) return memo_val[static_cast<size_t>(b)] != 0;
      bool ok = task_of[static_cast<size_t>(b)] < 0;
      for (int p : preds[static_cast<size_t>(b)]) {
        if (!ok) break;
        ok = done[static_cast<size_t>(p)] || (lazy[static_cast<size_t>(p)] && ready(p));
      }
      memo_gen[static_cast<size_t>(b)] = gen;
      memo_val[static_cast<size_t>(b)] = ok ? 1 : 0;
      return ok;
    };
    // Blocks without instructions (ops of other ranks) need no place.
    for (size_t b = 0; b < nb; ++b)
      if (first[b] < 0) done[b] = 1;
    std::vector<int> floats;
    for (size_t b = 0; b < nb; ++b)
      if (!done[b] && task_of[b] < 0 && !lazy[b]) floats.push_back(static_cast<int>(b));
    size_t float_from = 0;
    auto flush = [&]() {
      if (nt == 0) return;
      bool any = true;
      while (any) {
        any = false;
        ++gen;
        for (size_t i = float_from; i < floats.size(); ++i) {
          int b = floats[i];
          if (done[static_cast<size_t>(b)] || !ready(b)) continue;
          pull(b, current);
          any = true;
          ++gen;
        }
        while (float_from < floats.size() && done[static_cast<size_t>(floats[float_from])]) ++float_from;
      }
    };
    flush();
    for (size_t k = 0; k < seq.size(); ++k) {
      current = static_cast<int>(k);
      for (int b : task_blocks[static_cast<size_t>(seq[k])]) pull(b, current);
      flush();
    }
    current = -1;
    for (size_t b = 0; b < nb; ++b) pull(static_cast<int>(b), -1);
    // Instructions: receives of blocks a task pulled are posted when the
    // task before it starts; the wait stays where the recv was.
    std::vector<std::vector<PInstr>> posts(seq.size() + 1);
    for (int b : order) {
      int own = owner[static_cast<size_t>(b)];
      if (own < 0) continue;
      for (int i = first[b]; i < last[b]; ++i)
        if (P.instrs[static_cast<size_t>(i)].kind == PInstr::Recv) posts[static_cast<size_t>(own)].push_back(P.instrs[static_cast<size_t>(i)]);
    }
    std::vector<PInstr> out;
    out.reserve(P.instrs.size() * 11 / 10 + 8);
    int open_task = -1;
    std::vector<RankProgram::TaskSpan> spans;
    for (int b : order) {
      int own = owner[static_cast<size_t>(b)];
      if (own != open_task) {
        if (open_task >= 0) spans.back().last = static_cast<int>(out.size());
        open_task = own;
        if (own >= 0) {
          // Posting: this task's receives (unless posted already) and the next task's.
          for (int k : {own, own + 1})
            if (k < static_cast<int>(posts.size())) {
              for (const PInstr& r : posts[static_cast<size_t>(k)]) out.push_back(r);
              posts[static_cast<size_t>(k)].clear();
            }
          const sema::TaskRef& t = task_ref[static_cast<size_t>(seq[static_cast<size_t>(own)])];
          RankProgram::TaskSpan sp;
          sp.segment = t.segment;
          sp.mb = t.mb;
          sp.phase = static_cast<uint8_t>(t.phase);
          sp.first = static_cast<int>(out.size());
          spans.push_back(sp);
        }
      }
      for (int i = first[b]; i < last[b]; ++i) {
        const PInstr& in = P.instrs[static_cast<size_t>(i)];
        if (in.kind == PInstr::Recv) {
          if (own < 0) out.push_back(in);  // not posted ahead: post here
          out.push_back(wait_for(in));
          continue;
        }
        out.push_back(in);
      }
    }
    if (open_task >= 0) spans.back().last = static_cast<int>(out.size());
    P.instrs = std::move(out);
    P.tasks = std::move(spans);
  }

  // ---- the end of the step ------------------------------------------------------------------
  void step_end() {
    // Buckets in key order, each one fused allreduce over its device group.
    P.buckets.assign(static_cast<size_t>(A.buckets), {});
    for (auto& [key, buf] : bucket_buf_) P.buckets[static_cast<size_t>(key.first)].push_back(buf);
    for (int b = 0; b < A.buckets; ++b) {
      if (P.buckets[static_cast<size_t>(b)].empty()) continue;
      const std::vector<int>* devs = my_devices(*A.bucket_step[static_cast<size_t>(b)]);
      if (!devs) fail("internal: bucket " + std::to_string(b) + " has no group of device " + std::to_string(device()));
      if (devs->size() > 1 && !A.bucket_zero1[static_cast<size_t>(b)]) {
        PInstr& in = emit(PInstr::BucketAllReduce, -1);
        in.index = b;
        in.group = group_of(*devs);
      }
      if (A.bucket_zero1[static_cast<size_t>(b)]) {
        for (int buf : P.buckets[static_cast<size_t>(b)]) zero1_scatter(buf, *devs);
        continue;
      }
      for (int buf : P.buckets[static_cast<size_t>(b)]) accumulate_param_gradient(P.buffers[static_cast<size_t>(buf)].tensor, buf, -1);
    }
    int replicas = opts_.replicas;
    if (replicas > 1) {
      std::vector<int> across;
      for (int j = 0; j < replicas; ++j) across.push_back(j * k_ + device());
      int grp = groups_.intern(across);
      for (const ParamSlot& s : P.params)
        if (s.accum >= 0) {
          PInstr& in = emit(PInstr::ReplicaAverage, -1);
          in.a = s.accum;
          in.group = grp;
          in.scale = 1.f / static_cast<float>(replicas);
        }
    }
    // The loss and gradient norm, over every rank (one rank: no collective).
    {
      std::lock_guard<std::mutex> lock(groups_.mu);
      if (groups_.world < 0) {
        std::vector<int> world;
        for (int r = 0; r < k_ * replicas; ++r) world.push_back(r);
        groups_.world = groups_.intern_locked(world);
      }
      emit(PInstr::LossAllReduce, -1).group = groups_.world;
    }
    if (spec_.clip > 0) emit(PInstr::Clip, -1);
    for (size_t i = 0; i < P.params.size(); ++i)
      if (P.params[i].accum >= 0) {
        PInstr& in = emit(PInstr::Update, -1);
        in.a = P.params[i].state();
        in.b = P.params[i].accum;
        in.index = static_cast<int>(i);
      }
    // zero1: every member's updated shard back into the whole piece.
    for (size_t i = 0; i < P.params.size(); ++i) {
      const ParamSlot& s = P.params[i];
      if (s.shard < 0) continue;
      const Zero1Shards& z = zero1_.at(s.tensor);
      PInstr& in = emit(PInstr::AllGather, -1);
      in.a = s.shard;
      in.b = s.param;
      in.group = z.group;
      in.index = static_cast<int>(i);
      in.geom = static_cast<int>(P.geoms.size());
      CollectiveGeom geom;
      geom.recv = z.shards;
      P.geoms.push_back(std::move(geom));
    }
  }

  // zero1: the bucketed gradient `buf` of a sharded parameter, summed over
  // the group and cut into its shards: this rank keeps its own, which its
  // Shard buffer (the part of the parameter it updates) matches.
  struct Zero1Shards {
    int group = -1;
    std::vector<Piece> shards;  // per member of the group, in member order
  };
  std::map<int, Zero1Shards> zero1_;  // tensor -> its shards
  void zero1_scatter(int buf, const std::vector<int>& devs) {
    const int t = P.buffers[static_cast<size_t>(buf)].tensor;
    const int dim = A.zero1_dim.at(t);
    const int64_t k = static_cast<int64_t>(devs.size());
    const Piece whole = P.buffers[static_cast<size_t>(param_buf_.at(t))].piece;
    // Each group sums its own copy of the gradient: where the data-parallel
    // group is one of several (a weight also replicated inside a tensor-
    // parallel group), every shard has as many copies as the bucket piece
    // has replicas, and the gradient norm and the assembled gradients must
    // count one of them.
    const Piece& summed = P.buffers[static_cast<size_t>(buf)].piece;
    Zero1Shards z;
    z.group = group_of(devs);
    int me = -1;
    for (int64_t i = 0; i < k; ++i) {
      Piece sh = whole;
      sh.length[static_cast<size_t>(dim)] /= k;
      sh.start[static_cast<size_t>(dim)] += i * sh.length[static_cast<size_t>(dim)];
      sh.replica_index = summed.replica_index;
      sh.replicas = summed.replicas;
      sh.value_index = 0;
      sh.value_parts = 1;
      z.shards.push_back(sh);
      if (devs[static_cast<size_t>(i)] == device()) me = static_cast<int>(i);
    }
    if (me < 0) fail("internal: zero1 group of " + g.tensor(t).name + " lacks device " + std::to_string(device()));
    const Piece mine = z.shards[static_cast<size_t>(me)];
    int grad = new_buffer(BufferDecl::Transit, t, -1, mine);
    PInstr& in = emit(PInstr::ReduceScatter, -1);
    in.a = buf;
    in.b = grad;
    in.group = z.group;
    in.index = slot_of_.at(t);
    in.geom = static_cast<int>(P.geoms.size());
    CollectiveGeom geom;
    geom.send = z.shards;
    P.geoms.push_back(std::move(geom));
    zero1_[t] = std::move(z);
    ParamSlot& slot = P.params[static_cast<size_t>(slot_of_.at(t))];
    slot.shard = new_buffer(BufferDecl::Shard, t, -1, mine);
    accumulate_param_gradient(t, grad, -1);
  }

  // The buffer plan: every micro-batch buffer (and every bucket) is freed
  // right after its last use; parameters and accumulated gradients stay.
  void inject_frees() {
    std::vector<int> last(P.buffers.size(), -1);
    for (size_t i = 0; i < P.instrs.size(); ++i) {
      const PInstr& in = P.instrs[i];
      if (in.a >= 0) last[static_cast<size_t>(in.a)] = static_cast<int>(i);
      if (in.b >= 0) last[static_cast<size_t>(in.b)] = static_cast<int>(i);
      if (in.kind == PInstr::BucketAllReduce)
        for (int b : P.buckets[static_cast<size_t>(in.index)]) last[static_cast<size_t>(b)] = static_cast<int>(i);
    }
    std::vector<std::pair<int, int>> frees;  // (last use, buffer), sorted
    for (size_t b = 0; b < P.buffers.size(); ++b) {
      BufferDecl::Role r = P.buffers[b].role;
      if (r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard || last[b] < 0) continue;
      frees.emplace_back(last[b], static_cast<int>(b));
    }
    std::sort(frees.begin(), frees.end());
    std::vector<PInstr> out;
    out.reserve(P.instrs.size() + frees.size());
    std::vector<int> moved(P.instrs.size() + 1, 0);  // old index -> new (task spans follow)
    size_t f = 0;
    for (size_t i = 0; i < P.instrs.size(); ++i) {
      moved[i] = static_cast<int>(out.size());
      out.push_back(P.instrs[i]);
      for (; f < frees.size() && frees[f].first == static_cast<int>(i); ++f) {
        PInstr fr;
        fr.kind = PInstr::Free;
        fr.a = frees[f].second;
        fr.mb = P.buffers[static_cast<size_t>(fr.a)].mb;
        out.push_back(fr);
      }
    }
    moved[P.instrs.size()] = static_cast<int>(out.size());
    for (RankProgram::TaskSpan& t : P.tasks) {
      t.first = moved[static_cast<size_t>(t.first)];
      t.last = moved[static_cast<size_t>(t.last)];
    }
    P.instrs = std::move(out);
  }
};

}  // namespace

RankProgram lower_rank(const PlanAnalysis& analysis, const sema::TrainSpec& spec, const LowerOptions& opts, GroupTable& groups, int devices,
                       int rank) {
  return RankLowering(analysis, spec, opts, groups, devices, rank).run();
}

}  // namespace nns::backend::detail
