#include "backend/planner/simulator.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace nns::planner {

using backend::PInstr;
using backend::RankProgram;

namespace {

using MsgKey = std::tuple<int, int, uint32_t>;  // sender, receiver, tag

struct Msg {
  double start = 0, arrival = 0;
};

struct RankState {
  size_t pc = 0;
  double clock = 0;
  double comm_free = 0;          // overlap: when the communication stream is free
  std::unordered_map<int, MsgKey> posted;  // Recv buffer -> the message it waits for
  std::vector<int> group_seq;              // collectives issued per group
  bool arrived = false;          // waiting at a collective
  // Overlap. A gradient reduction is reduced in chunks, one per gradient
  // buffer (a share of its time by elements), each once that gradient is
  // final: DDP's small buckets, without their extra latency.
  struct Chunk {
    int ready_after = -1;  // the instruction after which this gradient is final (-1: step start)
    double share = 1;      // of the reduction's time
    double ready_at = 0;
  };
  std::vector<int> ready_after;                 // async instr -> the last of its chunks' ready_after
  std::map<int, std::vector<Chunk>> chunks;     // async instr -> its chunks
  std::map<int, std::vector<std::pair<int, int>>> starts_after;  // instruction -> (async instr, chunk) final after it
  std::map<int, double> local_start;            // async instr -> start such that start + cost = its last chunk's end
  // overlap_param_gather: Param buffer -> when its gather (at the step's
  // start, on the communication stream) is done; the deferred AllGathers.
  std::map<int, double> gathered_at;
  std::vector<char> deferred;
  double gather_wait = 0;  // time readers waited for their gathers
  // Reduce-scattered replica averages in flight (overlap_grad_reduce):
  // gradient buffer -> when its reduction is done, and when it started.
  std::map<int, std::pair<double, double>> scattering;
};

// The distributed optimizer's reduce-scatter (ReplicaAverage, count > 1)
// under overlap_grad_reduce is posted, not waited for where the program
// has it: the rank waits at the first later instruction naming its buffer
// (the Update reading the shard's gradient), or at the gradient norm
// (LossAllReduce, Clip: every gradient) or the step's end, as Megatron-LM
// waits for its grad buckets at the optimizer step.
bool deferred_scatter(const PInstr& in) { return in.kind == PInstr::ReplicaAverage && in.count > 1; }

// Waits for the in-flight reduce-scatters `in` reads (all of them for the
// gradient norm and clipping, or at the end: `in` null).
void settle_scatters(RankState& s, RankTimes& t, const PInstr* in) {
  if (s.scattering.empty()) return;
  const bool all = !in || in->kind == PInstr::LossAllReduce || in->kind == PInstr::Clip;
  for (auto it = s.scattering.begin(); it != s.scattering.end();) {
    if (!all && it->first != in->a && it->first != in->b) {
      ++it;
      continue;
    }
    const auto [done, start] = it->second;
    t.overlapped_comm += std::max(0.0, std::min(done, s.clock) - start);
    if (done > s.clock) {
      t.exposed_comm += done - std::max(s.clock, start);
      s.clock = done;
    }
    it = s.scattering.erase(it);
  }
}

bool gradient_reduction(const PInstr& in) {
  return in.kind == PInstr::BucketAllReduce || in.kind == PInstr::ReplicaAverage;
}

uint8_t track_of(const PInstr& in) {
  switch (in.kind) {
    case PInstr::Forward:
    case PInstr::Backward:
    case PInstr::BackwardW: return 1;
    default: return in.is_collective() || in.kind == PInstr::Send || in.kind == PInstr::Wait ? 2 : 3;
  }
}

// The buffers an async gradient reduction reads and writes.
std::vector<int> reduction_buffers(const RankProgram& prog, const PInstr& in) {
  if (in.kind == PInstr::ReplicaAverage) return {in.a};
  if (in.index >= 0 && static_cast<size_t>(in.index) < prog.buckets.size()) return prog.buckets[static_cast<size_t>(in.index)];
  return {};
}

// For each gradient reduction: the last earlier instruction naming one of its
// buffers (its gradients are final after it).
void find_ready_points(const RankProgram& prog, RankState& s) {
  s.ready_after.assign(prog.instrs.size(), -1);
  std::map<int, int> last_touch;  // buffer -> instruction
  for (size_t i = 0; i < prog.instrs.size(); ++i) {
    const PInstr& in = prog.instrs[i];
    if (gradient_reduction(in)) {
      int ready = -1;
      std::vector<int> bufs = reduction_buffers(prog, in);
      double total = 0;
      for (int b : bufs)
        if (b >= 0 && static_cast<size_t>(b) < prog.buffers.size()) total += static_cast<double>(prog.buffers[static_cast<size_t>(b)].piece.numel());
      std::vector<RankState::Chunk>& parts = s.chunks[static_cast<int>(i)];
      for (int b : bufs) {
        RankState::Chunk c;
        auto it = last_touch.find(b);
        if (it != last_touch.end()) c.ready_after = it->second;
        if (total > 0 && b >= 0 && static_cast<size_t>(b) < prog.buffers.size())
          c.share = static_cast<double>(prog.buffers[static_cast<size_t>(b)].piece.numel()) / total;
        else
          c.share = 1.0 / static_cast<double>(bufs.size());
        ready = std::max(ready, c.ready_after);
        if (c.ready_after >= 0) s.starts_after[c.ready_after].emplace_back(static_cast<int>(i), static_cast<int>(parts.size()));
        parts.push_back(c);
      }
      s.ready_after[i] = ready;
    }
    // Free ends a buffer; Alloc only zero-fills it (lowering allocates
    // accumulators lazily, after the backward): neither makes its content.
    if (in.kind == PInstr::Free || in.kind == PInstr::Alloc) continue;
    if (in.kind == PInstr::AddTo && in.a >= 0 && in.b >= 0) {
      // Accumulating a finished contribution (b += a) is what a DDP hook does
      // the moment the contribution exists: b is final when a was made
      // (lowering batches these copies at the end of a micro-batch's backward).
      auto src = last_touch.find(in.a);
      int when = src != last_touch.end() ? src->second : static_cast<int>(i);
      auto dst = last_touch.find(in.b);
      last_touch[in.b] = dst != last_touch.end() ? std::max(dst->second, when) : when;
      continue;
    }
    if (in.a >= 0) last_touch[in.a] = static_cast<int>(i);
    if (in.b >= 0) last_touch[in.b] = static_cast<int>(i);
    if (in.kind == PInstr::BucketAllReduce)
      for (int b : reduction_buffers(prog, in)) last_touch[b] = static_cast<int>(i);
  }
}

// The communication stream takes gradient reductions in the order their
// gradients became final (a DDP bucket is reduced when it is ready, not in
// parameter order): for the consecutive reductions from s.pc whose
// gradients are final by now, chain them on the stream in ready order and
// record when each would start. Members of a group are symmetric (or held
// and replayed), so a collective starts at the latest of its members' own
// starts.
void plan_stream(const RankProgram& prog, RankState& s, const InstrCost& cost) {
  struct Piece {
    double ready, dur;
    int instr;
  };
  std::vector<Piece> run;
  std::map<int, double> op_cost, op_end;
  for (size_t i = s.pc; i < prog.instrs.size() && gradient_reduction(prog.instrs[i]); ++i) {
    if (s.ready_after[i] >= static_cast<int>(s.pc)) continue;  // not final yet: planned when reached
    int x = static_cast<int>(i);
    op_cost[x] = cost(prog, prog.instrs[i]);
    op_end[x] = s.comm_free;
    for (const RankState::Chunk& c : s.chunks[x]) run.push_back(Piece{c.ready_at, op_cost[x] * c.share, x});
    if (s.chunks[x].empty()) run.push_back(Piece{s.clock, op_cost[x], x});
  }
  std::stable_sort(run.begin(), run.end(), [](const Piece& a, const Piece& b) { return a.ready < b.ready; });
  double free_at = s.comm_free;
  for (const Piece& p : run) {
    double start = std::max(p.ready, free_at);
    free_at = start + p.dur;
    op_end[p.instr] = std::max(op_end[p.instr], free_at);
  }
  for (const auto& [x, c] : op_cost) s.local_start[x] = op_end[x] - c;
  if (!s.local_start.count(static_cast<int>(s.pc))) s.local_start[static_cast<int>(s.pc)] = std::max(s.clock, s.comm_free);
}

bool param_gather(const RankProgram& prog, const PInstr& in) {
  return in.kind == PInstr::AllGather && in.edge < 0 && in.b >= 0 && static_cast<size_t>(in.b) < prog.buffers.size() &&
         prog.buffers[static_cast<size_t>(in.b)].role == backend::BufferDecl::Param;
}

// overlap_param_gather: the step's parameter gathers moved to its start,
// chained on the communication stream in the order of each parameter's
// first reader (SimOptions::overlap_param_gather). Returns the stream's
// busy time (hidden unless a reader waits).
double plan_param_gathers(const RankProgram& prog, RankState& s, const InstrCost& cost, SimResult& out, int r,
                          bool record) {
  s.deferred.assign(prog.instrs.size(), 0);
  std::map<int, int> first_read;  // Param buffer -> its first reader
  for (size_t i = 0; i < prog.instrs.size(); ++i)
    for (int b : {prog.instrs[i].a, prog.instrs[i].b})
      if (b >= 0) first_read.emplace(b, static_cast<int>(i));
  std::vector<std::pair<int, int>> order;  // (first reader, gather instruction)
  for (size_t i = 0; i < prog.instrs.size(); ++i)
    if (param_gather(prog, prog.instrs[i])) {
      s.deferred[i] = 1;
      auto f = first_read.find(prog.instrs[i].b);
      order.emplace_back(f != first_read.end() && f->second < static_cast<int>(i) ? f->second : static_cast<int>(i),
                         static_cast<int>(i));
    }
  std::stable_sort(order.begin(), order.end());
  double t = 0;
  for (const auto& [reader, i] : order) {
    double c = cost(prog, prog.instrs[static_cast<size_t>(i)]);
    if (record && c > 0) out.events.push_back(SimEvent{r, i, t, t + c, 2});
    t += c;
    s.gathered_at[prog.instrs[static_cast<size_t>(i)].b] = t;
  }
  s.comm_free = t;
  return t;
}

struct MsgHash {
  size_t operator()(const MsgKey& k) const {
    return (static_cast<size_t>(std::get<0>(k)) * 0x9e3779b97f4a7c15ULL) ^ (static_cast<size_t>(std::get<1>(k)) << 20) ^
           std::get<2>(k);
  }
};

// Members waiting at one collective: arrivals by rank, and how many have
// gone on (the meeting ends with the last).
struct Meeting {
  std::unordered_map<int, double> arrivals;
  size_t passed = 0;
};

// Per group, its members this simulation holds (the others are taken as on
// time); the loss allreduce's group is every rank of the run.
std::vector<std::vector<int>> members_held(const backend::LoweredPlan& lp,
                                           const std::unordered_map<int, size_t>& index_of) {
  std::vector<std::vector<int>> held(lp.groups.size());
  for (size_t g = 0; g < lp.groups.size(); ++g)
    for (int m : lp.groups[g])
      if (index_of.count(m)) held[g].push_back(m);
  return held;
}

}  // namespace

bool simulate(const backend::LoweredPlan& lp, const InstrCost& cost, SimResult& out, std::string& err,
              const SimOptions& opts) {
  const size_t n = lp.programs.size();
  out = SimResult{};
  out.ranks.assign(n, RankTimes{});
  std::vector<RankState> st(n);
  for (size_t r = 0; r < n; ++r) {
    st[r].group_seq.assign(lp.groups.size(), 0);
    if (opts.overlap_grad_reduce) find_ready_points(lp.programs[r], st[r]);
  }
  std::vector<double> gather_busy(n, 0.0);
  for (size_t r = 0; r < n && opts.overlap_param_gather; ++r)
    gather_busy[r] = plan_param_gathers(lp.programs[r], st[r], cost, out, static_cast<int>(r), opts.record);
  std::unordered_map<MsgKey, Msg, MsgHash> sent;  // sent and not yet received (a Wait takes its message out)
  std::unordered_map<int, size_t> index_of;       // global rank -> program (a lowering may hold some ranks only)
  for (size_t i = 0; i < n; ++i) index_of[lp.programs[i].rank] = i;
  const std::vector<std::vector<int>> held_members = members_held(lp, index_of);
  std::unordered_map<uint64_t, Meeting> meeting;  // (group, k) -> the k-th collective's meeting
  auto record = [&](size_t r, size_t pc, double b, double e, uint8_t track) {
    if (opts.record && e > b) out.events.push_back(SimEvent{static_cast<int>(r), static_cast<int>(pc), b, e, track});
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      const RankProgram& prog = lp.programs[r];
      RankState& s = st[r];
      RankTimes& t = out.ranks[r];
      while (s.pc < prog.instrs.size()) {
        const PInstr& in = prog.instrs[s.pc];
        const bool async = opts.overlap_grad_reduce && gradient_reduction(in);
        if (!s.gathered_at.empty())  // a parameter's first reader waits for its gather
          for (int b : {in.a, in.b}) {
            auto g = s.gathered_at.find(b);
            if (g == s.gathered_at.end()) continue;
            if (g->second > s.clock) {
              t.exposed_comm += g->second - s.clock;
              s.gather_wait += g->second - s.clock;
              s.clock = g->second;
            }
            s.gathered_at.erase(g);
          }
        if (!s.scattering.empty() && !deferred_scatter(in)) settle_scatters(s, t, &in);
        if (!s.deferred.empty() && s.deferred[s.pc]) {
          // gathered at the step's start (plan_param_gathers)
        } else if (in.kind == PInstr::Send) {
          double c = cost(prog, in);
          sent[{prog.rank, in.peer, in.tag}] = Msg{s.clock, s.clock + c};
          record(r, s.pc, s.clock, s.clock + c, 2);
        } else if (in.kind == PInstr::Recv) {
          s.posted[in.b] = MsgKey{in.peer, prog.rank, in.tag};
        } else if (in.kind == PInstr::Wait) {
          auto p = s.posted.find(in.a);
          if (p == s.posted.end()) {
            err = "rank " + std::to_string(prog.rank) + ": Wait on a buffer with no posted Recv";
            return false;
          }
          auto m = sent.find(p->second);
          if (m == sent.end()) break;  // the sender has not reached its Send yet
          double start = std::max(s.clock, m->second.start);
          if (m->second.arrival > s.clock) {
            t.bubble += start - s.clock;
            t.exposed_comm += m->second.arrival - start;
            s.clock = m->second.arrival;
          }
          sent.erase(m);
          s.posted.erase(p);
        } else if (in.is_collective() && in.group >= 0) {
          const std::vector<int>& members = held_members.at(static_cast<size_t>(in.group));
          const uint64_t key = (static_cast<uint64_t>(in.group) << 32) |
                               static_cast<uint32_t>(s.group_seq[static_cast<size_t>(in.group)]);
          auto meet = meeting.try_emplace(key).first;
          auto& arrivals = meet->second.arrivals;
          if (!s.arrived) {
            // Async: the member is ready when its gradients are final and its
            // communication stream is free.
            double when = s.clock;
            if (async) {
              if (!s.local_start.count(static_cast<int>(s.pc))) plan_stream(prog, s, cost);
              when = s.local_start[static_cast<int>(s.pc)];
            }
            arrivals[prog.rank] = when;
            s.arrived = true;
          }
          // Members this simulation does not hold (other, identical replicas) are taken as on time.
          bool all = true;
          double start = 0;
          for (int m : members) {
            auto a = arrivals.find(m);
            if (a == arrivals.end()) { all = false; break; }
            start = std::max(start, a->second);
          }
          if (!all) break;
          double c = cost(prog, in);
          if (async && deferred_scatter(in)) {
            const double done = start + c;
            s.comm_free = std::max(s.comm_free, done);
            auto& f = s.scattering[in.a];
            f = {std::max(f.first, done), start};
            record(r, s.pc, start, done, 2);
          } else if (async) {
            double done = start + c;
            s.comm_free = std::max(s.comm_free, done);
            double hidden = std::max(0.0, std::min(done, s.clock) - start);
            t.overlapped_comm += hidden;
            if (done > s.clock) {
              t.exposed_comm += done - std::max(s.clock, start);
              t.bubble += std::max(0.0, start - s.clock);
              s.clock = done;
            }
            record(r, s.pc, start, done, 2);
          } else {
            t.bubble += start - s.clock;
            t.exposed_comm += c;
            s.clock = start + c;
            record(r, s.pc, start, s.clock, 2);
          }
          s.arrived = false;
          ++s.group_seq[static_cast<size_t>(in.group)];
          if (++meet->second.passed == members.size()) meeting.erase(meet);
        } else {
          double c = cost(prog, in);
          t.busy += c;
          record(r, s.pc, s.clock, s.clock + c, track_of(in));
          s.clock += c;
        }
        if (opts.overlap_grad_reduce) {
          auto it = s.starts_after.find(static_cast<int>(s.pc));
          if (it != s.starts_after.end())
            for (const auto& [x, j] : it->second) s.chunks[x][static_cast<size_t>(j)].ready_at = s.clock;
        }
        ++s.pc;
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    settle_scatters(st[r], out.ranks[r], nullptr);
    if (st[r].pc < lp.programs[r].instrs.size()) {
      err = "rank " + std::to_string(lp.programs[r].rank) + " blocks forever at instruction " +
            std::to_string(st[r].pc) + " (" + backend::instr_name(lp.programs[r].instrs[st[r].pc].kind) + ")";
      return false;
    }
    out.ranks[r].end = st[r].clock;
    // The gathers' stream time no reader waited for was hidden.
    out.ranks[r].overlapped_comm += std::max(0.0, gather_busy[r] - st[r].gather_wait);
    out.step_time = std::max(out.step_time, st[r].clock);
  }
  return true;
}

}  // namespace nns::planner
