// The plan executor (internal to the runtime): runs one rank's RankProgram
// (backend/lowering/rank_program.h) instruction by instruction on a Backend
// and a Communicator. Buffers are host vectors of 4-byte elements (f32, or
// i32 bit patterns); the kernels' local tensors live beside them. Used by
// PlanTrainer (plan_runtime.h), which adds the step statistics, full-tensor
// assembly and checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/runtime/backend.h"
#include "semantics/train_spec.h"

namespace nns::backend {

class Communicator;
class TraceRecorder;

// Copies region (start, length) — full-tensor coordinates — from a buffer
// laid out as piece `sp` into one laid out as `dp`; `add` accumulates,
// `scale` multiplies (floats only; raw 4-byte copies otherwise).
void copy_region(const float* src, const Piece& sp, float* dst, const Piece& dp, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& length, bool add, float scale);

struct PlanExecutor {
  const sema::Graph& g;
  LoweredPlan lowered;   // this rank's program only
  const RankProgram& P;
  sema::TrainSpec spec;
  Backend& be;
  Communicator* comm;
  uint64_t seed;
  int world = 1;
  std::vector<std::vector<float>> bufs;              // by buffer id
  std::vector<std::vector<std::vector<float>>> lbuf_mb;  // per micro-batch, by local tensor id
  std::vector<std::vector<float>>* lbuf_cur = nullptr;  // the running instruction's micro-batch
  // Per micro-batch, by local tensor id: the buffer a kernel input reads in
  // place (slice_in_place), -1 when it has its own copy in lbuf_mb.
  std::vector<std::vector<int>> alias_mb;
  std::vector<int>* alias_cur = nullptr;
  std::vector<std::vector<int64_t>> alias_at_mb;  // the slice's element offset in that buffer
  std::vector<int64_t>* alias_at_cur = nullptr;
  std::vector<std::vector<std::vector<float>>> opt;  // per ParamSlot: optimizer slots
  int64_t cur_bytes = 0, peak_bytes = 0;
  bool fault_skip_allreduce = false;  // NNS_TEST_FAULT=skip-allreduce (test hook)
  TraceRecorder* tracer = nullptr;    // --trace (trace.h): keyed by instruction index; null = off

  // Per step.
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;

  // `data_path`: the data file (trainer.h's data_file), "" for synthetic inputs.
  PlanExecutor(const sema::Graph& graph, LoweredPlan lp, const sema::TrainSpec& s, Backend& b, Communicator* c, uint64_t sd,
               const std::string& data_path = "");
  void run_step(int64_t step_number);  // every instruction of the program, once

  const std::vector<int>& group(const PInstr& in) const { return lowered.groups[static_cast<size_t>(in.group)]; }
  const Piece& piece(int b) const { return P.buffers[static_cast<size_t>(b)].piece; }
  std::vector<float> extract(const std::vector<float>& from, const Piece& have, const Piece& want, float scale) const;

 private:
  void exec(const PInstr& in);
  void exec_compute(const PInstr& in);
  void exec_collective(const PInstr& in);
  void exec_step(const PInstr& in);
  void set_buf(int b, std::vector<float> v);
  void free_buf(int b);
  void lset(int t, std::vector<float> v);
  void drop_local(int t);
  void release_buf(int b);  // Free: now, or parked while a send of it is in flight
  void unref(int b);
  std::vector<int> buf_refs_;     // kernel inputs reading each buffer in place
  std::vector<char> free_later_;  // freed by the program while still read in place
  TensorView lview(int t);
  void run_local(int n);
  void track(int64_t delta);
  void finish_transfers();
  void load_input(const PInstr& in);
  std::vector<float> file_input_piece(int t, int64_t index, const Piece& want) const;

  // Point-to-point transfers in flight (pipelined programs post them
  // early and wait late): receives until their Wait, sends until the
  // step ends (a freed buffer with a send in flight is kept until then).
  std::map<std::pair<int, int64_t>, std::vector<float>> input_cache_;  // (input buffer, data index) -> its piece
  std::map<int, std::vector<uint8_t>> data_;  // input tensor -> the data file's bytes (empty: synthetic data)
  struct InFlight;
  std::map<int, std::shared_ptr<InFlight>> recv_pending_;
  std::map<int, std::vector<std::shared_ptr<InFlight>>> send_pending_;
  std::vector<std::pair<std::vector<float>, std::vector<std::shared_ptr<InFlight>>>> send_parked_;
};

}  // namespace nns::backend
