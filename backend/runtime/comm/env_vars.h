// The NNS_* environment variables nns reads, declared once with their types
// and ranges, and one parser for them: a bad value is a usage error (exit
// 64) naming the variable, found before anything starts (detect_launch_env
// checks them all), instead of an atoi() that turns "abc" into 0 or a
// silently ignored NNS_BIND=2. The launch variables of torchrun, Slurm and
// Open MPI are parsed in launch_env.cpp with the same strict integers.
#pragma once

#include <cstdint>
#include <string>

#include "backend/runtime/comm/launch_env.h"

namespace nns::backend {

// A whole decimal integer: digits only, optionally one leading '-' (no
// spaces, signs, exponents or trailing text), that fits int64.
bool parse_strict_int(const char* text, int64_t& out);

// The first NNS_* variable with a value outside its declaration, as
// "NNS_THREADS='-1': expected an integer from 1 to 4096 (threads per rank)";
// "" when all are fine (or unset).
std::string check_nns_variables(const EnvLookup& env);

// The value of an integer variable of the table, or `fallback` when unset
// or invalid (check_nns_variables has refused invalid values already).
int64_t nns_env_int(const char* name, int64_t fallback);

// Why this host cannot run `ranks` local rank processes, "" when it can:
// more than 8 per core, or less than 64 MiB of available memory each, is
// refused before any is forked (--gpus 65536 used to fork until fork
// failed). NNS_MAX_LOCAL_RANKS overrides the limit explicitly.
std::string local_ranks_problem(int64_t ranks);

// Every declared variable, "NAME (what, range)" per line, for docs and tests.
std::string describe_nns_variables();

}  // namespace nns::backend
