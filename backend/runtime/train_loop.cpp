#include "backend/runtime/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "backend/runtime/fault.h"
#include "backend/runtime/progress_line.h"
#include "backend/runtime/tensorboard.h"
#include "backend/runtime/trainer.h"
#include "semantics/graph.h"  // format_bytes

namespace nns::backend {

namespace {

// Appended to a figure: " (NAME)", or nothing without a name.
std::string named(const std::string& name) { return name.empty() ? "" : " (" + name + ")"; }

// Whether the run passed: every loss and gradient within its bound (each
// its own derived one, or the one constant), and the update within its.
bool verify_passed(const StepVerifier& v, const LoopOptions& o) {
  const bool grads = v.bounds() ? v.worst_ratio().ratio <= 1 : v.worst() <= o.verify_bound;
  return grads && v.worst_update() <= o.verify_update_bound;
}

void print_verify_summary(const StepVerifier& v, const LoopOptions& o) {
  std::FILE* out = o.out;
  bool ok = verify_passed(v, o);
  char bound[256];
  if (v.bounds()) {
    const StepComparison& w = v.worst_ratio();
    std::snprintf(bound, sizeof bound,
                  "%s derived bounds: largest error/bound %.3g, %s %.2e of %.2e, condition %.3g; update %.0e",
                  o.verify_precision.c_str(), w.ratio, w.ratio_name.c_str(), w.ratio_error, w.ratio_bound,
                  w.ratio_condition, o.verify_update_bound);
  } else {
    std::snprintf(bound, sizeof bound, "%s bound %.0e; update %.0e", o.verify_precision.c_str(), o.verify_bound,
                  o.verify_update_bound);
  }
  std::fprintf(out, "verify: largest relative error %.2e over losses and gradients, %.2e over the update%s: %s (%s)\n",
               v.worst(), v.worst_update(), named(v.worst_update_name()).c_str(), ok ? "PASS" : "FAIL", bound);
  // A wrong annotation makes a plan's gradients wrong where the op is split:
  // verify-op finds which op by running each partition against the whole.
  if (!ok && !o.verify_hint.empty())
    std::fprintf(out, "verify: if an op's annotation is wrong, `%s` finds it (every partition of every op against the whole op)\n",
                 o.verify_hint.c_str());
  const std::set<std::string>& inv = v.invariant_params();
  if (o.report_invariant_params && !inv.empty()) {
    std::fprintf(out, "verify: %zu parameter(s) do not affect the loss (gradient norm below %.0e of the largest) and were not compared:",
                 inv.size(), o.verify_rounding);
    int shown = 0;
    for (const std::string& n : inv)
      if (shown++ < 4) std::fprintf(out, " %s", n.c_str());
    std::fprintf(out, "%s\n", inv.size() > 4 ? " ..." : "");
  }
}

// --verify after a step (rank 0): the comparison and its line and, with
// --verify-drift, the free-running copy's step; returns the weight drift
// (NaN without --verify-drift), kept in `drift` for the summary.
double verify_step(StepVerifier& verifier, const LoopOptions& o, const StepStats& st, const TensorMap& grads,
                   const TensorMap& weights, WeightDrift& drift) {
  std::FILE* out = o.out;
  StepComparison c = verifier.compare(st.loss, grads, weights, st.skipped);
  if (c.skip_mismatch)
    std::fprintf(
        out,
        "  verify vs 1 device: the run %s this step's update and one device did not (loss scaling decided differently)\n",
        st.skipped ? "skipped" : "applied");
  char bound[160] = "";
  if (o.verify_bounds)
    std::snprintf(bound, sizeof bound, ", largest error/bound %.3g (%s)", c.ratio, c.ratio_name.c_str());
  std::fprintf(out, "  verify vs 1 device x %lld micro-batches: loss %.2e, gradients %.2e%s, update %.2e%s%s\n",
               static_cast<long long>(o.reference_micro_batches), c.loss, c.gradients, named(c.worst_gradient).c_str(),
               c.weights, named(c.worst_weight).c_str(), bound);
  if (!o.drift_reference) return std::nan("");
  // The free-running copy steps on its own weights and optimizer state.
  o.drift_reference->step();
  drift = weight_drift(weights, o.drift_reference->parameters());
  if (std::getenv("NNS_VERIFY_DETAIL"))
    std::fprintf(stderr, "  weight drift from the free-running copy: %.2e overall, largest %.2e (%s)\n", drift.overall,
                 drift.worst, drift.worst_name.c_str());
  return drift.overall;
}

// One step's scalars for TensorBoard (a skipped fp16 step's norm, inf or
// NaN, is left out; the validation loss only where there is one).
void write_scalars(TensorBoardWriter& board, const StepStats& st, double rate, const TrainSession& session,
                   double val_loss) {
  board.scalar("train/loss", st.loss, st.step);
  board.scalar("train/lr", st.lr, st.step);
  if (std::isfinite(st.grad_norm)) board.scalar("train/grad_norm", st.grad_norm, st.step);
  board.scalar(session.counts_tokens() ? "train/tokens_per_second" : "train/samples_per_second", rate, st.step);
  board.scalar("train/peak_memory_bytes", static_cast<double>(session.peak_bytes()), st.step);
  if (!std::isnan(val_loss)) board.scalar("val/loss", val_loss, st.step);
  board.flush();
}

// One step's --metrics line. %.17g: the exact double, so runs can be
// compared bit for bit. A skipped fp16 step's norm is inf or NaN, which JSON
// cannot spell: null. "val_loss" only at validation steps; "weight_drift"
// (--verify-drift) the run's weights' distance from a free-running copy.
void write_metrics_line(std::FILE* metrics, const StepStats& st, double val_loss, double drift) {
  char norm[32] = "null";
  if (std::isfinite(st.grad_norm)) std::snprintf(norm, sizeof norm, "%.17g", st.grad_norm);
  std::fprintf(metrics, "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.17g, \"grad_norm\": %s, \"ms\": %.3f",
               static_cast<long long>(st.step), st.loss, st.lr, norm, st.seconds * 1e3);
  if (st.loss_scale > 0)
    std::fprintf(metrics, ", \"loss_scale\": %.17g, \"skipped\": %s", st.loss_scale, st.skipped ? "true" : "false");
  if (!std::isnan(val_loss)) std::fprintf(metrics, ", \"val_loss\": %.17g", val_loss);
  if (!std::isnan(drift)) std::fprintf(metrics, ", \"weight_drift\": %.17g", drift);
  std::fprintf(metrics, "}\n");
  std::fflush(metrics);
}

// At every eval_every-th step the validation loss (else NaN); a loss below
// `best` becomes it and is saved (--save-best), the save's line kept in
// `best_line` for rank 0 to print.
double validate_at(const LoopOptions& o, int64_t step, double& best, std::string& best_line) {
  if (!o.validate || o.eval_every <= 0 || step % o.eval_every != 0) return std::nan("");
  const double loss = o.validate();
  if (!(loss < best)) return loss;  // a NaN never counts as the best
  best = loss;
  if (o.save_best && (o.rank == 0 || o.collective)) {
    std::string line = o.save_best();
    if (o.rank == 0) best_line = line;
  }
  return loss;
}

}  // namespace

LoopResult run_train_loop(TrainSession& session, const LoopOptions& o) {
  std::FILE* out = o.out;
  const bool rank0 = o.rank == 0;
  const int64_t start = session.steps_done();
  if (start >= o.steps) {
    if (rank0) std::fprintf(out, "nns: the checkpoint is at step %lld; nothing left to run (raise --steps)\n", static_cast<long long>(start));
    return LoopResult::Ok;
  }
  // --stop-after: this invocation ends early; the progress lines still count to o.steps.
  const int64_t end = o.stop_after > 0 && o.stop_after < o.steps ? o.stop_after : o.steps;
  if (start >= end) {
    if (rank0)
      std::fprintf(out, "nns: the checkpoint is at step %lld; nothing left to run before --stop-after %lld\n",
                   static_cast<long long>(start), static_cast<long long>(end));
    return LoopResult::Ok;
  }
  if (rank0) std::fprintf(out, "%s", o.banner.c_str());
  std::unique_ptr<StepVerifier> verifier;
  if (rank0 && o.verify && o.reference)
    verifier = std::make_unique<StepVerifier>(*o.reference, o.verify_rounding, o.verify_bounds);
  WeightDrift last_drift;
  double total = 0, first_loss = 0, last_loss = 0, last_scale = 0;
  int64_t skipped_total = 0;
  double best_val = std::numeric_limits<double>::infinity();
  std::string best_line;  // the best-checkpoint save's line, printed with the validation loss
  std::FILE* metrics = nullptr;
  if (rank0 && !o.metrics.empty()) {
    metrics = std::fopen(o.metrics.c_str(), "w");
    if (!metrics) throw RuntimeError("--metrics " + o.metrics + ": cannot create the file");
  }
  struct Closer {
    std::FILE*& f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } close_metrics{metrics};
  std::unique_ptr<TensorBoardWriter> board;
  if (rank0 && !o.tensorboard.empty()) board = std::make_unique<TensorBoardWriter>(o.tensorboard);
  // On a terminal (progress_line.h) one line is redrawn after each step;
  // --stats and --verify print per-step detail, so they keep the full lines.
  const bool live = rank0 && !o.stats && !o.verify && wants_live_progress(out);
  bool line_open = false;  // the live line is drawn and not yet ended
  auto close_line = [&] {
    if (line_open) std::fprintf(out, "\n");
    line_open = false;
  };
  auto save = [&] {
    std::string line = o.save();
    if (rank0) {
      close_line();
      std::fprintf(out, "%s\n", line.c_str());
    }
  };
  for (int64_t s = start; s < end; ++s) {
    set_fault_context(o.rank, s + 1);
    if (o.before_step) o.before_step();
    StepStats st = session.step();
    if (!std::isfinite(st.loss)) {
      // The loss is averaged over the ranks: every rank sees it; rank 0 says so.
      if (rank0) std::fprintf(stderr, "nns: error: step %lld: the loss is %f (diverged)\n", static_cast<long long>(st.step), st.loss);
      return LoopResult::Diverged;
    }
    if (s == start) first_loss = st.loss;
    last_loss = st.loss;
    last_scale = st.loss_scale;
    skipped_total = st.skipped_total;
    if (s > start) total += st.seconds;  // the first step includes one-off setup (primitive creation)
    // The first step this run takes: step 1, or after --resume the step after the checkpoint's.
    if (s == start && (rank0 || o.collective) && o.dump_gradients) o.dump_gradients();
    TensorMap grads, weights;
    if (o.verify && (o.collective || verifier)) {
      grads = session.last_gradients();
      weights = session.parameters();
    }
    // Every save_every-th step (the last step's save comes after the summary).
    if (o.save && o.save_every > 0 && st.step % o.save_every == 0 && st.step < end && (rank0 || o.collective)) save();
    // Validation: every rank takes part (the loss is the same on all of them).
    const double val_loss = validate_at(o, st.step, best_val, best_line);
    if (!rank0) continue;
    double rate = static_cast<double>(session.samples_per_step()) / st.seconds;
    if (board) write_scalars(*board, st, rate, session, val_loss);
    // fp16: the loss scale the step ran with, and a skipped update said so.
    char scaling[96] = "";
    if (st.loss_scale > 0)
      std::snprintf(scaling, sizeof scaling, "  scale %g%s", st.loss_scale, st.skipped ? " (inf/nan gradients: update skipped)" : "");
    if (live && !scaling[0]) {
      // The steps after the first give the pace (the first includes setup).
      const double eta = s > start ? total / static_cast<double>(s - start) * static_cast<double>(end - 1 - s) : -1;
      std::fprintf(out, "\r%s\x1b[K",
                   progress_text(st.step, o.steps, st.loss, st.lr, rate, session.counts_tokens() ? "tokens" : "samples",
                                 eta, sema::format_bytes(session.peak_bytes()))
                       .c_str());
      line_open = true;
    } else {
      close_line();
      std::fprintf(out, "step %4lld/%lld  loss %.6f  lr %.3g  |g| %.3f  %8.2f ms  %10.0f %s/s  peak %s%s\n",
                   static_cast<long long>(st.step), static_cast<long long>(o.steps), st.loss, st.lr, st.grad_norm,
                   st.seconds * 1e3, rate, session.counts_tokens() ? "tokens" : "samples",
                   sema::format_bytes(session.peak_bytes()).c_str(), scaling);
    }
    if (o.stats)  // exact byte counts (no rounding), so that a test can hold a step to its few scalar reads
      std::fprintf(out, "  stats (rank 0): host->device %lld B, device->host %lld B; of these, collective staging %lld B host->device, %lld B device->host\n",
                   static_cast<long long>(st.to_device), static_cast<long long>(st.to_host), static_cast<long long>(st.staged_to_device),
                   static_cast<long long>(st.staged_to_host));
    if (!std::isnan(val_loss)) {
      close_line();
      std::fprintf(out, "  validation loss %.6f%s\n", val_loss,
                   best_line.empty() ? "" : ("  (best; " + best_line + ")").c_str());
      best_line.clear();
    }
    const double drift = verifier ? verify_step(*verifier, o, st, grads, weights, last_drift) : std::nan("");
    if (metrics) write_metrics_line(metrics, st, val_loss, drift);
    std::fflush(out);
  }
  const int64_t ran = end - start;
  if (rank0) {
    close_line();
    std::fprintf(out, "done: %lld steps, loss %.6f -> %.6f", static_cast<long long>(ran), first_loss, last_loss);
    if (ran > 1) std::fprintf(out, ", %.2f ms/step (steps after the first)", total / static_cast<double>(ran - 1) * 1e3);
    std::fprintf(out, ", %s %s%s%s", o.peak_label.c_str(), sema::format_bytes(session.peak_bytes()).c_str(),
                 o.peak_of_rank0 ? " (rank 0)" : "", o.peak_note.c_str());
    if (last_scale > 0) std::fprintf(out, ", loss scale %g, %lld step(s) skipped", last_scale, static_cast<long long>(skipped_total));
    std::fprintf(out, "\n");
  }
  if (o.rank_peaks) {
    std::vector<int64_t> peaks = o.rank_peaks();
    if (rank0) {
      std::fprintf(out, "memory peak by rank (bytes):");
      for (int64_t b : peaks) std::fprintf(out, " %lld", static_cast<long long>(b));
      std::fprintf(out, "\n");
    }
  }
  if (o.save && (rank0 || o.collective)) save();
  if (!verifier) return LoopResult::Ok;
  print_verify_summary(*verifier, o);
  if (o.drift_reference && rank0)
    std::fprintf(
        out,
        "verify: weight drift from a free-running one-device copy after %lld steps: %.2e overall, largest %.2e (%s) (information, not a verdict)\n",
        static_cast<long long>(ran), last_drift.overall, last_drift.worst, last_drift.worst_name.c_str());
  return verify_passed(*verifier, o) ? LoopResult::Ok : LoopResult::VerifyFailed;
}

}  // namespace nns::backend
