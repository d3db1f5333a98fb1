// The training loop every front end shares: one progress line per step, the
// --verify comparison with a single-device reference Trainer, and the run
// summary. What is trained hides behind TrainSession (the single-device
// Trainer, the plan executor), so both run the same loop and print the same
// lines; the comparison itself is a library call a test can make (ggml's
// ggml_backend_compare_graph_backend).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace nns::backend {

class Trainer;

struct StepStats {
  int64_t step = 0;  // 1-based
  double loss = 0;
  double seconds = 0;
  double lr = 0;
  double grad_norm = 0;  // of the unscaled gradients
  // fp16 loss scaling (loss_scale.h): the scale this step's backward was
  // seeded with (0: no scaling), whether its update was skipped (inf/NaN
  // gradients) and how many steps have been skipped so far.
  double loss_scale = 0;
  bool skipped = false;
  int64_t skipped_total = 0;
  // Bytes the step moved between host and backend memory
  // (Backend::host_traffic), and the part of them that staged collectives
  // through host memory (a plan on a backend whose memory is not the
  // host's). --stats prints them.
  int64_t to_device = 0, to_host = 0;
  int64_t staged_to_device = 0, staged_to_host = 0;
};

using TensorMap = std::map<std::string, std::vector<float>>;  // host copies by qualified name

// What a training loop needs from whatever trains: a step, its counters and
// host copies of the weights and the latest gradients.
class TrainSession {
 public:
  virtual ~TrainSession() = default;
  virtual StepStats step() = 0;              // one optimizer step (all micro-batches)
  virtual int64_t steps_done() const = 0;    // steps taken (a resumed checkpoint's included)
  virtual int64_t samples_per_step() const = 0;
  virtual bool counts_tokens() const = 0;    // throughput in tokens, not samples
  virtual int64_t peak_bytes() const = 0;    // this rank's peak memory so far
  // Full tensors by parameter name. Collective for a partitioned session
  // (every rank calls them together; see LoopOptions::collective).
  virtual TensorMap parameters() = 0;
  virtual TensorMap last_gradients() = 0;
};

// --- The --verify comparison ------------------------------------------------

// Normwise relative error per tensor of `want`: ||a - b||_2 / ||b||_2
// (elementwise ratios explode near zero), the denominator floored at
// `floor`; tensors in `skip` are left out; 1e30 for one that `got` lacks or
// has with another size. NNS_VERIFY_DETAIL=1 prints, for a tensor whose
// error exceeds its threshold (`detail_at`, else 1e-5), its first elements
// that differ by more than that share of its norm.
std::map<std::string, double> tensor_errors(const TensorMap& got, const TensorMap& want, double floor = 1e-30,
                                            const std::set<std::string>& skip = {},
                                            const std::map<std::string, double>& detail_at = {});

// The largest of tensor_errors; `worst` names its tensor ("NAME (missing)"
// and 1e30 when `got` lacks one or has another size).
double compare_tensors(const TensorMap& got, const TensorMap& want, std::string& worst, double floor = 1e-30,
                       const std::set<std::string>& skip = {});

// Parameters the loss does not depend on (an attention key bias: softmax is
// invariant to it): gradient norm at most `rounding` (fp32: 1e-6) of the
// largest, `global_max`.
// Their values legitimately differ between summation orders; they are
// reported, not compared.
std::set<std::string> loss_invariant(const TensorMap& grads, double& global_max, double rounding = 1e-6);

// How far the run's weights lie from a free-running one-device copy's
// (--verify-drift): normwise over all weights together, and the tensor
// farthest off. Information, not a verdict: rounding differences compound
// over steps (AdamW moves a weight with a rounding-level gradient by about lr).
struct WeightDrift {
  double overall = 0, worst = 0;
  std::string worst_name;
};
WeightDrift weight_drift(const TensorMap& run, const TensorMap& free_running);

// One step's comparison with the reference.
struct StepComparison {
  double loss = 0, gradients = 0, weights = 0;  // relative errors
  std::string worst_gradient, worst_weight;     // tensor names, empty if none
  bool skip_mismatch = false;                   // one side skipped the update, the other did not
  // With derived bounds (verify_bound.h): the largest error / bound over the
  // loss and the gradients, the tensor ("loss" for the loss), its error and
  // bound.
  double ratio = 0, ratio_error = 0, ratio_bound = 0;
  double ratio_condition = 1;  // the condition (kappa) of that tensor's sum, by which its bound was scaled
  std::string ratio_name;
};

struct DerivedBounds;

// Steps a reference Trainer (one device running every replica's
// micro-batches) beside a run and checks each step in two parts
// (docs/verify.md):
// - what the plan can change: the loss and every gradient tensor, normwise
//   against the reference's own (the denominator floored at `rounding` of
//   the largest gradient norm), both computed from the same weights; with
//   `bounds`, each against its own derived bound, else all against one
//   constant (LoopOptions::verify_bound);
// - what it cannot: the update. The reference applies its optimizer to the
//   run's gradients (Trainer::set_gradient_hook), with the state the run's
//   gradients built, so the run's new weights must equal its new weights
//   up to rounding of the update's own arithmetic.
// The reference then takes the run's weights, so every step is checked on
// its own: AdamW, which moves a weight with a rounding-level gradient by
// about lr, cannot turn a rounding difference into a verdict.
class StepVerifier {
 public:
  // rounding: the share of the largest gradient norm below which a whole
  // tensor's gradient is rounding noise of the precision (1e-6 for fp32;
  // bf16 autocast 2^-8). bounds: kept by the caller; null for the constant.
  // With bounds, the reference also computes the magnitude of each
  // parameter gradient's sum, and each step's bound of a tensor is its
  // derived one times the condition of that sum (conditioned_bounds).
  StepVerifier(Trainer& reference, double rounding = 1e-6, const DerivedBounds* bounds = nullptr);
  // skipped: the run skipped this step's update (fp16 loss scaling); the
  // reference must have skipped it too (else the error is 1e30), and the
  // gradients of a skipped step (inf/NaN on both sides) are not compared.
  StepComparison compare(double loss, const TensorMap& gradients, const TensorMap& weights, bool skipped = false);
  double worst() const { return worst_; }                // losses and gradients, over every step so far
  double worst_update() const { return worst_update_; }  // the update check, over every step so far
  const std::string& worst_update_name() const { return worst_update_name_; }
  const std::set<std::string>& invariant_params() const { return invariant_; }
  const DerivedBounds* bounds() const { return bounds_; }
  // With bounds: the step comparison with the largest error / bound so far.
  const StepComparison& worst_ratio() const { return worst_ratio_; }

 private:
  void rate(StepComparison& c, const std::map<std::string, double>& errors);

  Trainer& ref_;
  double rounding_;
  const DerivedBounds* bounds_;
  double worst_ = 0, worst_update_ = 0;
  std::string worst_update_name_;
  std::set<std::string> invariant_;
  StepComparison worst_ratio_;
};

// --- The loop ----------------------------------------------------------------

struct LoopOptions {
  int rank = 0;                // only rank 0 prints
  int64_t steps = 0;           // the run ends after this step (the train block's, or --steps)
  int64_t stop_after = 0;      // --stop-after: this invocation ends after this step (0: at `steps`)
  std::string banner;          // printed by rank 0 before the first step
  // The session's parameters()/last_gradients(), `save` and `dump_gradients`
  // are collective: every rank calls them (a partitioned plan); otherwise
  // rank 0 alone does.
  bool collective = false;
  // --verify: rank 0 compares each step with `reference`, one device
  // running `reference_micro_batches` micro-batches.
  bool verify = false;
  Trainer* reference = nullptr;
  // fp32: each tensor's own bound (verify_bound.h) instead of verify_bound.
  const DerivedBounds* verify_bounds = nullptr;
  // --verify-drift: a one-device Trainer that never takes the run's
  // weights; their distance is printed (information, not a verdict).
  Trainer* drift_reference = nullptr;
  int64_t reference_micro_batches = 0;
  // The largest relative error --verify accepts, and the precision it is
  // for (printed): 1e-5 for fp32; bf16 autocast rounds every product's
  // operands to 8 significant bits, so fp32 reordering differences between
  // the ranks' slices and one device can flip a rounding (see README).
  double verify_bound = 1e-5;
  double verify_rounding = 1e-6;  // StepVerifier's rounding level
  // The update check's bound: the optimizer applied to the same gradients,
  // weights and state is elementwise arithmetic in the same order on both
  // sides; only a clipping factor from a differently ordered norm differs.
  double verify_update_bound = 1e-6;
  std::string verify_precision = "fp32";
  // On a --verify failure, the command that checks every op's annotation by
  // partitioning it (nns verify-op FILE '*'); "" for none.
  std::string verify_hint;
  bool report_invariant_params = false;   // a summary line naming them
  // The summary's memory figure: "<peak_label> 12.0 MiB", " (rank 0)" added when peak_of_rank0.
  std::string peak_label = "peak memory";
  bool peak_of_rank0 = false;
  std::string peak_note;  // appended to the memory figure (a plan's ", optimizer state 1.20 MiB")
  // Every rank's peak (collective, called on every rank after the last
  // step); rank 0 prints them exactly, in bytes, for tests that compare
  // a memory model with what ran.
  std::function<std::vector<int64_t>()> rank_peaks;
  std::function<void()> dump_gradients;  // after the run's first step (1, or resume + 1), on rank 0 or, when collective, every rank (--dump-grads)
  std::function<std::string()> save;     // after the last step (--save); returns the line rank 0 prints
  int64_t save_every = 0;
  std::function<void()> before_step;     // e.g. the thread count for the next step (cpu/thread_policy.h)                // also after every save_every-th step (--save-every)
  // Validation (eval_every): after every eval_every-th step, `validate`
  // (collective) gives the validation loss, printed and logged as
  // "val_loss"; `save_best` saves after each one lower than all before it.
  int64_t eval_every = 0;
  std::function<double()> validate;
  std::function<std::string()> save_best;
  std::string metrics;                   // rank 0 appends one JSON line per step to this file (--metrics)
  std::string tensorboard;               // rank 0 writes event files into this folder (--tensorboard; tensorboard.h)
  bool stats = false;                    // --stats: rank 0 prints each step's host<->device bytes
  std::FILE* out = stdout;
};

enum class LoopResult { Ok, Diverged, VerifyFailed };

// Runs the steps from session.steps_done() to o.steps: progress lines, the
// comparison, the summary (and "nothing left to run" when a checkpoint is
// already there). Diverged: a non-finite loss (the error is on stderr).
LoopResult run_train_loop(TrainSession& session, const LoopOptions& o);

}  // namespace nns::backend
