// Internal to program verification (program_check.h): the order half.
// Each rank's sequence of collectives and updates is read off its lowered
// program; seeded bugs corrupt the derived communication or the lists;
// updates must follow every reduction of their gradient with one replica
// scale, and the ranks' sequences must match (else: the deadlock named).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_program.h"

namespace nns::backend::detail {

// "gradient of %60 (attention#0 -> add#0)" (program_values.cpp).
std::string edge_text(const sema::Graph& g, const CommEdge& e);
// Runs edge `e`'s adapter abstractly on every device (program_values.cpp).
void simulate_edge(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors);

// Seeded bugs in the derived communication (before lowering); false when
// the plan has nothing to corrupt (the error says so).
bool seed_comm_bug(const sema::Graph& g, CommPlan& cp, const std::vector<int>& used, int devices, SeededBug bug, ProgramCheck& out);
// Seeds the list bugs (replica scale, early update, collective order) into
// `lp`, then checks the order; appends diagnoses to out.errors.
void check_order(const sema::Graph& g, LoweredPlan& lp, SeededBug bug, ProgramCheck& out);

// Seeds replica-scale / gradient-scale-1pct into `p` (device 0 of replica
// 1): its first replica average gets factor 1, or 1% more. False when it
// has none.
bool seed_replica_scale(const sema::Graph& g, RankProgram& p, int replicas, SeededBug bug, std::string& applied);

// Early send releases (program_release.cpp): for every Send of `lp` that
// names a release point (PInstr::index), the peer must wait for our
// message before it sends the releasing one; each violation is appended
// to `errors` (at most max_errors). Pairs whose peer `lp` does not hold
// are skipped (another replica's programs are checked where held).
void check_send_releases(const sema::Graph& g, const LoweredPlan& lp, std::vector<std::string>& errors,
                         size_t max_errors = 16);
// Seeded bug early-send-release: rank 0's first Send that can be released
// at a later Wait of its own on a message the peer sends before it has
// received ours gets that release point. False when none can.
bool seed_early_release(const sema::Graph& g, LoweredPlan& lp, std::string& applied);

// A program of another replica that differs from replica 0's (rank_classes.h,
// replica_difference), held with its lowering's group table.
struct HeldProgram {
  const RankProgram* program = nullptr;
  const std::vector<std::vector<int>>* groups = nullptr;
};

// Plan replicas held apart (program_replicas.cpp): replicas 1.. of `lp`
// (replica 0's programs only) lowered one at a time with `ro`'s options, as
// replica 0 was, and each program compared with replica 0's of its device
// (rank_classes.h, replica_difference). An equal one is dropped: its checks
// are replica 0's, renamed (check_order_replicas). One that differs is
// kept in `kept` (by replica, with its lowering's group table; a note says
// so) and verified on its own. Holding one replica at a time instead of all
// (GPT 145.6B on 1536 ranks: 24 replicas, 22 GB) is the point. The seeded
// replica-scale bugs go into replica 1's first program here, as it is
// lowered. False (the error appended) when a replica does not lower.
bool compare_replicas(const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& sp, LowerOptions ro,
                      const LoweredPlan& lp, SeededBug bug, std::vector<std::unique_ptr<LoweredPlan>>& kept,
                      ProgramCheck& out);

// check_order over plan replicas of which `lp0` holds replica 0's programs
// only: every other rank runs replica 0's program of its device renamed
// (groups inside replica 0 moved to its replica, peers likewise), except
// the `held` ones, checked as they are. The collectives are matched over
// the whole world as check_order matches them; the update checks run on
// replica 0's and the held programs (a renamed one's are replica 0's).
// Seeds the list bugs into replica 0 (replica-scale is seeded by the caller,
// into replica 1's program as it is lowered: out.applied says so).
void check_order_replicas(const sema::Graph& g, LoweredPlan& lp0, const std::vector<HeldProgram>& held, SeededBug bug,
                          ProgramCheck& out);

}  // namespace nns::backend::detail
