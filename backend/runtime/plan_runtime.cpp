#include "backend/runtime/plan_runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/optimizer.h"
#include "backend/runtime/plan_executor.h"

namespace nns::backend {

PlanTrainer::PlanTrainer(const sema::Graph& g, LoweredPlan lowered, const sema::TrainSpec& spec, Backend& backend, Communicator* comm,
                         uint64_t seed)
    : x_(std::make_unique<PlanExecutor>(g, std::move(lowered), spec, backend, comm, seed)) {
  std::vector<int> inputs = g.inputs();
  if (!inputs.empty()) {
    const sema::TensorInfo& first = g.tensor(inputs[0]);
    counts_tokens_ = first.dtype == sema::DType::I32 && first.shape.size() >= 2;
    samples_per_step_ = (counts_tokens_ ? sema::numel(first.shape) : first.shape[0]) * spec.micro_batches * x_->lowered.replicas;
  }
}

PlanTrainer::~PlanTrainer() = default;

int64_t PlanTrainer::piece_bytes_peak() const { return x_->peak_bytes; }

const RankProgram& PlanTrainer::program() const { return x_->P; }

StepStats PlanTrainer::step() {
  PlanExecutor& m = *x_;
  auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  st.step = ++step_;
  m.be.set_step(step_);
  // The learning rate follows the same schedule as one device.
  double lr = learning_rate(m.spec.schedule, m.spec.optimizer.lr, m.spec.steps, step_);
  m.lr = lr;
  m.run_step(step_);
  st.loss = m.loss;
  st.grad_norm = m.grad_norm;
  st.lr = lr;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

// Full tensors from the pieces: replica 0's first copy of every piece,
// summed over all ranks (collective, in the graph's parameter order).
std::map<std::string, std::vector<float>> PlanTrainer::assemble(bool grads) {
  PlanExecutor& m = *x_;
  std::map<std::string, std::vector<float>> out;
  for (int p : m.g.params()) {
    const sema::TensorInfo& t = m.g.tensor(p);
    if (grads && !sema::dtype_is_float(t.dtype)) continue;
    std::vector<float> full(static_cast<size_t>(sema::numel(t.shape)), 0.f);
    for (const ParamSlot& slot : m.P.params) {
      int b = grads ? slot.accum : slot.param;
      if (slot.tensor != p || b < 0 || m.P.replica != 0 || m.piece(b).replica_index != 0) continue;
      const Piece& pc = m.piece(b);
      copy_region(m.bufs[static_cast<size_t>(b)].data(), pc, full.data(), full_piece(t.shape), pc.start, pc.length, false, 1.f);
    }
    if (m.comm && m.world > 1) m.comm->allreduce(full.data(), full.size());
    out[t.name] = std::move(full);
  }
  return out;
}

std::map<std::string, std::vector<float>> PlanTrainer::parameters() { return assemble(false); }

std::map<std::string, std::vector<float>> PlanTrainer::last_gradients() { return assemble(true); }

}  // namespace nns::backend
