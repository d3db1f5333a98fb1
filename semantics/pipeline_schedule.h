// Pipeline schedules as data: the per-pipeline-rank order of tasks
// (forward F, input-gradient backward B, weight-gradient backward W of one
// stage for one micro-batch) that the schedule library generates, the
// `schedule(...)` plan builtin turns into op-order directives between
// tasks, the checker proves and lowering follows.
//
// Conventions shared by every generator:
//  - p pipeline ranks (0-based r), m micro-batches (0-based), unit times;
//  - a "stage" is an index into the schedule's list of op groups;
//  - the result is one task sequence per pipeline rank, in execution order;
//  - a B with no W of the same (stage, mb) in the sequence is the whole
//    backward (input and weight gradients together).
// Definitions: docs/language.md, "Pipeline schedules: op-order over tasks"
// (the table of schedules).
//
// Generators assume valid sizes (p >= 1, m >= 1, v >= 1, recycles >= 0,
// m % p == 0 for interleaved with v > 1) and throw std::invalid_argument
// otherwise; make_schedule() checks them and reports `why` instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nns::sema {

struct PipeTask {
  enum Phase : uint8_t { F, B, W };
  int stage = 0;
  Phase phase = F;
  int mb = 0;
  bool operator==(const PipeTask& o) const { return stage == o.stage && phase == o.phase && mb == o.mb; }
  bool operator<(const PipeTask& o) const;
  std::string to_string() const;  // "F3.1" (stage 3, micro-batch 1), "B0.0", "W1.2"
};

// Per pipeline rank, its tasks in execution order.
using PipeOrder = std::vector<std::vector<PipeTask>>;

// GPipe: stage s on rank s; all forwards, then all backwards (B in
// micro-batch order).
PipeOrder gpipe_order(int p, int m);
// 1F1B (PipeDream-flush, Megatron's rule): stage s on rank s; warm-up
// w = min(p-1-s, m) forwards, then m-w pairs F(w+i), B(i), then the rest
// of the backwards.
PipeOrder one_f_one_b_order(int p, int m);
// Interleaved 1F1B with v model chunks per rank: stage c*p + r is chunk c
// of rank r. Megatron's table with group size p (requires m % p == 0 when
// v > 1): warm-up 2(p-1-r) + (v-1)p forwards (capped at m*v), then pairs
// (next forward, next backward), then the remaining backwards; forwards
// iterate chunks 0..v-1 within groups of p micro-batches, backwards the
// chunks in reverse (v-1..0). v == 1 is plain 1F1B (as in Megatron, which
// only uses the interleaved table for v > 1).
PipeOrder interleaved_order(int p, int v, int m);
// ZB-H1 (Qi et al., ICLR'24, zero-bubble handcrafted schedule 1): 1F1B
// whose backwards on ranks s > 0 split into B and W, W delayed per the
// reference rules; leftover Ws at the end. Stage 0 never splits.
// Precisely (reference branch zb-h1-quick-start): rank s runs 1F1B's
// sequence of F and B; on s > 0 every B(k) is split, its W queued, and one
// queued W (FIFO, i.e. W(k-s)) runs right after B(k) when k >= s -- the
// steady rule "W(i-s) after B(i) when i >= s" and the cool-down rule
// "remaining + i >= s" are both this one rule on k. The s Ws still queued
// after the last B run at the end. With unit F = B = W the bubble is
// (p-1)(T_F+T_B-T_W) = p-1 slots per rank against 1F1B's 3(p-1) (one
// third); the W delay makes every rank hold up to min(p, m) micro-batches
// until their W (counted by peak_stashed), so the peak over ranks equals
// 1F1B's (rank 0's p), which is the paper's "p * M_B" claim.
PipeOrder zb_h1_order(int p, int m);
// nnScaler's interlaced pipeline (T5): 1F1B over stages 0..p-1 (stage s on
// rank s) plus two segments that run on EVERY rank: stage p (the head, e.g.
// a vocabulary-split embedding; it feeds stage 0) and stage p+1 (the tail,
// e.g. the vocabulary-split LM head; it consumes stage p-1's output).
// Every rank runs the head's and tail's tasks in the same relative order
// (they hold collectives over all ranks).
// Placement: a global step table from nnScaler's 1F1B step form (stage s
// at step t >= s, k = t-s: even k -> F(k/2), odd k -> B(k/2 - (p-1-s)),
// when that micro-batch exists); head F(mb) just before stage 0's F(mb)
// step, tail F(mb) then tail B(mb) just after stage p-1's F(mb), head
// B(mb) just after stage 0's B(mb). Each rank runs its tasks sorted by
// (step, position within the step): the same key on every rank, so the
// collectives keep one relative order, and every dependency points to a
// smaller key, so the orders cannot deadlock.
PipeOrder interlaced_order(int p, int m);
// nnScaler's NF1B / 3F1B (AlphaFold2 recycling): R no-grad passes then one
// pass with gradients; stage k*p + s is pass k on rank s. Passes 0..R-1
// have F tasks only; pass R has F and B. Pass k's stage 0 consumes pass
// k-1's stage p-1 output (of the same micro-batch).
// Order on rank s (nnScaler schednf1b, R = recycles): the passes of a
// micro-batch run along anti-diagonals d = pass + mb. Warm-up: for
// d = 0..R-1, the no-grad forwards (pass d-j, mb j) for j = 0..d. Steady,
// for f = 0..m+p-2-s: the no-grad forwards of diagonal f+R, i.e. (pass
// R-1-j, mb f+1+j) for j = 0..R-1 while mb < m; then the grad forward
// (pass R, mb f) if f < m; then B(pass R, mb f-(p-1-s)) if that mb exists.
// Only pass R stashes, at most p-s micro-batches on rank s, like 1F1B.
// With unit times the steady phase is bubble-free while a micro-batch's
// trip round the ring between passes fits in one iteration (3f1b: p <= 4,
// bubble (p-1)/(m+p-1)); for larger p that trip is the critical path and
// the bubble grows (3f1b, p = 32, m = 512: 85% idle) -- the reference
// order's limit, kept as is.
PipeOrder nf1b_order(int p, int m, int recycles);

// Simulation with unit task times: the slot (start time) of every task of
// `order`, given each task's predecessors on other ranks (`deps`). A task
// starts at max(previous task on its rank ends, every dependency ends).
// Returns false (with `why`) when the orders deadlock (a dependency cycle),
// a task repeats on one rank, or a dependency is a task no rank runs.
//
// Task times (task_slots): F = 1, W = 1, a split B (one with a W of the
// same (stage, mb) anywhere in the order) = 1, an unsplit B = 2 (it is
// B + W together), so split and unsplit schedules compare fairly: with
// these times 1F1B and GPipe have bubble (p-1)/(m+p-1), ZB-H1 one third
// of 1F1B's idle slots.
//
// A task that appears on several ranks (interlaced head and tail) is a
// collective: it starts at the same slot on all of them, once every one of
// them has reached it and its dependencies have ended; a dependency on it
// means its (common) end.
struct PipeDeps {
  // Predecessors of a task: tasks (of any rank) that must end before it starts.
  virtual std::vector<PipeTask> of(const PipeTask& t) const = 0;
  virtual ~PipeDeps() = default;
};
// The data-flow dependencies of the generators above: F(k) after F(k-1) of
// the same micro-batch (k > 0 within the pipeline chain), B(k) after
// B(k+1) and after F(k), W(k) after B(k); interlaced and nf1b add their
// head/tail and pass links. `kind` is one of the schedule names below.
// The chain of stages in data-flow order: 0..p-1 (gpipe, 1f1b, zb-h1),
// 0..p*v-1 (interleaved), 0..(recycles+1)*p-1 (nf1b; "3f1b" uses 2
// recycles), head p, 0..p-1, tail p+1 (interlaced). F(chain[i]) depends on
// F(chain[i-1]); B(chain[i]) on F(chain[i]) and B(chain[i+1]); W(k) on
// B(k). An unknown kind or a stage outside the chain throws
// std::invalid_argument.
struct ChainDeps : PipeDeps {
  std::string kind;
  int p = 1, v = 1, recycles = 0;
  std::vector<PipeTask> of(const PipeTask& t) const override;
};
struct PipeTimes {
  std::vector<std::vector<int64_t>> start;  // per rank, per task of the order
  int64_t makespan = 0;
};
bool simulate(const PipeOrder& order, const PipeDeps& deps, PipeTimes& out, std::string& why);
// Duration in slots of every task of `order` (per rank, per task), by the
// rule above.
std::vector<std::vector<int>> task_slots(const PipeOrder& order);
// Tasks joined by single spaces ("F0.0 F0.1 B0.0"), for messages and tests.
std::string to_string(const std::vector<PipeTask>& tasks);

// Bubble fraction of a simulated schedule: idle slots / (ranks * makespan).
double bubble_fraction(const PipeOrder& order, const PipeTimes& t);
// Peak number of micro-batches whose activations a rank holds (F done,
// its last backward task of that (stage, mb) not yet run), per rank. The
// last backward task is the rank's W of that (stage, mb) when it has one,
// else its B. Stages with no B anywhere in the order are no-grad (NF1B's
// recycling passes) and never stash.
std::vector<int> peak_stashed(const PipeOrder& order);

// A text timeline, one row per rank, one column per slot:
//   rank 0 | F0.0 F0.1 .    B0.0 -    ...
// Every column has the width of the longest task name; '.' is an idle slot
// and '-' the second slot of a two-slot (unsplit) B. Rows are labelled
// "rank r" unless rank_names has one name per rank; labels are padded to
// one width and trailing blanks are trimmed.
// With `notes` (per rank, per task of the order), a second row per rank
// shows each task's note under its first slot (--emit=schedule: the
// transfers a task waits for and sends).
std::string timeline(const PipeOrder& order, const PipeTimes& t, const std::vector<std::string>& rank_names = {},
                     const std::vector<std::vector<std::string>>* notes = nullptr);

// The schedule library's names: "gpipe", "1f1b", "interleaved", "zb-h1",
// "interlaced", "nf1b" (alias "3f1b" = nf1b with 2 recycles).
// Generates by name; false with `why` for an unknown name or bad sizes.
// v applies to "interleaved" only and recycles to "nf1b" only ("3f1b"
// accepts 0 or 2); any other value for another kind is an error, so that a
// misplaced argument is not silently ignored.
bool make_schedule(const std::string& kind, int p, int v, int m, int recycles, PipeOrder& out, std::string& why);

}  // namespace nns::sema
