// nns simulate --trace: the simulated timeline as a Chrome trace, in the
// Trace Event Format that `nns run --trace` writes (backend/runtime/trace.h:
// one process row per rank, "rank R (device D)", tracks 1 compute, 2 comm,
// 3 local as thread ids, "X" events with microsecond ts/dur), so the two
// open side by side in Perfetto. Written here, not through the runtime's
// recorder: the planner does not link the runtime.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/planner/simulator.h"
#include "semantics/graph.h"

namespace nns::planner {

// Writes `r.events` (simulate with SimOptions::record) to `path`; false with
// err when the file cannot be written. `g` (the full graph) names kernels.
// `node_times` (optional): the primitive nodes a kernel instruction runs
// and their seconds (program_cost.h's kernel_node_times); each becomes an
// event nested in its kernel's, named as the node is in the rank's local
// graph ("...linear#0 F"), with its op kind in args, as the single-device
// `nns run --trace` names its per-node events.
using NodeTimes = std::function<std::vector<std::pair<int, double>>(const backend::RankProgram&, const backend::PInstr&)>;
bool write_sim_trace(const std::string& path, const backend::LoweredPlan& lp, const sema::Graph* g, const SimResult& r,
                     std::string& err, const NodeTimes& node_times = nullptr);

}  // namespace nns::planner
