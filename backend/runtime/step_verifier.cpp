// --verify's comparison of a run with the one-device reference
// (train_loop.h: StepVerifier, tensor_errors, weight_drift).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/runtime/train_loop.h"
#include "backend/runtime/trainer.h"
#include "backend/runtime/verify_bound.h"

namespace nns::backend {

std::map<std::string, double> tensor_errors(const TensorMap& got, const TensorMap& want, double floor,
                                            const std::set<std::string>& skip,
                                            const std::map<std::string, double>& detail_at) {
  std::map<std::string, double> errors;
  const bool detail = std::getenv("NNS_VERIFY_DETAIL") != nullptr;
  for (const auto& [name, ref] : want) {
    if (skip.count(name)) continue;
    auto it = got.find(name);
    if (it == got.end() || it->second.size() != ref.size()) {
      errors[name] = 1e30;
      continue;
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      double d = static_cast<double>(it->second[i]) - ref[i];
      diff += d * d;
      norm += static_cast<double>(ref[i]) * ref[i];
    }
    const double err = std::sqrt(diff) / std::max(std::sqrt(norm), floor);
    errors[name] = err;
    auto at = detail_at.find(name);
    const double threshold = at == detail_at.end() ? 1e-5 : at->second;
    if (detail && err > threshold) {
      size_t shown = 0;
      for (size_t i = 0; i < ref.size() && shown < 6; ++i)
        if (std::fabs(static_cast<double>(it->second[i]) - ref[i]) > threshold * std::sqrt(norm)) {
          std::fprintf(stderr, "  %s[%zu]: %.9g vs %.9g\n", name.c_str(), i, it->second[i], ref[i]);
          ++shown;
        }
    }
  }
  return errors;
}

double compare_tensors(const TensorMap& got, const TensorMap& want, std::string& worst, double floor,
                       const std::set<std::string>& skip) {
  double max_err = 0;
  for (const auto& [name, err] : tensor_errors(got, want, floor, skip)) {
    if (err >= 1e30) {
      worst = name + " (missing)";
      return 1e30;
    }
    if (err > max_err) {
      max_err = err;
      worst = name;
    }
  }
  return max_err;
}

std::set<std::string> loss_invariant(const TensorMap& grads, double& global_max, double rounding) {
  global_max = 0;
  std::map<std::string, double> local;
  for (const auto& [name, g] : grads) {
    double m = 0;
    for (float v : g) m += static_cast<double>(v) * v;
    m = std::sqrt(m);
    local[name] = m;
    global_max = std::max(global_max, m);
  }
  std::set<std::string> out;
  for (const auto& [name, m] : local)
    if (m <= rounding * global_max) out.insert(name);
  return out;
}

WeightDrift weight_drift(const TensorMap& run, const TensorMap& free_running) {
  WeightDrift d;
  double diff = 0, norm = 0;
  for (const auto& [name, ref] : free_running) {
    auto it = run.find(name);
    if (it == run.end() || it->second.size() != ref.size()) continue;  // the comparison proper reports those
    double td = 0, tn = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = static_cast<double>(it->second[i]) - ref[i];
      td += e * e;
      tn += static_cast<double>(ref[i]) * ref[i];
    }
    diff += td;
    norm += tn;
    const double rel = std::sqrt(td) / std::max(std::sqrt(tn), 1e-30);
    if (rel > d.worst) {
      d.worst = rel;
      d.worst_name = name;
    }
  }
  d.overall = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  return d;
}

StepVerifier::StepVerifier(Trainer& reference, double rounding, const DerivedBounds* bounds)
    : ref_(reference), rounding_(rounding), bounds_(bounds) {
  if (bounds_) ref_.track_gradient_magnitudes();
}

// Each gradient's error against its own bound, scaled by the condition of
// its sum in this step's reference, and the loss's: the largest ratio names
// the step's tensor (1e30 for a missing tensor or a parameter without a
// bound: an unbounded comparison never passes).
void StepVerifier::rate(StepComparison& c, const std::map<std::string, double>& errors) {
  const std::map<std::string, double> kappa = ref_.gradient_conditions();
  const std::map<std::string, double> bounds = conditioned_bounds(*bounds_, kappa, ref_.gradient_norms());
  auto condition = [&kappa](const std::string& name) {
    auto k = kappa.find(name);
    return k == kappa.end() ? 1.0 : k->second;
  };
  auto consider = [&c](const std::string& name, double err, double bound, double cond) {
    const double ratio = bound > 0 ? err / bound : 1e30;
    if (ratio > c.ratio || c.ratio_name.empty()) {
      c.ratio = ratio;
      c.ratio_name = name;
      c.ratio_error = err;
      c.ratio_bound = bound;
      c.ratio_condition = cond;
    }
  };
  consider("loss", c.loss, bounds_->loss, 1);
  for (const auto& [name, err] : errors) {
    auto b = bounds.find(name);
    consider(name, err, b == bounds.end() ? 0 : b->second, condition(name));
  }
  if (c.ratio > worst_ratio_.ratio || worst_ratio_.ratio_name.empty()) worst_ratio_ = c;
  // Every tensor past a tenth of its bound (NNS_VERIFY_DETAIL=all: every tensor), with the bound.
  if (const char* detail = std::getenv("NNS_VERIFY_DETAIL")) {
    const double share = std::string(detail) == "all" ? 0 : 0.1;
    for (const auto& [name, err] : errors) {
      auto b = bounds.find(name);
      if (b == bounds.end() || err >= share * b->second)
        std::fprintf(stderr, "  %s: error %.2e, bound %.2e (chain of %lld, condition %.3g)\n", name.c_str(), err,
                     b == bounds.end() ? 0.0 : b->second,
                     static_cast<long long>(b == bounds.end() ? 0 : bounds_->length.at(name)), condition(name));
    }
  }
}

StepComparison StepVerifier::compare(double loss, const TensorMap& gradients, const TensorMap& weights, bool skipped) {
  StepComparison c;
  // The reference computes its own gradients (kept for the comparison) and
  // then updates with the run's: its new weights are the optimizer applied
  // to the run's gradients and to the state they built, which the run's
  // new weights must equal.
  TensorMap ref_grads;
  bool updated = false;
  ref_.set_gradient_hook([&](TensorMap own) {
    ref_grads = std::move(own);
    updated = true;
    return gradients;
  });
  StepStats rs = ref_.step();
  ref_.set_gradient_hook({});
  if (rs.skipped != skipped) {
    c.skip_mismatch = true;
    c.loss = 1e30;
    worst_ = 1e30;
    c.ratio = 1e30;
    c.ratio_name = "the loss scaling's skip decision";
    worst_ratio_ = c;
    return c;
  }
  c.loss = std::fabs(loss - rs.loss) / std::max(1e-30, std::fabs(rs.loss));
  std::map<std::string, double> errors;
  if (updated) {  // a skipped step (inf/NaN on both sides) has no gradients to compare
    double gmax = 0;
    // Kept across steps: std::max of two sets is the lexicographically larger one.
    invariant_ = std::max(invariant_, loss_invariant(ref_grads, gmax, rounding_));
    // Gradient errors are relative to the tensor's norm, floored at the rounding level (fp32: a millionth) of the
    // largest gradient norm.
    errors = tensor_errors(gradients, ref_grads, rounding_ * gmax, invariant_,
                           bounds_ ? bounds_->gradient : std::map<std::string, double>{});
    for (const auto& [name, err] : errors)
      if (err > c.gradients) {
        c.gradients = err;
        c.worst_gradient = err >= 1e30 ? name + " (missing)" : name;
      }
  }
  if (bounds_) rate(c, errors);
  // The update check covers every parameter, those the loss ignores too.
  c.weights = compare_tensors(weights, ref_.parameters(), c.worst_weight);
  for (const auto& [name, w] : weights)
    ref_.set_parameter(name, w);  // the next step starts from the run's weights exactly
  worst_ = std::max({worst_, c.loss, c.gradients});
  if (c.weights > worst_update_) {
    worst_update_ = c.weights;
    worst_update_name_ = c.worst_weight;
  }
  return c;
}

}  // namespace nns::backend
