#include "backend/runtime/plan_runtime.h"

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/optimizer.h"
#include "backend/runtime/plan_executor.h"
#include "backend/runtime/trace.h"

namespace nns::backend {

PlanTrainer::PlanTrainer(const sema::Graph& g, LoweredPlan lowered, const sema::TrainSpec& spec, Backend& backend, Communicator* comm,
                         uint64_t seed, const std::string& data_path, const CollectivesFactory& collectives)
    : x_(std::make_unique<PlanExecutor>(g, std::move(lowered), spec, backend, comm, seed, data_path, collectives)) {
  std::vector<int> inputs = g.inputs();
  if (!inputs.empty()) {
    const sema::TensorInfo& first = g.tensor(inputs[0]);
    counts_tokens_ = first.dtype == sema::DType::I32 && first.shape.size() >= 2;
    samples_per_step_ = (counts_tokens_ ? sema::numel(first.shape) : first.shape[0]) * spec.micro_batches * x_->lowered.replicas;
  }
}

PlanTrainer::~PlanTrainer() = default;

std::string PlanTrainer::collectives_name() const { return x_->coll->name(); }

int64_t PlanTrainer::piece_bytes_peak() const { return x_->peak_bytes; }

int64_t PlanTrainer::optimizer_state_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<DeviceBuffer>& slots : x_->opt)
    for (const DeviceBuffer& b : slots) bytes += static_cast<int64_t>(b.bytes());
  return bytes;
}

std::vector<int64_t> PlanTrainer::piece_bytes_peaks() {
  const int n = x_->world;
  // The communicator moves floats: the peak in 2-byte units (every tracked
  // size is a multiple of 2: a bf16 activation of odd length is not one of
  // 4), split in two parts of at most 2^24, exact in fp32.
  const int64_t words = x_->peak_bytes / 2;
  float mine[2] = {static_cast<float>(words >> 24), static_cast<float>(words & ((int64_t{1} << 24) - 1))};
  std::vector<float> all(static_cast<size_t>(2 * n), 0.f);
  if (x_->comm && n > 1) {
    x_->comm->allgather(mine, all.data(), 2);
  } else {
    all[0] = mine[0];
    all[1] = mine[1];
  }
  std::vector<int64_t> out;
  for (int r = 0; r < n; ++r)
    out.push_back(((static_cast<int64_t>(all[2 * r]) << 24) + static_cast<int64_t>(all[2 * r + 1])) * 2);
  return out;
}

const RankProgram& PlanTrainer::program() const { return x_->P; }

namespace {

const char* comm_kind_name(PInstr::Kind k) {
  switch (k) {
    case PInstr::AllReduce: return "AllReduce";
    case PInstr::AllGather: return "AllGather";
    case PInstr::ReduceScatter: return "ReduceScatter";
    case PInstr::AllToAll: return "AllToAll";
    case PInstr::BucketAllReduce: return "BucketAllReduce";
    case PInstr::ReplicaAverage: return "ReplicaAverage";
    case PInstr::LossAllReduce: return "LossAllReduce";
    case PInstr::Send: return "Send";
    case PInstr::Recv: return "Recv";
    default: return instr_name(k);
  }
}

}  // namespace

// One label per instruction that is traced on its own (kernels' Forward and
// Backward, collectives, transfers, the update, input loading, clipping);
// every other instruction shares the merging "local work" label.
void PlanTrainer::set_tracer(TraceRecorder* tracer, int64_t steps) {
  PlanExecutor& m = *x_;
  m.tracer = tracer;
  if (!tracer) return;
  const RankProgram& P = m.P;
  int local_work = tracer->add_label(TraceTrack::Local, "local work", {}, true);
  m.posted_wait_label = tracer->add_label(TraceTrack::Comm, "Wait for posted collective");
  // NNS_TRACE_EVERY_INSTRUCTION=1 (trace.h): each bookkeeping instruction its own event.
  const char* every = std::getenv("NNS_TRACE_EVERY_INSTRUCTION");
  const bool each = every && std::string(every) == "1";
  auto bytes_of = [&](int b) { return b < 0 ? int64_t{0} : m.piece(b).numel() * 4; };
  for (size_t i = 0; i < P.instrs.size(); ++i) {
    const PInstr& in = P.instrs[i];
    std::string at = "\"instr\":" + std::to_string(i);
    int label = local_work;
    switch (in.kind) {
      case PInstr::Forward:
      case PInstr::Backward:
      case PInstr::BackwardW: {  // a zero-bubble schedule's weight-gradient task is compute too, not local work
        const SubOpKernel& kn = P.kernels[static_cast<size_t>(in.kernel)];
        const sema::OpNode& node = m.g.node(kn.node);
        const char* phase = in.kind == PInstr::Forward ? " F" : in.kind == PInstr::Backward ? " B" : " W";
        label = tracer->add_label(
            TraceTrack::Compute, node.name + phase,
            "\"kernel\":" + std::to_string(in.kernel) + ",\"op\":\"" + json_escape(node.kind) + "\"," + at);
        break;
      }
      case PInstr::Send:
      case PInstr::Recv: {
        bool send = in.kind == PInstr::Send;
        int64_t n = bytes_of(send ? in.a : in.b);
        label = tracer->add_label(TraceTrack::Comm,
                                  std::string(send ? "Send " : "Recv ") + trace_bytes(n) + (send ? " to rank " : " from rank ") + std::to_string(in.peer) +
                                      " tag " + std::to_string(in.tag),
                                  "\"bytes\":" + std::to_string(n) + ",\"peer\":" + std::to_string(in.peer) + ",\"tag\":" + std::to_string(in.tag) + "," + at);
        break;
      }
      case PInstr::AllReduce:
      case PInstr::AllGather:
      case PInstr::ReduceScatter:
      case PInstr::AllToAll:
      case PInstr::BucketAllReduce:
      case PInstr::ReplicaAverage:
      case PInstr::LossAllReduce: {
        int64_t n = 0;
        if (in.kind == PInstr::LossAllReduce) n = 8;
        else if (in.kind == PInstr::BucketAllReduce)
          for (int b : P.buckets[static_cast<size_t>(in.index)]) n += bytes_of(b);
        else n = bytes_of(in.a);
        std::string grp = in.group >= 0 ? group_text(m.group(in)) : "{}";
        label = tracer->add_label(TraceTrack::Comm, std::string(comm_kind_name(in.kind)) + " " + trace_bytes(n) + " " + grp,
                                  "\"bytes\":" + std::to_string(n) + ",\"group\":\"" + grp + "\"," + at);
        break;
      }
      case PInstr::Wait:  // blocked on a posted receive: waiting, not local work
        label = tracer->add_label(TraceTrack::Comm, "Wait " + trace_bytes(bytes_of(in.a)), "\"bytes\":" + std::to_string(bytes_of(in.a)) + "," + at);
        break;
      case PInstr::Update:
        label = tracer->add_label(TraceTrack::Local, "Update " + m.g.tensor(P.params[static_cast<size_t>(in.index)].tensor).name, at);
        break;
      case PInstr::LoadInput:
        label = tracer->add_label(TraceTrack::Local, "LoadInput " + m.g.tensor(P.buffers[static_cast<size_t>(in.b)].tensor).name, at);
        break;
      case PInstr::Clip:
        label = tracer->add_label(TraceTrack::Local, "Clip", at);
        break;
      default:
        if (each) label = tracer->add_label(TraceTrack::Local, instr_name(in.kind), at);
        break;
    }
    tracer->set_key(static_cast<int>(i), label);
  }
  tracer->reserve(static_cast<size_t>(std::max<int64_t>(steps, 1)) * (P.instrs.size() + 1));
}

StepStats PlanTrainer::step() {
  PlanExecutor& m = *x_;
  auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  st.step = ++step_;
  m.be.set_step(step_);
  // The learning rate follows the same schedule as one device.
  double lr = learning_rate(m.spec.schedule, m.spec.optimizer.lr, m.spec.schedule.steps, step_);
  m.lr = lr;
  const Backend::HostTraffic traffic0 = m.be.host_traffic();
  const int64_t staged_in0 = m.coll->staged_to_device, staged_out0 = m.coll->staged_to_host;
  const float scale = m.scaler.scale();  // what this step seeds its backward with
  m.run_step(step_);
  st.to_device = m.be.host_traffic().to_device - traffic0.to_device;
  st.to_host = m.be.host_traffic().to_host - traffic0.to_host;
  st.staged_to_device = m.coll->staged_to_device - staged_in0;
  st.staged_to_host = m.coll->staged_to_host - staged_out0;
  st.loss = m.loss;
  st.grad_norm = m.grad_norm;
  st.lr = lr;
  if (m.scaler.enabled()) {
    st.loss_scale = scale;
    st.skipped = m.skip_update;
    st.skipped_total = m.scaler.skipped();
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

// Full tensors from the pieces: replica 0's first copy of every piece,
// summed over all ranks (collective, in the graph's parameter order). A
// gradient the distributed optimizer shards over the replicas is averaged
// only in each replica's shard: every replica gives its shard.
std::map<std::string, std::vector<float>> PlanTrainer::assemble(bool grads) {
  PlanExecutor& m = *x_;
  std::map<std::string, std::vector<float>> out;
  for (int p : m.g.params()) {
    const sema::TensorInfo& t = m.g.tensor(p);
    if (grads && (!sema::dtype_is_float(t.dtype) || t.buffer)) continue;  // buffers have no gradient (as on one device)
    std::vector<float> full(static_cast<size_t>(sema::numel(t.shape)), 0.f);
    for (size_t i = 0; i < m.P.params.size(); ++i) {
      const ParamSlot& slot = m.P.params[i];
      int b = grads ? slot.accum : slot.param;
      const bool by_shard = grads && m.replica_sharded(i);
      if (slot.tensor != p || b < 0 || (m.P.replica != 0 && !by_shard) || m.piece(b).replica_index != 0) continue;
      const Piece& pc = m.piece(b);
      const Piece& part = by_shard ? m.piece(slot.shard) : pc;
      std::vector<float> host = m.download(m.bufs[static_cast<size_t>(b)]);
      copy_region(host.data(), pc, full.data(), full_piece(t.shape), part.start, part.length, false, 1.f);
    }
    if (m.comm && m.world > 1) m.comm->allreduce(full.data(), full.size());
    out[t.name] = std::move(full);
  }
  return out;
}

std::map<std::string, std::vector<float>> PlanTrainer::parameters() { return assemble(false); }

std::map<std::string, std::vector<float>> PlanTrainer::last_gradients() { return assemble(true); }

}  // namespace nns::backend
