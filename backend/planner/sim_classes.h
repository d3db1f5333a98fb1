// Rank classes for the simulator (issue 31, item 4): `nns simulate` lowers
// and replays one rank of each class of ranks that run the same program up
// to the renaming of ranks, not every rank. A Megatron plan of tp 8 x pp 35
// then replays 35 programs instead of 280; the others would only repeat
// them.
//
// How a class is found. Every rank of one plan replica is lowered in
// structure form (no kernel bodies) for a few micro-batches only
// (kClassMicroBatches): the lowering emits every micro-batch of a rank by
// the same code, so two ranks equal over the first few are equal over all
// (the test simulate_classes_test.cpp replays every rank against the
// classes on many plans to hold that). Two ranks are in one class when
//   - their programs' memory signatures are equal (rank_classes.h: buffers,
//     instructions, kernels' elaboration keys, all but the ranks they name),
//   - every communication instruction costs the same on the profile (its
//     group's or peer's place in the topology: an intra-node and an
//     inter-node send differ), and
//   - each send or receive, in program order, talks to a peer of the same
//     class (refined until stable, as colour refinement does).
// The ranks replayed are the first of each class and, until closed, the
// peers they receive from: a Wait needs its sender replayed. A collective
// whose members are not all replayed starts when the replayed members reach
// it (simulator.h, "Symmetry"): the others run the same program.
#pragma once

#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/planner/simulator.h"
#include "semantics/plan.h"

namespace nns::planner {

// Micro-batches of the lowering that decides the classes: the first, one in
// the middle and the last are emitted differently (first contributions,
// held transfers, the step's end); more only repeat the middle one.
constexpr int kClassMicroBatches = 3;

// `plan` for its first `micro_batches` micro-batches: the task orders
// among their tasks, closed through the tasks of later micro-batches (an
// interleaved schedule orders B(mb 0) before B(mb 1) through later tasks;
// dropping those alone would lose it).
sema::Plan first_micro_batches(const sema::Plan& plan, int micro_batches);

struct SimClasses {
  std::vector<int> class_of;    // per program of the structure lowering: its class
  std::vector<int> class_size;  // per class: its ranks
  std::vector<int> replayed;    // global ranks to lower with kernel bodies and replay (ascending)
  int classes() const { return static_cast<int>(class_size.size()); }
};

// `structure`: every rank of one plan replica, lowered structure-only (see
// above); `comm_cost`: the profile's cost of a communication instruction
// in it (planner::profile_cost).
SimClasses simulation_classes(const sema::Plan& plan, const backend::LoweredPlan& structure,
                              const InstrCost& comm_cost);

}  // namespace nns::planner
