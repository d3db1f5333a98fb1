// Internal to program verification (program_check.h): the order half.
// Each rank's sequence of collectives and updates is read off its lowered
// program; seeded bugs corrupt the derived communication or the lists;
// updates must follow every reduction of their gradient with one replica
// scale, and the ranks' sequences must match (else: the deadlock named).
#pragma once

#include <string>
#include <vector>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_program.h"

namespace nns::backend::detail {

// "gradient of %60 (attention#0 -> add#0)" (program_check.cpp).
std::string edge_text(const sema::Graph& g, const CommEdge& e);
// Runs edge `e`'s adapter abstractly on every device (program_check.cpp).
void simulate_edge(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors);

// Seeded bugs in the derived communication (before lowering); false when
// the plan has nothing to corrupt (the error says so).
bool seed_comm_bug(const sema::Graph& g, CommPlan& cp, const std::vector<int>& used, int devices, SeededBug bug, ProgramCheck& out);
// Seeds the list bugs (replica scale, early update, collective order) into
// `lp`, then checks the order; appends diagnoses to out.errors.
void check_order(const sema::Graph& g, LoweredPlan& lp, SeededBug bug, ProgramCheck& out);

}  // namespace nns::backend::detail
