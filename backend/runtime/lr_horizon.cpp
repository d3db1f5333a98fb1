#include "backend/runtime/lr_horizon.h"

#include <cstdio>

#include "backend/runtime/optimizer.h"
#include "backend/runtime/safetensors.h"

namespace nns::backend {
namespace {

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

int64_t zero_lr_steps(const sema::ScheduleSpec& schedule, double base_lr, int64_t run_steps) {
  int64_t zeros = 0;
  for (int64_t step = 1; step <= run_steps; ++step)
    if (learning_rate(schedule, base_lr, schedule.steps, step) == 0.0) ++zeros;
  return zeros;
}

std::vector<std::string> lr_horizon_warnings(const sema::ScheduleSpec& schedule, double base_lr, int64_t run_steps) {
  std::vector<std::string> warnings;
  // A constant schedule has no horizon to outrun.
  const bool decays = schedule.kind != "constant";
  if (decays && schedule.pinned && schedule.steps < run_steps)
    warnings.push_back("the schedule's horizon is pinned at " + std::to_string(schedule.steps) +
                       " steps, shorter than this run's " + std::to_string(run_steps) + "; steps " +
                       std::to_string(schedule.steps + 1) + " to " + std::to_string(run_steps) +
                       " train at the final rate (" + short_number(schedule.min_lr) + ")");
  const int64_t zeros = zero_lr_steps(schedule, base_lr, run_steps);
  if (zeros > 1)
    warnings.push_back(std::to_string(zeros) + " of this run's " + std::to_string(run_steps) +
                       " steps train at learning rate 0 (raise the schedule's steps or its min_lr)");
  return warnings;
}

void add_horizon_metadata(const sema::ScheduleSpec& schedule, std::map<std::string, std::string>& meta) {
  meta["lr_horizon"] = std::to_string(schedule.steps);
}

std::string adopt_saved_horizon(const std::map<std::string, std::string>& meta, sema::ScheduleSpec& schedule) {
  auto it = meta.find("lr_horizon");
  int64_t saved = 0;
  // A pinned horizon is the train block's explicit word: it wins. A
  // checkpoint without the key (older) or with a malformed one leaves the
  // run's own horizon.
  if (schedule.pinned || it == meta.end() || !parse_count(it->second, saved) || saved <= 0) return "";
  const int64_t own = schedule.steps;
  schedule.steps = saved;
  if (saved == own || schedule.kind == "constant") return "";
  return "the learning-rate schedule keeps the checkpoint's horizon of " + std::to_string(saved) +
         " steps (this run's steps: " + std::to_string(own) +
         "; pin it in the train block, e.g. cosine_lr(steps = " + std::to_string(own) + "), to change it)";
}

}  // namespace nns::backend
