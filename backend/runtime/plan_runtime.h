// Partitioned training: one rank's share of a plan (nns run --plan P).
//
// Lowering. Every leaf sub-op placed on this rank's device is elaborated
// again on its slice (Interpreter::instantiate_op) into a rank-local graph
// and differentiated there (sema::differentiate), so each sub-op has its own
// forward and backward ops with the sliced shapes. Tensors between ops live
// as one piece per device, in the layout the plan gives them (R x V x D over
// a device group, backend/comm_plan.h); at every edge the derived adapter
// (allreduce, allgather, reduce-scatter, all-to-all, local chunk or value
// split, send/recv) turns the producer's layout into the consumer's, and in
// backward the gradient goes the other way through the dual adapter the
// communication plan derived. Parameters live in the layout of their first
// consumer and are updated there, piece by piece.
//
// Every rank walks the same global sequence of ops and adapter steps and
// joins the collectives of the groups it belongs to, so collectives are
// issued in one order everywhere and cannot deadlock.
//
// Data parallelism over plan replicas: a plan for k devices run on N = m k
// ranks forms m replicas (rank = replica * k + device); replica j trains on
// its own micro-batches and parameter gradients are averaged over the
// replicas, exactly like one device running m x micro_batches.
//
// Limits (refused with a RuntimeError, never silently wrong): pieces that do
// not form a regular layout, dropout split other than along its first dim.
// Execution follows the graph's op order, micro-batch after micro-batch,
// which honours every `order` directive (one that runs against the data
// dependencies orders consecutive micro-batches, as in a pipeline).
// `recompute` drops a sub-op's activations after its forward and runs the
// forward again before its backward. Pipeline stages run their
// micro-batches one after another (no overlap between stages yet).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/runtime/backend.h"
#include "backend/lowering/comm_plan.h"
#include "backend/lowering/geometry.h"
#include "backend/runtime/trainer.h"
#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::backend {

class Communicator;

class PlanTrainer {
 public:
  // `g`: the forward graph the plan was evaluated on (its loss set);
  // `comm`: the N ranks (N a multiple of plan.ngpus), null for one rank.
  PlanTrainer(sema::Interpreter& interp, const sema::Graph& g, const sema::Plan& plan, const sema::TrainSpec& spec, Backend& backend,
              Communicator* comm, uint64_t seed);
  ~PlanTrainer();

  StepStats step();
  int64_t steps_done() const { return step_; }
  int64_t samples_per_step() const { return samples_per_step_; }
  bool counts_tokens() const { return counts_tokens_; }
  int64_t piece_bytes_peak() const { return peak_bytes_; }

  // Full tensors assembled from the pieces, on every rank (collective: all
  // ranks must call them together).
  std::map<std::string, std::vector<float>> parameters();
  std::map<std::string, std::vector<float>> last_gradients();
  // Checkpoints. Each rank writes the pieces it owns (one copy of every
  // element over all ranks) to DIR/rank-<r>.safetensors (collective);
  // merge_checkpoint_shards builds the single-device checkpoint from them,
  // which load() reads into any plan on any number of ranks: weights only
  // (--init) or weights, optimizer state and step (--resume).
  void save_shards(const std::string& dir);
  void load(const std::string& path, bool checkpoint);

  // --emit=program: this rank's instruction list.
  std::string dump() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t step_ = 0;
  int64_t samples_per_step_ = 0;
  bool counts_tokens_ = false;
  int64_t peak_bytes_ = 0;
};

// `nns ckpt merge DIR -o OUT`: assembles the shards a plan run saved into
// one single-device checkpoint; every element must come from exactly one
// shard (a missing or overlapping shard is an error naming the tensor).
// Returns a one-line summary.
std::string merge_checkpoint_shards(const std::string& dir, const std::string& out);

}  // namespace nns::backend
