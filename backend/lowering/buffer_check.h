// Buffer check (issue 25): interprets each rank's lowered instructions
// (rank_program.h) over its buffers, as the plan executor runs them
// (backend/runtime/plan_executor*.cpp), and reports what the value-level
// half of program verification (program_check.h) cannot see: that half
// runs every edge's adapter on its own abstract pieces, not on the buffers
// the programs name, so aliasing and in-place collectives are invisible to
// it. Per rank and buffer this tracks:
//   - the lifetime: made (Alloc, LoadInput, Extract, Recv, a collective's
//     result; parameters and zero1 shards live across steps), freed (Free);
//     a read or write before the buffer is made or after its free, a second
//     free, a buffer the step leaves live that the frees pass must free;
//     a receive never waited for;
//   - the partial-sum state of its contents: how many value parts it is
//     still split into (1: the full sum). The producer's output starts as
//     its layout says; each collective of an edge's adapter must find the
//     state the adapter's step expects on this device (the one-device
//     program's value, split as the layouts say) and leaves the state of
//     the step's result; a kernel input must hold the parts its slice
//     reads. A partial sum reduced in place twice (its allreduce run again
//     on a buffer an earlier allreduce already summed) is reported with the
//     instruction that summed it first;
//   - the replica averages applied to each accumulated gradient (exactly
//     one per update when the plan has replicas; never two), and that an
//     update reads a full gradient;
//   - writes while the data is still read elsewhere: kernel inputs read in
//     place (slice_in_place) until their kernel is freed, and sends in
//     flight until their release point (the Wait the Send names,
//     lower_releases.cpp; one never reached is reported) or else the loss
//     allreduce (every rank has waited for all its receives before it).
// Every diagnosis names the rank, the instruction index and text (as
// --emit=program prints it) and the buffer (role, tensor, micro-batch).
//
// Not modelled: what kernels compute (a kernel's output is taken to be the
// partial sum its layout says), element-level overlap of Insert parts, and
// a read of a buffer whose only content is Alloc's zeros (legitimate for
// accumulators, e.g. a gradient nothing contributed to). verify_programs
// lowers communication only but with the kernels' buffer instructions
// (LowerOptions::kernel_buffers), so kernel reads and writes are checked
// there; in a lowering without them the producer's Alloc stands for its
// output.
#pragma once

#include <string>
#include <vector>

#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_program.h"

namespace nns::backend {

struct BufferCheckStats {
  int buffers = 0;             // buffers interpreted, over every rank
  long long instructions = 0;  // instructions interpreted, over every rank
  int programs = 0;            // programs interpreted
};

// Interprets every whole program of `lp` (the deadline is polled per
// rank); appends at most `max_errors` diagnoses to `errors`. A skeleton
// (RankProgram::moved_from) is not interpreted: its program is its
// representative's moved by a bijection of each tensor's atoms that keeps
// every box a box of the same extents, every label and every instruction's
// buffers, so each judgement here (a read inside what a buffer holds,
// partial sums and copies, lifetimes, in-place reductions) is the
// representative's, moved.
BufferCheckStats check_buffers(const sema::Graph& g, const LoweredPlan& lp, std::vector<std::string>& errors,
                               size_t max_errors = 16);

// Seeded bug `double-inplace-allreduce` (program_check.h): where a partial
// sum read by two ops is allreduced twice, each time on its own copy
// (lower_edges.cpp), the copies are dropped so that both allreduces run in
// place on the producer's buffer, the second summing an already summed
// value (the bug of issue 25). Collectives, their order, groups and the
// derived communication are unchanged, so the value and order halves still
// verify; only the buffer check sees it. Returns false when no such value
// exists; otherwise says in `applied` what changed.
bool seed_double_inplace_allreduce(const sema::Graph& g, LoweredPlan& lp, std::string& applied);

// Seeded bug `kernel-read-after-free` (program_check.h): on the first rank
// whose kernels read a buffer that is freed later in the step (not a
// parameter, gradient accumulator or shard), the first such buffer's Free
// moves to just before the kernel's SliceIn that reads it. Only the buffer
// check sees it, and only in a lowering that carries the kernels'
// instructions (LowerOptions::kernel_buffers). False when no kernel reads
// such a buffer (a communication-only lowering).
bool seed_kernel_read_after_free(const sema::Graph& g, LoweredPlan& lp, std::string& applied);

}  // namespace nns::backend
