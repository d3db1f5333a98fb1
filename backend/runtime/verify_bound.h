// --verify's derived bound (docs/verify.md, "The bound"): for each gradient
// tensor and the loss, how far a plan's result may lie from the one-device
// reference under fp32 rounding alone, from the standard error analysis of
// summation (|fl(sum x_i) - sum x_i| <= gamma_n sum |x_i|, gamma_n =
// n u / (1 - n u), u = 2^-24) applied to the reduction lengths of the
// training graph: the longest chain of reductions that feeds the tensor on
// one device (forward and backward), then the micro-batch accumulation and,
// for the run, the extra additions a plan can put into each reduction (its
// partial sums over the plan's devices) and the replicas' average.
//
// The bound of a tensor is gamma(L_run) + gamma(L_ref): each side is at
// most its own gamma away from the exact value, normwise, under the
// assumptions docs/verify.md lists (no cancellation, i.e. sum |x| ~ |sum x|;
// Jacobians of the nonlinear ops of norm about 1). It is a worst-case
// bound, not a fit: the measured errors are typically far below it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace nns::sema {
class Graph;
struct TrainingGraphInfo;
}  // namespace nns::sema

namespace nns::backend {

// What the plan adds to the one-device reduction order.
struct BoundShape {
  int64_t plan_devices =
      1;                 // devices one copy of the plan spans: each reduction split into at most this many partial sums
  int64_t replicas = 1;  // data-parallel copies of the plan, averaged
  int64_t micro_batches = 1;  // per replica; the reference runs micro_batches * replicas
  bool clip = false;          // gradient clipping by the global norm (a factor from a differently ordered norm)
};

struct DerivedBounds {
  static constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // fp32: 2^-24
  std::map<std::string, double> gradient;                   // by parameter name: the relative normwise bound
  // The parts of `gradient`: the chains' gamma_ref + gamma_run, and, with
  // clipping, what the clip factor adds to every tensor besides the largest
  // chain term (conditioned_bounds recombines them).
  std::map<std::string, double> chain;
  bool clip = false;
  double clip_extra = 0;
  std::map<std::string, int64_t> length;  // by parameter name: L_run (the longer chain), for the detail output
  double loss = 0;
  int64_t loss_length = 0;
  int64_t unanalysed_nodes = 0;  // nodes whose annotation could not be read (counted with one rounding each)
};

// gamma_n = n u / (1 - n u) (infinite when n u >= 1).
double gamma_n(int64_t n, double u = DerivedBounds::kUnitRoundoff);

// The bounds for every trained parameter of the training graph (g with the
// backward nodes of `info`) and for its loss.
DerivedBounds derive_bounds(const sema::Graph& g, const sema::TrainingGraphInfo& info, const BoundShape& shape);

// The bounds of one step with the condition of each parameter gradient's
// sum (kappa = ||sum |c_j| || / ||sum c_j|| >= 1, gradient_magnitude.h):
// each chain term times its tensor's kappa (1 for a name kappa lacks),
// then, with clipping, the global norm's relative error, sqrt(sum_t
// bound_t^2 ||g_t||^2) / ||g|| with the gradients' norms `norms` (the
// largest bound without them), and the clip factor's roundings. With every
// kappa 1 and no norms it is `b.gradient`.
std::map<std::string, double> conditioned_bounds(const DerivedBounds& b, const std::map<std::string, double>& kappa,
                                                 const std::map<std::string, double>& norms = {});

}  // namespace nns::backend
