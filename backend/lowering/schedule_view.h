// --emit=schedule and the REPL's `schedule`: the tasks each rank of a
// lowered plan runs (RankProgram::tasks, in program order) as a text
// timeline, simulated with unit task times over the data flow between the
// plan's segments (semantics/pipeline_schedule.h).
#pragma once

#include <string>

#include "backend/lowering/rank_program.h"
#include "semantics/plan.h"

namespace nns::backend {

std::string schedule_text(const sema::Graph& g, const sema::Plan& plan, const LoweredPlan& lowered);

}  // namespace nns::backend
