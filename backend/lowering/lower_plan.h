// lower_plan: a checked plan -> one RankProgram per rank (rank_program.h).
//
// Every rank walks the same global sequence: the plan's top-level ops in
// graph order, micro-batch after micro-batch; in forward each op's input
// edges run their derived adapters (communication derivation, comm_plan.h)
// and the rank's sub-ops run on their slices; in backward the ops run in
// reverse and each input's gradient contribution runs the dual adapter.
// Parameter gradients whose adapter is one allreduce (replicated weights,
// batch-split consumers) are summed locally and reduced at the end of the
// step in one fused allreduce per device group (buckets, in key order);
// plan replicas then average their gradients; the loss and gradient norm are
// reduced over every rank; clipping; updates. Because every rank derives its
// list from the same sequence, collectives are issued in one order
// everywhere; program verification (program_check.h) checks that on the
// lists themselves.
//
// Data parallelism over plan replicas: a plan for k devices on N = m k ranks
// forms m replicas (rank = replica * k + device).
//
// Sub-ops are elaborated on their slices through `elaborate` (the driver
// passes the interpreter's instantiate_op); without it the programs have
// their full instruction lists but no kernel bodies (what verification
// needs, at a fraction of the cost for 1024 devices).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "semantics/plan.h"
#include "semantics/train_spec.h"

namespace nns::backend {

// Elaborates top-level op `node` on a slice into `local` (see
// sema::Interpreter::instantiate_op); throws std::runtime_error naming the op.
using Elaborator = std::function<sema::OpInstance(int node, const std::vector<sema::Shape>& input_shapes,
                                                  const std::vector<sema::Shape>& output_shapes,
                                                  const std::map<std::string, int64_t>& divisors, sema::Graph& local)>;

// What an elaboration reads, as a key (sema::Interpreter::instantiation_key):
// equal keys elaborate to equal bodies.
using ElaborationKey = std::function<std::string(int node, const std::vector<sema::Shape>& input_shapes,
                                                 const std::vector<sema::Shape>& output_shapes,
                                                 const std::map<std::string, int64_t>& divisors)>;

// The whole-plan analysis lowering derives from (graph, plan,
// communication) before any rank, kept between lower_plan calls by the
// caller (LowerOptions::analysis_cache): `nns check` lowers every rank's
// structure, then the capacity check's representatives with their bodies,
// from one analysis (4.9 s each at Swin coshard on 1024 devices).
struct AnalysisCache;
std::shared_ptr<AnalysisCache> make_analysis_cache();

struct LowerOptions {
  int replicas = 1;
  // The replicas' gradient bucket size in bytes; 0: replica_bucket_bytes
  // (a device profile may say otherwise: planner::profile_bucket_bytes).
  size_t replica_bucket_bytes = 0;
  Elaborator elaborate;         // empty: structure only
  // With `elaborate`: sub-ops that would elaborate to the same kernel (equal
  // keys, same position attrs, same backward) get a copy of the first one's
  // body instead of running the interpreter again (kernel_cache.h). Empty,
  // or kernel_cache false, or NNS_KERNEL_CACHE=0: every sub-op is
  // elaborated (what the tests compare the cache against).
  ElaborationKey elaboration_key;
  bool kernel_cache = true;
  // With the kernel cache: a later kernel of a key that a kernel of the
  // same program already made uses that kernel's local tensors and nodes
  // (the same ids) instead of a copy of them. Such a program is for the
  // memory replay only (memory_replay.h keys a kernel's tensors by kernel,
  // so sharers count separately): no executor runs it, and two kernels'
  // bodies are no longer disjoint. The capacity check's lowering: at
  // AlphaFold2 dap on 32 devices the copies were 98 MB of rank 0's 190 MB.
  bool shared_kernel_bodies = false;
  int only_rank = -1;           // >= 0: lower this rank only (what a rank process runs)
  // > 0: lower ranks 0 .. first_ranks-1 only (the simulator lowers one plan
  // replica and takes the others, identical, as on time at collectives).
  int first_ranks = 0;
  // Non-empty: lower these ranks only, in this order (the capacity check's
  // rank-class representatives, rank_classes.h).
  std::vector<int> ranks;
  const CommPlan* comm = nullptr;  // derived communication to use (default: derived here)
  // With `comm`: reuse the analysis an earlier call with this cache made
  // over the same graph, plan and *comm, which the cache's owner keeps
  // alive and unchanged while it uses the cache (driver::Pipeline).
  std::shared_ptr<AnalysisCache> analysis_cache;
  // With `comm`: the LoweredPlan refers to *comm instead of copying it (a
  // copy of AlphaFold2's 33061 edges took 30-200 ms, most of it first
  // touches of fresh memory). The caller keeps *comm alive and unchanged
  // for as long as the LoweredPlan lives (check_stage.cpp's lowerings of
  // the Pipeline's communication).
  bool share_comm = false;
  // Communication only: no kernels and no compute instructions; every
  // buffer, communication, reduction and update instruction is emitted by
  // the same code as in a full lowering, so the collective sequence is the
  // one the runtime issues. What program verification reads (1024 ranks).
  bool communication_only = false;
  // With communication_only: the kernels' instructions too (SliceIn,
  // Forward, CollectOut, SliceGrad, Backward, CollectGrad, FreeKernel), the
  // kernels not elaborated (no local graphs, no payloads), so that the
  // buffer check (buffer_check.h) sees every read and write of a buffer the
  // runtime makes. What `nns check --plan` lowers.
  bool kernel_buffers = false;
  // Stop each rank's lowering after this pass (lower_rank.h lists them;
  // empty: run them all). What `--emit=program:PASS` prints.
  std::string stop_after;
  // The distributed optimizer over the plan replicas (Megatron-LM's
  // --use-distributed-optimizer, ZeRO-1): a parameter's replica average is
  // a reduce-scatter (ReplicaAverage with count = replicas), each replica
  // updates its 1/replicas Shard (the optimizer state and fp32 master
  // weights cover the shard only) and the updated shards are gathered back
  // over the replicas (AllGather, edge -1). The gradient buffer (Accum)
  // stays whole, as Megatron's contiguous grad buffer does. Simulation and
  // the memory check only: the runtime refuses such programs.
  bool distributed_optimizer = false;
  // Every rank walks every op of the global sequence (lower_internal.h,
  // WalkPlan), checking its tag counter against the recorded one at each
  // op: what the tests compare the default (each rank walks its own ops)
  // against.
  bool walk_every_op = false;
  // Emit every micro-batch, instead of replaying micro-batch 1's emission
  // for micro-batches 2 .. M-2 (lower_replay.cpp): what the tests compare
  // the replay against. walk_every_op implies it.
  bool every_micro_batch = false;
  // Lower every plan replica's ranks instead of renaming replica 0's
  // programs (replica_rename.cpp): what the tests compare the renaming
  // against.
  bool every_replica = false;
  // Lower every device instead of moving one representative's program
  // along the plan's symmetry (rank_symmetry.h): what the tests compare the
  // move against. NNS_RANK_SYMMETRY=0 does the same.
  bool every_device = false;
  // With rank symmetry, a moved device gets a skeleton (RankProgram::
  // moved_from): only the communication and update instructions of its
  // moved program, decided movable exactly as a whole move would be. What
  // `nns check` verifies of a moved device (program_check.h says why that
  // suffices). With one plan replica only: with more, lower_plan makes
  // whole programs (verification compares replicas program by program).
  bool moved_skeletons = false;
};

// Throws LoweringError when the plan cannot be executed (an edge that is not
// a layout, a parameter split by value, a dropout split other than along its
// first dim, a sub-op that cannot be elaborated on its slice).
// A LoweringError the plan's text caused (a value part cut finer than its
// producer's, a dropout split along another dim) carries the directive's
// location (split or assign), so the driver prints it as a located
// diagnostic; otherwise `loc` is invalid.
struct LoweringError : std::runtime_error {
  using std::runtime_error::runtime_error;
  LoweringError(const std::string& msg, front::SourceLoc where) : std::runtime_error(msg), loc(where) {}
  front::SourceLoc loc;
};

LoweredPlan lower_plan(const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& spec, const LowerOptions& opts);

// Whether lower_plan gives the ranks of plan replicas 1.. replica 0's
// programs renamed (replica_rename.cpp) instead of lowering each: with
// replicas, unless the distributed optimizer shards each replica's update
// differently. Program verification then checks replica 0's programs and
// matches the renamed collectives of the others (program_check.h).
bool renames_replicas(const LowerOptions& opts);

// The replicas' gradient bucket size for `total` bytes of gradients: a
// quarter of them, 64 KiB to 16 MiB (four buckets overlap the backward
// without paying a message per parameter). The plan search counts the
// buckets a replica's gradients make (each pays a collective's latency).
size_t replica_bucket_bytes(size_t total);

}  // namespace nns::backend
