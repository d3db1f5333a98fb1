// The plan search's parts (search.h, steps 2 and 3), shared by its files
// and by nothing else:
//   search_cost.cpp   per-op costs, the constraint tables and each op's
//                     options;
//   search_unit.cpp   the per-unit solve and its memo;
//   search_frontier.cpp the frontier DP over one unit's ops;
//   search_space.cpp  the space: constraint tables, the outer grid, the
//                     micro-batch counts, the space's size and cut bytes;
//   search_rank.cpp   one grid point's stage partition and the ranking of
//                     the candidates found;
//   search.cpp        search_plans: the outer enumeration over those.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/planner/search.h"

namespace nns::planner::search_detail {

constexpr int kR = -2, kV = -1;  // layouts inside a TP group: replicated, partial sums; >= 0: split along that dim
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Env {  // what one unit solve is costed under
  const SearchModel& m;
  const SearchOptions& o;
  int tp, dp;
  double s;  // batch scale: samples per micro-batch per DP group / graph batch
  bool rc;   // block recompute
  bool sel = false;  // selective recompute (Candidate::selective): score_core ops recomputed alone
  std::vector<int> tp_group, dp_group;
  bool seq = false;          // boundary tensors sequence parallel (Candidate::seq)
  // Data parallelism as plan replicas of replica_devices (pp x tp) devices
  // each (Candidate::replicas): a data-parallel group is strided by them,
  // a pipeline's next stage is tp devices on; 0: dp inside the plan (the
  // group strided by tp, the next stage dp x tp devices on).
  int replica_devices = 0;
  double micro_batches = 1;  // per step: gradient synchronisation is charged 1/m per micro-batch
};

Env make_env(const SearchModel& m, const SearchOptions& o, int tp, int dp, double s, bool rc, bool seq = false,
             int replica_devices = 0, bool sel = false);

struct OpCost {
  double time = 0;  // forward + backward (+ forward again when recomputed) of one micro-batch, comm excluded
  double fwd_time = 0;
  double kept = 0;       // activation bytes kept per micro-batch until the backward
  double transient = 0;  // bytes that come back at once for a recompute
  double work = 0;   // the backward working set of one kernel (the checker's: gradients of outputs, body, inputs twice)
  double param = 0;  // parameter bytes per device (weights; gradients and state are multiples)
  // Of those, the bytes of weights split into k > 1 pieces on a device
  // (coshard): zero1 does not shard them (the checker and the lowering
  // shard a weight piece only when every device holds one box of it).
  double param_multi = 0;
  double sync_dp = 0;      // gradient bytes allreduced over the DP group per step
  double sync_tp = 0;      // gradient bytes allreduced over the TP group per step (a replicated weight of a split op)
  double sync_params = 0;  // weights among sync_dp's (zero1 gives each its own collectives)
};

struct Weights {  // the Lagrangian multipliers, seconds per byte
  double act = 0, transient = 0, param = 0;
};

// search_cost.cpp
// The layout output k of an op leaves in its TP group under decision d.
int out_layout(const SearchOp& op, const OpDecision& d, size_t k);
OpCost op_cost(const Env& e, int opi, const OpDecision& d);
double edge_time(const Env& e, int po, const OpDecision& pd, int pk, int ci, const OpDecision& cd, int ck);
double edge_mem(const Env& e, int po, const OpDecision& pd, int pk, int ci, const OpDecision& cd, int ck);
double boundary_time(const Env& e, int opi, const OpDecision& d, double* kept);
double node_objective(const Env& e, int opi, const OpDecision& d, const Weights& w);
std::vector<int> range_devices(int n, int stride);

// Constraint tables resolved per op.
struct OpRules {
  bool has_split_only = false;
  std::vector<std::string> split_only;  // identifiers ("" never matches)
  bool dp_forbidden = false;            // the batch is not among split_only's dims
  std::vector<int64_t> counts;          // split_counts (empty: any)
  bool same_split_batch = false;        // the batch split must be the same for all: no TP split along the batch
  std::vector<int64_t> place_on;        // empty: anywhere
};

bool decision_allowed(const SearchOp& op, const OpRules& r, const OpDecision& d, int tp, int dp);
// Every decision of an op in the space for (tp, batch scale, block
// recompute, selective recompute).
std::vector<OpDecision> op_options(const SearchModel& m, int opi, int tp, double s, bool rc, bool sel = false);
// Whether the model has an op selective recompute drops (SearchOp::score_core).
bool has_score_core(const SearchModel& m);
double log10_sum(double a, double b);  // log10(10^a + 10^b)
double log10_binom(int n, int k);

// search_unit.cpp
struct UnitStats {
  double time = 0, kept = 0, transient = 0, param = 0, param_multi = 0, sync_dp = 0, sync_tp = 0, sync_params = 0;
  // The backward's moment above the unit's kept activations: max over its
  // ops of the op's working set less what the ops after it keep (freed
  // by their backward before it); may be negative.
  double work = 0;
  // Of `time`, the forward's part (its ops' forward runs over all their
  // runs; the rest is the backward, recompute included): an interleaved
  // schedule's forward and backward tasks are timed apart.
  double fwd = 0;
};
using UnitSolution = std::pair<std::vector<OpDecision>, UnitStats>;

double unit_objective_env(const Env& e, int unit, const std::vector<OpDecision>& d, const Weights& w);
double solve_unit_env(const Env& e, int unit, const Weights& w, bool exhaustive, std::vector<OpDecision>& out,
                      const std::vector<std::vector<OpDecision>>& options);
UnitStats unit_stats(const Env& e, int unit, const std::vector<OpDecision>& d);
// search_frontier.cpp: the frontier DP (search.h, step 2).
double frontier_dp(const Env& e, int unit, const Weights& w, const std::vector<std::vector<OpDecision>>& options,
                   std::vector<OpDecision>& out);

// Unit solutions memoised by (signature, tp, dp, s, rc, lambda, megatron,
// seq, sel): units with one signature get the same decisions and stats.
class UnitSolver {
 public:
  UnitSolver(const SearchModel& m, const SearchOptions& o, const std::vector<OpRules>& rules, bool constrained,
             const std::vector<double>& lambdas, int64_t& solves)
      : m_(m), o_(o), rules_(rules), constrained_(constrained), lambdas_(lambdas), solves_(solves) {}
  // nullptr: some op of the unit has no allowed option.
  const UnitSolution* solve(int unit, const Env& e, int li, bool megatron);

 private:
  std::vector<std::vector<OpDecision>> options_of(int unit, const Env& e, bool megatron) const;
  const SearchModel& m_;
  const SearchOptions& o_;
  const std::vector<OpRules>& rules_;
  const bool constrained_;
  const std::vector<double>& lambdas_;
  int64_t& solves_;
  std::map<std::tuple<int, int, int, double, bool, int, bool, bool, bool>, UnitSolution> memo_;
};

// search_space.cpp
std::vector<OpRules> resolve_constraints(const SearchModel& m, const SearchOptions& o, bool& constrained);

struct GridPoint {
  int pp, tp, dp;
};
std::vector<GridPoint> outer_grid(const SearchModel& m, const SearchOptions& o);
std::vector<int64_t> micro_batch_counts(const SearchOptions& o, int dp, int pp);
// The chunks per rank searched at pp stages and m micro-batches: 1 (1F1B),
// and for pp > 1 the powers of two v up to o.max_vp where the layer units
// divide by pp x v and m by pp (interleaved 1F1B); o.fixed_vp alone when set.
std::vector<int> chunk_counts(const SearchModel& m, const SearchOptions& o, int pp, int64_t mcount);
// The recompute modes searched: 0 none, 1 selective (only where the model
// has a score core: a fused attention keeps no [seq, seq] values, so there
// is nothing to drop), 2 block; o.fixed_recompute alone when set.
std::vector<int> recompute_modes(const SearchModel& m, const SearchOptions& o);
// The Lagrangian grid (seconds per byte); 0 first: the fastest layouts.
std::vector<double> lambda_grid(const SearchOptions& o);

// log10 of the space's size, without and with the constraint tables.
class SpaceSize {
 public:
  SpaceSize(const SearchModel& m, const std::vector<OpRules>& rules) : m_(m), rules_(rules) {}
  // Adds one (grid point, micro-batch scale, recompute) slice, with its
  // chunks per rank (each a partition into pp x v stages).
  void add(int pp, int tp, int dp, double s, bool rc, bool dp_bad, const std::vector<int>& vps, bool sel = false);
  double all = -kInf, constrained = -kInf;

 private:
  double log_op_space(int tp, int dp, double s, bool rc, bool with_rules, bool sel);
  const SearchModel& m_;
  const std::vector<OpRules>& rules_;
  std::map<std::tuple<int, int, double, bool, bool, bool>, double>
      log_ops_;  // (tp, dp, s, rc, constrained, sel) -> log10 prod
};

// Activation bytes crossing the cut after each unit (per micro-batch, at
// batch scale 1), and per TP degree the part a sequence-parallel boundary
// splits.
class CutBytes {
 public:
  explicit CutBytes(const SearchModel& m);
  std::vector<double> batch, fixed, none;
  const std::vector<double>& seq(int tp);

 private:
  const SearchModel& m_;
  std::map<int, std::vector<double>> seq_;
};

// search_rank.cpp
// One grid point with its micro-batches, recompute, seq, lambda and zero1
// fixed: the units' solutions are known, the stages are chosen here.
struct StageProblem {
  const SearchModel& m;
  const SearchOptions& o;
  const Env& e;
  const GridPoint& gr;
  int64_t mcount, mb;
  int li;
  bool megatron, z1;
  const std::vector<const UnitSolution*>& sol;
  const std::vector<double>& cut_split;
  const CutBytes& cuts;
  double cap;
  int vp = 1;  // chunks per rank: 1F1B (1) or interleaved 1F1B over pp x vp stages
  // The step's loss and gradient norm, allreduced over every rank
  // (lower_step_end.cpp: LossAllReduce over the world): two elements, so
  // its latency, priced by topology as the simulator prices it (10 us of
  // GPT tiny's 91 us step on 2 A100s). Costed once per search.
  double loss_sync = 0;
};
// The best stage partition (step_time 0: none fits; a Megatron-style one is
// returned even when it does not fit).
Candidate partition_stages(const StageProblem& p);

// search_chain.cpp: the step of interleaved 1F1B with p ranks, v chunks
// each (chunk c on rank c % p) and m micro-batches, following the
// schedule's dependency chain: every rank runs its tasks in Megatron's
// order (semantics/pipeline_schedule.h, interleaved_order), a task
// starting when its rank is free and its input has arrived. fwd[c] and
// bwd[c]: chunk c's forward and backward per micro-batch; link[c]: the
// one-way transfer from chunk c to c + 1 (and of the gradient back). The
// makespan (seconds), without the step end's synchronisation.
double interleaved_makespan(int p, int v, int64_t m, const std::vector<double>& fwd, const std::vector<double>& bwd,
                            const std::vector<double>& link);

// Ranking: the candidates found, the baselines (the fixed-layout variant
// at tp 1 and pp 1 is data parallelism; at tp > 1, Megatron-style) and
// the space.
struct Ranking {
  std::vector<Candidate> found;
  Candidate megatron, data_parallel;
  bool megatron_found = false, data_parallel_found = false;
  void add(Candidate c);
  void finish(SearchResult& res, const SearchOptions& o, double cap);
};

}  // namespace nns::planner::search_detail
