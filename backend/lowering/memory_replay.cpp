#include "backend/lowering/memory_replay.h"

#include "backend/lowering/bf16_storage.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace nns::backend {

namespace {

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
    if (bf16_storage) half_ = bf16_local_tensors(prog);
    count_persistent(optimizer_slots);
    index_kernel_tensors();
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
  double tbytes(int t) const {
    const bool half = !half_.empty() && half_[static_cast<size_t>(t)];
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

  // Which kernel each local tensor belongs to (every kernel elaborates into
  // its own tensors of the shared local graph).
  void index_kernel_tensors() {
    owner_.assign(L_.tensors().size(), -1);
    auto own = [&](int t, int k) {
      if (t >= 0 && static_cast<size_t>(t) < owner_.size()) owner_[static_cast<size_t>(t)] = k;
    };
    for (size_t k = 0; k < prog_.kernels.size(); ++k) {
      const SubOpKernel& kn = prog_.kernels[k];
      for (int t : kn.inst.inputs) own(t, static_cast<int>(k));
      for (int t : kn.dy) own(t, static_cast<int>(k));
      for (const std::vector<int>* list : {&kn.inst.nodes, &kn.bwd.nodes, &kn.wgrad_nodes})
        for (int n : *list)
          for (int t : L_.node(n).outputs) own(t, static_cast<int>(k));
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
    for (const auto& [at, held] : local_) out_.kernel_bytes_at_peak[owner_[static_cast<uint32_t>(at)]] += held;
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
  // A kernel tensor of one micro-batch, as one key.
  static uint64_t key(int mb, int t) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(mb)) << 32) | static_cast<uint32_t>(t);
  }
  void unalias(int mb, int t) {
    if (alias_.empty()) return;
    auto it = alias_.find(key(mb, t));
    if (it == alias_.end()) return;
    int b = it->second;
    alias_.erase(it);
    if (--refs_[static_cast<size_t>(b)] == 0 && free_later_[static_cast<size_t>(b)]) {
      free_later_[static_cast<size_t>(b)] = 0;
      release(b);
    }
  }
  void lset(int mb, int t) {
    if (t < 0 || static_cast<size_t>(t) >= L_.tensors().size()) return;
    unalias(mb, t);
    double& held = local_[key(mb, t)];
    kern_ += tbytes(t) - held;
    held = tbytes(t);
  }
  void ldrop(int mb, int t) {
    unalias(mb, t);
    auto it = local_.find(key(mb, t));
    if (it == local_.end()) return;
    kern_ -= it->second;
    local_.erase(it);
  }
  // A node list as the executor runs it: each node's outputs made (the
  // peak may fall here, mid-instruction), then what it was last to read dropped.
  void run_nodes(int mb, const std::vector<int>& nodes, const std::vector<std::vector<int>>& release) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int t : L_.node(nodes[i]).outputs) lset(mb, t);
      sub_ = static_cast<int>(i);
      note();
      if (i < release.size())
        for (int t : release[i]) ldrop(mb, t);
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
    if (slice_in_place(prog_, in) >= 0) {
      ldrop(in.mb, t);
      alias_[key(in.mb, t)] = in.a;
      ++refs_[static_cast<size_t>(in.a)];
    } else {
      lset(in.mb, t);
    }
  }
  void free_kernel(int mb, const SubOpKernel& k) {
    for (int t : k.inst.inputs) ldrop(mb, t);
    for (const std::vector<int>* list : {&k.inst.nodes, &k.bwd.nodes, &k.wgrad_nodes})
      for (int n : *list)
        for (int t : L_.node(n).outputs) ldrop(mb, t);
    for (int t : k.dy) ldrop(mb, t);
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
          if (k->drop_after_collect[static_cast<size_t>(in.index)]) {
            ldrop(in.mb, t);
          } else if (fresh_b && collect_out_whole(prog_, in)) {  // the kernel reads its output in the buffer
            ldrop(in.mb, t);
            alias_[key(in.mb, t)] = in.b;
            ++refs_[static_cast<size_t>(in.b)];
          }
        }
        break;
      case PInstr::SliceGrad:
        if (k && in.index >= 0 && static_cast<size_t>(in.index) < k->dy.size()) {
          const int dy = k->dy[static_cast<size_t>(in.index)];
          if (dy < 0) break;
          if (in.a >= 0 && slice_in_place(prog_, in) >= 0) {  // read in place, as the executor does
            ldrop(in.mb, dy);
            alias_[key(in.mb, dy)] = in.a;
            ++refs_[static_cast<size_t>(in.a)];
          } else {
            lset(in.mb, dy);
          }
        }
        break;
      case PInstr::Forward:
        if (k) run_nodes(in.mb, k->inst.nodes, k->fwd_release);
        break;
      case PInstr::Backward:
        if (k) run_nodes(in.mb, k->bwd.nodes, k->bwd_release);
        break;
      case PInstr::BackwardW:
        if (k) run_nodes(in.mb, k->wgrad_nodes, {});
        break;
      case PInstr::DropForward:
        if (k)
          for (int n : k->inst.nodes)
            for (int t : L_.node(n).outputs) ldrop(in.mb, t);
        break;
      case PInstr::FreeKernel:
        if (k) free_kernel(in.mb, *k);
        break;
      default: break;
    }
  }

  const RankProgram& prog_;
  const sema::Graph& L_;
  const size_t nb_;
  const int bpe_;
  std::vector<char> half_;  // bf16 storage: the local tensors held in bf16 (empty: none)
  MemoryPeak out_;
  std::vector<char> live_;
  // Per buffer, its sends posted this step and not known complete: a Free
  // parks the buffer until their release points (or the step's end).
  std::unordered_map<int, int> sending_;
  std::unordered_set<int> parked_;  // freed while sending
  std::unordered_map<uint64_t, std::vector<int>>
      releases_;  // (peer, tag) of a Wait -> the buffers whose sends it completes
  // Per (micro-batch, local tensor): its bytes while it is held.
  std::unordered_map<uint64_t, double> local_;
  std::vector<int> owner_;  // local tensor -> kernel index
  // Kernel inputs read in place: (micro-batch, local tensor) -> buffer, the
  // readers of each buffer, and the buffers freed while still read.
  std::unordered_map<uint64_t, int> alias_;
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
