// Plan search (issue 12, part 4): `nns plan` finds a plan for a model on N
// devices of a profile without lowering a single candidate.
//
// The method (nnScaler's AutoDist and Alpa, made analytical):
//  1. build_search_model reads the forward graph once: per top-level op its
//     FLOPs (2 x the registry's macs), operand bytes, which operands carry
//     the batch, its transform space (dimop choices, with the layout each
//     choice gives every operand), and groups the ops into layer units
//     (qualified names `blocks.N.*`, `layers.I.blocks.J.*`; the ops between
//     them form units of their own). Units with the same signature (op
//     kinds, annotations, sizes, internal edges) share one id: their
//     solutions are memoised (symmetry).
//  2. solve_unit: for a tensor-parallel degree t, the per-op layout choice
//     (replicate, or split one identifier over the t devices, or coshard:
//     k*t parts, k per device, recomputed) minimising time + lambda x memory
//     by an exact dynamic program over the unit's ops in order, whose state
//     is the choice of every op whose output is still to be read inside the
//     unit (a frontier DP: a Transformer block keeps 2-3 such ops live).
//     Costs: roofline compute per device, reshard between a producer's
//     output layout and a consumer's input layout by collective_time (and
//     its dual in backward), parameter and activation bytes per device.
//     Tensors between units cross in one boundary layout: replicated in the
//     TP group, or (sequence parallel, with block recompute) split along
//     their tokens; coshard is searched inside recomputed blocks too.
//  3. search_plans enumerates pp x tp x dp = N, micro-batch counts, the
//     recompute mode (none; selective: each attention op whose body saves
//     [seq, seq] values recomputed alone; block: every unit) and zero1,
//     and a grid of lambda (the Lagrangian of the
//     memory bound); per combination a bottleneck partition of the units
//     into pp contiguous stages under per-device memory (1F1B keeps
//     min(pp - s, m) micro-batches in flight on stage s), the step time
//     (m + pp - 1) x slowest stage + gradient synchronisation + update;
//     for pp > 1 also interleaved 1F1B with v chunks per rank (v x pp
//     chunks, bubble (pp - 1) / (v m), v times the sends, Megatron's
//     longer warm-up in memory; search_rank.cpp).
//     Megatron-style plans (attention by heads, MLP column/row parallel,
//     the rest replicated, in the same TP x PP x DP grid) are costed by the
//     same functions for the comparison.
//  4. plan_text prints the chosen candidate as an ordinary `plan` block
//     (trans / assign / replicate / recompute / zero1 / schedule).
// Constraint tables of a user plan (split_only, split_counts, same_split,
// place_on) prune the op choices and the candidates; the space size is
// counted with and without them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/planner/cost_model.h"
#include "backend/planner/program_cost.h"
#include "semantics/dimop.h"
#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::planner {

// One way to split an op inside its tensor-parallel group.
struct SearchChoice {
  int idx = -1, dim = -1;                      // trans(op, idx = idx, dim = dim): input operand and its tensor dim
  bool value = false;                          // trans(op, dim = "value")
  std::string id;                              // the identifier it splits
  int64_t size = 0;                            // that identifier's size in the elaborated graph
  bool is_batch = false;                       // the op's batch identifier (its size scales with the batch)
  bool reduce = false;                         // '+': the outputs become partial sums
  std::vector<sema::PartitionEffect> in, out;  // per operand
  // A composite's body nodes (SearchOp::parts) this split divides; the
  // others (a reshape of an input the split leaves whole, whatever follows
  // a product that turns it into partial sums) run whole in every piece.
  std::vector<char> part_split;
};

struct SearchOp {
  int node = -1;
  std::string name, kind, op_class;
  double flops = 0;       // forward, whole op, at the graph's batch
  bool batch_ok = false;  // trans(op, dim = "batch") exists
  std::string batch_id;
  std::vector<int> in_tensor, out_tensor;  // tensor ids per operand (-1: not a tensor)
  std::vector<int64_t> in_bytes, out_bytes;
  std::vector<int> out_rank;              // dims of each output (0: not a tensor)
  std::vector<bool> in_batch, out_batch;  // the operand carries the batch identifier
  std::vector<bool> in_param;
  int64_t inner_bytes = 0;  // a composite op's body tensors (what it keeps besides its outputs)
  // Of those and of the outputs, what a backward reads the values of
  // (sema::backward_reads_operand: this op's, a body node's or a consumer's),
  // which a kernel keeps until its backward; the rest goes after the forward.
  int64_t inner_kept_bytes = 0;
  std::vector<char> out_kept;
  // A composite op's primitive nodes, each a kernel of its own at run
  // time: costed one roofline each and summed, as the simulator costs
  // them (one roofline over the whole body let its matrix products hide
  // its memory-bound permutes and softmax: Swin's search predicted half
  // the simulator's step). Empty for a primitive op.
  std::vector<NodeWork> parts;
  std::vector<char> part_batch;  // per part: it carries the batch (scales with the micro-batch)
  bool backward = true;          // a gradient flows through it
  // A composite whose body saves a softmax's [.., seq, seq] values (an
  // unfused attention): what selective recompute drops (Korthikanti et
  // al. 2022). A fused core (sdpa) saves none, so it is not one.
  bool score_core = false;
  std::vector<SearchChoice> choices;
};

// Megatron-LM's structure found in the graph by its shape, not by names
// (search_structure.cpp): a Transformer block is an attention op (one op
// whose body holds a softmax, split by heads: a partial-sum output from
// weights split along an identifier while its activations stay whole)
// followed downstream by an MLP pair: a column linear (a matrix product
// with a weight whose split gives its output's last dim) and a row linear
// (a weight split along the contraction, partial sums out) of the same
// hidden size, with only elementwise ops between them. Megatron-style
// tensor parallelism is a baseline only for a model that has such blocks.
struct MegatronStructure {
  int blocks = 0;           // attention ops followed by an MLP pair
  int attention_ops = 0;    // attention ops seen (with or without an MLP after)
  int mlp_pairs = 0;        // column/row pairs seen (with or without attention before)
  std::vector<int> choice;  // per op: its Megatron-layout choice (index into choices), -1: replicated
  bool found() const { return blocks > 0; }
  std::string describe() const;  // "4 attention + MLP blocks" / why not
};

struct SearchUnit {
  std::string key;       // "blocks.3." (its layer), or "" for ops outside layers
  std::vector<int> ops;  // indices into SearchModel::ops, in graph order
  int signature = -1;    // units with equal signatures are solved once
  std::string select;    // a select() pattern matching exactly its ops, or "" (list them by name)
};

struct SearchModel {
  std::vector<SearchOp> ops;    // top-level forward ops, graph order
  std::vector<int> op_of_node;  // node id -> index in ops (-1)
  std::vector<SearchUnit> units;
  int signatures = 0;
  int64_t graph_batch = 1;  // the batch the graph was elaborated with (one micro-batch)
  int64_t param_bytes = 0;
  // The data flow between ops: per tensor its readers (op, input operand),
  // its producer (op, output operand; -1 for params and data inputs).
  std::vector<std::vector<std::pair<int, int>>> consumers;
  std::vector<int> producer, producer_out;
  std::vector<bool> data_input;  // per tensor: a data input (ids, images)
  // Per tensor: the size of its dim 1 (tokens of a [batch, tokens, features]
  // activation) when it has 3 dims or more, else 0. A sequence-parallel
  // residual stream crosses unit boundaries split along it.
  std::vector<int64_t> seq_len;
  std::vector<int> unit_of_op;
  // Weights read by ops of several units (GPT's wte: the embedding and the
  // output layer): per such weight tensor its units, ascending; per unit,
  // its reads of them as (position in the unit, input operand).
  std::map<int, std::vector<int>> tied_units;
  std::vector<std::vector<std::pair<int, int>>> tied_reads;
  MegatronStructure megatron;  // build_search_model fills it (find_megatron_structure)
};

// Reads the forward graph (after evaluate(), before any training graph).
SearchModel build_search_model(const sema::Graph& g, const sema::Plan& empty_plan);

// The Megatron structure of m (search_structure.cpp); m.megatron is this.
MegatronStructure find_megatron_structure(const SearchModel& m);

// One op's decision in a candidate.
struct OpDecision {
  int choice = -1;  // index into SearchOp::choices; -1: replicated in its TP group
  int k = 1;        // coshard: parts per device (k * tp parts), recomputed when > 1 or rc
  bool rc = false;  // recomputed alone (coshard)
};

struct Candidate {
  int pp = 1, tp = 1, dp = 1;
  // Pipeline chunks per rank: 1 is 1F1B over pp stages; v > 1 is
  // interleaved 1F1B over pp * v stages, stage c on rank c % pp
  // (schedule("interleaved", stages, v = vp)); unit_stage then holds the
  // chunk (the stage of the schedule), not the rank.
  int vp = 1;
  int64_t micro_batches = 1, micro_batch = 1;  // per data-parallel group: m micro-batches of micro_batch samples
  bool recompute = false, zero1 = false;
  // Selective recompute: every score_core op recomputed alone (it keeps
  // its inputs, its forward runs again before its backward), the rest of
  // the block kept. The language recomputes whole top-level ops, so the
  // whole attention op runs again, its projections included.
  bool selective = false;
  // Tensors crossing unit boundaries split along their tokens (dim 1) over
  // the TP group (sequence parallel) instead of replicated in it.
  bool seq = false;
  bool megatron = false;        // a Megatron-style candidate
  // The data parallelism is dp plan replicas of pp x tp devices (nns run
  // and simulate --gpus N --plan-gpus pp*tp), not inside the plan; its
  // zero1 is then the distributed optimizer over the replicas (simulate
  // and check --distributed-optimizer). Costed with that placement: a
  // replica's devices contiguous, the data-parallel groups strided by
  // pp x tp (dp_as_replicas says when).
  bool replicas = false;
  std::vector<int> unit_stage;  // per unit
  std::vector<OpDecision> ops;  // per op
  double step_time = 0, stage_time = 0, sync_time = 0, bubble = 0;
  double memory = 0;  // peak predicted bytes per device
  bool fits = true;   // memory within the search's bound (false only for a reported baseline)
  // tp > 1 and no op of the candidate splits inside its TP group: the tp
  // devices of a group repeat one another's work (a plan that leaves
  // devices idle, in effect), which describe() says.
  bool replicated() const;
  double throughput() const {
    return step_time > 0 ? static_cast<double>(micro_batches * micro_batch * dp) / step_time : 0;
  }
  std::string describe() const;  // "pp 8 x tp 8 x dp 16, 96 micro-batches of 1, recompute, zero1"
  // The devices the written plan covers (`ngpus`, --plan-gpus): one
  // replica's with plan replicas, else all of them.
  int plan_devices() const { return replicas ? pp * tp : pp * tp * dp; }
};

// Where the search stands, for a progress line (SearchOptions::progress).
struct SearchProgress {
  const char* phase = "";           // "grid points" (pp x tp x dp), "one-device reference: points"
  int points_done = 0, points = 0;  // the phase's points finished, of
  int64_t evaluated = 0, unit_solves = 0;
  const Candidate* best = nullptr;  // the fastest feasible so far (nullptr: none yet)
};

struct SearchOptions {
  int gpus = 1;
  DeviceProfile profile;        // devices_per_node already set (--nodes)
  int64_t global_batch = 1;     // samples per step
  int optimizer_slots = 2;      // AdamW 2, SGD with momentum 1, SGD 0
  double memory_cap = 0;        // bytes per device (the profile's memory when 0)
  double memory_margin = 0.92;  // search within this fraction of the cap (the checker counts a bit more)
  std::string dtype = "fp32";
  int bytes_per_element = 4;
  int top = 5;  // runners-up kept
  const std::vector<sema::PlanConstraint>* constraints = nullptr;
  const sema::Plan* constraint_plan = nullptr;  // to map the constraints' sub-ops to nodes
  bool exhaustive = false;  // tests: enumerate every op combination and stage partition instead of the DPs
  int max_micro_batch_options = 6;
  // Recompute modes searched (nns plan --recompute): -1 all, else only
  // 0 none, 1 selective (attention cores alone), 2 every unit (block).
  int fixed_recompute = -1;
  // Interleaved 1F1B: chunks per rank tried where pp > 1 (1, 2, 4, ... up
  // to max_vp, where the layer units split evenly over pp * v chunks and
  // the micro-batches over pp); fixed_vp > 0: that count only (nns plan
  // --vp; 1 is plain 1F1B).
  int max_vp = 8;
  int fixed_vp = 0;
  // > 0: only this micro-batch count (the REPL keeps its session's config,
  // whose inputs are one micro-batch of global_batch / fixed_micro_batches).
  int64_t fixed_micro_batches = 0;
  // Data parallelism inside the plan even where plan replicas express it
  // (nns plan --dp-in-plan; the REPL, whose session has no replicas).
  bool dp_in_plan = false;
  // Called after every costed variant (often: the callee throttles);
  // empty: none.
  std::function<void(const SearchProgress&)> progress;
};

// A plan the best is compared with, and whether it applies to this model
// on these devices (why not, when it does not).
struct Baseline {
  bool applies = false;
  std::string why_not;  // when !applies: "the global batch (4) does not split over 8 devices"
  Candidate best;       // the fastest that fits, else the one needing the least memory (fits = false)
};

struct SearchResult {
  std::vector<Candidate> best;  // ascending step time, feasible ones
  // The same model on one device (pp = tp = dp = 1, every micro-batch
  // count searched): what "a speedup" means. Always costed.
  Baseline one_device;
  // Data parallelism over all N devices (tp = pp = 1): applies where the
  // global batch splits over N.
  Baseline data_parallel;
  // Megatron-style tensor parallelism (TP > 1, with PP and DP around it):
  // applies where the model has Megatron's structure (SearchModel::megatron)
  // and its layout splits over some TP degree of the grid.
  Baseline megatron;
  double log10_space = 0;              // the space without constraint tables
  double log10_space_constrained = 0;  // with them (== log10_space without --plan)
  int64_t evaluated = 0;               // candidates costed
  int64_t unit_solves = 0;             // unit DPs run (after memoisation)
  double search_ms = 0;
  std::string note;  // why nothing fits, when best is empty
};

SearchResult search_plans(const SearchModel& m, const SearchOptions& o);

// Whether data parallelism over dp groups is written as dp plan replicas
// (Candidate::replicas): dp > 1, not o.dp_in_plan, no place_on table (its
// device ids number the dp-inside plan's devices) and every op that
// carries the batch splits along it (an op that cannot runs on the whole
// batch inside the plan, which replicas, each on its own samples, would
// change). Else false with why in `why` (when given).
bool dp_as_replicas(const SearchModel& m, const SearchOptions& o, int dp, std::string* why = nullptr);

// Objective value of one unit under fixed decisions (time per micro-batch +
// lambda x memory): the quantity solve_unit minimises (exposed for tests).
// seq: the unit's boundary tensors are sequence parallel (Candidate::seq).
double unit_objective(const SearchModel& m, int unit, const std::vector<OpDecision>& d, int tp, int dp,
                      double batch_scale, bool recompute, double lambda_act, double lambda_param,
                      const SearchOptions& o, bool seq = false);
// The unit DP's optimum (decisions into `out`); exhaustive: enumerate every
// combination (tests).
double solve_unit(const SearchModel& m, int unit, int tp, int dp, double batch_scale, bool recompute, double lambda_act,
                  double lambda_param, const SearchOptions& o, bool exhaustive, std::vector<OpDecision>& out,
                  const std::vector<std::vector<OpDecision>>* allowed = nullptr, bool seq = false);

// The plan block of a candidate (ordinary .nns plan text), named `name`.
std::string plan_text(const SearchModel& m, const Candidate& c, const std::string& name);

}  // namespace nns::planner
