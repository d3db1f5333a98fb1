#include "backend/runtime/loss_scale.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/runtime/safetensors.h"

namespace nns::backend {

LossScaler::LossScaler(const sema::LossScaleSpec& spec, bool enabled) : spec_(spec), enabled_(enabled), scale_(enabled ? spec.init : 1.0) {}

bool LossScaler::finish_step(double scaled_sum_of_squares) {
  // Without scaling a non-finite gradient is a divergence the loop
  // reports; the update runs as it always has.
  if (!enabled_) return true;
  if (!std::isfinite(scaled_sum_of_squares)) {
    scale_ *= spec_.backoff;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ >= spec_.interval) {
    // GradScaler grows only to a finite scale.
    if (std::isfinite(static_cast<float>(scale_ * spec_.growth))) scale_ *= spec_.growth;
    good_steps_ = 0;
  }
  return true;
}

void LossScaler::restore(const State& s) {
  if (enabled_ && s.scale > 0) scale_ = s.scale;
  good_steps_ = s.good_steps;
  skipped_ = s.skipped;
}

void add_loss_scale_metadata(const LossScaler& s, std::map<std::string, std::string>& meta) {
  if (!s.enabled()) return;
  const LossScaler::State st = s.state();
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", st.scale);
  meta["loss_scale"] = text;
  meta["loss_scale_good_steps"] = std::to_string(st.good_steps);
  meta["skipped_steps"] = std::to_string(st.skipped);
}

void read_loss_scale_metadata(const std::map<std::string, std::string>& meta, const std::string& path, LossScaler& s) {
  auto it = meta.find("loss_scale");
  if (!s.enabled() || it == meta.end()) return;
  LossScaler::State st;
  char* end = nullptr;
  st.scale = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(st.scale > 0) || !std::isfinite(st.scale))
    throw SafetensorsError(path + ": metadata 'loss_scale' must be a positive number (got '" + it->second + "')");
  auto count = [&](const char* key) {
    auto c = meta.find(key);
    int64_t n = 0;
    if (c == meta.end() || !parse_count(c->second, n)) throw SafetensorsError(path + ": metadata '" + key + "' missing or not a count");
    return n;
  };
  st.good_steps = count("loss_scale_good_steps");
  st.skipped = count("skipped_steps");
  s.restore(st);
}

}  // namespace nns::backend
