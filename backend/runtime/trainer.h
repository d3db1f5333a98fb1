// Single-device training: owns the buffers of a Program, initialises
// weights, feeds data, runs steps (with micro-batch gradient accumulation,
// global-norm clipping, the learning-rate schedule and the optimizer) and
// saves/loads checkpoints. It is the one-device oracle: a run on one rank
// without --plan, and the reference --verify compares every parallel run
// with. Runs on several ranks are plans (the implicit data-parallel plan
// without --plan), run by PlanTrainer (plan_runtime.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/lowering/program.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/data/input_source.h"
#include "backend/runtime/loss_scale.h"
#include "backend/runtime/safetensors.h"
#include "backend/runtime/train_loop.h"
#include "semantics/autograd.h"
#include "semantics/train_spec.h"

namespace nns::backend {

class TraceRecorder;
class GradientMagnitudes;

// Counter-based initial values: a tensor's values are a pure function of
// (key, element index), so every rank can produce any slice of it. The key
// of a parameter is init_key(--seed, its name); of synthetic micro-batch
// `index` of an input, data_key(the data seed, its name, index).
uint64_t init_key(uint64_t seed, const std::string& name);
uint64_t data_key(int64_t data_seed, const std::string& name, int64_t index);
// `data` holds the whole tensor of `shape`. rotary(base) (a buffer's
// rotary-embedding angles) reads the shape: [..., s, d] holds position s
// times base^(-2 (j mod d/2) / d) at column j (the two halves repeat, as
// Llama's cat(freqs, freqs)); every other init is elementwise.
void fill_init(const sema::InitSpec& init, uint64_t key, sema::DType dtype, void* data, const sema::Shape& shape);

// The data file a run reads: --data if given, else the train block's
// safetensors source; "" for synthetic data.
std::string data_file(const std::string& data_flag, const sema::TrainSpec& spec);

// Each of `inputs`' tensor from the data file at `path`, raw bytes in the
// order of `inputs`: a tensor named like the input, of its dtype, of shape
// [k*B, trailing dims...] for the input's [B, trailing dims...] (k
// micro-batches, walked through in order). Throws RuntimeError naming the
// tensor on any mismatch.
std::vector<std::vector<uint8_t>> read_input_data(const std::string& path, const sema::Graph& g, const std::vector<int>& inputs);

// Writes a gradient file (--dump-grads): every tensor of `grads` with its
// parameter's shape in `g`, format nns-gradients-1, the step in the metadata.
void write_gradients(const std::string& path, const sema::Graph& g, const std::map<std::string, std::vector<float>>& grads, int64_t step);

struct TrainOptions {
  uint64_t seed = 0;           // weight init (data has its own seed in the train block)
  std::string init_path;       // weights from safetensors (names = qualified param names)
  // --init read through a weights map (weight_import.h): used instead of
  // reading init_path, which then only names it in messages.
  std::shared_ptr<const SafetensorsFile> init_weights;
  bool init_partial = false;   // --init-partial: parameters the file lacks keep their initializers
  std::string data_path;       // overrides the train block's data source
  std::string resume_path;     // checkpoint to resume from
  // bf16 activation storage: tensors held in f32 all the same (a --verify
  // reference's: lowering/bf16_storage.h, partial_sum_tensors).
  std::vector<int> keep_f32;
};

// Implements the TrainSession of the shared loop (train_loop.h); the
// --verify reference of every parallel run is one of these.
class Trainer : public TrainSession {
 public:
  // `g` is the training graph (autograd applied); it must outlive the trainer.
  Trainer(const sema::Graph& g, const sema::TrainingGraphInfo& info, const sema::TrainSpec& spec, Backend& backend,
          TrainOptions opts);
  ~Trainer() override;

  StepStats step() override;        // one optimizer step (all micro-batches)
  // For gradient checks: the loss of micro-batch 0 (forward only), its
  // gradients (forward + backward, no update; read with last_gradients with
  // micro_batches == 1), and overwriting a parameter.
  double forward_loss();
  // --eval --dump-outputs: tensors the program must not free, so that they
  // can be read after a forward pass (tensor_values, f32 tensors only).
  void keep_tensors(const std::vector<int>& tensors) { kept_.insert(tensors.begin(), tensors.end()); }
  std::vector<float> tensor_values(int tensor) const;
  void compute_gradients();
  void set_parameter(const std::string& name, const std::vector<float>& values);
  // Validation (driver/validation.h): the step count set back to 0, so that
  // the data is read from its start again.
  void restart() { step_ = 0; }
  int64_t steps_done() const override { return step_; }
  const Program& program() const { return program_; }
  // --trace: records the next `steps` steps into `tracer` (trace.h): each
  // node run, input loading and each update.
  void set_tracer(TraceRecorder* tracer, int64_t steps);
  // --verify's update check (StepVerifier): each step that updates hands
  // the hook its own gradients (host copies, clipped and unscaled, as the
  // update reads them); the gradients
  // the hook returns replace them for the update, so the reference applies
  // the optimizer to the run's gradients and, step after step, keeps the
  // optimizer state the run's gradients build. Tensors the hook leaves out
  // keep the step's own. An empty hook turns this off.
  using GradientHook = std::function<TensorMap(TensorMap own)>;
  void set_gradient_hook(GradientHook hook) { gradient_hook_ = std::move(hook); }
  // --verify's derived bound: from now on each step also computes the
  // magnitude sum |c_j| of every parameter gradient's sum (gradient_magnitude.h);
  // gradient_conditions() is then, by parameter name, ||sum |c_j| || / ||g||
  // of the latest step (empty when off).
  void track_gradient_magnitudes();
  std::map<std::string, double> gradient_conditions() const;
  std::map<std::string, double> gradient_norms() const;  // ||g|| of the latest step's (tracked) gradients

  // Host copies, by qualified parameter name.
  std::map<std::string, std::vector<float>> parameters() const;
  std::map<std::string, std::vector<float>> last_gradients() const;  // of the latest step
  TensorMap parameters() override { return std::as_const(*this).parameters(); }
  TensorMap last_gradients() override { return std::as_const(*this).last_gradients(); }
  int64_t peak_bytes() const override { return be_.peak_bytes(); }  // the backend's

  void save_checkpoint(const std::string& path) const;
  void save_gradients(const std::string& path) const;  // --dump-grads
  // Samples (or tokens) per step, for throughput.
  int64_t samples_per_step() const override { return samples_per_step_; }
  bool counts_tokens() const override { return counts_tokens_; }

 private:
  double run_micro_batch(int64_t k, bool backward);
  void release_all();  // every buffer, optimizer state and accumulator (destructor, failed constructor)
  TensorView view(int tensor) const;
  void* ensure(int tensor);
  void release(int tensor);
  void init_parameter(int tensor);
  void load_inputs(int64_t micro_batch_index);
  void load_weights(const SafetensorsFile& f, const std::string& path, bool checkpoint);

  const sema::Graph& g_;
  const sema::TrainingGraphInfo& info_;
  sema::TrainSpec spec_;
  Backend& be_;
  TrainOptions opts_;
  Program program_;
  std::vector<void*> buffers_;                   // by tensor id
  // By tensor id: held in bf16 (bf16 activation storage, lowering/bf16_storage.h);
  // empty when every tensor keeps its dtype.
  std::vector<char> bf16_;
  bool stored_bf16(int tensor) const { return !bf16_.empty() && bf16_[static_cast<size_t>(tensor)]; }
  size_t stored_bytes(int tensor) const;
  std::set<int> kept_;                           // never freed (keep_tensors)
  std::map<int, OptimizerState> state_;           // optimizer state per param
  std::map<int, TensorView> accum_;               // accumulated gradients per param (micro-batches)
  std::vector<std::vector<uint8_t>> data_;        // safetensors data per input, if any
  std::unique_ptr<data::InputSource> source_;    // a token or .npy source (data/input_source.h), if any
  int64_t step_ = 0;
  LossScaler scaler_;  // fp16: dynamic loss scaling (off otherwise: scale 1, never skips)
  int64_t samples_per_step_ = 0;
  bool counts_tokens_ = false;
  // --trace: keys are node ids, then trace_base_ + 0 (input loading) and
  // trace_base_ + 1 + i (parameter i's update).
  TraceRecorder* tracer_ = nullptr;
  GradientHook gradient_hook_;
  std::unique_ptr<GradientMagnitudes> magnitudes_;               // track_gradient_magnitudes()
  void replace_gradients(const std::vector<TensorView>& grads);  // with gradient_hook_'s
  int trace_base_ = 0, trace_mb_ = -1;
};

}  // namespace nns::backend
