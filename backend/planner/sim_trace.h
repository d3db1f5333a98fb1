// nns simulate --trace: the simulated timeline as a Chrome trace, in the
// Trace Event Format that `nns run --trace` writes (backend/runtime/trace.h:
// one process row per rank, "rank R (device D)", tracks 1 compute, 2 comm,
// 3 local as thread ids, "X" events with microsecond ts/dur), so the two
// open side by side in Perfetto. Written here, not through the runtime's
// recorder: the planner does not link the runtime.
#pragma once

#include <string>

#include "backend/lowering/rank_program.h"
#include "backend/planner/simulator.h"
#include "semantics/graph.h"

namespace nns::planner {

// Writes `r.events` (simulate with SimOptions::record) to `path`; false with
// err when the file cannot be written. `g` (the full graph) names kernels.
bool write_sim_trace(const std::string& path, const backend::LoweredPlan& lp, const sema::Graph* g, const SimResult& r,
                     std::string& err);

}  // namespace nns::planner
