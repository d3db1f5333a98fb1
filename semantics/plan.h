// Plans as data: the result of evaluating a `plan` block against the
// forward graph — which top-level ops are split how (op-trans), which
// sub-op runs on which devices (op-assign), and ordering constraints
// (op-order) — plus the slice of every operand each sub-op touches.
// Lowering (backend/) turns a Plan into per-rank programs; the checker
// (Z3) verifies it.
#pragma once

#include <string>
#include <vector>

#include "frontend/source.h"
#include "semantics/dimop.h"
#include "semantics/graph.h"
#include "semantics/pipeline_schedule.h"
#include "semantics/slice_dims.h"

namespace nns::sema {

// The part of one operand (input or output) a sub-op touches.
struct OperandSlice {
  bool tensor = true;
  SliceDims start, length;  // per dim, in elements of the full tensor (inline up to 4 dims: slice_dims.h)
  int64_t value_index = 0, value_parts = 1;  // chunk value_index of value_parts partial sums
  std::string to_string() const;       // "[0:4, 0:64] v1/2"
};

struct SubOp {
  int node = -1;        // the top-level forward node it belongs to
  int parent = -1;      // the sub-op it was split from; -1 for the whole op
  std::vector<int> children;  // set once it is split
  std::string split_id;       // identifier (or "value") of the split that made it
  int split_index = 0, split_num = 1;
  std::vector<OperandSlice> inputs, outputs;
  std::vector<int> devices;   // empty until assigned / replicated
  bool recompute = false;
  int recompute_call = -1;  // which recompute() call marked it (ops of one call form regions)
  // regather(): the inputs an all-gather made for it are dropped after its
  // forward and gathered again for its backward (Megatron-LM's sequence
  // parallelism keeps the token shard, not the gathered sequence).
  bool regather = false;
  front::SourceLoc split_loc, assign_loc;
  bool leaf() const { return children.empty(); }
};

struct OrderConstraint {
  int before = -1, after = -1;  // sub-op indices
  front::SourceLoc loc;
};

// One rule of a constraint table (nnScaler's Tables 2-7), declared by a
// builtin inside a plan (semantics/checker/table_builtins.cpp) and enforced
// by the checker: plan evaluation only records it, so a table may be
// declared before or after the directives it constrains.
struct PlanConstraint {
  enum Kind {
    SameSplit,    // every op of `ops` with dimension dims[0] splits it into the same number of parts
    SplitOnly,    // ops of `ops` may be split only along `dims` ("value", "batch" allowed)
    SplitCounts,  // each op of `ops` is split into a number of parts listed in `values`
    PlaceOn,      // every part of the ops of `ops` runs only on devices listed in `values`
  } kind = SameSplit;
  std::string name;               // how diagnostics name the rule
  std::vector<int> ops;           // sub-ops (usually whole ops) it constrains, with their parts
  std::vector<std::string> dims;
  std::vector<int64_t> values;
  front::SourceLoc loc;           // the builtin call
};

// Pipeline schedules are op-order over tasks. A segment is a group of
// top-level ops (a pipeline stage, or the head / tail segment of an
// interlaced pipeline); a task is its forward F, input-gradient backward B
// or weight-gradient backward W for one micro-batch. order(task, task)
// orders the two tasks on every device that runs parts of both; the
// schedule(...) builtin generates such orders from the schedule library
// (semantics/pipeline_schedule.h). Lowering emits each rank's program in an
// order that honours them; the checker proves they cannot deadlock.
struct Segment {
  std::vector<int> nodes;  // top-level forward nodes, ascending
  std::string name;        // "stage 1" for schedule stages, else the first op's name
  bool split_w = false;    // some order names its W tasks: its backward runs as B then W
  front::SourceLoc loc;    // where it was first named
};
struct TaskRef {
  int segment = -1;
  PipeTask::Phase phase = PipeTask::F;
  int mb = 0;
  bool operator==(const TaskRef& o) const { return segment == o.segment && phase == o.phase && mb == o.mb; }
  bool operator<(const TaskRef& o) const;
};
struct TaskOrder {
  TaskRef before, after;
  front::SourceLoc loc;  // the order() or schedule() call
};
// What schedule(...) generated, kept for --emit=schedule and the checker's
// messages.
struct PlanSchedule {
  std::string kind;
  int ranks = 0, v = 1, recycles = 0, micro_batches = 1;
  std::vector<int> stage_segment;  // schedule stage -> segment
  PipeOrder order;                 // per pipeline rank, in schedule stages
  front::SourceLoc loc;
};

// assign(parts, devices, order = "auto"): nns chooses which part runs on
// which device of the list (backend/lowering/auto_order.h), by the cost of
// the adapters around the op. Evaluation places the parts in the given
// order, so that a plan is complete before the choice; the choice then
// rewrites the parts' devices and records what it compared.
struct AutoOrder {
  std::vector<int> subops;   // the parts, as listed
  std::vector<int> devices;  // the devices, as listed: the given order puts subops[i] on devices[i]
  front::SourceLoc loc;      // the assign() call
  std::vector<int> chosen;   // chosen[i]: the device subops[i] runs on; empty until chosen
  // Adapter cost (bytes) of the edges around the op in both orders;
  // infinite when some edge has no adapter.
  double cost_given = 0, cost_chosen = 0;
};

struct Plan {
  std::string name;
  int64_t ngpus = 1;
  std::vector<SubOp> subops;         // [i] for i < number of top-level ops: the whole op
  std::vector<int> root_of_node;     // top-level node id -> its root sub-op
  std::vector<OrderConstraint> orders;
  std::vector<PlanConstraint> constraints;  // constraint tables declared by the plan
  std::vector<Segment> segments;
  std::vector<TaskOrder> task_orders;
  std::vector<PlanSchedule> schedules;     // at most one
  std::vector<int> segment_of_node;        // top-level node -> segment (-1: none); sized with root_of_node
  std::vector<AutoOrder> auto_orders;      // assign(..., order = "auto") groups, in plan order
  // zero1(ops): parameters whose optimizer state is sharded over their
  // data-parallel group (ZeRO stage 1): their gradient is reduce-scattered
  // instead of allreduced, each device updates its shard, and the updated
  // shards are allgathered. Tensor ids, ascending; zero1_loc per entry.
  int recompute_calls = 0;  // recompute() calls evaluated so far
  std::vector<int> zero1_params;
  std::vector<front::SourceLoc> zero1_loc;
  bool zero1(int tensor) const;
  // regather(ops) calls, in plan order: where each was made and the
  // top-level nodes it marked (the check warns about a call that gathers
  // nothing again).
  struct RegatherCall {
    front::SourceLoc loc;
    std::vector<int> nodes;
  };
  std::vector<RegatherCall> regather_calls;

  // "F(stage 1, mb 3)"
  std::string task_text(const TaskRef& t) const;

  std::vector<int> leaves() const;
  // The leaves of one top-level op's partition tree, in sub-op index order
  // (walks only that tree: per-op lookups stay cheap on 100k-sub-op plans).
  std::vector<int> leaves_of(int node) const;
  // --emit=plan: per op, its partition tree with slices and devices.
  std::string dump(const Graph& g) const;
};

// Which tensors of a plan's graph need gradients (they depend on a float
// parameter), which reach the loss, and which top-level ops therefore run
// a backward (an input that needs a gradient and is not a data input, an
// output that reaches the loss). Ops no gradient flows through (detach,
// comparisons; where's condition: passes_gradient) cut both directions, as
// in autograd. Lowering and the checker's schedule pass read the same facts.
struct GradientFlow {
  std::vector<bool> requires_grad, reaches;  // per tensor
  std::vector<bool> backward;                // per node (top-level forward ops only)
};
GradientFlow gradient_flow(const Graph& g, const Plan& plan);

// Recompute regions (activation checkpointing): maximal runs of two or more
// consecutive top-level ops (graph order) whose every part was marked by
// the same recompute() call, that run a backward, and that share a segment;
// ops without backward marked by the call join the run in between (made
// again rather than kept), other ops without backward neither join nor
// break it. A region
// keeps only the inputs it reads from outside itself; its forward runs
// again, whole, before the backward of its last op. A recomputed op alone
// keeps its inputs and runs its own forward again. Per top-level node: its
// region (index into the result's `ops`), or -1.
struct RecomputeRegions {
  std::vector<int> region_of_node;
  std::vector<std::vector<int>> ops;  // per region: its nodes, ascending; the last one runs a backward
};
RecomputeRegions recompute_regions(const Graph& g, const Plan& plan, const GradientFlow& flow);

// Slices of the whole op: every operand complete, no value split.
SubOp whole_op(const Graph& g, int node);

// The plan of a run on several ranks without --plan: every top-level op
// whole on device 0 of a one-device plan replica, so that N ranks are N
// replicas of it (plain data parallelism). It goes through the stages a
// written plan does (lowering, program verification, the plan executor),
// which gives data parallelism one implementation and one bucket policy.
// Legal by construction: nothing is split, ordered or placed twice.
inline constexpr const char* kImplicitPlanName = "implicit-data-parallel";
Plan implicit_plan(const Graph& g);

// Splits `parent` (a leaf) along `choice` into `num` sub-ops.
std::vector<SubOp> split_subop(const SubOp& parent, int parent_index, const TransformChoice& choice, int num);
// The same split made inside `plan`: the parts are appended to its sub-ops
// (split_loc = loc) and become the children of sub-op `parent_index`.
// Returns their indices.
std::vector<int> split_in_plan(Plan& plan, int parent_index, const TransformChoice& choice, int num,
                               front::SourceLoc loc);

}  // namespace nns::sema
