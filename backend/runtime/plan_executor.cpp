// The plan executor: runs a rank's program instruction by instruction (exec), with its
// buffers, kernel-local tensors, transfers and step end. Collectives are in
// plan_executor_collectives.cpp.
#include "backend/runtime/plan_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/lowering/bf16_storage.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/optimizer.h"
#include "backend/runtime/trace.h"
#include "backend/runtime/trainer.h"

namespace nns::backend {

BoxCopy region_box(const Piece& sp, const Piece& dp, const std::vector<int64_t>& start, const std::vector<int64_t>& length) {
  BoxCopy box;
  box.length = length;
  box.src_dims = sp.length;
  box.dst_dims = dp.length;
  for (size_t d = 0; d < start.size(); ++d) {
    box.src_at.push_back(start[d] - sp.start[d]);
    box.dst_at.push_back(start[d] - dp.start[d]);
  }
  return box;
}

void copy_region(const float* src, const Piece& sp, float* dst, const Piece& dp, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& length, bool add, float scale) {
  host_copy_box(dst, src, region_box(sp, dp, start, length), add, scale);
}

PlanExecutor::PlanExecutor(const sema::Graph& graph, LoweredPlan lp, const sema::TrainSpec& s, Backend& b, Communicator* c, uint64_t sd,
                           const std::string& data_path, const CollectivesFactory& collectives)
    : g(graph), lowered(std::move(lp)), P(lowered.programs.at(0)), spec(s), be(b), comm(c), seed(sd), scaler(s.loss_scale, s.precision == "fp16") {
  const char* staging = std::getenv("NNS_TEST_HOST_STAGING");
  coll = collectives ? collectives(lowered) : make_host_collectives(comm, be, !be.host_memory() || (staging && std::string(staging) == "1"));
  world = coll->size();
  if (world != lowered.ranks())
    throw RuntimeError("plan " + lowered.plan + " lowered for " + std::to_string(lowered.ranks()) + " rank(s) runs on " + std::to_string(world));
  if (P.rank != coll->rank()) throw RuntimeError("internal: rank " + std::to_string(P.rank) + "'s program on another rank");
  const char* f = std::getenv("NNS_TEST_FAULT");
  fault_skip_allreduce = f && std::string(f) == "skip-allreduce";
  fault_consume_before_wait = f && std::string(f) == "consume-before-wait";
  fault_grad_scale_1pct = f && std::string(f) == "grad-scale-1pct";
  fault_update_lr_1pct = f && std::string(f) == "update-lr-1pct";
  fault_wrong_group = f && std::string(f) == "wrong-group";
  fault_gather_own_shard = f && std::string(f) == "gather-own-shard";
  fault_in_place_overwrite = f && std::string(f) == "in-place-overwrite";
  bufs.resize(P.buffers.size());
  zero_pending_.assign(P.buffers.size(), 0);
  // Kernel-local tensors per micro-batch: a pipelined program interleaves
  // micro-batches, and each in-flight one keeps its own activations.
  lbuf_mb.resize(static_cast<size_t>(std::max<int64_t>(spec.micro_batches, 1)));
  for (auto& l : lbuf_mb) l.resize(P.local.tensors().size());
  lbuf_cur = &lbuf_mb[0];
  alias_mb.assign(lbuf_mb.size(), std::vector<int>(P.local.tensors().size(), -1));
  alias_cur = &alias_mb[0];
  alias_at_mb.assign(lbuf_mb.size(), std::vector<int64_t>(P.local.tensors().size(), 0));
  alias_at_cur = &alias_at_mb[0];
  alias_stride_mb.assign(lbuf_mb.size(), std::vector<int64_t>(P.local.tensors().size(), 0));
  alias_stride_cur = &alias_stride_mb[0];
  buf_refs_.assign(P.buffers.size(), 0);
  free_later_.assign(P.buffers.size(), 0);
  if (spec.precision == "bf16" && be.bf16_storage()) bf16_local_ = bf16_local_tensors(P);
  // Point-to-point contexts, created up front in ascending order of the
  // pair on every rank (creation is collective between the two; a common
  // order means no two ranks wait on each other's creation).
  if (world > 1) {
    std::vector<int> peers;
    for (const PInstr& in : P.instrs)
      if (in.kind == PInstr::Send || in.kind == PInstr::Recv) peers.push_back(in.peer);
    std::sort(peers.begin(), peers.end(), [&](int x, int y) {
      return std::make_pair(std::min(P.rank, x), std::max(P.rank, x)) < std::make_pair(std::min(P.rank, y), std::max(P.rank, y));
    });
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    for (int q : peers) coll->connect_peer(q);
  }
  // A data file is read whole by every rank, as one device reads it, and
  // uploaded once; each LoadInput then cuts this rank's piece out of its
  // micro-batch in backend memory.
  if (!data_path.empty()) {
    std::vector<int> inputs = g.inputs();
    std::vector<std::vector<uint8_t>> data = read_input_data(data_path, g, inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (sema::dtype_bytes(g.tensor(inputs[i]).dtype) != 4)
        throw RuntimeError(data_path + ": input '" + g.tensor(inputs[i]).name + "' is " + sema::dtype_name(g.tensor(inputs[i]).dtype) +
                           "; a plan's inputs are 4-byte (f32 or i32)");
      DeviceBuffer file(be, data[i].size());
      be.copy_from_host(file.data(), data[i].data(), data[i].size());
      data_[inputs[i]] = std::move(file);
    }
  }
  if (data_path.empty()) source = data::make_input_source(spec.data, g, spec.micro_batches * lowered.replicas);
  // Parameters: every rank computes the full initial values (a pure
  // function of seed and name) and uploads its piece.
  auto uploaded = [&](const std::vector<float>& host) {
    DeviceBuffer d = alloc(static_cast<int64_t>(host.size()));
    upload(d, host);
    return d;
  };
  for (const ParamSlot& slot : P.params) {
    const sema::TensorInfo& t = g.tensor(slot.tensor);
    std::vector<float> full(static_cast<size_t>(sema::numel(t.shape)));
    fill_init(t.init, init_key(seed, t.name), t.dtype, full.data(), t.shape);
    set_buf(slot.param, uploaded(extract(full, full_piece(t.shape), piece(slot.param), 1.f)));
    if (slot.shard >= 0) set_buf(slot.shard, uploaded(extract(full, full_piece(t.shape), piece(slot.shard), 1.f)));
    std::vector<DeviceBuffer> slots;
    if (slot.trainable) {  // optimizer state for the part this rank updates (a zero1 shard, or its whole piece)
      size_t n = optimizer_slots(spec.optimizer);
      for (size_t k = 0; k < n; ++k) slots.push_back(alloc(piece(slot.state()).numel()));
      track(static_cast<int64_t>(n) * piece(slot.state()).numel() * 4);
    }
    opt.push_back(std::move(slots));
  }
  find_replica_shards();
}

// Micro-batch `index` of the run's data stream, numbered as one device
// numbers its micro-batches (replicas interleave), so that every plan and
// the single-device run see the same samples in the same steps.
void PlanExecutor::load_input(const PInstr& in) {
  int t = P.buffers[static_cast<size_t>(in.b)].tensor;
  const sema::TensorInfo& info = g.tensor(t);
  const Piece& want = piece(in.b);
  int64_t mbs = spec.micro_batches, replicas = lowered.replicas;
  int64_t index = ((step - 1) * mbs + in.mb) * replicas + P.replica;
  if (!data_.empty()) {
    // The file walks through its micro-batches in order and starts again
    // after the last, as the single-device Trainer does. A raw copy (i32
    // token ids travel in 4-byte slots unchanged).
    const DeviceBuffer& file = data_.at(t);
    const int64_t numel = sema::numel(info.shape);
    DeviceBuffer out = alloc(want.numel());
    be.copy_box(out.data(), file.element(index % (file.numel() / numel) * numel), region_box(full_piece(info.shape), want, want.start, want.length),
                false, 1.f);
    return set_buf(in.b, std::move(out));
  }
  if (source) {
    // File data: this rank reads its rows of the micro-batch only (a
    // batch-split rank, its disjoint share), in the input's dtype (f32 or
    // i32, 4-byte slots); its piece is cut out and uploaded.
    std::vector<float> full(static_cast<size_t>(sema::numel(info.shape)));
    source->fill(t, index, full.data(), want.start[0], want.start[0] + want.length[0]);
    DeviceBuffer out = alloc(want.numel());
    upload(out, extract(full, full_piece(info.shape), want, 1.f));
    return set_buf(in.b, std::move(out));
  }
  // Synthetic data is a fixed set of micro-batches: each piece is
  // generated and uploaded once, and copied in backend memory every step.
  auto key = std::make_pair(in.b, index % (mbs * replicas));
  auto hit = input_cache_.find(key);
  if (hit == input_cache_.end()) {
    std::vector<float> full(static_cast<size_t>(sema::numel(info.shape)));
    fill_init(info.init, data_key(spec.data.seed, info.name, key.second), info.dtype, full.data(), info.shape);
    DeviceBuffer d = alloc(want.numel());
    upload(d, extract(full, full_piece(info.shape), want, 1.f));
    hit = input_cache_.emplace(key, std::move(d)).first;
  }
  DeviceBuffer out = alloc(want.numel());
  be.copy(out.data(), hit->second.data(), out.bytes());
  set_buf(in.b, std::move(out));
}

void PlanExecutor::track(int64_t delta) {
  cur_bytes += delta;
  peak_bytes = std::max(peak_bytes, cur_bytes);
}

void PlanExecutor::set_buf(int b, DeviceBuffer v) {
  DeviceBuffer& slot = bufs[static_cast<size_t>(b)];
  track(static_cast<int64_t>(v.bytes()) - static_cast<int64_t>(slot.bytes()));
  slot = std::move(v);
}

void PlanExecutor::free_buf(int b) {
  take_zero(b);
  DeviceBuffer& slot = bufs[static_cast<size_t>(b)];
  track(-static_cast<int64_t>(slot.bytes()));
  slot.reset();
}

void PlanExecutor::lset(int t, DeviceBuffer v) {
  if (int& b = (*alias_cur)[static_cast<size_t>(t)]; b >= 0) unref(std::exchange(b, -1));
  DeviceBuffer& slot = (*lbuf_cur)[static_cast<size_t>(t)];
  track(static_cast<int64_t>(v.bytes()) -
        static_cast<int64_t>(slot.bytes()));  // bytes: a bf16 tensor holds 2 per element
  slot = std::move(v);
}

void PlanExecutor::read_in_place(int t, int b, int64_t at, int64_t row_stride) {
  drop_local(t);
  (*alias_cur)[static_cast<size_t>(t)] = b;
  (*alias_at_cur)[static_cast<size_t>(t)] = at;
  (*alias_stride_cur)[static_cast<size_t>(t)] = row_stride;
  ++buf_refs_[static_cast<size_t>(b)];
}

void PlanExecutor::drop_local(int t) {
  if (int& b = (*alias_cur)[static_cast<size_t>(t)]; b >= 0) unref(std::exchange(b, -1));
  DeviceBuffer& slot = (*lbuf_cur)[static_cast<size_t>(t)];
  track(-static_cast<int64_t>(slot.bytes()));
  slot.reset();
}

template <class Make>
const PlanExecutor::InstrMemo& PlanExecutor::memo(const PInstr& in, Make&& make) {
  if (memo_base_ != P.instrs.data() || memo_.size() != P.instrs.size()) {  // a new program (the profile swaps bodies)
    memo_.assign(P.instrs.size(), InstrMemo{});
    memo_base_ = P.instrs.data();
  }
  const size_t i = static_cast<size_t>(&in - P.instrs.data());
  if (i >= memo_.size()) throw RuntimeError("internal: an instruction outside the rank's program");
  InstrMemo& m = memo_[i];
  if (!m.ready) {
    make(m);
    m.ready = true;
  }
  return m;
}

std::vector<float> PlanExecutor::extract(const std::vector<float>& from, const Piece& have, const Piece& want, float scale) const {
  std::vector<float> out(static_cast<size_t>(want.numel()));
  copy_region(from.data(), have, out.data(), want, want.start, want.length, false, scale);
  return out;
}

DeviceBuffer PlanExecutor::extract_box(const DeviceBuffer& from, int64_t numel, const BoxCopy& box, float scale) {
  int64_t covered = 1;
  for (int64_t l : box.length) covered *= l;
  DeviceBuffer out = covered == numel ? alloc_uninit(numel) : alloc(numel);  // zeros only where the box leaves some
  be.copy_box(out.data(), from.data(), box, false, scale);
  return out;
}

std::vector<float> PlanExecutor::download(const DeviceBuffer& b) const {
  std::vector<float> host(static_cast<size_t>(b.numel()));
  be.copy_to_host(host.data(), b.data(), b.bytes());
  return host;
}

void PlanExecutor::upload(DeviceBuffer& b, const std::vector<float>& host) const {
  if (static_cast<int64_t>(host.size()) != b.numel())
    throw RuntimeError("internal: " + std::to_string(host.size()) + " values for a buffer of " + std::to_string(b.numel()));
  be.copy_from_host(b.data(), host.data(), b.bytes());
}

void PlanExecutor::run_step(int64_t step_number) {
  step = step_number;
  loss = 0;
  grad_norm = 0;
  if (tracer) {  // --trace: every instruction timed, one clock read each (one test per step when off)
    int64_t s0 = TraceRecorder::now_ns(), t0 = s0;
    for (size_t i = 0; i < P.instrs.size(); ++i) {
      settled_at_ = 0;
      exec(P.instrs[i]);
      int64_t t1 = TraceRecorder::now_ns();
      if (settled_at_ > 0 && posted_wait_label >= 0) {  // its wait for a posted collective first, on the comm track
        tracer->record(posted_wait_label, t0, settled_at_, P.instrs[i].mb, step);
        t0 = settled_at_;
      }
      tracer->record_key(static_cast<int>(i), t0, t1, P.instrs[i].mb, step);
      t0 = t1;
    }
    finish_transfers();  // the step's posted operations end with it, traced or not
    settle_all_zeros();
    return tracer->record_step(step, s0, t0);
  }
  for (const PInstr& in : P.instrs) exec(in);
  finish_transfers();
  settle_all_zeros();  // what the step left untouched is read as zeros outside it
}

// Sends complete by the end of the step (the receivers' waits guarantee
// they can); their parked buffers go then.
void PlanExecutor::finish_transfers() {
  // The step end consumes what is still posted (a bucket whose gradients
  // nothing read after it, or everything under the consume-before-wait hook).
  if (!recv_open_.empty()) throw RuntimeError("internal: a receive of the step was never waited for (b" + std::to_string(*recv_open_.begin()) + ")");
  pending_.finish();
  late_.finish();
  for (auto& [b, reqs] : send_pending_)
    for (auto& r : reqs) r->wait();
  send_pending_.clear();
  for (auto& [b, parked] : send_parked_) {
    for (auto& r : parked.second) r->wait();
    track(-static_cast<int64_t>(parked.first.bytes()));
  }
  send_parked_.clear();
  send_release_.clear();
}

void PlanExecutor::release_buf(int b) {
  if (auto it = send_pending_.find(b); it != send_pending_.end()) {
    // Still being sent: keep the data (and its memory) until the send's
    // release point (release_sends) or the step's end.
    auto [at, fresh] =
        send_parked_.emplace(b, std::make_pair(std::move(bufs[static_cast<size_t>(b)]), std::move(it->second)));
    if (!fresh) throw RuntimeError("internal: b" + std::to_string(b) + " parked twice in one step");
    send_pending_.erase(it);
    return;
  }
  free_buf(b);
}

// A Wait on the peer's message that Sends name as their release point
// (PInstr::index, lower_releases.cpp): the peer sent it only after
// receiving ours, so those sends are complete (their wait returns at once)
// and a buffer the program already freed goes now, where the memory replay
// releases it too.
void PlanExecutor::release_sends(const PInstr& wait) {
  auto it = send_release_.find({wait.peer, wait.tag});
  if (it == send_release_.end()) return;
  for (const auto& [b, req] : it->second) {
    req->wait();
    auto drop = [&, req = req](Sends& reqs) {
      for (size_t i = 0; i < reqs.size(); ++i)
        if (reqs[i].get() == req) {
          reqs.erase(reqs.begin() + static_cast<long>(i));
          break;
        }
      return reqs.empty();
    };
    if (auto p = send_pending_.find(b); p != send_pending_.end()) {
      if (drop(p->second)) send_pending_.erase(p);
    } else if (auto k = send_parked_.find(b); k != send_parked_.end() && drop(k->second.second)) {
      track(-static_cast<int64_t>(k->second.first.bytes()));
      send_parked_.erase(k);
    }
  }
  send_release_.erase(it);
}

// A kernel input read in place no longer reads buffer b.
void PlanExecutor::unref(int b) {
  if (--buf_refs_[static_cast<size_t>(b)] == 0 && free_later_[static_cast<size_t>(b)]) {
    free_later_[static_cast<size_t>(b)] = 0;
    release_buf(b);
  }
}

void PlanExecutor::exec(const PInstr& in) {
  // "Post now, wait at first use": an instruction touching a buffer that a
  // posted operation changes waits for it first (on a device: the compute
  // stream waits for the collective stream's event).
  // (A replica average settles its run's members itself: the run's later
  // instructions would otherwise wait for the run's own post.)
  if (!pending_.empty() && in.kind != PInstr::Wait && in.kind != PInstr::ReplicaAverage && pending_.settle(P, in) > 0 &&
      tracer)
    settled_at_ = TraceRecorder::now_ns();
  if (zero_pending_count_ > 0 && in.kind != PInstr::Alloc && in.kind != PInstr::Free) {
    settle_zeros(in);
    if (first_write(in)) return;
  }
  if (in.is_collective()) return exec_collective(in);
  switch (in.kind) {
    case PInstr::Alloc: {  // zeros made lazily (plan_executor_zeros.cpp)
      DeviceBuffer& cur = bufs[static_cast<size_t>(in.b)];
      const int64_t n = piece(in.b).numel();
      if (cur.empty() || cur.numel() != n) set_buf(in.b, alloc_uninit(n));
      return mark_zero(in.b);
    }
    case PInstr::Free:
      if (buf_refs_[static_cast<size_t>(in.a)] > 0) {  // kernels still read it in place: it goes when the last drops it
        free_later_[static_cast<size_t>(in.a)] = 1;
        return;
      }
      release_buf(in.a);
      return;
    case PInstr::Wait:
      recv_open_.erase(in.a);
      if (pending_.complete(in.a) == 0 && world > 1) throw RuntimeError("internal: wait for b" + std::to_string(in.a) + " without its recv");
      if (!send_release_.empty()) release_sends(in);
      return;
    case PInstr::SeedGrad: {  // the loss gradient (loss_scale.h)
      DeviceBuffer& b = bufs[static_cast<size_t>(in.b)];
      scaler.seed_loss_gradient(be, b.data(), b.numel());
      return;
    }
    case PInstr::LoadInput:
      load_input(in);
      return;
    case PInstr::Extract: {
      const Piece& want = piece(in.b);
      const InstrMemo& m = memo(in, [&](InstrMemo& fresh) { fresh.box = region_box(piece(in.a), want, want.start, want.length); });
      set_buf(in.b, extract_box(bufs[static_cast<size_t>(in.a)], want.numel(), m.box, in.scale));
      return;
    }
    case PInstr::Insert: {
      Piece part;
      const Piece from = piece(in.a), to = piece(in.b);
      if (!intersect(from, to, part.start, part.length)) throw RuntimeError("internal: insert of b" + std::to_string(in.a) + " outside b" + std::to_string(in.b));
      be.copy_box(bufs[static_cast<size_t>(in.b)].data(), bufs[static_cast<size_t>(in.a)].data(), region_box(from, to, part.start, part.length), false,
                  in.scale);
      return;
    }
    case PInstr::AddTo: {
      DeviceBuffer& dst = bufs[static_cast<size_t>(in.b)];
      const DeviceBuffer& src = bufs[static_cast<size_t>(in.a)];
      if (dst.numel() != src.numel()) throw RuntimeError("internal: add-to b" + std::to_string(in.b) + " of another size");
      be.axpy(fview(dst), fview(src), in.scale);
      return;
    }
    case PInstr::LossShare:
    case PInstr::Clip:
    case PInstr::Update:
      return exec_step(in);
    default:
      return exec_compute(in);
  }
}

void PlanExecutor::exec_compute(const PInstr& in) {
  const SubOpKernel& kn = P.kernels[static_cast<size_t>(in.kernel)];
  if (in.mb < 0 || in.mb >= static_cast<int>(lbuf_mb.size())) throw RuntimeError("internal: kernel instruction outside a micro-batch");
  lbuf_cur = &lbuf_mb[static_cast<size_t>(in.mb)];
  alias_cur = &alias_mb[static_cast<size_t>(in.mb)];
  alias_at_cur = &alias_at_mb[static_cast<size_t>(in.mb)];
  alias_stride_cur = &alias_stride_mb[static_cast<size_t>(in.mb)];
  if (!kn.elaborated) throw RuntimeError("internal: kernel k" + std::to_string(in.kernel) + " was lowered without its body");
  switch (in.kind) {
    case PInstr::SliceIn: {
      int t = kn.inst.inputs[static_cast<size_t>(in.index)];
      const Piece& want = kn.in_slices[static_cast<size_t>(in.index)];
      const InstrMemo& m = memo(in, [&](InstrMemo& fresh) {
        fresh.in_place = slice_in_place(P, in);
        if (fresh.in_place >= 0) fresh.row_stride = slice_row_stride(P, in);
        if (fresh.in_place < 0) fresh.box = region_box(piece(in.a), want, want.start, want.length);
      });
      if (m.in_place >= 0) {  // read where it lives, no copy (row-strided: columns of its rows)
        read_in_place(t, in.a, m.in_place, m.row_stride);
        return;
      }
      lset(t, extract_box(bufs[static_cast<size_t>(in.a)], want.numel(), m.box, in.scale));
      return;
    }
    case PInstr::Forward:
      prepare_out_writes(in);  // outputs the kernel writes into their collects' buffers (plan_executor_views.cpp)
      for (size_t i = 0; i < kn.inst.nodes.size(); ++i) {
        run_local(kn.inst.nodes[i]);
        if (i < kn.fwd_release.size())
          for (int t : kn.fwd_release[i]) drop_local(t);
      }
      active_outs_.clear();
      return;
    case PInstr::CollectOut: {
      const Piece& sl = kn.out_slices[static_cast<size_t>(in.index)];
      const int out = kn.inst.outputs[static_cast<size_t>(in.index)];
      const bool drop = static_cast<size_t>(in.index) < kn.drop_after_collect.size() &&
                        kn.drop_after_collect[static_cast<size_t>(in.index)];
      if (const int wrote = written_in_place(in)) {  // the kernel wrote it there (plan_executor_views.cpp)
        // The whole of a fresh buffer: the output lives there, as a first
        // whole write's swap leaves it (whole_write; the memory replay's model).
        if (wrote == 2 && !drop && collect_out_whole(P, in)) read_in_place(out, in.b, 0);
      } else {
        const InstrMemo& m = memo(in, [&](InstrMemo& fresh) {
          fresh.box = region_box(sl, piece(in.b), sl.start, sl.length);
          fresh.box.src_bf16 = local_bf16(out);  // a bf16 activation widened into its f32 buffer
        });
        // A tile of a fresh buffer is written (its zeros were never made).
        be.copy_box(bufs[static_cast<size_t>(in.b)].data(), (*lbuf_cur)[static_cast<size_t>(out)].data(), m.box,
                    !tile_write(in), in.scale);
      }
      if (drop) drop_local(out);
      return;
    }
    case PInstr::DropForward:
      for (int ln : kn.inst.nodes)
        for (int t : P.local.node(ln).outputs) drop_local(t);
      return;
    case PInstr::SliceGrad: {
      int dy = kn.dy[static_cast<size_t>(in.index)];
      if (dy < 0) return;
      const Piece& sl = kn.out_slices[static_cast<size_t>(in.index)];
      if (in.a < 0) {
        lset(dy, alloc(sl.numel()));
        return;
      }
      const InstrMemo& m = memo(in, [&](InstrMemo& fresh) {
        fresh.in_place = slice_in_place(P, in);
        if (fresh.in_place >= 0) fresh.row_stride = slice_row_stride(P, in);
        if (fresh.in_place < 0) fresh.box = region_box(piece(in.a), sl, sl.start, sl.length);
      });
      if (m.in_place >= 0) {  // read where it lives, as SliceIn does
        read_in_place(dy, in.a, m.in_place, m.row_stride);
        return;
      }
      lset(dy, extract_box(bufs[static_cast<size_t>(in.a)], sl.numel(), m.box, in.scale));
      return;
    }
    case PInstr::Backward:
      prepare_grad_chains(in);  // gradients added into an earlier kernel's (plan_executor_chains.cpp)
      for (size_t i = 0; i < kn.bwd.nodes.size(); ++i) {
        run_local(kn.bwd.nodes[i]);
        if (i < kn.bwd_release.size())
          for (int t : kn.bwd_release[i]) drop_local(t);
      }
      active_outs_.clear();
      return;
    case PInstr::BackwardW:
      for (int bn : kn.wgrad_nodes) run_local(bn);
      return;
    case PInstr::CollectGrad: {
      if (chained(in)) return;  // its kernel added it to the run's first gradient
      auto gt = kn.bwd.grads.find(kn.inst.inputs[static_cast<size_t>(in.index)]);
      if (gt == kn.bwd.grads.end() || gt->second < 0) return;
      const Piece& sl = kn.in_slices[static_cast<size_t>(in.index)];
      const InstrMemo& m = memo(in, [&](InstrMemo& fresh) {
        fresh.box = region_box(sl, piece(in.b), sl.start, sl.length);
        fresh.box.src_bf16 = local_bf16(gt->second);  // an activation gradient held in bf16
      });
      be.copy_box(bufs[static_cast<size_t>(in.b)].data(), (*lbuf_cur)[static_cast<size_t>(gt->second)].data(), m.box,
                  !tile_write(in), 1.f);
      return;
    }
    case PInstr::FreeKernel:
      for (int t : kn.inst.inputs) drop_local(t);
      for (int ln : kn.inst.nodes)
        for (int t : P.local.node(ln).outputs) drop_local(t);
      for (int ln : kn.bwd.nodes)
        for (int t : P.local.node(ln).outputs) drop_local(t);
      for (int ln : kn.wgrad_nodes)
        for (int t : P.local.node(ln).outputs) drop_local(t);
      for (int t : kn.dy)
        if (t >= 0) drop_local(t);
      return;
    default:
      throw RuntimeError(std::string("internal: unexpected instruction ") + instr_name(in.kind));
  }
}

void PlanExecutor::exec_step(const PInstr& in) {
  switch (in.kind) {
    case PInstr::LossShare: {
      // The one read of a step's values on the host: the loss scalar.
      float share = 0;
      be.copy_to_host(&share, bufs[static_cast<size_t>(in.a)].data(), sizeof share);
      loss += static_cast<double>(share) * in.scale / static_cast<double>(spec.micro_batches);
      return;
    }
    case PInstr::Clip:
      if (skip_update) return;
      if (float factor = clip_factor(spec.clip, grad_norm); factor != 1.f)
        for (const ParamSlot& s : P.params)
          if (s.accum >= 0) be.scale(fview(bufs[static_cast<size_t>(s.accum)]), factor);
      return;
    case PInstr::Update: {
      if (skip_update) return;  // fp16: inf/NaN gradients, this step changes nothing
      size_t slot = static_cast<size_t>(in.index);
      const sema::TensorInfo& t = g.tensor(P.params[slot].tensor);
      const Piece& pc = piece(in.a);
      // A distributed optimizer's Shard: the part of the whole gradient in
      // its box, where the replicas' average is.
      DeviceBuffer part;
      if (!piece(in.b).same_box(pc)) part = box_of(in.b, pc);
      TensorView pv = bufs[static_cast<size_t>(in.a)].view(t.dtype, pc.length),
                 gv = (part.empty() ? bufs[static_cast<size_t>(in.b)] : part).view(t.dtype, pc.length);
      OptimizerState state;
      for (const DeviceBuffer& v : opt[slot]) state.buffers.push_back(v.view(t.dtype, pc.length));
      const double update_lr = fault_update_lr_1pct ? lr * 1.01 : lr;  // NNS_TEST_FAULT=update-lr-1pct
      apply_update(be, spec.optimizer, pv, gv, state, static_cast<float>(update_lr),
                   step - scaler.skipped());  // the optimizer's own step count
      return;
    }
    default:
      throw RuntimeError(std::string("internal: unexpected instruction ") + instr_name(in.kind));
  }
}

}  // namespace nns::backend
