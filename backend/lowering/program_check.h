// Program verification: after lowering, checks symbolically that the
// per-rank programs a plan turns into compute what one device computes,
// communication included (issue 5, second half; the Z3 checker proves the
// plan itself legal before this runs).
//
// Two halves, kept independent of each other. Values: abstract
// interpretation over ALL ranks at once — every piece a device holds is a
// region of the full tensor plus a weighted set of value labels (which
// partial sums of the producer it contains, and how often); every adapter
// step of every edge the programs run is executed abstractly on every device
// of its groups, and at the consumer each device must hold exactly its slice
// with every partial sum counted once (the verifier's own semantics, not the
// runtime's code). Order: the ranks' lowered programs (lower_plan.h, the
// lists the runtime executes) are read for their collectives and updates
// (program_order.h); a mismatched order across ranks is reported as the
// deadlock it would be, each update must come after every reduction of its
// gradient, with the same scale on every replica.
//
// Third, buffers (buffer_check.h): each rank's instructions interpreted over
// its buffers (lifetimes, partial-sum state, in-place reductions, replica
// averages), what the value half's own abstract pieces cannot see.
//
// Moved devices (rank symmetry, rank_symmetry.h): `nns check` holds each
// as a skeleton (LowerOptions::moved_skeletons), the communication and
// updates of its moved program, made exactly where the whole move is. The
// order half matches every rank's collectives, sends and updates as
// before (skeletons included, each at its place in the whole program); the
// buffer check and the rank classes read each orbit's representative
// only, because a move is a bijection of each tensor's atoms that keeps
// every box a box of the same extents, every label and every buffer an
// instruction names: what they judge of the representative they would
// judge of its moved programs. The gradient counts take a skeleton's
// accumulated pieces (sizes and copy counts) from its representative. The
// value half reads the derived communication, not the programs.
//
// Seeded bugs (a test-only hook, `nns check --plan P --seed-bug KIND`)
// corrupt the lowered programs before verification; the test suite asserts
// the exact diagnosis of each.
#pragma once

#include <string>
#include <vector>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "semantics/graph.h"
#include "semantics/plan.h"
#include "semantics/train_spec.h"

namespace nns::backend {

enum class SeededBug {
  None,
  MissingAllreduce,        // drop the first allreduce step
  AllgatherForAllreduce,   // an allgather where an allreduce is needed
  WrongGroup,              // a collective over the wrong device group
  WrongStageDevice,        // send/recv to a device that is not the receiver (the sender itself on 2 devices)
  ReplicaScale,            // one replica averages gradients with another factor
  EarlyUpdate,             // a weight update issued before its gradient is reduced
  DoubleCount,             // a partial sum counted twice (the allreduce runs twice)
  CollectiveOrder,         // rank 0 reorders its collectives into a deadlock (two group collectives a peer
                           // shares swapped, else a receive waited on before the send it answers)
  GradientCopies,          // a replicated gradient piece not labelled as a copy (counted twice)
  GradientScale1Pct,       // one replica averages a gradient with a factor 1% too large
  DoubleInplaceAllreduce,  // a partial sum read by two ops allreduced twice in place on the producer's buffer
                           // (issue 25; only the buffer check, buffer_check.h, sees it)
  KernelReadAfterFree,     // a kernel reads a buffer after its free (the Free moved before the read;
                           // only the buffer check sees it, on the kernels' instructions)
  EarlySendRelease,        // rank 0 frees a sent buffer at a wait on a message its peer sends before
                           // receiving ours (the send may be in flight; program_release.cpp sees it)
};
bool seeded_bug_from_name(const std::string& name, SeededBug& out);
std::string seeded_bug_names();  // "missing-allreduce, allgather-for-allreduce, ..."

struct ProgramCheck {
  bool ok = true;
  std::vector<std::string> errors;  // precise diagnoses, first first
  std::string applied;              // what the seeded bug changed ("" if none)
  // The seeded bug has nothing to corrupt in this plan (no allreduce, no
  // second replica, ...): the programs are left as they are and not
  // verified; the driver exits with its own status (see docs/verify.md).
  bool seed_not_applicable = false;
  std::vector<std::string> notes;   // what lowering decided that the user should know (LoweredPlan::notes)
  int ranks = 0, edges = 0, steps = 0, collectives = 0;
  int buffers = 0;        // buffers the buffer check interpreted, over every rank
  int buffer_programs = 0;  // the whole programs it interpreted (not skeletons: buffer_check.h)
  int buffer_errors = 0;  // how many of `errors` the buffer check found (the last ones)
  double ms = 0;
  double buffer_ms = 0;  // of which the buffer check
  double lower_ms = 0;   // of which lowering the programs (and again after a seeded derivation bug)
  double value_ms = 0;   // of which the value half (every edge's adapter, abstractly)
  double order_ms = 0;   // of which the order half and the gradient counts
  // Plan replicas: programs of replicas 1.. found equal to replica 0's up to
  // the renaming of ranks (rank_classes.h, replica_difference), each lowered,
  // compared and dropped (`replica_ms`: lowering and comparing them); the
  // others are verified on their own.
  int replica_programs = 0;
  double replica_ms = 0;
};

// `replicas`: plan replicas (N = replicas x plan.ngpus ranks).
// The programs are lowered here (lower_plan, structure only) with the train
// block's micro-batches (`spec`; one when null); the seeded bug corrupts the
// derived communication before lowering or the lowered lists after it.
// `comm`: the plan's derived communication when the caller has it (derived
// here otherwise).
ProgramCheck verify_programs(const sema::Graph& g, const sema::Plan& plan, int replicas, SeededBug bug = SeededBug::None,
                             const sema::TrainSpec* spec = nullptr, const CommPlan* comm = nullptr);

// The lowering options verification reads: every rank, structure only
// (communication_only) with the kernels' buffer instructions.
LowerOptions verification_lowering(int replicas, const CommPlan* comm);

// The same on programs the caller lowered with verification_lowering (the
// driver lowers once for this and the capacity check's rank classes);
// `lower_ms`: what that lowering took, for the report. `lp` stays the
// caller's to free (a seeded bug may have changed or replaced it).
ProgramCheck verify_programs(const sema::Graph& g, const sema::Plan& plan, LoweredPlan&& lp, SeededBug bug,
                             const sema::TrainSpec* spec, double lower_ms);

}  // namespace nns::backend
