// A Plan written back as .nns: the `plan` command's output and what `save`
// writes. Evaluating the text (as plan NAME with ngpus = plan.ngpus) gives
// the same Plan again — the same sub-ops at the same indices, the same
// devices, recompute marks and order constraints — because it replays the
// splits in the order they were made, then the placements (tests/repl
// checks the round trip).
#pragma once

#include <string>

#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::repl {

std::string plan_to_nns(const sema::Graph& g, const sema::Plan& plan, const std::string& name);

}  // namespace nns::repl
