// The run stage of the pipeline: trains the model on topo.ranks CPU rank
// processes, each a data-parallel replica of the whole model (Trainer) or
// its share of the plan (PlanTrainer), in the one loop of
// backend/runtime/train_loop.h; rank 0 prints.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "driver/pipeline.h"

namespace nns::backend {
class Backend;
class Communicator;
class PlanTrainer;
class TrainSession;
class Trainer;
}  // namespace nns::backend

namespace nns::driver {

// Trains after the training-graph stage (p.info set). Returns the exit code:
// 0, or 70 for divergence, a --verify beyond its bounds or a runtime error.
int run_training(Pipeline& p, const PipelineOptions& o);

// --eval, before any plan is evaluated: the graph trains nothing
// (g.inference: no backward, forward-only communication) and every
// dropout's p is 0.
void prepare_eval(sema::Graph& g);

// --eval after the training-graph stage (of a prepare_eval'd graph): the
// train block's steps as forward passes, on one device, data-parallel
// replicas or a plan's ranks, on the data those steps would read; the
// weights come from --init / --resume (else their initializers). Rank 0
// prints each step's loss and their mean. Returns 0, or 70 for a runtime error.
int run_eval(Pipeline& p, const PipelineOptions& o);

// A forward-only session on a prepare_eval'd pipeline (what --eval and
// validation run): one device's Trainer or this rank's PlanTrainer, with its
// backend, weights from o.run.init / o.run.resume if given.
struct EvalSession {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<backend::Communicator> solo_comm;  // --comm nccl on one rank
  std::unique_ptr<backend::TrainSession> session;
  backend::PlanTrainer* plan = nullptr;  // session, when it runs a plan
  backend::Trainer* one = nullptr;       // session, on one device
};
EvalSession make_eval_session(Pipeline& p, const PipelineOptions& o, backend::Communicator* comm);

// Runs `rank_main` once in this process (topo.ranks == 1, communicator
// null), as the one rank an outside launcher started (topo.external()), or
// in topo.ranks forked rank processes, joined by a Communicator; a runtime
// or checkpoint error becomes "nns: error: ..." and exit 70.
int run_on_ranks(const Topology& topo, const std::function<int(backend::Communicator*)>& rank_main);

}  // namespace nns::driver
