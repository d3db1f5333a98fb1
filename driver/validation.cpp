#include "driver/validation.h"

#include <iostream>
#include <sstream>
#include <utility>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/plan_runtime.h"
#include "backend/runtime/trainer.h"
#include "driver/args.h"

namespace nns::driver {
namespace {

// Swaps a stream's buffer for a string's while it lives: the validation
// pipeline's stages repeat the training pipeline's reports and warnings,
// which the user has already seen.
class Captured {
 public:
  explicit Captured(std::ostream& s) : stream_(s), old_(s.rdbuf(text_.rdbuf())) {}
  ~Captured() { stream_.rdbuf(old_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostream& stream_;
  std::ostringstream text_;
  std::streambuf* old_;
};

}  // namespace

int build_validation(const PipelineOptions& o, const Pipeline& train, std::unique_ptr<Pipeline>& out) {
  out.reset();
  if (train.spec.eval_every <= 0) return kExitOk;
  PipelineOptions eo = o;
  eo.run.eval = true;  // prepare_eval: dropout off, forward-only program
  eo.last = Stage::TrainingGraph;
  eo.emit = false;
  eo.memory_report = false;
  // The weights come from the training session at each evaluation, the data from val_data.
  eo.run.init.clear();
  eo.run.resume.clear();
  eo.run.data.clear();
  auto ep = std::make_unique<Pipeline>();
  int rc = kExitOk;
  std::string errors;
  {
    Captured quiet_out(std::cout), quiet_err(std::cerr);
    rc = run_pipeline(eo, *ep);
    errors = quiet_err.text();
  }
  if (rc != kExitOk) {
    std::cerr << errors << "nns: error: the validation program (eval_every) could not be built\n";
    return rc;
  }
  ep->spec.data = ep->spec.val_data;
  ep->spec.steps = ep->spec.eval_batches;
  out = std::move(ep);
  return kExitOk;
}

Validator::Validator(Pipeline& eval, const PipelineOptions& o, backend::Communicator* comm) : eval_(eval) {
  PipelineOptions eo = o;
  eo.run.init.clear();
  eo.run.resume.clear();
  eo.run.data.clear();
  session_ = make_eval_session(eval, eo, comm);
}

double Validator::evaluate(backend::TrainSession& training) {
  // parameters() is collective on a plan: every rank assembles the full
  // tensors, so each can cut its own pieces for the validation plan.
  std::map<std::string, std::vector<float>> weights = training.parameters();
  if (session_.plan) {
    session_.plan->set_parameters(weights);
    session_.plan->restart();
  } else {
    for (const auto& [name, values] : weights) session_.one->set_parameter(name, values);
    session_.one->restart();
  }
  double sum = 0;
  const int64_t batches = eval_.spec.eval_batches;
  // A step of the forward-only program is the forward and the loss, averaged over the ranks.
  for (int64_t b = 0; b < batches; ++b) sum += session_.session->step().loss;
  return sum / static_cast<double>(batches);
}

}  // namespace nns::driver
