#include "backend/lowering/buffer_check.h"
#include "backend/lowering/buffer_layouts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>

#include "backend/lowering/geometry.h"
#include "backend/lowering/parallel.h"
#include "semantics/check_deadline.h"

namespace nns::backend {

namespace {

// What the interpreter knows of one buffer during the step.
struct BufState {
  enum Life : uint8_t { Unmade, Live, Freed } life = Unmade;
  int64_t parts = 0;    // value parts its contents are split into: 1 the full sum, 0 not known (nothing said yet)
  bool zeros = false;   // holds Alloc's zeros only (an accumulator nothing added to yet)
  int freed_at = -1;    // the Free that ended it
  int reduced_at = -1;  // the last in-place reduction of its contents
  int averaged = 0;     // replica averages applied (accumulated gradients)
  int averaged_at = -1;
  int sent_at = -1;        // a send of it posted (in flight until its release point or the loss allreduce)
  int sends_open = 0;      // its sends not yet known complete
  bool recv_open = false;  // a receive posted into it, not yet waited for
  // Kernel reads of it (slice-in, slice-grad) whose kernel is not freed
  // yet, and the kernel of the last: whether one reads it in place, where
  // it lives (slice_in_place), is asked only when something writes it.
  int readers = 0;
  int reader_kernel = -1;
};

bool persistent(BufferDecl::Role r) {
  return r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard;
}

// One rank's program, interpreted once.
class RankRun {
 public:
  RankRun(const sema::Graph& g, const LoweredPlan& lp, const RankProgram& p, const BufferLayouts& shared,
          std::vector<std::string>& errors, size_t max_errors)
      : g_(g),
        lp_(lp),
        p_(p),
        shared_(shared),
        errors_(errors),
        max_errors_(max_errors),
        st_(p.buffers.size()),
        alias_(p.kernels.size()) {
    // Parameters and zero1 shards hold their values from the previous step
    // (or their initialisation). Accumulated gradients are made again by
    // their Alloc each step: what the last step left in them is stale.
    for (size_t b = 0; b < st_.size(); ++b)
      if (p.buffers[b].role == BufferDecl::Param || p.buffers[b].role == BufferDecl::Shard) {
        st_[b].life = BufState::Live;
        st_[b].parts = 1;
      }
  }

  void run() {
    for (size_t i = 0; i < p_.instrs.size() && !full(); ++i) {
      if ((i & 63) == 0) sema::CheckDeadline::poll();  // (it reads the clock every 64th poll)
      at_ = static_cast<int>(i);
      step(p_.instrs[i]);
    }
    if (!full()) finish();
  }

 private:
  const sema::Graph& g_;
  const LoweredPlan& lp_;
  const RankProgram& p_;
  const BufferLayouts& shared_;
  std::vector<std::string>& errors_;
  size_t max_errors_;
  std::vector<BufState> st_;
  int at_ = -1;
  int rank_errors_ = 0;
  // Sends with a release point not reached yet: (peer, tag of its Wait) -> (buffer, the send's instruction).
  std::map<std::pair<int, uint32_t>, std::vector<std::pair<int, int>>> releases_;
  // Kernel inputs (and output gradients) read in place, by kernel: (mb,
  // dy?, index, buffer), a handful each (its inputs in the micro-batches
  // not yet freed).
  struct Alias {
    int mb, dy, index, buffer, at;  // at: the read's instruction
  };
  std::vector<std::vector<Alias>> alias_;

  bool full() const { return errors_.size() >= max_errors_ || rank_errors_ >= 4; }

  std::string buffer_text(int b) const {
    const BufferDecl& d = p_.buffers[static_cast<size_t>(b)];
    const sema::TensorInfo& t = g_.tensor(d.tensor);
    std::string s = "b" + std::to_string(b) + " (" + role_name(d.role) + " of " +
                    (t.kind == sema::TensorKind::Activation ? "%" + std::to_string(d.tensor) : t.name);
    if (d.mb >= 0) s += ", mb" + std::to_string(d.mb);
    return s + ")";
  }
  std::string where(int i) const {
    return "rank " + std::to_string(p_.rank) + ", instruction " + std::to_string(i) + " (" +
           lp_.instr_text(g_, p_, p_.instrs[static_cast<size_t>(i)]) + ")";
  }
  void error(const std::string& what) {
    if (full()) return;
    errors_.push_back(where(at_) + ": " + what);
    ++rank_errors_;
  }
  bool valid(int b) {
    if (b >= 0 && static_cast<size_t>(b) < st_.size()) return true;
    error("names buffer " + std::to_string(b) + ", which the program does not declare");
    return false;
  }

  // A read of b's contents.
  bool read(int b) {
    if (!valid(b)) return false;
    BufState& s = st_[static_cast<size_t>(b)];
    if (s.life == BufState::Unmade) {
      error("reads " + buffer_text(b) + " before anything writes it");
      return false;
    }
    if (s.life == BufState::Freed) {
      error("reads " + buffer_text(b) + " after its free at instruction " + std::to_string(s.freed_at));
      return false;
    }
    return true;
  }
  // A write into b's existing contents (in place, or adding to them).
  bool update(int b) {
    if (!valid(b)) return false;
    BufState& s = st_[static_cast<size_t>(b)];
    if (s.life == BufState::Unmade) {
      error("writes into " + buffer_text(b) + " before it is made (no alloc)");
      return false;
    }
    if (s.life == BufState::Freed) {
      error("writes to " + buffer_text(b) + " after its free at instruction " + std::to_string(s.freed_at));
      return false;
    }
    return overwrite_ok(b);
  }
  // Anything that changes b's data while others still read it there.
  bool overwrite_ok(int b) {
    const BufState& s = st_[static_cast<size_t>(b)];
    if (s.readers > 0 && read_in_place(b)) {
      error("writes " + buffer_text(b) +
            " while a kernel still reads it in place (its slice-in, before its free-kernel)");
      return false;
    }
    if (s.sent_at >= 0) {
      error("writes " + buffer_text(b) + " while its send (instruction " + std::to_string(s.sent_at) +
            ") may still be in flight");
      return false;
    }
    return true;
  }
  // b made anew (its old contents, if any, replaced).
  void make(int b, int64_t parts) {
    if (!valid(b)) return;
    BufState& s = st_[static_cast<size_t>(b)];
    if (s.life == BufState::Freed) {
      error("makes " + buffer_text(b) + " again after its free at instruction " + std::to_string(s.freed_at));
      return;
    }
    if (s.life == BufState::Live && !overwrite_ok(b)) return;
    const int sent = s.sent_at, open = s.sends_open, readers = s.readers, reader_kernel = s.reader_kernel;
    s = BufState{};
    s.life = BufState::Live;
    s.parts = parts;
    s.sent_at = sent;
    s.sends_open = open;
    // Held reads stay held (none of them in place: overwrite_ok said so).
    s.readers = readers;
    s.reader_kernel = reader_kernel;
  }

  const CommEdge* edge_of(const PInstr& in) const {
    if (in.edge < 0 || static_cast<size_t>(in.edge) >= lp_.comm->edges.size()) return nullptr;
    const CommEdge& e = lp_.comm->edges[static_cast<size_t>(in.edge)];
    if (in.step < 0 || static_cast<size_t>(in.step) >= e.adapter.steps.size()) return nullptr;
    return &e;
  }
  // This device's value parts under the layout before step `step` of edge
  // `edge` (valid, step <= its steps).
  int64_t parts_before(int edge, int step) const {
    return shared_.parts(shared_.first[static_cast<size_t>(edge)] + static_cast<size_t>(step), p_.device);
  }
  // Its value parts under the layout tensor t is produced in (0 when none is known).
  int64_t produced_parts(int t) const {
    if (t < 0 || static_cast<size_t>(t) >= shared_.produced.size() || shared_.produced[static_cast<size_t>(t)] < 0)
      return 0;
    return shared_.parts(static_cast<size_t>(shared_.produced[static_cast<size_t>(t)]), p_.device);
  }

  // The state the adapter step expects b to hold; false (diagnosed) when it
  // holds another. A known full sum where a partial one is expected, after
  // an in-place reduction, is the double reduction of issue 25.
  bool expect_parts(int b, int64_t want, const char* role) {
    BufState& s = st_[static_cast<size_t>(b)];
    if (want <= 0 || s.parts == 0 || s.parts == want) return true;
    if (s.parts == 1 && s.reduced_at >= 0) {
      error(std::string(role) + " " + buffer_text(b) + ", a partial sum of " + std::to_string(want) +
            " parts, but instruction " + std::to_string(s.reduced_at) + " (" +
            lp_.instr_text(g_, p_, p_.instrs[static_cast<size_t>(s.reduced_at)]) +
            ") already reduced it in place: the partial sum is reduced twice (its reduction count is 2)");
      return false;
    }
    error(std::string(role) + " " + buffer_text(b) + " expecting " + parts_text(want) + " but it holds " +
          parts_text(s.parts));
    return false;
  }
  static std::string parts_text(int64_t parts) {
    return parts == 1 ? "the full sum" : "a partial sum of " + std::to_string(parts) + " parts";
  }

  // A collective or transfer of an edge's adapter.
  void adapter_step(const PInstr& in) {
    const CommEdge* e = edge_of(in);
    const int64_t want_before = e ? parts_before(in.edge, in.step) : 0;
    const int64_t after = e ? parts_before(in.edge, in.step + 1) : 0;
    switch (in.kind) {
      case PInstr::AllReduce: {
        if (!read(in.a)) return;
        // A write while a kernel reads the buffer in place, and what the
        // buffer holds: both diagnosed (a second in-place allreduce is both).
        const bool writable = update(in.a);
        if (!expect_parts(in.a, want_before, "allreduces") || !writable) return;
        BufState& s = st_[static_cast<size_t>(in.a)];
        s.parts = after > 0 ? after : 1;
        s.reduced_at = at_;
        s.zeros = false;
        return;
      }
      case PInstr::Send:
        if (read(in.a)) {
          expect_parts(in.a, want_before, "sends");
          BufState& s = st_[static_cast<size_t>(in.a)];
          s.sent_at = at_;
          ++s.sends_open;
          if (in.index >= 0) releases_[{in.peer, static_cast<uint32_t>(in.index)}].push_back({in.a, at_});
        }
        return;
      case PInstr::Recv:
        make(in.b, after);
        if (valid(in.b)) st_[static_cast<size_t>(in.b)].recv_open = true;
        return;
      default: break;  // AllGather, ReduceScatter, AllToAll: a -> b
    }
    if (in.edge < 0) return zero1_step(in);
    if (!read(in.a)) return;
    expect_parts(in.a, want_before,
                 in.kind == PInstr::AllGather       ? "gathers"
                 : in.kind == PInstr::ReduceScatter ? "reduce-scatters"
                                                    : "exchanges");
    if (in.b != in.a) make(in.b, after);
  }

  // zero1 (edge -1): a bucketed gradient reduce-scattered into this rank's
  // shard, or an updated shard gathered into the parameter.
  void zero1_step(const PInstr& in) {
    if (!read(in.a)) return;
    BufState& s = st_[static_cast<size_t>(in.a)];
    if (in.kind == PInstr::ReduceScatter && s.parts == 1 && s.reduced_at >= 0) {
      error("reduce-scatters " + buffer_text(in.a) + ", which instruction " + std::to_string(s.reduced_at) +
            " already reduced: the partial sum is reduced twice");
      return;
    }
    if (in.kind == PInstr::AllGather) {
      if (update(in.b)) st_[static_cast<size_t>(in.b)].parts = 1;
      return;
    }
    make(in.b, 1);
    st_[static_cast<size_t>(in.b)].reduced_at = at_;
  }

  void add_into(int from, int to) {
    if (!read(from) || !update(to)) return;
    BufState &src = st_[static_cast<size_t>(from)], &dst = st_[static_cast<size_t>(to)];
    if (dst.zeros || dst.parts == 0) {
      dst.parts = src.parts;
      dst.zeros = false;
      if (src.reduced_at > dst.reduced_at) dst.reduced_at = src.reduced_at;
      return;
    }
    if (src.parts != 0 && src.parts != dst.parts)
      error("adds " + buffer_text(from) + ", " + parts_text(src.parts) + ", into " + buffer_text(to) + ", " +
            parts_text(dst.parts));
  }

  void kernel_read(const PInstr& in, bool dy) {
    if (in.a < 0) return;  // zeros: a gradient nothing produced
    if (!read(in.a)) return;
    const SubOpKernel* k = kernel(in);
    if (!k) return;
    if (!dy && in.index >= 0 && static_cast<size_t>(in.index) < k->in_slices.size()) {
      // The slice reads the buffer's parts cut by `scale` (value_scale):
      // the buffer must hold slice parts x scale.
      const int64_t want =
          std::llround(static_cast<double>(k->in_slices[static_cast<size_t>(in.index)].value_parts) * in.scale);
      expect_parts(in.a, want, "a kernel input reads");
    }
    // Every read is held until its kernel is freed; whether it reads in
    // place is found only if the buffer is written meanwhile (read_in_place):
    // asking at every read was a quarter of the check.
    std::vector<Alias>& held = alias_[static_cast<size_t>(in.kernel)];
    const int d = dy ? 1 : 0;
    auto it = std::find_if(held.begin(), held.end(),
                           [&](const Alias& x) { return x.mb == in.mb && x.dy == d && x.index == in.index; });
    if (it != held.end()) {
      // Read again (a recompute): the new read replaces the held one when
      // it reads in place; one that copies leaves it (as it always did).
      if (slice_in_place(p_, in) < 0) return;
      --st_[static_cast<size_t>(it->buffer)].readers;
      it->buffer = in.a;
      it->at = at_;
    } else {
      held.push_back({in.mb, d, in.index, in.a, at_});
    }
    BufState& s = st_[static_cast<size_t>(in.a)];
    ++s.readers;
    s.reader_kernel = in.kernel;
  }
  // Whether a held read of b (kernel_read) reads it in place: those of its
  // last reader's kernel first, the other kernels' only when b has more.
  bool read_in_place(int b) const {
    const BufState& s = st_[static_cast<size_t>(b)];
    int seen = 0;
    auto in_place = [&](const std::vector<Alias>& held) {
      for (const Alias& x : held)
        if (x.buffer == b) {
          ++seen;
          if (slice_in_place(p_, p_.instrs[static_cast<size_t>(x.at)]) >= 0) return true;
        }
      return false;
    };
    if (s.reader_kernel >= 0 && in_place(alias_[static_cast<size_t>(s.reader_kernel)])) return true;
    if (seen >= s.readers) return false;
    for (size_t k = 0; k < alias_.size(); ++k)
      if (static_cast<int>(k) != s.reader_kernel && in_place(alias_[k])) return true;
    return false;
  }
  const SubOpKernel* kernel(const PInstr& in) const {
    return in.kernel >= 0 && static_cast<size_t>(in.kernel) < p_.kernels.size()
               ? &p_.kernels[static_cast<size_t>(in.kernel)]
               : nullptr;
  }
  void free_kernel(const PInstr& in) {
    if (in.kernel < 0 || static_cast<size_t>(in.kernel) >= alias_.size()) return;
    std::vector<Alias>& held = alias_[static_cast<size_t>(in.kernel)];
    auto gone = std::remove_if(held.begin(), held.end(), [&](const Alias& x) {
      if (x.mb != in.mb) return false;
      --st_[static_cast<size_t>(x.buffer)].readers;
      return true;
    });
    held.erase(gone, held.end());
  }

  void free_buffer(int b) {
    if (!valid(b)) return;
    BufState& s = st_[static_cast<size_t>(b)];
    if (persistent(p_.buffers[static_cast<size_t>(b)].role)) {
      error("frees " + buffer_text(b) + ", which lives across steps");
      return;
    }
    if (s.life == BufState::Freed) {
      error("frees " + buffer_text(b) + " again (first freed at instruction " + std::to_string(s.freed_at) + ")");
      return;
    }
    if (s.life == BufState::Unmade) {
      error("frees " + buffer_text(b) + ", which was never made");
      return;
    }
    if (s.recv_open) error("frees " + buffer_text(b) + " while its receive is not waited for");
    s.recv_open = false;
    s.life = BufState::Freed;
    s.freed_at = at_;
    // The executor parks a buffer still being sent, and one kernels still
    // read in place, until they are done: the free itself is fine.
  }

  void replica_average(int b) {
    if (!read(b) || !update(b)) return;
    BufState& s = st_[static_cast<size_t>(b)];
    if (s.averaged > 0) {
      error("averages " + buffer_text(b) + " over the replicas again (instruction " + std::to_string(s.averaged_at) +
            " already did): the gradient is divided twice");
      return;
    }
    expect_parts(b, 1, "averages");
    ++s.averaged;
    s.averaged_at = at_;
  }

  void update_param(const PInstr& in) {
    if (!read(in.b) || !update(in.a)) return;
    const BufState& gr = st_[static_cast<size_t>(in.b)];
    if (gr.parts > 1)
      error("updates " + buffer_text(in.a) + " with " + buffer_text(in.b) + ", " + parts_text(gr.parts) +
            ": the full gradient is needed");
    if (lp_.replicas > 1 && gr.averaged == 0)
      error("updates " + buffer_text(in.a) + " with " + buffer_text(in.b) + ", which no replica average reached");
  }

  // Every accumulated gradient: read by the gradient norm, scaled by clipping.
  void accums(bool write) {
    for (const ParamSlot& s : p_.params)
      if (s.accum >= 0 && read(s.accum) && write) update(s.accum);
  }

  void step(const PInstr& in) {
    switch (in.kind) {
      case PInstr::Alloc: {
        if (!valid(in.b)) return;
        const BufferDecl& d = p_.buffers[static_cast<size_t>(in.b)];
        const BufState& s = st_[static_cast<size_t>(in.b)];
        if (s.life == BufState::Live && d.role != BufferDecl::Accum)
          error("allocates " + buffer_text(in.b) + " again while it is live (its contents would be zeroed)");
        // A value's buffer holds what its producer's layout says once the
        // kernels' outputs are collected (in a communication-only lowering
        // there are none: the alloc stands for them).
        const int64_t parts = d.role == BufferDecl::Value ? produced_parts(d.tensor) : 0;
        make(in.b, parts);
        st_[static_cast<size_t>(in.b)].zeros = d.role != BufferDecl::Value || !p_.kernels.empty();
        if (d.role == BufferDecl::Value) st_[static_cast<size_t>(in.b)].parts = parts;
        return;
      }
      case PInstr::Free: return free_buffer(in.a);
      case PInstr::LoadInput: return make(in.b, 1);
      case PInstr::Extract: {
        if (!read(in.a)) return;
        const int64_t src = st_[static_cast<size_t>(in.a)].parts;
        // A value part cut finer (scale < 1) splits the parts further.
        const int64_t finer = in.scale > 0 && in.scale < 1 ? std::llround(1.0 / in.scale) : 1;
        return make(in.b, src * finer);
      }
      case PInstr::AddTo: return add_into(in.a, in.b);
      case PInstr::Insert: {
        if (!read(in.a) || !update(in.b)) return;
        BufState& dst = st_[static_cast<size_t>(in.b)];
        if (dst.zeros || dst.parts == 0) dst.parts = st_[static_cast<size_t>(in.a)].parts;
        dst.zeros = false;
        return;
      }
      case PInstr::SliceIn: return kernel_read(in, false);
      case PInstr::SliceGrad: return kernel_read(in, true);
      case PInstr::CollectOut:
      case PInstr::CollectGrad:
      case PInstr::SeedGrad:
        if (update(in.b)) st_[static_cast<size_t>(in.b)].zeros = false;
        if (in.kind == PInstr::SeedGrad && valid(in.b)) st_[static_cast<size_t>(in.b)].parts = 1;
        return;
      case PInstr::FreeKernel: return free_kernel(in);
      case PInstr::Forward:
      case PInstr::Backward:
      case PInstr::BackwardW:
      case PInstr::DropForward: return;
      case PInstr::AllReduce:
      case PInstr::AllGather:
      case PInstr::ReduceScatter:
      case PInstr::AllToAll:
      case PInstr::Send:
      case PInstr::Recv: return adapter_step(in);
      case PInstr::Wait:
        if (!valid(in.a)) return;
        if (!st_[static_cast<size_t>(in.a)].recv_open)
          return error("waits for " + buffer_text(in.a) + ", into which no receive is posted");
        st_[static_cast<size_t>(in.a)].recv_open = false;
        return release_sends(in);
      case PInstr::BucketAllReduce:
        if (in.index < 0 || static_cast<size_t>(in.index) >= p_.buckets.size())
          return error("names a bucket the program does not have");
        for (int b : p_.buckets[static_cast<size_t>(in.index)]) {
          if (!read(b) || !update(b)) continue;
          BufState& s = st_[static_cast<size_t>(b)];
          if (s.parts == 1 && s.reduced_at >= 0) {
            error("allreduces " + buffer_text(b) + ", which instruction " + std::to_string(s.reduced_at) +
                  " already reduced: the partial sum is reduced twice (its reduction count is 2)");
            continue;
          }
          s.parts = 1;
          s.reduced_at = at_;
        }
        return;
      case PInstr::ReplicaAverage: return replica_average(in.a);
      case PInstr::LossShare: read(in.a); return;
      case PInstr::LossAllReduce:
        // Every rank waits for all its receives before this allreduce over
        // every rank, so no send of the step is still in flight after it
        // (the updates that follow may write a parameter a stage sent).
        for (BufState& s : st_) s.sent_at = -1, s.sends_open = 0;
        return accums(false);
      case PInstr::Clip: return accums(true);
      case PInstr::Update: return update_param(in);
    }
  }

  // The step's end: every micro-batch buffer freed (the frees pass's
  // contract), every receive waited for.
  // A Wait that Sends name as their release point (PInstr::index): those
  // sends are complete (program_release.cpp checks the peer's order).
  void release_sends(const PInstr& in) {
    auto it = releases_.find({in.peer, in.tag});
    if (it == releases_.end()) return;
    for (const auto& [b, sent] : it->second) {
      BufState& s = st_[static_cast<size_t>(b)];
      if (s.sends_open > 0 && --s.sends_open == 0) s.sent_at = -1;
    }
    releases_.erase(it);
  }

  void finish() {
    for (const auto& [key, sends] : releases_)
      for (const auto& [b, sent] : sends) {
        if (full()) return;
        at_ = sent;
        error("releases " + buffer_text(b) + " at tag " + std::to_string(key.second) + " from rank " +
              std::to_string(key.first) + ", which this rank never waits for after the send");
      }
    at_ = static_cast<int>(p_.instrs.size()) - 1;
    for (size_t b = 0; b < st_.size() && !full(); ++b) {
      const BufState& s = st_[b];
      if (s.recv_open)
        errors_.push_back("rank " + std::to_string(p_.rank) + ": the receive into " + buffer_text(static_cast<int>(b)) +
                          " is never waited for");
      if (s.life == BufState::Live && !persistent(p_.buffers[b].role))
        errors_.push_back("rank " + std::to_string(p_.rank) + ": " + buffer_text(static_cast<int>(b)) +
                          " is never freed (the step leaves it live)");
    }
  }
};

}  // namespace

BufferCheckStats check_buffers(const sema::Graph& g, const LoweredPlan& lp, std::vector<std::string>& errors,
                               size_t max_errors) {
  BufferCheckStats stats;
  const BufferLayouts shared(g, lp);
  // Ranks are independent: interpreted on all cores, each into its own
  // list (capped as a serial run would cap it), the lists then appended in
  // rank order up to the budget. A rank's diagnoses do not depend on what
  // other ranks said, so this is the serial output: the serial run stops a
  // rank once the budget is spent, which cuts the same list short.
  std::vector<std::vector<std::string>> found(lp.programs.size());
  parallel_for(lp.programs.size(), [&](size_t r) {
    sema::CheckDeadline::poll();
    if (lp.programs[r].moved_from < 0) RankRun(g, lp, lp.programs[r], shared, found[r], max_errors).run();
  });
  const size_t budget = errors.size() + max_errors;
  for (size_t r = 0; r < lp.programs.size() && errors.size() < budget; ++r) {
    const RankProgram& p = lp.programs[r];
    if (p.moved_from >= 0) continue;
    ++stats.programs;
    const size_t take = std::min(found[r].size(), budget - errors.size());
    errors.insert(errors.end(), found[r].begin(), found[r].begin() + static_cast<std::ptrdiff_t>(take));
    stats.buffers += static_cast<int>(p.buffers.size());
    stats.instructions += static_cast<long long>(p.instrs.size());
  }
  return stats;
}

}  // namespace nns::backend
