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

// Pinned (parametric = false): the text asserts ngpus == plan.ngpus.
// Parametric: no assert, and every split count and device range end equal
// to the device count is written as `ngpus`; whether that text is the same
// plan at the count it was made for, and a legal one at another, is for the
// caller to check (save does, repl/save_check.cpp).
std::string plan_to_nns(const sema::Graph& g, const sema::Plan& plan, const std::string& name, bool parametric = false);

}  // namespace nns::repl
