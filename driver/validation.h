// Validation while training: a train block with `eval_every = K` and
// `val_data = ...` reports, every K steps, the mean loss of `eval_batches`
// batches of the validation data, forward only with dropout off, on the
// weights of that step, under any plan (the same plan as the training,
// lowered forward only as --eval lowers it).
#pragma once

#include <memory>

#include "driver/pipeline.h"
#include "driver/train.h"

namespace nns::driver {

// The validation pipeline: FILE evaluated again as `nns run --eval` does
// (prepare_eval), with the same plan and ranks, its data source the train
// block's val_data and its steps eval_batches. Built once, before the ranks
// start. `out` stays null when the train block has no eval_every. Returns
// kExitOk, or the exit code of a stage that failed (said on stderr).
int build_validation(const PipelineOptions& o, const Pipeline& train, std::unique_ptr<Pipeline>& out);

// One rank's validation session on that pipeline.
class Validator {
 public:
  Validator(Pipeline& eval, const PipelineOptions& o, backend::Communicator* comm);
  // The mean loss of the validation batches on `training`'s current
  // weights: every evaluation reads the same batches (the data from its
  // start). Collective: every rank calls it at the same step.
  double evaluate(backend::TrainSession& training);

 private:
  Pipeline& eval_;
  EvalSession session_;
};

}  // namespace nns::driver
