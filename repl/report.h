// What the REPL tells the user about a plan: the communication it derives
// (and how that changed), per-device memory, each op's partition, and
// values printed back at the prompt. Everything is read off a Plan and the
// Graph through the functions file mode uses (derive_communication, the
// Z3 checker); nothing here decides what is legal or models memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "semantics/checker/checker.h"
#include "semantics/interpreter.h"

namespace nns::repl {

// A plan in the making has leaves no directive has placed yet. To show
// what it would cost so far, they are counted as replicated on every
// device — what the usual last directive, replicate(unassigned(),
// 0..ngpus), makes of them.
sema::Plan completed(const sema::Plan& plan);
int unplaced_leaves(const sema::Plan& plan);

// One collective of a derived CommPlan, flattened for diffs and listings.
struct Collective {
  std::string prim;       // allreduce, allgather, reduce-scatter, all-to-all, send/recv
  std::string groups;     // "{0,1}" or "{0,1} {2,3}"
  int64_t bytes = 0;      // volume per device by the cost model
  bool backward = false;
  std::string what;       // "%60 blocks.0.attn.attention#0 -> blocks.0.attn.add#0"
  std::string key() const;
};
struct CommSummary {
  std::vector<Collective> collectives;
  std::vector<std::string> notes;  // edges that could not be expressed as layouts
  std::string error;               // derive_communication refused the plan
  int64_t bytes() const;
};
CommSummary summarize_comm(const sema::Graph& g, const sema::Plan& plan);

// One device's peak, by the replay of its lowered program
// (backend/lowering/memory_check.h).
struct DeviceMemory {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t total() const { return weights + gradients + optimizer + activations; }
};

// What the REPL shows of one plan: its derived collectives, the Z3
// checker's result (verdict, conflict diagnostics) and, for a legal plan,
// each device's peak memory as `nns check` computes it: the plan lowered
// with its kernel bodies (`elaborate`) and each rank's program replayed.
// All see completed(plan).
struct PlanFacts {
  CommSummary comm;
  sema::check::CheckResult check;
  std::vector<DeviceMemory> memory;  // per device; empty when the plan is not legal or cannot be lowered
  std::string memory_unknown;        // why `memory` is empty
};
PlanFacts analyse(const sema::Graph& g, const sema::Plan& plan, const sema::check::CheckOptions& opts, const sema::TrainSpec& spec,
                  const backend::Elaborator& elaborate);

// "h=0/2 -> [0], h=1/2 -> [1]", "whole on [0, 1]", "whole, not placed".
std::string describe_partition(const sema::Plan& plan, int node, size_t max_leaves = 8);
// "blocks.0.attn.attention#0 h=1/2" for one sub-op.
std::string describe_subop(const sema::Graph& g, const sema::Plan& plan, int sub);

// A value as the prompt echoes it (strings quoted, tensors with shapes,
// op handles with names; long lists cut).
std::string format_value(const sema::Value& v, const sema::Graph& g, const sema::Plan* plan);

// The report after a directive: which ops changed, collectives added and
// removed, memory per device before -> after, and the verdict.
struct ChangeReport {
  std::string text;
  bool changed = false;
};
// `list_ops` false leaves out the per-op lines (show's what-ifs).
ChangeReport report_change(const sema::Graph& g, const sema::Plan& before, const PlanFacts& facts_before, const sema::Plan& after,
                           const PlanFacts& facts_after, bool colour, bool list_ops = true);

// `plan` with op `node` whole and unplaced again: its sub-ops removed, the
// others renumbered, order constraints on removed sub-ops dropped (show's
// what-ifs for an op that is partitioned already).
sema::Plan unpartitioned(const sema::Plan& plan, int node);

// Whether two plans are the same plan (sub-ops, slices, devices, marks and
// orders; source locations ignored).
bool same_plan(const sema::Plan& a, const sema::Plan& b);

}  // namespace nns::repl
