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
// Definitions: ../shared/reference/pipelines-and-models.md §3.
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
// v > 1): warm-up 2(p-1-r) + (v-1)p forwards (capped at m*v), forwards
// iterate chunks 0..v-1 within groups of p micro-batches, backwards the
// chunks in reverse.
PipeOrder interleaved_order(int p, int v, int m);
// ZB-H1 (Qi et al., ICLR'24, zero-bubble handcrafted schedule 1): 1F1B
// whose backwards on ranks s > 0 split into B and W, W delayed per the
// reference rules; leftover Ws at the end. Stage 0 never splits.
PipeOrder zb_h1_order(int p, int m);
// nnScaler's interlaced pipeline (T5): 1F1B over stages 0..p-1 (stage s on
// rank s) plus two segments that run on EVERY rank: stage p (the head, e.g.
// a vocabulary-split embedding; it feeds stage 0) and stage p+1 (the tail,
// e.g. the vocabulary-split LM head; it consumes stage p-1's output).
// Every rank runs the head's and tail's tasks in the same relative order
// (they hold collectives over all ranks).
PipeOrder interlaced_order(int p, int m);
// nnScaler's NF1B / 3F1B (AlphaFold2 recycling): R no-grad passes then one
// pass with gradients; stage k*p + s is pass k on rank s. Passes 0..R-1
// have F tasks only; pass R has F and B. Pass k's stage 0 consumes pass
// k-1's stage p-1 output (of the same micro-batch).
PipeOrder nf1b_order(int p, int m, int recycles);

// Simulation with unit task times: the slot (start time) of every task of
// `order`, given each task's predecessors on other ranks (`deps`). A task
// starts at max(previous task on its rank ends, every dependency ends).
// Returns false (with `why`) when the orders deadlock (a dependency cycle).
struct PipeDeps {
  // Predecessors of a task: tasks (of any rank) that must end before it starts.
  virtual std::vector<PipeTask> of(const PipeTask& t) const = 0;
  virtual ~PipeDeps() = default;
};
// The data-flow dependencies of the generators above: F(k) after F(k-1) of
// the same micro-batch (k > 0 within the pipeline chain), B(k) after
// B(k+1) and after F(k), W(k) after B(k); interlaced and nf1b add their
// head/tail and pass links. `kind` is one of the schedule names below.
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

// Bubble fraction of a simulated schedule: idle slots / (ranks * makespan).
double bubble_fraction(const PipeOrder& order, const PipeTimes& t);
// Peak number of micro-batches whose activations a rank holds (F done,
// its last backward task of that (stage, mb) not yet run), per rank.
std::vector<int> peak_stashed(const PipeOrder& order);

// A text timeline, one row per rank, one column per slot:
//   rank 0 | F0.0 F0.1 .    B0.0 ...
std::string timeline(const PipeOrder& order, const PipeTimes& t, const std::vector<std::string>& rank_names = {});

// The schedule library's names: "gpipe", "1f1b", "interleaved", "zb-h1",
// "interlaced", "nf1b" (alias "3f1b" = nf1b with 2 recycles).
// Generates by name; false with `why` for an unknown name or bad sizes.
bool make_schedule(const std::string& kind, int p, int v, int m, int recycles, PipeOrder& out, std::string& why);

}  // namespace nns::sema
