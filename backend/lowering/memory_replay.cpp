#include "backend/lowering/memory_replay.h"

#include "backend/lowering/bf16_storage.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace nns::backend {

namespace {

// A kernel's local tensor in one micro-batch. By kernel, not by tensor
// alone: kernels of one body may share their tensors' ids
// (LowerOptions::shared_kernel_bodies), each still holding its own.
struct LocalKey {
  int mb, kernel, t;
  bool operator==(const LocalKey& o) const { return mb == o.mb && kernel == o.kernel && t == o.t; }
};
struct LocalKeyHash {
  size_t operator()(const LocalKey& k) const {
    uint64_t h = (static_cast<uint64_t>(static_cast<uint32_t>(k.kernel)) << 32) | static_cast<uint32_t>(k.t);
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(k.mb)) * 0x9e3779b97f4a7c15ULL;
    return std::hash<uint64_t>()(h * 0xff51afd7ed558ccdULL);
  }
};

// The replay's state: the buffers live now, the kernels' local tensors held
// now (per micro-batch), and the largest sum seen so far with what made it.
class Replay {
 public:
  Replay(const RankProgram& prog, int bpe, int optimizer_slots, bool bf16_storage)
      : prog_(prog),
        L_(prog.local),
        nb_(prog.buffers.size()),
        bpe_(bpe),
        live_(nb_, 0),
        refs_(nb_, 0),
        free_later_(nb_, 0),
        fresh_(nb_, 0) {
    if (bf16_storage) half_ = bf16_kernel_tensors(prog);
    count_persistent(optimizer_slots);
  }

  // Replays the program. Without a stop point, finds the peak and where it
  // is reached (an instruction, and the node inside it when a kernel's
  // nodes make it); with one (a fresh Replay), replays up to that point and
  // describes what is live there. Two linear passes: describing the live
  // set at every new peak (each step of a growing forward) was quadratic.
  MemoryPeak run(int stop_at = -1, int stop_sub = -1) {
    stop_at_ = stop_at;
    stop_sub_ = stop_sub;
    cur_ = out_.persistent;
    out_.peak = cur_;
    for (size_t i = 0; i < prog_.instrs.size() && !described_; ++i) {
      at_ = static_cast<int>(i);
      step(prog_.instrs[i]);
      sub_ = -1;
      note();
    }
    return out_;
  }
  int peak_sub() const { return peak_sub_; }

 private:
  double bytes(int buf) const { return static_cast<double>(prog_.buffers[static_cast<size_t>(buf)].piece.numel()) * bpe_; }
  bool persistent(int buf) const {
    BufferDecl::Role r = prog_.buffers[static_cast<size_t>(buf)].role;
    return r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard;
  }
  // Kernel tensors are fp32 in the local graph (the CPU executor keeps any
  // dtype in 4-byte slots): scale them to the costed element size; under
  // bf16 storage, the executor's bf16 activations take 2 bytes.
  double tbytes(int kernel, int t) const {
    const bool half = half_ && half_->bf16(kernel, t);
    return static_cast<double>(sema::numel(L_.tensor(t).shape)) * (half ? 2 : bpe_);
  }

  void count_persistent(int optimizer_slots) {
    for (size_t b = 0; b < nb_; ++b) {
      if (!persistent(static_cast<int>(b))) continue;
      out_.persistent += bytes(static_cast<int>(b));
      (prog_.buffers[b].role == BufferDecl::Accum ? out_.gradients : out_.weights) += bytes(static_cast<int>(b));
    }
    for (const ParamSlot& s : prog_.params)
      if (s.trainable && s.state() >= 0 && static_cast<size_t>(s.state()) < nb_) {
        double elems = static_cast<double>(prog_.buffers[static_cast<size_t>(s.state())].piece.numel());
        double state = elems * 4 * (optimizer_slots + (bpe_ < 4 ? 1 : 0));  // fp32 state (+ fp32 master weights)
        out_.persistent += state;
        out_.optimizer += state;
      }
  }

  // A point of the replay: the first pass keeps the largest sum and where;
  // the second describes the live set at the point the first found.
  void note() {
    if (stop_at_ < 0) {
      if (cur_ + kern_ > out_.peak) {
        out_.peak = cur_ + kern_;
        out_.at_instr = at_;
        peak_sub_ = sub_;
      }
    } else if (!described_ && at_ == stop_at_ && sub_ == stop_sub_) {
      describe();
      described_ = true;
    }
  }
  // The peak: what is live now.
  void describe() {
    out_.peak = cur_ + kern_;
    out_.at_instr = at_;
    out_.buffers_at_peak = cur_ - out_.persistent;
    out_.kernels_at_peak = kern_;
    out_.roles_at_peak.clear();
    out_.live_buffers.clear();
    for (size_t b = 0; b < nb_; ++b)
      if (live_[b]) {
        out_.roles_at_peak[prog_.buffers[b].role] += bytes(static_cast<int>(b));
        out_.live_buffers.push_back(static_cast<int>(b));
      }
    out_.kernel_bytes_at_peak.clear();
    for (const auto& [at, held] : local_) out_.kernel_bytes_at_peak[at.kernel] += held;
  }

  void make(int buf) {
    if (buf < 0 || static_cast<size_t>(buf) >= nb_ || live_[static_cast<size_t>(buf)] || persistent(buf)) return;
    live_[static_cast<size_t>(buf)] = 1;
    cur_ += bytes(buf);
  }
  void release(int buf) {
    if (!live_[static_cast<size_t>(buf)]) return;
    if (sending_.count(buf)) {  // parked: its send may still be in flight
      parked_.insert(buf);
      return;
    }
    live_[static_cast<size_t>(buf)] = 0;
    cur_ -= bytes(buf);
  }
  // A Send: until its release point (PInstr::index, a later Wait on the
  // peer's message; lower_releases.cpp) or the step's end.
  void send(const PInstr& in) {
    if (in.a < 0 || static_cast<size_t>(in.a) >= nb_) return;
    ++sending_[in.a];
    if (in.index >= 0) releases_[release_key(in.peer, static_cast<uint32_t>(in.index))].push_back(in.a);
  }
  // A Wait: the sends it completes no longer hold their buffers; a parked
  // one goes now, as the executor frees it there.
  void wait(const PInstr& in) {
    if (releases_.empty()) return;
    auto it = releases_.find(release_key(in.peer, in.tag));
    if (it == releases_.end()) return;
    for (int b : it->second) {
      auto s = sending_.find(b);
      if (s == sending_.end() || --s->second > 0) continue;
      sending_.erase(s);
      if (parked_.erase(b)) release(b);
    }
    releases_.erase(it);
  }
  static uint64_t release_key(int peer, uint32_t tag) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(peer)) << 32) | tag;
  }
  void unalias(const LocalKey& at) {
    if (alias_.empty()) return;
    auto it = alias_.find(at);
    if (it == alias_.end()) return;
    int b = it->second;
    alias_.erase(it);
    if (--refs_[static_cast<size_t>(b)] == 0 && free_later_[static_cast<size_t>(b)]) {
      free_later_[static_cast<size_t>(b)] = 0;
      release(b);
    }
  }
  void lset(int k, int mb, int t) {
    if (t < 0 || static_cast<size_t>(t) >= L_.tensors().size()) return;
    const LocalKey at{mb, k, t};
    unalias(at);
    double& held = local_[at];
    const double now = tbytes(k, t);
    kern_ += now - held;
    held = now;
  }
  void ldrop(int k, int mb, int t) {
    const LocalKey at{mb, k, t};
    unalias(at);
    auto it = local_.find(at);
    if (it == local_.end()) return;
    kern_ -= it->second;
    local_.erase(it);
  }
  // A kernel tensor read in place from buffer `buf` until the kernel drops it.
  void alias(int k, int mb, int t, int buf) {
    const LocalKey at{mb, k, t};
    ldrop(k, mb, t);
    alias_[at] = buf;
    ++refs_[static_cast<size_t>(buf)];
  }
  // A node list as the executor runs it: each node's outputs made (the
  // peak may fall here, mid-instruction), then what it was last to read dropped.
  void run_nodes(int k, int mb, const std::vector<int>& nodes, const std::vector<std::vector<int>>& release) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int t : L_.node(nodes[i]).outputs) lset(k, mb, t);
      sub_ = static_cast<int>(i);
      note();
      if (i < release.size())
        for (int t : release[i]) ldrop(k, mb, t);
    }
  }

  void free_buffer(int buf) {
    if (buf < 0 || static_cast<size_t>(buf) >= nb_) return;
    if (refs_[static_cast<size_t>(buf)] > 0) free_later_[static_cast<size_t>(buf)] = 1;
    else release(buf);
  }
  // A kernel input: read where it lives (held by the buffer until the
  // kernel drops it), or copied into the kernel.
  void slice_in(const PInstr& in, const SubOpKernel& k) {
    if (in.index < 0 || static_cast<size_t>(in.index) >= k.inst.inputs.size()) return;
    int t = k.inst.inputs[static_cast<size_t>(in.index)];
    if (slice_in_place(prog_, in) >= 0)
      alias(in.kernel, in.mb, t, in.a);
    else
      lset(in.kernel, in.mb, t);
  }
  void free_kernel(int ki, int mb, const SubOpKernel& k) {
    for (int t : k.inst.inputs) ldrop(ki, mb, t);
    for (const std::vector<int>* list : {&k.inst.nodes, &k.bwd.nodes, &k.wgrad_nodes})
      for (int n : *list)
        for (int t : L_.node(n).outputs) ldrop(ki, mb, t);
    for (int t : k.dy) ldrop(ki, mb, t);
  }

  void step(const PInstr& in) {
    // Freshness (allocated, untouched since), as the executor's lazy zeros
    // see it (plan_executor_zeros.cpp): any instruction naming a buffer, a
    // bucket's allreduce its members, the loss allreduce and clipping all.
    const bool fresh_b = in.b >= 0 && static_cast<size_t>(in.b) < nb_ && fresh_[static_cast<size_t>(in.b)];
    if (in.kind == PInstr::LossAllReduce || in.kind == PInstr::Clip) std::fill(fresh_.begin(), fresh_.end(), 0);
    for (int b : {in.a, in.b})
      if (b >= 0 && static_cast<size_t>(b) < nb_) fresh_[static_cast<size_t>(b)] = 0;
    if (in.kind == PInstr::BucketAllReduce && in.index >= 0 && static_cast<size_t>(in.index) < prog_.buckets.size())
      for (int b : prog_.buckets[static_cast<size_t>(in.index)]) fresh_[static_cast<size_t>(b)] = 0;
    if (in.kind == PInstr::Alloc && in.b >= 0 && static_cast<size_t>(in.b) < nb_) fresh_[static_cast<size_t>(in.b)] = 1;
    const SubOpKernel* k =
        in.kernel >= 0 && static_cast<size_t>(in.kernel) < prog_.kernels.size() ? &prog_.kernels[static_cast<size_t>(in.kernel)] : nullptr;
    switch (in.kind) {
      case PInstr::Free: free_buffer(in.a); break;
      case PInstr::Send: send(in); break;
      case PInstr::Wait: wait(in); break;
      case PInstr::Alloc:
      case PInstr::LoadInput:
      case PInstr::Extract:
      case PInstr::Recv:
      case PInstr::AllGather:
      case PInstr::ReduceScatter:
      case PInstr::AllToAll: make(in.b); break;
      case PInstr::SliceIn:
        if (k) slice_in(in, *k);
        break;
      case PInstr::CollectOut:
        if (k && in.index >= 0 && static_cast<size_t>(in.index) < k->drop_after_collect.size()) {
          const int t = k->inst.outputs[static_cast<size_t>(in.index)];
          if (k->drop_after_collect[static_cast<size_t>(in.index)])
            ldrop(in.kernel, in.mb, t);
          else if (fresh_b && collect_out_whole(prog_, in))  // the kernel reads its output in the buffer
            alias(in.kernel, in.mb, t, in.b);
        }
        break;
      case PInstr::SliceGrad:
        if (k && in.index >= 0 && static_cast<size_t>(in.index) < k->dy.size()) {
          const int dy = k->dy[static_cast<size_t>(in.index)];
          if (dy < 0) break;
          if (in.a >= 0 && slice_in_place(prog_, in) >= 0)  // read in place, as the executor does
            alias(in.kernel, in.mb, dy, in.a);
          else
            lset(in.kernel, in.mb, dy);
        }
        break;
      case PInstr::Forward:
        if (k) run_nodes(in.kernel, in.mb, k->inst.nodes, k->fwd_release);
        break;
      case PInstr::Backward:
        if (k) run_nodes(in.kernel, in.mb, k->bwd.nodes, k->bwd_release);
        break;
      case PInstr::BackwardW:
        if (k) run_nodes(in.kernel, in.mb, k->wgrad_nodes, {});
        break;
      case PInstr::DropForward:
        if (k)
          for (int n : k->inst.nodes)
            for (int t : L_.node(n).outputs) ldrop(in.kernel, in.mb, t);
        break;
      case PInstr::FreeKernel:
        if (k) free_kernel(in.kernel, in.mb, *k);
        break;
      default: break;
    }
  }

  const RankProgram& prog_;
  const sema::Graph& L_;
  const size_t nb_;
  const int bpe_;
  std::optional<Bf16KernelTensors> half_;  // bf16 storage: the local tensors held in bf16 (none: fp32 costing)
  MemoryPeak out_;
  std::vector<char> live_;
  // Per buffer, its sends posted this step and not known complete: a Free
  // parks the buffer until their release points (or the step's end).
  std::unordered_map<int, int> sending_;
  std::unordered_set<int> parked_;  // freed while sending
  std::unordered_map<uint64_t, std::vector<int>>
      releases_;  // (peer, tag) of a Wait -> the buffers whose sends it completes
  // Per (micro-batch, kernel, local tensor): its bytes while it is held.
  std::unordered_map<LocalKey, double, LocalKeyHash> local_;
  // Kernel inputs read in place: (micro-batch, kernel, local tensor) ->
  // buffer, the readers of each buffer, and the buffers freed while still read.
  std::unordered_map<LocalKey, int, LocalKeyHash> alias_;
  std::vector<int> refs_;
  std::vector<char> free_later_;
  std::vector<char> fresh_;  // per buffer: allocated and untouched since (step())
  double cur_ = 0, kern_ = 0;
  int at_ = -1;
  int sub_ = -1;  // the node of run_nodes being replayed, -1 between instructions
  int peak_sub_ = -1, stop_at_ = -1, stop_sub_ = -1;
  bool described_ = false;
};

}  // namespace

MemoryPeak peak_memory(const RankProgram& prog, int bpe, int optimizer_slots, bool bf16_storage) {
  Replay find(prog, bpe, optimizer_slots, bf16_storage);
  MemoryPeak found = find.run();
  if (found.at_instr < 0) return found;  // persistent state only: nothing else is live
  return Replay(prog, bpe, optimizer_slots, bf16_storage).run(found.at_instr, find.peak_sub());
}

}  // namespace nns::backend
