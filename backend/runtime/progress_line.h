// The training progress on a terminal: one line, rewritten in place after
// every step (carriage return, then erase to the end of the line), with the
// step, loss, throughput, time left and peak memory. Piped output keeps one
// full line per step (train_loop.cpp), which logs and tests read.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nns::backend {

// Whether `out` is a terminal, so that the loop draws the live line;
// NNS_PROGRESS=lines forces the per-step lines on a terminal too.
bool wants_live_progress(std::FILE* out);

// "3m05s", "42s", "1h02m": a duration for the ETA.
std::string short_duration(double seconds);

// The live line's text (without the carriage return): `rate` in
// `unit`/s, `eta_seconds` < 0 while unknown (the first step).
std::string progress_text(int64_t step, int64_t steps, double loss, double lr, double rate, const char* unit,
                          double eta_seconds, const std::string& peak);

}  // namespace nns::backend
