// nns profile's measurements on the local backend (library
// nns_profile_measure: the planner's profile_build.h plus the runtime's
// kernels and communicator, which nns_planner itself must not use).
#pragma once

#include <string>

#include "backend/planner/profile_build.h"

namespace nns::planner {

// Starts s.ranks rank processes (the launcher of `nns run --gpus R`), each
// with s.threads kernel threads, measures collectives, kernels and
// instructions on all of them at once (they contend for cores and memory as
// a run's ranks do), and rank 0 writes the profile (build_profile) to
// out_path and prints measurement_summary. Returns 0, or the exit code of
// the rank that failed.
int measure_on_ranks(const ProfileSettings& s, const std::string& out_path);

}  // namespace nns::planner
