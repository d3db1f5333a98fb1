// The schedule pass: the emitted blocks in the order the rank runs them.
// Without task orders that is the emission order; with them (pipeline
// schedules), this rank's tasks in the plan's order, each block once the
// blocks it depends on ran, receives posted a task ahead. Split into steps
// over one StepBlocks: extents, dependencies, tasks, their sequence, the
// block order, the instructions.
#include <algorithm>
#include <functional>
#include <set>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

namespace {

using Block = RankBuild::Block;

// What the steps of the schedule pass compute about the blocks of one rank.
struct StepBlocks {
  size_t nb = 0;                       // blocks
  std::vector<char> runs_segment;      // per plan segment: this rank runs a part of it
  std::vector<int> first, last;        // per block: its instructions [first, last) in emission order (-1: none)
  std::vector<std::vector<int>> preds;  // per block: the blocks it depends on (sorted)
  // This rank's tasks: their refs, blocks and ids; per block its task (-1:
  // none) and whether it receives (lazy: runs when a task needs it).
  std::map<sema::TaskRef, int> task_id;
  std::vector<sema::TaskRef> task_ref;
  std::vector<std::vector<int>> task_blocks;
  std::vector<int> task_of;
  std::vector<char> lazy;
  std::vector<int> seq_pos, seq;       // the task sequence and each task's position in it
  std::vector<int> order, owner;       // the block order; per block the position of the task that pulled it (-1: none)
};

// The Wait that completes receive `in` (named like it for the matching).
// The directive a schedule error points at: the schedule() call, else the
// first order() between tasks.
front::SourceLoc schedule_directive(const sema::Plan& plan) {
  if (!plan.schedules.empty()) return plan.schedules.front().loc;
  return plan.task_orders.empty() ? front::SourceLoc{} : plan.task_orders.front().loc;
}

PInstr wait_for(const PInstr& in) {
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

// Which plan segments this rank runs a part of, and the extents of the
// blocks.
void block_extents(const RankBuild& R, StepBlocks& S) {
  const size_t nb = S.nb;
  std::vector<char>& runs_segment = S.runs_segment;
  runs_segment.assign(R.plan.segments.size(), 0);
  // From the plan, not from the kernels: a communication-only lowering
  // (program verification) has none, and must order blocks the same way.
  for (const PlanAnalysis::Op& op : R.A.ops) {
    int seg = R.segment_of(op.node);
    if (seg >= 0 && op.leaves_on.count(R.device())) runs_segment[static_cast<size_t>(seg)] = 1;
  }
  // Block extents (blocks are contiguous in emission order).
  std::vector<int>& first = S.first;
  std::vector<int>& last = S.last;
  first.assign(nb, -1);
  last.assign(nb, -1);
  for (size_t i = 0; i < R.P.instrs.size(); ++i) {
    int b = R.block_of[i];
    if (b < 0) fail("internal: an instruction outside every block");
    if (first[b] < 0) first[b] = static_cast<int>(i);
    last[b] = static_cast<int>(i) + 1;
  }
}

void block_dependencies(const RankBuild& R, StepBlocks& S) {
  const size_t nb = S.nb;
  // Dependencies: read after write, write after read or write, per
  // buffer, per kernel instance (a kernel's local tensors for one
  // micro-batch) and for the step loss. Reads of one value (a weight read
  // by every micro-batch) need no order among themselves.
  std::vector<std::vector<int>>& preds = S.preds;
  preds.assign(nb, {});
  {
    const int mbs = static_cast<int>(R.spec.micro_batches);
    const size_t nbuf = R.P.buffers.size(), loss_res = nbuf + R.P.kernels.size() * static_cast<size_t>(mbs);
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
    for (size_t i = 0; i < R.P.instrs.size(); ++i) {
      const PInstr& in = R.P.instrs[i];
      int b = R.block_of[i];
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
}

void rank_tasks(const RankBuild& R, StepBlocks& S) {
  const size_t nb = S.nb;
  // This rank's tasks.
  std::map<sema::TaskRef, int>& task_id = S.task_id;
  std::vector<sema::TaskRef>& task_ref = S.task_ref;
  std::vector<std::vector<int>>& task_blocks = S.task_blocks;
  std::vector<int>& task_of = S.task_of;
  std::vector<char>& lazy = S.lazy;
  const std::vector<int>& first = S.first;
  const std::vector<int>& last = S.last;
  const std::vector<char>& runs_segment = S.runs_segment;
  task_of.assign(nb, -1);
  lazy.assign(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    for (int i = first[b]; i >= 0 && i < last[b]; ++i)
      if (R.P.instrs[static_cast<size_t>(i)].kind == PInstr::Recv) lazy[b] = 1;
    const Block& bl = R.blocks[b];
    if (bl.op < 0 || R.plan.task_orders.empty()) continue;
    auto seg_of = [&](int op) {
      int s2 = R.segment_of(R.A.ops[static_cast<size_t>(op)].node);
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
}

void task_sequence(const RankBuild& R, StepBlocks& S) {
  // The task sequence: the plan's task orders among this rank's tasks,
  // ties broken by emission order.
  const size_t nt = S.task_ref.size();
  const std::map<sema::TaskRef, int>& task_id = S.task_id;
  const std::vector<std::vector<int>>& task_blocks = S.task_blocks;
  std::vector<int>& seq_pos = S.seq_pos;
  std::vector<int>& seq = S.seq;
  seq_pos.assign(nt, -1);
  {
    std::vector<std::vector<int>> succ(nt);
    std::vector<int> indeg(nt, 0);
    for (const sema::TaskOrder& o : R.plan.task_orders) {
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
      throw LoweringError("plan " + R.plan.name + ": the task orders on rank " + std::to_string(R.P.rank) +
                              " form a cycle (nns check --plan names the directives)",
                          schedule_directive(R.plan));
  }
}

void place_blocks(const RankBuild& R, StepBlocks& S) {
  const size_t nb = S.nb;
  // Emission.
  std::vector<char> done(nb, 0);
  std::vector<int>& order = S.order;
  std::vector<int>& owner = S.owner;
  owner.assign(nb, -1);
  const size_t nt = S.task_ref.size();
  const std::vector<std::vector<int>>& preds = S.preds;
  const std::vector<int>& task_of = S.task_of;
  const std::vector<int>& seq_pos = S.seq_pos;
  const std::vector<int>& seq = S.seq;
  const std::vector<sema::TaskRef>& task_ref = S.task_ref;
  const std::vector<std::vector<int>>& task_blocks = S.task_blocks;
  const std::vector<char>& lazy = S.lazy;
  const std::vector<int>& first = S.first;
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
          throw LoweringError("plan " + R.plan.name + ": on rank " + std::to_string(R.P.rank) + " the schedule runs " +
                                  R.plan.task_text(task_ref[static_cast<size_t>(seq[static_cast<size_t>(own)])]) + " before " +
                                  R.plan.task_text(task_ref[static_cast<size_t>(pt)]) + ", which it needs",
                              schedule_directive(R.plan));
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
}

void write_instructions(RankBuild& R, const StepBlocks& S) {
  // Instructions: receives of blocks a task pulled are posted when the
  // task before it starts; the wait stays where the recv was.
  const std::vector<int>& seq = S.seq;
  const std::vector<int>& owner = S.owner;
  const std::vector<int>& first = S.first;
  const std::vector<int>& last = S.last;
  const std::vector<sema::TaskRef>& task_ref = S.task_ref;
  std::vector<std::vector<PInstr>> posts(seq.size() + 1);
  for (int b : S.order) {
    int own = owner[static_cast<size_t>(b)];
    if (own < 0) continue;
    for (int i = first[b]; i < last[b]; ++i)
      if (R.P.instrs[static_cast<size_t>(i)].kind == PInstr::Recv) posts[static_cast<size_t>(own)].push_back(R.P.instrs[static_cast<size_t>(i)]);
  }
  std::vector<PInstr> out;
  out.reserve(R.P.instrs.size() * 11 / 10 + 8);
  int open_task = -1;
  std::vector<RankProgram::TaskSpan> spans;
  for (int b : S.order) {
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
      const PInstr& in = R.P.instrs[static_cast<size_t>(i)];
      if (in.kind == PInstr::Recv) {
        if (own < 0) out.push_back(in);  // not posted ahead: post here
        out.push_back(wait_for(in));
        continue;
      }
      out.push_back(in);
    }
  }
  if (open_task >= 0) spans.back().last = static_cast<int>(out.size());
  R.P.instrs = std::move(out);
  R.P.tasks = std::move(spans);
}

}  // namespace

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
void order_blocks(RankBuild& R) {
  StepBlocks S;
  S.nb = R.blocks.size();
  if (S.nb == 0) return;
  if (R.plan.task_orders.empty()) {
    // No schedule: the emission order is the program (what the general
    // path below would return); each receive is waited for at once.
    std::vector<PInstr> out;
    out.reserve(R.P.instrs.size() + static_cast<size_t>(R.tag) + 1);
    for (const PInstr& in : R.P.instrs) {
      out.push_back(in);
      if (in.kind == PInstr::Recv) out.push_back(wait_for(in));
    }
    R.P.instrs = std::move(out);
    return;
  }
  block_extents(R, S);
  block_dependencies(R, S);
  rank_tasks(R, S);
  task_sequence(R, S);
  place_blocks(R, S);
  write_instructions(R, S);
}

}  // namespace nns::backend::detail
