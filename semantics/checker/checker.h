// The plan checker: proves with Z3 that a Plan is legal for its Graph
// before anything is lowered or run (DESIGN.md §3 "Checker").
//
// What it checks, each directive's constraints under its own Z3 tracking
// literal so that a conflict maps back to the statements that caused it:
//  - split legality: the split identifier exists, is not '^', numeric or a
//    non-first bracket member; value splits only for ops linear in their
//    first input; the split count divides the size (for symbolic sizes: for
//    every admissible size, or a counter-example);
//  - coverage: each op's iteration space (index x partial-sum value) is
//    computed exactly once per replica — the parts of every split tile their
//    parent with no gap or overlap, partial sums are refined, never claimed
//    whole twice;
//  - devices: every part placed on at least one device, all in 0..N-1, none
//    twice;
//  - order: op-order directives and the data flow admit a schedule (no
//    cycle); see encode_order.cpp for what order(a, b) means with
//    micro-batches;
//  - constraint tables declared in the plan (same_split, split_only,
//    split_counts, place_on).
// Memory is not checked here: the capacity check runs on the lowered
// programs (backend/lowering/memory_check.h), whose replay is the peak the
// executor measures; the driver runs it right after this check.
// An illegal plan yields ONE error at the first directive of the unsat core
// (source order) and a note at every other directive of the core.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "frontend/diagnostics.h"
#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::sema::check {

struct CheckOptions {
  // --device-memory, for the capacity check after lowering (driver/pipeline.cpp).
  int64_t device_memory = -1;   // bytes per device; < 0: memory is reported, not checked
  std::string memory_label;     // how the capacity was given ("80 GiB", "h100 (80 GiB)")
  unsigned timeout_ms = 10000;  // Z3 time limit for each solver call
  // --check-timeout: the whole check (plan evaluation to program
  // verification; semantics/check_deadline.h); 0 = none, each Z3 call then
  // bounded by timeout_ms alone.
  unsigned total_timeout_ms = 0;
  int64_t micro_batches = 1;  // the train block's (order directives over micro-batches)
  // --precision fp16|bf16 for the capacity check: mixed-precision training
  // as the simulator costs it (nns simulate --precision): 2-byte weights,
  // gradients and activations, fp32 optimizer state plus an fp32 master
  // copy of each weight. 0: what the CPU runtime runs (4-byte elements).
  int64_t bytes_per_element = 0;
  const front::SourceManager* sources = nullptr;  // for directive labels in notes (optional)
};

enum class Verdict {
  Legal,      // every rule holds (for every admissible size when sizes are symbolic)
  Illegal,    // a conflict: see diagnostics
  Unknown,    // Z3 gave up (time limit or incompleteness): see reason
};

struct CheckStats {
  int directives = 0;        // tracking literals (one per directive statement)
  int tracked = 0;           // formulas asserted under tracking literals
  int variables = 0;         // Z3 integer variables (schedule times, split counts, sizes)
  int obligations = 0;       // distinct size obligations proved for all admissible sizes
  int64_t ground_checks = 0; // constraints decided while encoding (no unknowns in them)
};

struct CheckResult {
  Verdict verdict = Verdict::Legal;
  std::vector<front::Diagnostic> diagnostics;  // the conflict (error + notes); warnings
  std::string reason;                          // Unknown: why Z3 gave up
  double encode_ms = 0, solve_ms = 0;
  std::vector<std::pair<std::string, double>> pass_ms;  // encode_ms by pass, then "solve" and "symbolic"
  bool symbolic = false;                       // sizes were symbolic (proved for all admissible sizes)
  CheckStats stats;
  double total_ms() const { return encode_ms + solve_ms; }
};

// Checks `plan` against the forward graph `g`.
CheckResult check_plan(const Graph& g, const Plan& plan, const CheckOptions& opts);

// Exit codes of a check, as the driver uses them (DESIGN.md §4.6): legal 0,
// illegal 65 (bad input), solver gave up 70 (the check could not finish).
int exit_code(Verdict v);

// The verdict line of a check (without the newline):
//   check: plan megatron on 4 devices: legal (12 ms)
// `illegal` overrides a legal verdict (the capacity check found an overflow).
std::string verdict_line(const Plan& plan, const CheckResult& r, bool illegal = false);

// Checks, reports the conflict into `diags`, and prints the verdict line to
// `out`. Returns true when the plan is legal; `*verdict` receives the
// verdict when non-null.
bool check_plan(const Graph& g, const Plan& plan, const CheckOptions& opts, front::DiagnosticEngine& diags, std::ostream& out,
                Verdict* verdict = nullptr);

// "80GiB", "512 MiB", "1.5TB", "1000000" (bytes). False with `err` set
// otherwise. A device's name is read from its profile by the planner
// (planner::parse_device_memory): the checker gets bytes.
bool parse_memory_size(const std::string& text, int64_t& bytes, std::string& label, std::string& err);

}  // namespace nns::sema::check
