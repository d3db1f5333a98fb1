// Emission of a communication edge's adapter on one rank (part of the
// emission pass, lower_emit.cpp): each derived step (comm_plan.h) becomes
// this rank's instructions: pieces reshaped, sends and receives of a
// send/recv step, a collective over the rank's group, with the buffer labels
// (partial sums, copies) updated as the step changes them.
#include <functional>
#include <limits>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

// A copy of `buf` holding exactly `want` (a new buffer), or `buf`
// relabelled when it already holds that box and value split.
int reshape_to(RankBuild& R, int buf, const Piece& want, int tensor, int mb, const std::function<std::string()>& what) {
  const Piece have = R.label(buf);
  if (have.same_box(want) && have.value_parts == want.value_parts) {
    R.label(buf) = want;
    return buf;
  }
  float scale = value_scale(have, want, false, what);
  int nb = R.new_buffer(BufferDecl::Transit, tensor, mb, want);
  PInstr& in = R.emit(PInstr::Extract, mb);
  in.a = buf;
  in.b = nb;
  in.scale = scale;
  return nb;
}

namespace {

// A send/recv step: each pair {s, d} moves the part of s's piece that d
// holds afterwards (transfer_parts). This device sends its parts (cut out
// of its piece where smaller), then receives its own and assembles them
// (with the part it keeps, if any). Returns its buffer after the step.
int send_recv(RankBuild& R, const CommEdge& e, const AdapterStep& st, size_t si, const Layout& cur, int buf, int mb, const std::function<void()>& before_receiving) {
  const Shape& shape = R.g.tensor(e.tensor).shape;
  const int edge = static_cast<int>(&e - R.A.cp.edges.data());
  auto what = [&] { return std::string(prim_name(st.prim)) + " of %" + std::to_string(e.tensor); };
  uint32_t t = ++R.tag;
  auto transfer = [&](PInstr::Kind kind, int a, int b, int peer, int s, int d) {
    PInstr& in = R.emit(kind, mb);
    in.a = a;
    in.b = b;
    in.peer = R.grank(peer);
    in.tag = t;
    in.edge = edge;
    in.step = static_cast<int>(si);
    in.group = R.groups.intern({R.grank(s), R.grank(d)});
  };
  if (holds(cur, R.device())) {
    const Piece mine = R.label(buf);
    for (const auto& pair : st.groups) {
      if (pair[0] != R.device() || pair[1] == R.device()) continue;
      Piece want = piece_of(st.after, pair[1], shape), part = want;
      if (want.value_index != mine.value_index || want.value_parts != mine.value_parts || !intersect(mine, want, part.start, part.length)) {
        // Only a corrupted step (a seeded bug) gets here; the program
        // verifier, which lowers in communication-only mode, names it.
        if (!R.opts.communication_only)
          fail("internal: " + what() + ": device " + std::to_string(R.device()) + " has nothing device " + std::to_string(pair[1]) + " needs");
        part = mine;
      }
      transfer(PInstr::Send, part.same_box(mine) ? buf : reshape_to(R, buf, part, e.tensor, mb, what), -1, pair[1], R.device(), pair[1]);
    }
  }
  before_receiving();
  if (!holds(st.after, R.device())) return -1;
  const Piece want = piece_of(st.after, R.device(), shape);
  std::vector<TransferPart> parts = transfer_parts(st, cur, R.device(), shape);
  if (!tiles(want, parts) && !R.opts.communication_only)
    fail("internal: " + what() + ": the parts device " + std::to_string(R.device()) + " receives do not make its piece");
  std::vector<std::pair<int, Piece>> got;  // buffer, box
  for (const TransferPart& p : parts) {
    if (p.from == R.device()) {
      got.push_back({buf, p.box});
      continue;
    }
    int received = R.new_buffer(BufferDecl::Transit, e.tensor, mb, p.box);
    transfer(PInstr::Recv, -1, received, p.from, p.from, R.device());
    got.push_back({received, p.box});
  }
  if (got.size() == 1 && got[0].second.same_box(want)) return reshape_to(R, got[0].first, want, e.tensor, mb, what);
  int whole = R.new_buffer(BufferDecl::Transit, e.tensor, mb, want);
  R.emit(PInstr::Alloc, mb).b = whole;
  for (const auto& [b, box] : got) {
    PInstr& in = R.emit(PInstr::Insert, mb);
    in.a = b;
    in.b = whole;
  }
  return whole;
}

}  // namespace

// Emits edge `e`'s adapter applied to `src` (this rank's piece in e.from,
// -1 when it holds none); returns its buffer in e.to (-1 if none).
// `stay`: every instruction in the current block (a region's recompute).
int emit_adapter(RankBuild& R, const CommEdge& e, int src, int mb, bool stay) {
  const Shape& shape = R.g.tensor(e.tensor).shape;
  Layout cur = e.from;
  int buf = holds(cur, R.device()) ? src : -1;
  if (holds(cur, R.device()) && buf < 0) fail("internal: rank " + std::to_string(R.P.rank) + " holds no piece of %" + std::to_string(e.tensor) + " for its adapter");
  int edge = static_cast<int>(&e - R.A.cp.edges.data());
  const RankBuild::Block entry = R.blocks.empty() ? RankBuild::Block{} : R.blocks[static_cast<size_t>(R.cur_block)];
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
      buf = send_recv(R, e, st, si, cur, buf, mb, [&] {
        if (si + 1 == e.adapter.steps.size() || stay) return;
        if (!e.backward) R.open_block(mb, R.A.op_of_node[static_cast<size_t>(e.consumer)], sema::PipeTask::F);
        else R.open_block(mb, e.consumer >= 0 ? R.A.op_of_node[static_cast<size_t>(e.consumer)] : -1, sema::PipeTask::B);
        switched = true;
      });
      cur = after;
      continue;
    }
    if (!holds(cur, R.device())) {
      cur = after;
      continue;
    }
    Piece want = piece_of(after, R.device(), shape);
    if (st.prim == AdapterStep::Chunk || st.prim == AdapterStep::ValueSplit) {
      buf = reshape_to(R, buf, want, e.tensor, mb, what);
      cur = after;
      continue;
    }
    const std::vector<int>* devs = R.my_devices(st);
    if (!devs) fail("internal: " + what() + ": this rank is in no group");
    PInstr in;
    in.mb = mb;
    in.edge = edge;
    in.step = static_cast<int>(si);
    in.group = R.group_of(*devs);
    in.a = buf;
    CollectiveGeom geom;
    switch (st.prim) {
      case AdapterStep::AllReduce:
        if (!R.label(buf).same_box(want)) fail("internal: " + what() + " changes the region");
        if (buf == src && !e.backward && R.A.readers[static_cast<size_t>(e.tensor)] > 1) {
          // In place on a value another consumer also reads (and reduces
          // through its own edge): reduce a copy, or it would sum twice.
          int copy = R.new_buffer(BufferDecl::Transit, e.tensor, mb, R.label(buf));
          PInstr& cp = R.emit(PInstr::Extract, mb);
          cp.a = buf;
          cp.b = copy;
          buf = copy;
          in.a = buf;
        }
        in.kind = PInstr::AllReduce;
        R.label(buf) = want;
        break;
      case AdapterStep::AllGather: {
        in.kind = PInstr::AllGather;
        if (R.opts.communication_only) break;  // member boxes: what the executor needs, not the verifier
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
        if (R.opts.communication_only) break;
        for (int d : *devs) {
          Piece ap = piece_of(after, d, shape);
          if (!contains(R.label(buf), ap.start, ap.length)) fail("internal: " + what() + ": a block lies outside the piece");
          geom.send.push_back(ap);
        }
        break;
      case AdapterStep::AllToAll: {
        in.kind = PInstr::AllToAll;
        int64_t chunk = -1;
        for (int d : *devs) {
          // Communication only, the block size is all the verifier needs:
          // the block this device keeps, which moves with it under the
          // plan's symmetry (rank_symmetry.h) as another member's would not.
          if (R.opts.communication_only && d != R.device()) continue;
          Piece theirs_after = piece_of(after, d, shape), theirs_before = piece_of(cur, d, shape), s, r;
          if (!intersect(R.label(buf), theirs_after, s.start, s.length) || !intersect(theirs_before, want, r.start, r.length))
            fail("internal: " + what() + ": blocks do not meet");
          if (chunk < 0) chunk = s.numel();
          if (s.numel() != chunk || r.numel() != chunk) fail("internal: " + what() + ": uneven blocks");
          geom.send.push_back(s);
          geom.recv.push_back(r);
        }
        // PInstr::count is 32-bit (the instruction lists of a 1,000-micro-
        // batch program are most of nns simulate's memory).
        if (chunk > std::numeric_limits<int32_t>::max())
          fail(what() + ": an all-to-all block of " + std::to_string(chunk) + " elements (over 2^31) is not supported");
        in.count = static_cast<int32_t>(chunk);
        break;
      }
      default:
        fail("internal: " + what() + ": unexpected primitive");
    }
    if (in.kind != PInstr::AllReduce) {
      in.b = R.new_buffer(BufferDecl::Transit, e.tensor, mb, want);
      in.geom = R.add_geom(std::move(geom));
      buf = in.b;
    }
    R.P.instrs.push_back(in);
    cur = after;
  }
  int out = holds(e.to, R.device()) ? reshape_to(R, buf, piece_of(e.to, R.device(), shape), e.tensor, mb, [&] { return "layout of %" + std::to_string(e.tensor); }) : -1;
  if (switched) R.open_block(entry.mb, entry.op, entry.phase, entry.from_op);
  return out;
}

}  // namespace nns::backend::detail
