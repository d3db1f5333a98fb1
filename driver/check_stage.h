// The check stage of `nns check --plan` (and of `nns run` before it
// lowers): the Z3 proof, the communication's derivation, the structure
// lowering, then the capacity check and program verification side by side
// (driver/check_stage.cpp). run_pipeline (driver/pipeline.cpp) calls it.
#pragma once

#include <chrono>
#include <iosfwd>

#include "driver/pipeline.h"

namespace nns::driver {

// check: the Z3 checker proves the plan legal (65 illegal, 70 when Z3 gives
// up), the capacity check replays the lowered programs (65 when a device
// overflows), then program verification checks the programs (70 if wrong).
int check_stage(const PipelineOptions& o, Pipeline& p, std::ostream& report);

// check without --plan on several ranks: the implicit plan (every op on
// one device, topo.replicas replicas of it). It is legal by construction
// (nothing split, ordered or placed twice), so Z3 is not asked; its
// communication is derived and its programs verified as a plan's are.
int implicit_plan_stage(const PipelineOptions& o, Pipeline& p, std::ostream& report);

// Shared by the stages: milliseconds since t0, and the diagnostics reported
// since the last call printed (errors or warnings) and forgotten, so that a
// later stage does not print them again.
double ms_since(std::chrono::steady_clock::time_point t0);
void print_diagnostics(Pipeline& p);

}  // namespace nns::driver
