// Partitioned training: one rank's share of a plan (nns run --plan P).
//
// The rank executes its RankProgram (backend/lowering/rank_program.h,
// built by lower_plan): sub-ops elaborated on their slices, the derived
// collectives between them, bucketed parameter-gradient allreduces, replica
// averaging, clipping and the optimizer update, in the order the program
// lists them. PlanTrainer adds what a training loop needs around it: step
// statistics, full tensors assembled from the pieces (for --verify), and
// checkpoint shards.
//
// Execution follows the program: the graph's op order, micro-batch after
// micro-batch, which honours every `order` directive. Pipeline stages run
// their micro-batches one after another (no overlap between stages yet).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/plan_executor.h"
#include "backend/runtime/safetensors.h"
#include "backend/runtime/train_loop.h"
#include "backend/runtime/trainer.h"
#include "semantics/train_spec.h"

namespace nns::backend {

class Communicator;
struct PlanExecutor;
class TraceRecorder;

class PlanTrainer : public TrainSession {
 public:
  // `g`: the forward graph the plan was lowered from; `lowered`: the plan
  // lowered for this rank (lower_plan with only_rank = the communicator's
  // rank, sub-ops elaborated); `comm`: the N ranks, null for one rank;
  // `data_path`: the data file (trainer.h's data_file), "" for synthetic data;
  // `collectives`: where the collectives run (plan_executor.h; empty: the
  // host path on `comm`).
  PlanTrainer(const sema::Graph& g, LoweredPlan lowered, const sema::TrainSpec& spec, Backend& backend, Communicator* comm, uint64_t seed,
              const std::string& data_path = "", const CollectivesFactory& collectives = {});
  ~PlanTrainer() override;

  StepStats step() override;
  int64_t steps_done() const override { return step_; }
  int64_t samples_per_step() const override { return samples_per_step_; }
  bool counts_tokens() const override { return counts_tokens_; }
  int64_t peak_bytes() const override { return piece_bytes_peak(); }
  int64_t piece_bytes_peak() const;
  // The optimizer state this rank holds (a part of piece_bytes_peak): its
  // pieces' or, sharded (zero1, the distributed optimizer), its shards'.
  int64_t optimizer_state_bytes() const;
  // Every rank's piece_bytes_peak(), by rank (collective).
  std::vector<int64_t> piece_bytes_peaks();
  const RankProgram& program() const;
  std::string collectives_name() const;  // "gloo" or "nccl" (collectives.h)
  // --trace: records every instruction of the next `steps` steps into
  // `tracer` (trace.h), named after the full graph's ops; null stops it.
  void set_tracer(TraceRecorder* tracer, int64_t steps);

  // Full tensors assembled from the pieces, on every rank (collective: all
  // ranks must call them together).
  std::map<std::string, std::vector<float>> parameters() override;
  std::map<std::string, std::vector<float>> last_gradients() override;
  // Checkpoints (plan_checkpoint.cpp). Each rank writes the pieces it owns
  // (one copy of every element over all ranks) to DIR/step-S/rank-<r>.safetensors
  // and rank 0 publishes the save (collective; checkpoint_store.h).
  // load() reads a single-device checkpoint file or such a folder (its
  // pieces assembled) into any plan on any number of ranks: weights only
  // (--init) or weights, optimizer state and step (--resume).
  void save_shards(const std::string& dir);
  // One single-device checkpoint file at `path`, as Trainer writes it, for
  // a plan whose rank 0 holds every parameter and its optimizer state
  // whole (the implicit data-parallel plan); rank 0 writes it (collective).
  void save_whole(const std::string& path);
  void load(const std::string& path, bool checkpoint);
  // --init from weights already read (through a weights map, weight_import.h);
  // `partial`: parameters `f` lacks keep their initializers.
  void load_init(const SafetensorsFile& f, const std::string& label, bool partial) {
    load_file(f, label, false, partial);
  }
  // Validation (driver/validation.h): weights set from full tensors (as
  // parameters() gives them; every rank passes the same), and the step
  // count set back to 0 so that the data is read from its start again.
  void set_parameters(const std::map<std::string, std::vector<float>>& weights);
  void restart() { step_ = 0; }

 private:
  void load_file(const SafetensorsFile& f, const std::string& path, bool checkpoint, bool partial = false);
  std::map<std::string, std::vector<float>> assemble(bool grads);
  std::unique_ptr<PlanExecutor> x_;
  int64_t step_ = 0;
  int64_t samples_per_step_ = 0;
  bool counts_tokens_ = false;
};

// `nns ckpt merge DIR -o OUT`: assembles the shards a plan run saved into
// one single-device checkpoint; every element must come from exactly one
// shard (a missing or overlapping shard is an error naming the tensor).
// Returns a one-line summary.
std::string merge_checkpoint_shards(const std::string& dir, const std::string& out);


}  // namespace nns::backend
