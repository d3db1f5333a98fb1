// Derives every communication a plan needs (`nns check --plan P --emit=comm`).
//
// For each tensor edge producer -> consumer between top-level ops, the
// producer's leaf sub-ops leave the tensor in one layout and the consumer's
// leaves need it in another; both are read off the sub-ops' operand slices
// and devices (pieces one device holds several of — nnScaler's coshard — are
// first merged locally) and derive_adapter finds the primitives. Parameters
// and data inputs live where their first consumer needs them. In backward,
// each consumer produces its input's gradient in its own layout (distinct
// sub-ops sharing a piece give partial sums) and the gradient moves to the
// layout the producer's backward or the parameter update reads — which is
// how the duals appear (a replicated input of a head-split attention gets an
// allreduce in backward, an allgather becomes a reduce-scatter).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/adapters.h"
#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::backend {

struct CommEdge {
  int tensor = -1;
  // Forward: producer -> consumer of the tensor. Backward (gradient of the
  // tensor): the forward consumer that produces it -> the forward producer
  // whose backward reads it, or -1 for a parameter's update.
  int producer = -1;   // top-level node, or -1 for a parameter / input
  int consumer = -1;
  int input_index = -1;  // which input of the forward consumer (forward: `consumer`, backward: `producer`) the tensor is
  bool backward = false;
  Layout from, to;
  Adapter adapter;
  std::string note;    // why an edge could not be expressed as a layout, if so
  // Traffic once (mark_shared_transfers). Consumers of one tensor that need
  // it in the same layout, in the same plan segment, share one transfer:
  // `shared_with` names the edge that carries it, -1 when the edge carries
  // its own. Forward, the carrier is the first consumer's edge and the
  // others read its result; backward, it is the edge of the consumer whose
  // backward runs last (the first in graph order), and the others' gradient
  // shares are summed into its contribution before its one adapter runs.
  int shared_with = -1;
  // Once per step instead of once per micro-batch: a parameter's edges. A
  // weight does not change within a step, so its forward transfer runs in
  // the first micro-batch and every micro-batch reads what it received;
  // its gradient is summed over the micro-batches and moved once (a
  // bucket's allreduce at the step's end, any other adapter in the last
  // micro-batch).
  bool per_step = false;
  // A gradient edge that no backward runs (its forward consumer has none,
  // e.g. a no-grad recycling pass, or the tensor needs no gradient):
  // derived, but not listed by dump() nor counted in the totals.
  bool idle = false;
};

class OperandReads;

struct CommPlan {
  std::vector<CommEdge> edges;
  // The operand layouts the derivation read (comm_pieces.h), for lowering's
  // analysis of the same plan; null when derived for some nodes only.
  std::shared_ptr<const OperandReads> reads;
  // Over the edges that carry a transfer (shared_with < 0, not idle), each once:
  int64_t collectives() const;  // number of collective launches (all groups of a step count once)
  double bytes() const;         // total volume by the cost model, summed over devices
  double cross_bytes() const;   // of which moves between device groups (send/recv out of the source group)
  // The same for a step of `micro_batches`: per-micro-batch edges that many
  // times, per-step edges once.
  int64_t step_collectives(int micro_batches) const;
  double step_bytes(int micro_batches) const;
  // `micro_batches` > 1 adds the step's totals.
  std::string dump(const sema::Graph& g, int micro_batches = 1) const;
};

// Reads a layout off the pieces that leaf sub-ops hold of one tensor.
// `pieces` pairs a device with the slice it holds. Returns false (and says
// why) when the pieces do not form an R x V x D layout over their devices.
bool layout_of_pieces(const std::vector<std::pair<int, sema::OperandSlice>>& pieces, const sema::Shape& shape, Layout& out,
                      std::string& why);

// With `only_nodes` (indexed by top-level node), only the edges whose
// producer or consumer is in the set are derived (parameters still live
// where their first consumer needs them, in the set or not): what choosing
// one op's device order compares, without deriving the whole plan again.
// `cost` goes to derive_adapter, with cost.give_up_above a bound on all the
// edges together: an edge whose every chain costs more than what the edges
// before it left gets a note instead of an adapter.
// Whether a parameter's gradient edge is one allreduce: lowering sums it
// over the micro-batches into its bucket and reduces the bucket at the
// step's end (PlanAnalysis); such edges do not share (each has its bucket
// buffer).
inline bool bucketed(const CommEdge& e) {
  return e.backward && e.consumer < 0 && e.adapter.steps.size() == 1 &&
         e.adapter.steps[0].prim == AdapterStep::AllReduce;
}

// Whether regather() gathers the input edge `e` carries again for its
// consumer's backward: a forward edge of an activation (a parameter's runs
// once per step) whose adapter is all-gathers only (with chunks), into an
// input the consumer's backward reads. The lowering marks kernel inputs by
// it (lower_kernels.cpp), the check warns about calls it never holds for.
bool regatherable(const sema::Graph& g, const CommEdge& e);

// The regather() calls of `plan` (sema::Plan::regather_calls) that gather
// nothing again: no op they marked has a regatherable input edge. Indices
// into plan.regather_calls.
std::vector<size_t> idle_regathers(const sema::Graph& g, const sema::Plan& plan, const CommPlan& cp);

CommPlan derive_communication(const sema::Graph& g, const sema::Plan& plan, const std::vector<bool>* only_nodes = nullptr,
                              const AdapterCost& cost = {});

// Sets CommEdge::shared_with, per_step and idle over derived edges (the
// last step of derive_communication). Forward edges share when they carry
// the same tensor between the same layouts to consumers in one plan
// segment; backward edges likewise, between consumers that run a backward
// (a parameter's gradient edges too, unless bucketed). One segment: the
// carrier's task then runs on that rank before (forward) or after
// (backward) every sharer's, whatever the schedule.
void mark_shared_transfers(const sema::Graph& g, const sema::Plan& plan, CommPlan& cp);

// The pieces of operand k of top-level op `node` that the plan's leaf
// sub-ops hold, one (device, slice) per device of each leaf; and the
// gradient pieces that op's backward produces for input k (distinct
// sub-ops sharing a piece give partial sums).
std::vector<std::pair<int, sema::OperandSlice>> input_pieces(const sema::Plan& plan, int node, size_t k);
std::vector<std::pair<int, sema::OperandSlice>> output_pieces(const sema::Plan& plan, int node, size_t k);
std::vector<std::pair<int, sema::OperandSlice>> gradient_pieces(const sema::Plan& plan, int node, size_t k);

// The gradient of a partial-sum tensor is the full gradient on every part:
// a layout with its V factors read as R (what a producer's backward reads).
Layout gradient_layout(Layout l);

}  // namespace nns::backend
