#include "backend/runtime/plan_runtime.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/safetensors.h"
#include "semantics/autograd.h"

namespace nns::backend {

using sema::OperandSlice;
using sema::Shape;

namespace {

// Copies region (start, length) — full-tensor coordinates — from a buffer
// laid out as piece `sp` into one laid out as `dp`; `add` accumulates,
// `scale` multiplies (floats only; raw 4-byte copies otherwise).
void copy_region(const float* src, const Piece& sp, float* dst, const Piece& dp, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& length, bool add, float scale) {
  size_t rank = start.size();
  if (rank == 0) {
    dst[0] = add ? dst[0] + scale * src[0] : (scale == 1.f ? src[0] : scale * src[0]);
    return;
  }
  for (int64_t l : length)
    if (l == 0) return;
  std::vector<int64_t> sstride(rank, 1), dstride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    sstride[d] = sstride[d + 1] * sp.length[d + 1];
    dstride[d] = dstride[d + 1] * dp.length[d + 1];
  }
  std::vector<int64_t> idx(rank, 0);
  int64_t inner = length[rank - 1];
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t d = 0; d < rank; ++d) {
      so += (start[d] + idx[d] - sp.start[d]) * sstride[d];
      doff += (start[d] + idx[d] - dp.start[d]) * dstride[d];
    }
    const float* s = src + so;
    float* t = dst + doff;
    if (add) {
      for (int64_t i = 0; i < inner; ++i) t[i] += scale * s[i];
    } else if (scale != 1.f) {
      for (int64_t i = 0; i < inner; ++i) t[i] = scale * s[i];
    } else {
      std::memcpy(t, s, static_cast<size_t>(inner) * sizeof(float));
    }
    // Next index over all dims but the last.
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++idx[d] < length[d]) break;
      idx[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
}

}  // namespace

// One buffer: a piece of a tensor that this rank holds.
struct Buf {
  Piece piece;
  std::vector<float> data;  // 4-byte elements (f32, or i32 bit patterns)
  bool empty() const { return data.empty() && piece.start.empty() && piece.length.empty(); }
};

struct PlanTrainer::Impl {
  struct SubRun {
    int subop = -1;
    sema::OpInstance inst;
    std::vector<int> dy;  // per output: the local tensor seeding its gradient (-1: not float)
    sema::Backward bwd;
    float scale = 1.f;  // mean-type losses: local count / full count
  };
  struct OpRun {
    int node = -1;
    std::vector<Layout> in_layout, out_layout, grad_in_layout;
    std::vector<const CommEdge*> in_edge, grad_edge;  // per input; null: none
    std::vector<SubRun> subs;
    bool backward = false;
  };

  sema::Interpreter& interp;
  const sema::Graph& g;
  const sema::Plan& plan;
  sema::TrainSpec spec;
  Backend& be;
  Communicator* comm;
  uint64_t seed;
  int rank = 0, world = 1, k = 1, replica = 0, replicas = 1, device = 0;
  CommPlan cp;
  sema::Graph local;
  std::vector<OpRun> ops;
  std::map<int, Layout> storage;  // params and inputs: the layout they live in
  std::vector<bool> requires_grad;
  std::map<int, Buf> params, accum;                // by param tensor, in storage layout
  std::map<int, std::vector<std::vector<float>>> opt_state;
  std::map<int, Buf> value, grad;                  // per micro-batch
  std::vector<std::vector<float>> lbuf;            // local graph tensors
  uint32_t tag = 0;
  bool fault_skip_allreduce = [] {
    const char* f = std::getenv("NNS_TEST_FAULT");
    return f && std::string(f) == "skip-allreduce";
  }();
  int64_t cur_bytes = 0, peak_bytes = 0;
  std::ostringstream program;                      // --emit=program

  Impl(sema::Interpreter& i, const sema::Graph& graph, const sema::Plan& p, const sema::TrainSpec& s, Backend& b, Communicator* c,
       uint64_t sd)
      : interp(i), g(graph), plan(p), spec(s), be(b), comm(c), seed(sd) {}

  int grank(int dev) const { return replica * k + dev; }
  Group group_of(const std::vector<int>& devs) const {
    Group out;
    for (int d : devs) out.push_back(grank(d));
    return out;
  }
  void track(int64_t delta) {
    cur_bytes += delta;
    peak_bytes = std::max(peak_bytes, cur_bytes);
  }

  Buf zeros(const Piece& p) {
    Buf b{p, std::vector<float>(static_cast<size_t>(p.numel()), 0.f)};
    return b;
  }

  // The part of `from` a consumer of `want` reads: a sub-box, and a value
  // part of it when `want` splits values more finely (scaled, so the parts sum
  // to the whole). Gradients read the whole value (ignore_value).
  std::vector<float> extract(const Buf& from, const Piece& want, bool ignore_value, const std::string& what) {
    if (!contains(from.piece, want.start, want.length))
      throw RuntimeError("internal: " + what + ": slice " + region_text(want.start, want.length) + " is not inside the piece " +
                         region_text(from.piece.start, from.piece.length) + " this rank holds");
    float scale = 1.f;
    if (!ignore_value && want.value_parts != from.piece.value_parts) {
      if (want.value_parts % from.piece.value_parts != 0)
        throw RuntimeError(what + ": value part " + std::to_string(want.value_index) + "/" + std::to_string(want.value_parts) +
                           " cannot be cut from a piece split into " + std::to_string(from.piece.value_parts) + " parts");
      scale = static_cast<float>(from.piece.value_parts) / static_cast<float>(want.value_parts);
    }
    std::vector<float> out(static_cast<size_t>(want.numel()));
    Piece dst = want;
    copy_region(from.data.data(), from.piece, out.data(), dst, want.start, want.length, false, scale);
    return out;
  }

  // ---- adapters ---------------------------------------------------------------------------
  const Group* my_group(const AdapterStep& st, Group& storage_group) const {
    for (const auto& devs : st.groups)
      if (std::find(devs.begin(), devs.end(), device) != devs.end()) {
        storage_group = group_of(devs);
        return &storage_group;
      }
    return nullptr;
  }

  // Runs the derived adapter of `e`: `src` is this rank's piece in e.from
  // (ignored when it holds none); returns its piece in e.to (empty if none).
  Buf run_adapter(const CommEdge& e, const Shape& shape, Buf src) {
    Layout cur = e.from;
    Buf buf = holds(cur, device) ? std::move(src) : Buf{};
    if (holds(cur, device) && buf.data.empty() && buf.piece.length.empty())
      throw RuntimeError("internal: rank " + std::to_string(rank) + " holds no piece of %" + std::to_string(e.tensor) + " for its adapter");
    for (const AdapterStep& st : e.adapter.steps) {
      const Layout& after = st.after;
      if (st.prim == AdapterStep::SendRecv) {
        uint32_t t = ++tag;
        Buf received;
        bool got = false;
        for (const auto& pair : st.groups) {
          int s = pair[0], d = pair[1];
          if (device == s) {
            if (comm) comm->send(buf.data.data(), buf.data.size(), grank(d), t);
          }
          if (device == d) {
            Piece sp = piece_of(cur, s, shape);
            received = zeros(sp);
            if (comm) comm->recv(received.data.data(), received.data.size(), grank(s), t);
            got = true;
          }
        }
        if (got) buf = std::move(received);
        if (holds(after, device)) {
          Piece want = piece_of(after, device, shape);
          if (buf.piece.start != want.start || buf.piece.length != want.length || buf.piece.value_parts != want.value_parts)
            buf = Buf{want, extract(buf, want, false, "send/recv of %" + std::to_string(e.tensor))};
          buf.piece = want;
        } else {
          buf = Buf{};
        }
        cur = after;
        continue;
      }
      Group gs;
      const Group* grp = holds(cur, device) ? my_group(st, gs) : nullptr;
      if (!holds(cur, device)) {
        cur = after;
        continue;
      }
      Piece want = piece_of(after, device, shape);
      std::string what = std::string(prim_name(st.prim)) + " of %" + std::to_string(e.tensor);
      switch (st.prim) {
        case AdapterStep::Chunk:
        case AdapterStep::ValueSplit:
          buf = Buf{want, extract(buf, want, false, what)};
          break;
        case AdapterStep::AllReduce: {
          if (!grp) throw RuntimeError("internal: " + what + ": this rank is in no group");
          // NNS_TEST_FAULT=skip-allreduce: a test-only seeded bug (the
          // activation allreduces are skipped), which --verify must catch.
          if (grp->size() > 1 && comm && !fault_skip_allreduce) comm->allreduce(buf.data.data(), buf.data.size(), *grp);
          if (buf.piece.start != want.start || buf.piece.length != want.length)
            throw RuntimeError("internal: " + what + " changes the region");
          buf.piece = want;
          break;
        }
        case AdapterStep::AllGather: {
          if (!grp) throw RuntimeError("internal: " + what + ": this rank is in no group");
          size_t n = grp->size(), chunk = buf.data.size();
          std::vector<float> tmp(n * chunk);
          if (comm && n > 1) comm->allgather(buf.data.data(), tmp.data(), chunk, *grp);
          else std::copy(buf.data.begin(), buf.data.end(), tmp.begin());
          Buf out = zeros(want);
          int64_t covered = 0;
          const std::vector<int>* devs = nullptr;
          for (const auto& d : st.groups)
            if (std::find(d.begin(), d.end(), device) != d.end()) devs = &d;
          for (size_t i = 0; i < n; ++i) {
            Piece bp = piece_of(cur, (*devs)[i], shape);
            if (!contains(want, bp.start, bp.length)) throw RuntimeError("internal: " + what + ": gathered blocks are not contiguous");
            copy_region(tmp.data() + i * chunk, bp, out.data.data(), want, bp.start, bp.length, false, 1.f);
            covered += bp.numel();
          }
          if (covered != want.numel()) throw RuntimeError("internal: " + what + ": gathered blocks do not cover the result");
          buf = std::move(out);
          break;
        }
        case AdapterStep::ReduceScatter: {
          if (!grp) throw RuntimeError("internal: " + what + ": this rank is in no group");
          const std::vector<int>* devs = nullptr;
          for (const auto& d : st.groups)
            if (std::find(d.begin(), d.end(), device) != d.end()) devs = &d;
          size_t n = grp->size(), chunk = static_cast<size_t>(want.numel());
          std::vector<float> in(n * chunk);
          for (size_t i = 0; i < n; ++i) {
            Piece ap = piece_of(after, (*devs)[i], shape);
            if (!contains(buf.piece, ap.start, ap.length)) throw RuntimeError("internal: " + what + ": a block lies outside the piece");
            copy_region(buf.data.data(), buf.piece, in.data() + i * chunk, ap, ap.start, ap.length, false, 1.f);
          }
          Buf out = zeros(want);
          if (comm && n > 1) comm->reduce_scatter(in.data(), out.data.data(), chunk, *grp);
          else std::copy(in.begin(), in.begin() + static_cast<long>(chunk), out.data.begin());
          buf = std::move(out);
          break;
        }
        case AdapterStep::AllToAll: {
          if (!grp) throw RuntimeError("internal: " + what + ": this rank is in no group");
          const std::vector<int>* devs = nullptr;
          for (const auto& d : st.groups)
            if (std::find(d.begin(), d.end(), device) != d.end()) devs = &d;
          size_t n = grp->size();
          std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> send_regions(n), recv_regions(n);
          size_t chunk = 0;
          for (size_t i = 0; i < n; ++i) {
            Piece theirs_after = piece_of(after, (*devs)[i], shape), theirs_before = piece_of(cur, (*devs)[i], shape);
            if (!intersect(buf.piece, theirs_after, send_regions[i].first, send_regions[i].second) ||
                !intersect(theirs_before, want, recv_regions[i].first, recv_regions[i].second))
              throw RuntimeError("internal: " + what + ": blocks do not meet");
            size_t c = 1;
            for (int64_t l : send_regions[i].second) c *= static_cast<size_t>(l);
            if (i == 0) chunk = c;
            if (c != chunk) throw RuntimeError("internal: " + what + ": uneven blocks");
          }
          std::vector<float> in(n * chunk), outv(n * chunk);
          for (size_t i = 0; i < n; ++i) {
            Piece blk;
            blk.start = send_regions[i].first;
            blk.length = send_regions[i].second;
            copy_region(buf.data.data(), buf.piece, in.data() + i * chunk, blk, blk.start, blk.length, false, 1.f);
          }
          if (comm && n > 1) comm->all_to_all(in.data(), outv.data(), chunk, *grp);
          else outv = in;
          Buf out = zeros(want);
          for (size_t i = 0; i < n; ++i) {
            Piece blk;
            blk.start = recv_regions[i].first;
            blk.length = recv_regions[i].second;
            copy_region(outv.data() + i * chunk, blk, out.data.data(), want, blk.start, blk.length, false, 1.f);
          }
          buf = std::move(out);
          break;
        }
        default:
          break;
      }
      cur = after;
    }
    if (!holds(e.to, device)) return Buf{};
    Piece want = piece_of(e.to, device, shape);
    if (buf.piece.start != want.start || buf.piece.length != want.length || buf.piece.value_parts != want.value_parts)
      buf = Buf{want, extract(buf, want, false, "layout of %" + std::to_string(e.tensor))};
    buf.piece = want;
    return buf;
  }

  // ---- lowering ---------------------------------------------------------------------------
  Layout layout_or_throw(const std::vector<std::pair<int, OperandSlice>>& pieces, const Shape& shape, const std::string& what) {
    Layout l;
    std::string why;
    if (!layout_of_pieces(pieces, shape, l, why)) throw RuntimeError(what + ": " + why + " (not executable yet)");
    return l;
  }

  void lower() {
    rank = comm ? comm->rank() : 0;
    world = comm ? comm->size() : 1;
    k = static_cast<int>(plan.ngpus);
    if (world % k != 0)
      throw RuntimeError("plan " + plan.name + " is for " + std::to_string(k) + " device(s); " + std::to_string(world) +
                         " ranks is not a multiple of that");
    replicas = world / k;
    replica = rank / k;
    device = rank % k;
    if (spec.data.kind == "safetensors") throw RuntimeError("plans train on synthetic data only for now (the train block names a file)");

    cp = derive_communication(g, plan);
    for (const CommEdge& e : cp.edges)
      if (!e.note.empty())
        throw RuntimeError("plan " + plan.name + ": tensor %" + std::to_string(e.tensor) + " (" + g.tensor(e.tensor).name + "): " + e.note);

    std::vector<int> order;
    for (size_t n = 0; n < plan.root_of_node.size(); ++n)
      if (plan.root_of_node[n] >= 0) order.push_back(static_cast<int>(n));
    // Ops run in graph order, one micro-batch after another. An `order(a, b)`
    // that agrees with that order holds within each micro-batch; one against
    // it (b feeds a) orders a of micro-batch i before b of micro-batch i + 1,
    // which running micro-batches one after another honours too.
    // Which tensors depend on a parameter, and which reach the loss.
    requires_grad.assign(g.tensors().size(), false);
    for (int p : g.params()) requires_grad[p] = sema::dtype_is_float(g.tensor(p).dtype);
    for (int n : order) {
      bool any = false;
      for (int t : g.node(n).inputs) any = any || requires_grad[t];
      for (int t : g.node(n).outputs) requires_grad[t] = any && sema::dtype_is_float(g.tensor(t).dtype);
    }
    std::vector<bool> reaches(g.tensors().size(), false);
    reaches[g.loss] = true;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      bool any = false;
      for (int t : g.node(*it).outputs) any = any || reaches[t];
      if (any)
        for (int t : g.node(*it).inputs) reaches[t] = true;
    }

    for (int n : order) {
      const sema::OpNode& node = g.node(n);
      OpRun run;
      run.node = n;
      bool any_in = false, any_out = false;
      for (size_t kk = 0; kk < node.inputs.size(); ++kk) {
        int t = node.inputs[kk];
        const sema::TensorInfo& info = g.tensor(t);
        run.in_layout.push_back(layout_or_throw(input_pieces(plan, n, kk), info.shape, node.name + " input " + std::to_string(kk)));
        const CommEdge* fe = nullptr;
        for (const CommEdge& e : cp.edges)
          if (!e.backward && e.consumer == n && e.input_index == static_cast<int>(kk)) fe = &e;
        if (info.kind != sema::TensorKind::Activation && !storage.count(t)) {
          if (fe) throw RuntimeError("internal: first consumer of " + info.name + " has an edge");
          storage[t] = run.in_layout.back();
        }
        if (info.kind == sema::TensorKind::Activation && !fe) throw RuntimeError("internal: no edge into " + node.name);
        run.in_edge.push_back(fe);
        const CommEdge* be_edge = nullptr;
        bool wants = requires_grad[t] && info.kind != sema::TensorKind::Input;
        any_in = any_in || wants;
        if (wants)
          for (const CommEdge& e : cp.edges)
            if (e.backward && e.producer == n && e.input_index == static_cast<int>(kk)) be_edge = &e;
        if (wants && !be_edge) throw RuntimeError("internal: no gradient edge for input " + std::to_string(kk) + " of " + node.name);
        run.grad_edge.push_back(be_edge);
        run.grad_in_layout.push_back(be_edge ? be_edge->from : Layout{});
      }
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        run.out_layout.push_back(
            layout_or_throw(output_pieces(plan, n, o), g.tensor(node.outputs[o]).shape, node.name + " output " + std::to_string(o)));
        any_out = any_out || reaches[node.outputs[o]];
      }
      run.backward = any_in && any_out;
      for (int leaf : plan.leaves_of(n)) {
        const sema::SubOp& s = plan.subops[leaf];
        if (std::find(s.devices.begin(), s.devices.end(), device) == s.devices.end()) continue;
        run.subs.push_back(instantiate(leaf, run.backward));
      }
      ops.push_back(std::move(run));
    }
    for (auto& [t, l] : storage)
      for (const LayoutFactor& f : l.factors)
        if (f.kind == LayoutFactor::V) throw RuntimeError(g.tensor(t).name + ": a plan that splits a parameter or input by value is not executable");

    // Parameters: every rank computes the full initial values (a pure
    // function of seed and name) and keeps its piece.
    for (int p : g.params()) {
      if (!storage.count(p) || !holds(storage[p], device)) continue;
      const sema::TensorInfo& t = g.tensor(p);
      std::vector<float> full(static_cast<size_t>(sema::numel(t.shape)));
      fill_init(t.init, init_key(seed, t.name), t.dtype, full.data(), sema::numel(t.shape));
      Piece pc = piece_of(storage[p], device, t.shape);
      Buf b{pc, extract(Buf{full_piece(t.shape), std::move(full)}, pc, true, t.name)};
      track(static_cast<int64_t>(b.data.size()) * 4);
      params[p] = std::move(b);
      if (requires_grad[p]) {
        size_t slots = spec.optimizer.kind == "adamw" ? 2 : (spec.optimizer.momentum > 0 ? 1 : 0);
        opt_state[p].assign(slots, std::vector<float>(static_cast<size_t>(pc.numel()), 0.f));
        track(static_cast<int64_t>(slots * pc.numel()) * 4);
      }
    }
    write_program();
  }

  SubRun instantiate(int leaf, bool backward) {
    const sema::SubOp& s = plan.subops[leaf];
    const sema::OpNode& node = g.node(s.node);
    SubRun sub;
    sub.subop = leaf;
    std::vector<Shape> ins, outs;
    for (const OperandSlice& sl : s.inputs) ins.push_back(sl.length);
    for (const OperandSlice& sl : s.outputs) outs.push_back(sl.length);
    std::map<std::string, int64_t> div;
    for (int c = leaf; c >= 0 && plan.subops[c].parent >= 0; c = plan.subops[c].parent)
      if (plan.subops[c].split_id != "value") {
        auto [it, fresh] = div.emplace(plan.subops[c].split_id, 1);
        it->second *= plan.subops[c].split_num;
      }
    try {
      sub.inst = interp.instantiate_op(s.node, ins, outs, div, local);
    } catch (const std::runtime_error& e) {
      throw RuntimeError("plan " + plan.name + ": " + e.what());
    }
    bool whole = true;
    for (size_t i = 0; i < ins.size(); ++i) whole = whole && ins[i] == g.tensor(node.inputs[i]).shape;
    // Kernels whose result depends on where the slice lies in the full tensor.
    for (int ln : sub.inst.nodes) {
      sema::OpNode& op = local.node(ln);
      if (op.kind == "dropout") {
        auto p = op.attrs.find("p");
        bool active = p != op.attrs.end() && std::holds_alternative<double>(p->second) && std::get<double>(p->second) > 0;
        if (!active || whole) continue;
        bool only_dim0 = !node.composite;
        for (size_t d = 1; only_dim0 && d < s.inputs[0].length.size(); ++d) only_dim0 = s.inputs[0].length[d] == g.tensor(node.inputs[0]).shape[d];
        if (!only_dim0) throw RuntimeError(node.name + ": dropout split other than along its first dim is not supported yet");
        op.attrs["element_offset"] = s.inputs[0].start[0] * (sema::numel(s.inputs[0].length) / std::max<int64_t>(1, s.inputs[0].length[0]));
      }
      if (!node.composite && (op.kind == "embedding" || op.kind == "index_select")) {
        size_t ti = op.kind == "embedding" ? 1 : 0;
        op.attrs["vocab_offset"] = s.inputs[ti].start[0];
        op.attrs["vocab_size"] = g.tensor(node.inputs[ti]).shape[0];
      }
    }
    if (!node.composite && !whole) {
      const Shape& full = g.tensor(node.inputs[0]).shape;
      if (node.kind == "cross_entropy" || node.kind == "mse")
        sub.scale = static_cast<float>(static_cast<double>(sema::numel(s.inputs[0].length)) / static_cast<double>(sema::numel(full)));
      if (node.kind == "mean") {
        auto it = node.attrs.find("dim");
        int64_t d = it != node.attrs.end() ? std::get<int64_t>(it->second) : -1;
        if (d < 0) d += static_cast<int64_t>(full.size());
        sub.scale = static_cast<float>(static_cast<double>(s.inputs[0].length[d]) / static_cast<double>(full[d]));
      }
    }
    if (!backward) return sub;
    std::map<int, int> seeds;
    for (int out : sub.inst.outputs) {
      const sema::TensorInfo& t = local.tensor(out);
      if (!sema::dtype_is_float(t.dtype)) {
        sub.dy.push_back(-1);
        continue;
      }
      sema::TensorInfo dy;
      dy.shape = t.shape;
      dy.dtype = t.dtype;
      dy.grad_of = out;
      dy.name = "dy." + t.name;
      int id = local.add_tensor(std::move(dy));
      sub.dy.push_back(id);
      seeds[out] = id;
    }
    sub.bwd = sema::differentiate(local, sub.inst.nodes, seeds, sub.inst.inputs);
    return sub;
  }

  void write_program() {
    program << "program rank " << rank << " (device " << device << " of plan " << plan.name << ", replica " << replica << " of " << replicas
            << ") {\n";
    auto edge_text = [&](const CommEdge* e) {
      std::string s;
      for (const AdapterStep& st : e->adapter.steps) {
        bool mine = false;
        for (const auto& grp : st.groups) mine = mine || std::find(grp.begin(), grp.end(), device) != grp.end();
        if (st.prim == AdapterStep::Chunk || st.prim == AdapterStep::ValueSplit) mine = holds(st.after, device);
        if (mine) s += "    " + st.to_string() + "\n";
      }
      return s;
    };
    for (const OpRun& op : ops) {
      const sema::OpNode& n = g.node(op.node);
      for (size_t kk = 0; kk < op.in_edge.size(); ++kk)
        if (op.in_edge[kk]) program << edge_text(op.in_edge[kk]);
      for (const SubRun& s : op.subs) {
        program << "  run " << n.name << " sub-op #" << s.subop << ":";
        for (int ln : s.inst.nodes) program << " " << local.node(ln).kind;
        program << "\n";
      }
    }
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      if (!it->backward) continue;
      const sema::OpNode& n = g.node(it->node);
      for (const SubRun& s : it->subs) program << "  backward " << n.name << " sub-op #" << s.subop << " (" << s.bwd.nodes.size() << " ops)\n";
      for (const CommEdge* e : it->grad_edge)
        if (e) program << edge_text(e);
    }
    for (const auto& [p, b] : params)
      if (requires_grad[p])
        program << "  update " << g.tensor(p).name << " piece " << region_text(b.piece.start, b.piece.length)
                << (replicas > 1 ? " after allreduce over the " + std::to_string(replicas) + " replicas" : "") << "\n";
    program << "}\n";
  }

  // ---- execution --------------------------------------------------------------------------
  TensorView lview(int t) {
    const sema::TensorInfo& info = local.tensor(t);
    if (lbuf[t].empty() && sema::numel(info.shape) > 0) throw RuntimeError("internal: local tensor %" + std::to_string(t) + " not computed");
    return TensorView{lbuf[t].data(), info.dtype, info.shape};
  }
  void lset(int t, std::vector<float> v) {
    track((static_cast<int64_t>(v.size()) - static_cast<int64_t>(lbuf[t].size())) * 4);
    lbuf[t] = std::move(v);
  }
  void drop_local(int t) {
    track(-static_cast<int64_t>(lbuf[t].size()) * 4);
    std::vector<float>().swap(lbuf[t]);
  }
  void run_local(int n) {
    const sema::OpNode& node = local.node(n);
    std::vector<TensorView> ins, outs;
    for (int t : node.inputs) ins.push_back(lview(t));
    for (int t : node.outputs) {
      const sema::TensorInfo& info = local.tensor(t);
      if (sema::dtype_bytes(info.dtype) != 4) throw RuntimeError(node.name + ": only 4-byte dtypes run on CPU ranks");
      lset(t, std::vector<float>(static_cast<size_t>(sema::numel(info.shape)), 0.f));
      outs.push_back(TensorView{lbuf[t].data(), info.dtype, info.shape});
    }
    be.run_node(local, node, ins, outs);
  }

  void load_inputs(int64_t index) {
    for (int in : g.inputs()) {
      if (!storage.count(in) || !holds(storage[in], device)) continue;
      const sema::TensorInfo& t = g.tensor(in);
      std::vector<float> full(static_cast<size_t>(sema::numel(t.shape)));
      fill_init(t.init, data_key(spec.data.seed, t.name, index % (spec.micro_batches * replicas)), t.dtype, full.data(),
                sema::numel(t.shape));
      Piece pc = piece_of(storage[in], device, t.shape);
      value[in] = Buf{pc, extract(Buf{full_piece(t.shape), std::move(full)}, pc, true, t.name)};
    }
  }

  // One micro-batch forward and backward; returns this rank's share of the loss.
  double run_micro_batch(int64_t index) {
    lbuf.assign(local.tensors().size(), {});
    value.clear();
    grad.clear();
    load_inputs(index);
    for (const OpRun& op : ops) {
      const sema::OpNode& n = g.node(op.node);
      for (size_t kk = 0; kk < n.inputs.size(); ++kk) {
        int t = n.inputs[kk];
        const Shape& shape = g.tensor(t).shape;
        const Buf* src = nullptr;
        if (auto it = params.find(t); it != params.end()) src = &it->second;
        else if (auto v = value.find(t); v != value.end()) src = &v->second;
        // An edge without steps leaves the piece as it is: read it in place.
        Buf moved;
        const Buf* in = src;
        if (op.in_edge[kk] && !op.in_edge[kk]->adapter.steps.empty()) {
          moved = run_adapter(*op.in_edge[kk], shape, src ? *src : Buf{});
          in = &moved;
        }
        if (!op.subs.empty() && !in) throw RuntimeError("internal: no piece of %" + std::to_string(t) + " for " + n.name);
        for (const SubRun& s : op.subs)
          lset(s.inst.inputs[kk], extract(*in, piece_of_slice(plan.subops[s.subop].inputs[kk]), false, n.name + " input " + std::to_string(kk)));
      }
      for (const SubRun& s : op.subs)
        for (int ln : s.inst.nodes) run_local(ln);
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        if (!holds(op.out_layout[o], device)) continue;
        Buf out = zeros(piece_of(op.out_layout[o], device, g.tensor(n.outputs[o]).shape));
        for (const SubRun& s : op.subs) {
          const OperandSlice& sl = plan.subops[s.subop].outputs[o];
          Piece src = piece_of_slice(sl);
          copy_region(lbuf[s.inst.outputs[o]].data(), src, out.data.data(), out.piece, sl.start, sl.length, true, s.scale);
        }
        value[n.outputs[o]] = std::move(out);
      }
      // recompute(...): the sub-op keeps only its inputs until backward,
      // which runs its forward again (dropout masks are counter-based, so
      // the recomputed values are the same).
      for (const SubRun& s : op.subs)
        if (plan.subops[s.subop].recompute && op.backward)
          for (int ln : s.inst.nodes)
            for (int t : local.node(ln).outputs) drop_local(t);
    }
    double loss = 0;
    if (auto it = value.find(g.loss); it != value.end() && it->second.piece.replica_index == 0) loss = it->second.data[0];

    // Backward: the loss gradient is 1 wherever the loss (or a part of it) lives.
    const sema::OpNode& last = g.node(g.tensor(g.loss).producer);
    for (const OpRun& op : ops)
      if (op.node == last.id) {
        size_t o = static_cast<size_t>(std::find(last.outputs.begin(), last.outputs.end(), g.loss) - last.outputs.begin());
        Layout gl = gradient_layout(op.out_layout[o]);
        if (holds(gl, device)) {
          Buf seed = zeros(piece_of(gl, device, g.tensor(g.loss).shape));
          std::fill(seed.data.begin(), seed.data.end(), 1.f);
          grad[g.loss] = std::move(seed);
        }
      }
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      const OpRun& op = *it;
      if (!op.backward) continue;
      const sema::OpNode& n = g.node(op.node);
      for (const SubRun& s : op.subs)
        if (plan.subops[s.subop].recompute)
          for (int ln : s.inst.nodes) run_local(ln);
      for (const SubRun& s : op.subs) {
        for (size_t o = 0; o < n.outputs.size(); ++o) {
          if (s.dy[o] < 0) continue;
          const OperandSlice& sl = plan.subops[s.subop].outputs[o];
          auto gi = grad.find(n.outputs[o]);
          if (gi == grad.end()) {
            lset(s.dy[o], std::vector<float>(static_cast<size_t>(sema::numel(sl.length)), 0.f));
            continue;
          }
          std::vector<float> dy = extract(gi->second, piece_of_slice(sl), true, n.name + " output gradient");
          if (s.scale != 1.f)
            for (float& x : dy) x *= s.scale;
          lset(s.dy[o], std::move(dy));
        }
        for (int bn : s.bwd.nodes) run_local(bn);
      }
      for (size_t kk = 0; kk < n.inputs.size(); ++kk) {
        const CommEdge* e = op.grad_edge[kk];
        if (!e) continue;
        int t = n.inputs[kk];
        const Shape& shape = g.tensor(t).shape;
        Buf contrib;
        if (holds(op.grad_in_layout[kk], device)) {
          contrib = zeros(piece_of(op.grad_in_layout[kk], device, shape));
          for (const SubRun& s : op.subs) {
            auto gt = s.bwd.grads.find(s.inst.inputs[kk]);
            if (gt == s.bwd.grads.end() || gt->second < 0) continue;
            const OperandSlice& sl = plan.subops[s.subop].inputs[kk];
            copy_region(lbuf[gt->second].data(), piece_of_slice(sl), contrib.data.data(), contrib.piece, sl.start, sl.length, true, 1.f);
          }
        }
        if (deferrable(*e)) {
          // Summed locally over the step's micro-batches; one fused
          // allreduce per device group at the end of the step.
          if (contrib.data.empty()) continue;
          auto [it, fresh] = pending[bucket_key(*e)].emplace(t, Buf{});
          if (fresh) it->second = std::move(contrib);
          else
            for (size_t i = 0; i < contrib.data.size(); ++i) it->second.data[i] += contrib.data[i];
          continue;
        }
        Buf moved = run_adapter(*e, shape, std::move(contrib));
        if (!holds(e->to, device)) continue;
        auto gi = grad.find(t);
        if (gi == grad.end()) {
          grad[t] = std::move(moved);
        } else {
          for (size_t i = 0; i < moved.data.size(); ++i) gi->second.data[i] += moved.data[i];
        }
      }
      // This op's local tensors are dead now.
      for (const SubRun& s : op.subs) {
        auto drop = [&](int t) { drop_local(t); };
        for (int t : s.inst.inputs) drop(t);
        for (int ln : s.inst.nodes)
          for (int t : local.node(ln).outputs) drop(t);
        for (int ln : s.bwd.nodes)
          for (int t : local.node(ln).outputs) drop(t);
        for (int t : s.dy)
          if (t >= 0) drop(t);
      }
    }
    return loss;
  }

  // Parameter gradients whose adapter is a single allreduce (replicated
  // weights, batch-split consumers) are bucketed: every rank defers the same
  // edges, and the buckets are reduced in key order, so collective order
  // stays the same on all ranks. pending[key][param] is this rank's summed
  // contribution, in the edge's source piece (an allreduce keeps regions).
  std::map<std::string, std::map<int, Buf>> pending;

  static bool deferrable(const CommEdge& e) {
    return e.backward && e.consumer < 0 && e.adapter.steps.size() == 1 && e.adapter.steps[0].prim == AdapterStep::AllReduce;
  }
  static std::string bucket_key(const CommEdge& e) {
    std::string k;
    for (const auto& grp : e.adapter.steps[0].groups) {
      k += "{";
      for (int d : grp) k += std::to_string(d) + ",";
      k += "}";
    }
    return k;
  }
  // Reduces the buckets (one allreduce each) and returns the summed parameter
  // gradients, in their storage pieces.
  std::map<int, Buf> reduce_pending() {
    std::map<int, Buf> out;
    for (auto& [key, params_in] : pending) {
      // The group of this rank: find it from any edge with this key.
      Group grp;
      for (const CommEdge& e : cp.edges)
        if (deferrable(e) && bucket_key(e) == key) {
          for (const auto& devs : e.adapter.steps[0].groups)
            if (std::find(devs.begin(), devs.end(), device) != devs.end()) grp = group_of(devs);
          break;
        }
      size_t total = 0;
      for (auto& [t, b] : params_in) total += b.data.size();
      std::vector<float> flat;
      flat.reserve(total);
      for (auto& [t, b] : params_in) flat.insert(flat.end(), b.data.begin(), b.data.end());
      if (comm && grp.size() > 1) comm->allreduce(flat.data(), flat.size(), grp);
      size_t off = 0;
      for (auto& [t, b] : params_in) {
        std::copy(flat.begin() + static_cast<long>(off), flat.begin() + static_cast<long>(off + b.data.size()), b.data.begin());
        off += b.data.size();
        b.piece.value_index = 0;
        b.piece.value_parts = 1;
        auto [it, fresh] = out.emplace(t, Buf{});
        if (fresh) it->second = std::move(b);
        else
          for (size_t i = 0; i < b.data.size(); ++i) it->second.data[i] += b.data[i];
      }
    }
    pending.clear();
    return out;
  }

  std::map<std::string, std::vector<float>> assemble(const std::map<int, Buf>& pieces, bool grads_only) {
    std::map<std::string, std::vector<float>> out;
    for (int p : g.params()) {
      if (grads_only && !requires_grad[p]) continue;
      const sema::TensorInfo& t = g.tensor(p);
      std::vector<float> full(static_cast<size_t>(sema::numel(t.shape)), 0.f);
      auto it = pieces.find(p);
      if (it != pieces.end() && replica == 0 && it->second.piece.replica_index == 0)
        copy_region(it->second.data.data(), it->second.piece, full.data(), full_piece(t.shape), it->second.piece.start, it->second.piece.length,
                    false, 1.f);
      if (comm && world > 1) comm->allreduce(full.data(), full.size());
      out[t.name] = std::move(full);
    }
    return out;
  }
};

PlanTrainer::PlanTrainer(sema::Interpreter& interp, const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& spec, Backend& backend,
                         Communicator* comm, uint64_t seed)
    : impl_(std::make_unique<Impl>(interp, g, plan, spec, backend, comm, seed)) {
  impl_->lower();
  std::vector<int> inputs = g.inputs();
  if (!inputs.empty()) {
    const sema::TensorInfo& first = g.tensor(inputs[0]);
    counts_tokens_ = first.dtype == sema::DType::I32 && first.shape.size() >= 2;
    samples_per_step_ = (counts_tokens_ ? sema::numel(first.shape) : first.shape[0]) * spec.micro_batches * impl_->replicas;
  }
}

PlanTrainer::~PlanTrainer() = default;

std::string PlanTrainer::dump() const { return impl_->program.str(); }

StepStats PlanTrainer::step() {
  Impl& m = *impl_;
  auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  st.step = ++step_;
  m.be.set_step(step_);
  int64_t mbs = m.spec.micro_batches;
  double loss = 0;
  for (auto& [p, b] : m.accum) std::fill(b.data.begin(), b.data.end(), 0.f);
  for (int64_t mb = 0; mb < mbs; ++mb) {
    loss += m.run_micro_batch(((step_ - 1) * mbs + mb) * m.replicas + m.replica) / static_cast<double>(mbs);
    for (int p : m.g.params()) {
      auto gi = m.grad.find(p);
      if (gi == m.grad.end() || !m.requires_grad[p]) continue;
      auto [it, fresh] = m.accum.emplace(p, m.zeros(gi->second.piece));
      if (fresh) m.track(static_cast<int64_t>(it->second.data.size()) * 4);
      float w = 1.f / static_cast<float>(mbs);
      for (size_t i = 0; i < gi->second.data.size(); ++i) it->second.data[i] += w * gi->second.data[i];
    }
  }
  // Bucketed parameter gradients: one fused allreduce per device group.
  for (auto& [p, b] : m.reduce_pending()) {
    auto [it, fresh] = m.accum.emplace(p, m.zeros(m.params.at(p).piece));
    if (fresh) m.track(static_cast<int64_t>(it->second.data.size()) * 4);
    if (it->second.piece.start != b.piece.start || it->second.piece.length != b.piece.length)
      throw RuntimeError("internal: bucketed gradient of " + m.g.tensor(p).name + " is not in its storage piece");
    float w = 1.f / static_cast<float>(mbs);
    for (size_t i = 0; i < b.data.size(); ++i) it->second.data[i] += w * b.data[i];
  }
  // Replicas average their gradients (the same device of every replica).
  if (m.replicas > 1) {
    Group across;
    for (int j = 0; j < m.replicas; ++j) across.push_back(j * m.k + m.device);
    for (auto& [p, b] : m.accum) {
      m.comm->allreduce(b.data.data(), b.data.size(), across);
      for (float& x : b.data) x /= static_cast<float>(m.replicas);
    }
  }
  // The loss: parts summed over the plan's devices, averaged over replicas.
  float lv[2] = {static_cast<float>(loss), 0.f};
  // Gradient norm: each piece once (copies of a replicated piece count once).
  double ss = 0;
  for (auto& [p, b] : m.accum) {
    if (m.replica != 0) break;
    double s = 0;
    for (float x : b.data) s += static_cast<double>(x) * x;
    ss += s / static_cast<double>(b.piece.replicas);
  }
  lv[1] = static_cast<float>(ss);
  if (m.comm && m.world > 1) m.comm->allreduce(lv, 2);
  st.loss = lv[0] / static_cast<double>(m.replicas);
  st.grad_norm = std::sqrt(static_cast<double>(lv[1]));
  if (m.spec.clip > 0 && st.grad_norm > m.spec.clip) {
    float factor = static_cast<float>(m.spec.clip / (st.grad_norm + 1e-6));
    for (auto& [p, b] : m.accum)
      for (float& x : b.data) x *= factor;
  }
  // The learning rate follows the same schedule as one device.
  const sema::ScheduleSpec& s = m.spec.schedule;
  double lr = m.spec.optimizer.lr;
  if (s.warmup > 0 && step_ <= s.warmup) {
    lr = lr * static_cast<double>(step_) / static_cast<double>(s.warmup);
  } else if (s.kind != "constant") {
    double total = static_cast<double>(std::max<int64_t>(1, m.spec.steps - s.warmup));
    double t = std::min(1.0, static_cast<double>(step_ - s.warmup) / total);
    lr = s.kind == "cosine" ? s.min_lr + 0.5 * (lr - s.min_lr) * (1 + std::cos(3.141592653589793 * t)) : lr + (s.min_lr - lr) * t;
  }
  st.lr = lr;
  const sema::OptimizerSpec& o = m.spec.optimizer;
  for (auto& [p, b] : m.accum) {
    Buf& param = m.params.at(p);
    const sema::TensorInfo& t = m.g.tensor(p);
    TensorView pv{param.data.data(), t.dtype, param.piece.length}, gv{b.data.data(), t.dtype, b.piece.length};
    OptimizerState state;
    for (auto& v : m.opt_state[p]) state.buffers.push_back(TensorView{v.data(), t.dtype, param.piece.length});
    if (o.kind == "adamw")
      m.be.adamw_update(pv, gv, state, static_cast<float>(lr), static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                        static_cast<float>(o.eps), static_cast<float>(o.weight_decay), step_);
    else
      m.be.sgd_update(pv, gv, state, static_cast<float>(lr), static_cast<float>(o.momentum), static_cast<float>(o.weight_decay));
  }
  peak_bytes_ = m.peak_bytes;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

std::map<std::string, std::vector<float>> PlanTrainer::parameters() { return impl_->assemble(impl_->params, false); }

std::map<std::string, std::vector<float>> PlanTrainer::last_gradients() { return impl_->assemble(impl_->accum, true); }

namespace {

std::string ints_text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::vector<int64_t> parse_ints(const std::string& s) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    out.push_back(std::stoll(s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

StTensor f32_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data, size_t n) {
  StTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = shape;
  t.data.resize(n * 4);
  std::memcpy(t.data.data(), data, n * 4);
  return t;
}

const char* slot_name(const std::string& optimizer, size_t s) {
  if (optimizer == "adamw") return s == 0 ? "exp_avg" : "exp_avg_sq";
  return "momentum";
}

}  // namespace

void PlanTrainer::save_shards(const std::string& dir) {
  Impl& m = *impl_;
  std::vector<StTensor> tensors;
  std::map<std::string, std::string> meta{{"format", "nns-shard-1"},
                                          {"step", std::to_string(step_)},
                                          {"optimizer", m.spec.optimizer.kind},
                                          {"rank", std::to_string(m.rank)},
                                          {"world", std::to_string(m.world)},
                                          {"plan", m.plan.name}};
  // One owner per element: replica 0, first copy of a replicated piece.
  if (m.replica == 0)
    for (const auto& [p, b] : m.params) {
      if (b.piece.replica_index != 0) continue;
      const sema::TensorInfo& t = m.g.tensor(p);
      std::string where = "full=" + ints_text(t.shape) + ";start=" + ints_text(b.piece.start);
      tensors.push_back(f32_tensor(t.name, b.piece.length, b.data.data(), b.data.size()));
      meta["piece:" + t.name] = where;
      auto st = m.opt_state.find(p);
      if (st == m.opt_state.end()) continue;
      for (size_t s = 0; s < st->second.size(); ++s) {
        std::string name = std::string("optimizer.") + slot_name(m.spec.optimizer.kind, s) + "." + t.name;
        tensors.push_back(f32_tensor(name, b.piece.length, st->second[s].data(), st->second[s].size()));
        meta["piece:" + name] = where;
      }
    }
  if (m.rank == 0) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw RuntimeError(dir + ": cannot create the shard folder");
  }
  if (m.comm) m.comm->barrier();
  write_safetensors_atomic(dir + "/rank-" + std::to_string(m.rank) + ".safetensors", tensors, meta);
  if (m.comm) m.comm->barrier();
}

void PlanTrainer::load(const std::string& path, bool checkpoint) {
  Impl& m = *impl_;
  SafetensorsFile f = read_safetensors(path);
  if (checkpoint) {
    auto fmt = f.metadata.find("format");
    if (fmt == f.metadata.end() || fmt->second != "nns-checkpoint-1")
      throw RuntimeError(path + ": not an nns checkpoint (a folder of shards is merged first: nns ckpt merge DIR -o FILE)");
    auto opt = f.metadata.find("optimizer");
    if (opt == f.metadata.end() || opt->second != m.spec.optimizer.kind)
      throw RuntimeError(path + ": checkpoint optimizer '" + (opt == f.metadata.end() ? "?" : opt->second) + "' differs from the train block's '" +
                         m.spec.optimizer.kind + "'");
  }
  auto slice_into = [&](const std::string& name, const Shape& shape, const Piece& pc, std::vector<float>& dst) {
    const StTensor* t = f.find(name);
    if (!t) throw RuntimeError(path + ": missing tensor '" + name + "'");
    if (t->dtype != "F32") throw RuntimeError(path + ": tensor '" + name + "' is " + t->dtype + ", expected F32");
    if (t->shape != shape)
      throw RuntimeError(path + ": tensor '" + name + "' has shape " + sema::shape_to_string(t->shape) + ", expected " + sema::shape_to_string(shape));
    Buf full{full_piece(shape), std::vector<float>(t->data.size() / 4)};
    std::memcpy(full.data.data(), t->data.data(), t->data.size());
    dst = m.extract(full, pc, true, name);
  };
  for (auto& [p, b] : m.params) {
    const sema::TensorInfo& t = m.g.tensor(p);
    slice_into(t.name, t.shape, b.piece, b.data);
    if (!checkpoint) continue;
    auto st = m.opt_state.find(p);
    if (st == m.opt_state.end()) continue;
    for (size_t s = 0; s < st->second.size(); ++s)
      slice_into(std::string("optimizer.") + slot_name(m.spec.optimizer.kind, s) + "." + t.name, t.shape, b.piece, st->second[s]);
  }
  if (!checkpoint) {
    for (const StTensor& t : f.tensors) {
      bool known = false;
      for (int p : m.g.params()) known = known || m.g.tensor(p).name == t.name;
      if (!known) throw RuntimeError(path + ": tensor '" + t.name + "' is not a parameter of this model");
    }
    return;
  }
  try {
    step_ = std::stoll(f.metadata.at("step"));
  } catch (...) {
    throw RuntimeError(path + ": bad 'step' metadata");
  }
}

std::string merge_checkpoint_shards(const std::string& dir, const std::string& out) {
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("rank-", 0) == 0 && n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") files.push_back(dir + "/" + n);
    }
    ::closedir(d);
  } else {
    throw RuntimeError(dir + ": cannot open the shard folder");
  }
  if (files.empty()) throw RuntimeError(dir + ": no rank-*.safetensors shards");
  std::sort(files.begin(), files.end());
  struct Full {
    std::vector<int64_t> shape;
    std::vector<float> data;
    std::vector<char> seen;
  };
  std::map<std::string, Full> full;
  std::map<std::string, std::string> meta0;
  int64_t world = -1;
  for (const std::string& path : files) {
    SafetensorsFile f = read_safetensors(path);
    auto fmt = f.metadata.find("format");
    if (fmt == f.metadata.end() || fmt->second != "nns-shard-1") throw RuntimeError(path + ": not an nns checkpoint shard");
    int64_t w = std::stoll(f.metadata.count("world") ? f.metadata.at("world") : "-1");
    if (world < 0) {
      world = w;
      meta0 = f.metadata;
    }
    if (w != world || f.metadata.at("step") != meta0.at("step"))
      throw RuntimeError(path + ": shard from another run (world or step differs from " + files[0] + ")");
    for (const StTensor& t : f.tensors) {
      auto where = f.metadata.find("piece:" + t.name);
      if (where == f.metadata.end()) throw RuntimeError(path + ": tensor '" + t.name + "' has no piece metadata");
      size_t semi = where->second.find(";start=");
      if (where->second.rfind("full=", 0) != 0 || semi == std::string::npos) throw RuntimeError(path + ": bad piece metadata for '" + t.name + "'");
      std::vector<int64_t> shape = parse_ints(where->second.substr(5, semi - 5)), start = parse_ints(where->second.substr(semi + 7));
      if (start.size() != shape.size() || t.shape.size() != shape.size()) throw RuntimeError(path + ": bad piece of '" + t.name + "'");
      Full& fl = full[t.name];
      if (fl.shape.empty() && fl.data.empty()) {
        fl.shape = shape;
        fl.data.assign(static_cast<size_t>(sema::numel(shape)), 0.f);
        fl.seen.assign(fl.data.size(), 0);
      }
      if (fl.shape != shape) throw RuntimeError(path + ": tensor '" + t.name + "' has another full shape in another shard");
      Piece src;
      src.start = start;
      src.length = t.shape;
      if (!contains(full_piece(shape), start, t.shape)) throw RuntimeError(path + ": piece of '" + t.name + "' lies outside the tensor");
      std::vector<float> vals(t.data.size() / 4);
      std::memcpy(vals.data(), t.data.data(), t.data.size());
      // Mark coverage, then copy.
      std::vector<float> ones(vals.size(), 1.f), cover(fl.data.size(), 0.f);
      copy_region(ones.data(), src, cover.data(), full_piece(shape), start, t.shape, false, 1.f);
      for (size_t i = 0; i < cover.size(); ++i)
        if (cover[i] != 0.f) {
          if (fl.seen[i]) throw RuntimeError(path + ": tensor '" + t.name + "' overlaps a piece of another shard");
          fl.seen[i] = 1;
        }
      copy_region(vals.data(), src, fl.data.data(), full_piece(shape), start, t.shape, false, 1.f);
    }
  }
  std::vector<StTensor> tensors;
  for (auto& [name, fl] : full) {
    for (char c : fl.seen)
      if (!c) throw RuntimeError(dir + ": tensor '" + name + "' is not covered by the shards (a rank's shard is missing?)");
    tensors.push_back(f32_tensor(name, fl.shape, fl.data.data(), fl.data.size()));
  }
  write_safetensors_atomic(out, tensors, {{"format", "nns-checkpoint-1"}, {"step", meta0.at("step")}, {"optimizer", meta0.at("optimizer")}});
  return "merged " + std::to_string(files.size()) + " shard(s) of " + std::to_string(world) + " rank(s), " + std::to_string(tensors.size()) +
         " tensors, step " + meta0.at("step") + " -> " + out;
}

}  // namespace nns::backend
