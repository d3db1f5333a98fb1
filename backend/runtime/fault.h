// Fault injection for the fault tests: a process kills itself at a named
// point when the environment asks for it, so a test can stop a run at an
// exact moment (half-way through a checkpoint save) instead of racing a
// `kill` from outside.
//
//   NNS_FAULT=POINT:RANK:STEP   e.g. "shard-written:1:4", "before-rename:0:*"
//
// kills rank RANK (`*`: any) with SIGKILL when it reaches POINT while the
// training is at step STEP (`*`: any). Points:
//   before-rename   a file written atomically (checkpoint, manifest, shard)
//                   is complete under its temporary name, not yet renamed
//   shard-written   a rank's checkpoint shard is in place; the save is not
//                   yet published (no manifest, `latest` unchanged)
// Unset (always, outside the tests), fault_point() costs one comparison.
#pragma once

#include <cstdint>

namespace nns::backend {

// The rank and step fault_point() matches NNS_FAULT's RANK and STEP against.
void set_fault_context(int rank, int64_t step);
// Kills this process (SIGKILL, after one line on stderr) when NNS_FAULT names
// `point` at the current rank and step.
void fault_point(const char* point);

}  // namespace nns::backend
