// The plan executor (internal to the runtime): runs one rank's RankProgram
// (backend/lowering/rank_program.h) instruction by instruction on a Backend
// and a Communicator. Buffers, the kernels' local tensors and the optimizer
// state are Backend memory (DeviceBuffer) of 4-byte elements (f32, or i32
// bit patterns), and every data movement between them is a Backend call:
// after the first step a step goes back to the host only for the loss
// scalars (and, on a backend whose memory is not the host's, for the
// collectives' host staging, counted in staged_*). Used by PlanTrainer
// (plan_runtime.h), which adds the step statistics, full-tensor assembly
// and checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/collectives.h"
#include "backend/runtime/data/input_source.h"
#include "backend/runtime/device_buffer.h"
#include "backend/runtime/loss_scale.h"
#include "semantics/train_spec.h"

namespace nns::backend {

class Communicator;
class TraceRecorder;

// Makes the Collectives a run's executor uses (collectives.h) for its
// lowered plan: the device path creates its NCCL groups from the plan's.
// An empty factory means the host path.
using CollectivesFactory = std::function<std::unique_ptr<Collectives>(const LoweredPlan&)>;

// Copies region (start, length) — full-tensor coordinates — from a host
// buffer laid out as piece `sp` into one laid out as `dp`; `add`
// accumulates, `scale` multiplies (floats only; raw 4-byte copies otherwise).
void copy_region(const float* src, const Piece& sp, float* dst, const Piece& dp, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& length, bool add, float scale);
// The same region as a Backend box copy's geometry.
BoxCopy region_box(const Piece& sp, const Piece& dp, const std::vector<int64_t>& start, const std::vector<int64_t>& length);

struct PlanExecutor {
  const sema::Graph& g;
  LoweredPlan lowered;   // this rank's program only
  const RankProgram& P;
  sema::TrainSpec spec;
  Backend& be;
  Communicator* comm;
  uint64_t seed;
  int world = 1;
  std::vector<DeviceBuffer> bufs;                        // by buffer id
  std::vector<std::vector<DeviceBuffer>> lbuf_mb;        // per micro-batch, by local tensor id
  std::vector<DeviceBuffer>* lbuf_cur = nullptr;         // the running instruction's micro-batch
  // Per micro-batch, by local tensor id: the buffer a kernel input reads in
  // place (slice_in_place), -1 when it has its own copy in lbuf_mb.
  std::vector<std::vector<int>> alias_mb;
  std::vector<int>* alias_cur = nullptr;
  std::vector<std::vector<int64_t>> alias_at_mb;  // the slice's element offset in that buffer
  std::vector<int64_t>* alias_at_cur = nullptr;
  // Its row stride there (slice_row_stride: columns of the buffer's rows), 0: contiguous.
  std::vector<std::vector<int64_t>> alias_stride_mb;
  std::vector<int64_t>* alias_stride_cur = nullptr;
  std::vector<std::vector<DeviceBuffer>> opt;            // per ParamSlot: optimizer slots
  // Per ParamSlot: the geometry of its distributed optimizer gather (the
  // boxes of every replica's shard, plan_executor_sharded.cpp), -1 when the
  // slot is not sharded over the replicas. A sharded slot's Accum holds the
  // replicas' average only in this replica's shard: every replica's shard
  // counts in the gradient norm and the assembled gradients.
  std::vector<int> replica_shard_geom;
  bool replica_sharded(size_t slot) const { return replica_shard_geom[slot] >= 0; }
  int64_t cur_bytes = 0, peak_bytes = 0;
  bool fault_skip_allreduce = false;  // NNS_TEST_FAULT=skip-allreduce (test hook)
  // NNS_TEST_FAULT=consume-before-wait (test hook): posted collectives are
  // completed only at the step end, not before their first consumer, so
  // that a test shows --verify catching a consumer that runs before its wait.
  bool fault_consume_before_wait = false;
  // NNS_TEST_FAULT=grad-scale-1pct (test hook): the replicas average their
  // gradients with a factor 1% too large, which --verify's gradient check
  // must catch; NNS_TEST_FAULT=update-lr-1pct: each update takes a learning
  // rate 1% too large, with correct gradients: only the update check sees it.
  bool fault_grad_scale_1pct = false, fault_update_lr_1pct = false;
  // NNS_TEST_FAULT=wrong-group (test hook): the activation allreduces run
  // over another group of the same size (plan_executor_collectives.cpp,
  // wrong_group), which --verify must catch.
  bool fault_wrong_group = false;
  // NNS_TEST_FAULT=gather-own-shard (test hook): the distributed
  // optimizer's gather writes back only this replica's updated shard, the
  // rest of each parameter stale, which --verify's update check must catch.
  bool fault_gather_own_shard = false;
  // NNS_TEST_FAULT=in-place-overwrite (test hook): a kernel output written
  // in place where its collect accumulates (a partial sum) overwrites the
  // buffer instead of adding to it, which --verify must catch.
  bool fault_in_place_overwrite = false;
  // Where the collectives run (collectives.h): the host path (Gloo, staged
  // through host copies when the backend's memory is not the host's, or
  // with NNS_TEST_HOST_STAGING=1, a test hook: CPU ranks then take the path
  // of CUDA ranks over Gloo), or NCCL on device pointers. Its staged_*
  // counters are the bytes staged through host memory, part of the
  // backend's host_traffic().
  std::unique_ptr<Collectives> coll;
  TraceRecorder* tracer = nullptr;    // --trace (trace.h): keyed by instruction index; null = off
  // --trace: the label of the time an instruction first waits for posted
  // operations on its buffers (a bucket's allreduce, pending_): comm
  // waiting, recorded apart from the instruction's own (local) work.
  int posted_wait_label = -1;

  // Per step.
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  // fp16 dynamic loss scaling: SeedGrad seeds the scale; LossAllReduce
  // decides the step from the all-reduced squared norm (the same on every
  // rank) and unscales; Clip and Update skip a step it skipped.
  LossScaler scaler;
  // A token or .npy source (data/input_source.h): this replica reads its
  // micro-batches of the shared sample stream; checkpoints save its position.
  std::unique_ptr<data::InputSource> source;
  bool skip_update = false;

  // `data_path`: the data file (trainer.h's data_file), "" for synthetic inputs.
  // `collectives`: where the collectives run (empty: the host path on `c`).
  PlanExecutor(const sema::Graph& graph, LoweredPlan lp, const sema::TrainSpec& s, Backend& b, Communicator* c, uint64_t sd,
               const std::string& data_path = "", const CollectivesFactory& collectives = {});
  void run_step(int64_t step_number);  // every instruction of the program, once

  const std::vector<int>& group(const PInstr& in) const { return lowered.groups[static_cast<size_t>(in.group)]; }
  const Piece& piece(int b) const { return P.buffers[static_cast<size_t>(b)].piece; }
  // Host side: the box of `want` read out of a host buffer laid out as
  // `have`, times `scale` (initial values, checkpoints).
  std::vector<float> extract(const std::vector<float>& from, const Piece& have, const Piece& want, float scale) const;
  // Host copies of backend memory and back (checkpoints, --verify's
  // assembly; counted as host traffic, outside the step).
  std::vector<float> download(const DeviceBuffer& b) const;
  void upload(DeviceBuffer& b, const std::vector<float>& host) const;

 private:
  void exec(const PInstr& in);
  void exec_compute(const PInstr& in);
  void exec_collective(const PInstr& in);
  void exec_step(const PInstr& in);
  void replica_average(const PInstr& in, bool talk);  // `in` and the averages fused with it
  void post_flat_allreduce(const std::vector<int>& members, const std::vector<int>& grp, float scale);
  // The distributed optimizer (plan_executor_sharded.cpp).
  void find_replica_shards();
  int accum_slot(int accum) const;                              // the ParamSlot whose Accum buffer is `accum`
  const std::vector<Piece>& replica_shards(size_t slot) const;  // by replica
  void replica_reduce_scatter(const std::vector<int>& members, const std::vector<int>& grp, bool talk, float scale);
  void replica_gather(const PInstr& in, bool talk);  // `in` and the gathers of its bucket
  DeviceBuffer box_of(int b, const Piece& box);      // b's part in `box`, copied out
  std::map<int, int> accum_slot_;
  bool round_bf16() const { return spec.grad_reduce == "bf16"; }  // grad_reduce = "bf16" (collectives.h)
  DeviceBuffer alloc(int64_t numel) { return DeviceBuffer(be, static_cast<size_t>(numel) * 4); }
  DeviceBuffer alloc_uninit(int64_t numel) {
    return DeviceBuffer(be, static_cast<size_t>(numel) * 4, DeviceBuffer::Uninit{});
  }
  // Alloc's zeros, made lazily (lazy_zero.cpp): a buffer whose first write
  // covers all of it (a kernel's whole output or gradient, an add-to) is
  // written, or takes the kernel's block, instead of being zero-filled and
  // then added to; any other first touch fills it first.
  std::vector<char> zero_pending_;
  int64_t zero_pending_count_ = 0;
  std::vector<int> touched_;  // instr_buffers' scratch
  int64_t settled_at_ = 0;    // --trace: when the running instruction's wait for posted operations ended (0: none)
  void mark_zero(int b);
  bool take_zero(int b);                // clears the mark; whether it was set
  void settle_zeros(const PInstr& in);  // fills the marked buffers `in` touches (not a first writer's target)
  void settle_all_zeros();
  bool first_write(const PInstr& in);  // a first writer of a marked buffer, done; false: run it as usual
  bool whole_write(const PInstr& in);  // first_write's writes covering the whole buffer
  // add_to_sources_freed_next(P) (collectives.h): an AddTo whose source
  // dies next hands its block to a fresh target instead of copying it.
  // Made at first use and again for a new program (the profile swaps bodies).
  std::vector<char> src_dies_;
  const PInstr* src_dies_base_ = nullptr;
  // A new buffer of `numel` elements holding `box` of `from` (a memo's box), times scale.
  DeviceBuffer extract_box(const DeviceBuffer& from, int64_t numel, const BoxCopy& box, float scale);
  void set_buf(int b, DeviceBuffer v);
  void free_buf(int b);
  void lset(int t, DeviceBuffer v);
  void drop_local(int t);
  void read_in_place(int t, int b, int64_t at,
                     int64_t row_stride = 0);  // local tensor t reads buffer b from element `at` (no copy)
  void release_buf(int b);  // Free: now, or parked while a send of it is in flight (until its release point)
  void unref(int b);
  std::vector<int> buf_refs_;     // kernel inputs reading each buffer in place
  std::vector<char> free_later_;  // freed by the program while still read in place
  // Local tensor t's view, written into an existing view (its shape's
  // storage reused): read in place from a buffer, or its own block.
  // `backward`, `input`: the node reading it there, when a backward node;
  // an input it needs the shape of only (OpRow::backward_reads) may have
  // been dropped after the forward, and gets a view with no data.
  void lview_into(int t, TensorView& v, const sema::OpNode* backward = nullptr, size_t input = 0);
  // Per instruction of P (by index), filled at its first run: the box its
  // copy moves and, for a SliceIn, where it reads its buffer in place (-1:
  // it copies). Pieces are fixed per program, so these are too; building a
  // box each time cost five allocations, and a step of alphafold2 tiny dap
  // runs some 12,000 such instructions per rank.
  struct InstrMemo {
    bool ready = false;
    int64_t in_place = -1;
    int64_t row_stride = 0;  // of an in-place slice (slice_row_stride)
    BoxCopy box;
  };
  std::vector<InstrMemo> memo_;
  const PInstr* memo_base_ = nullptr;
  // The memo of `in` (an instruction of P), its box made by `make` at first use.
  template <class Make>
  const InstrMemo& memo(const PInstr& in, Make&& make);
  std::vector<TensorView> ins_, outs_;  // run_local's views, reused from node to node
  // Kernel outputs written in place, and collects that tile a fresh buffer
  // (plan_executor_views.cpp). Per instruction of P, made at first use and
  // again for a new program (the profile swaps bodies).
  struct OutWrite {
    int collect = -1;        // the CollectOut's instruction index
    int node = -1;           // the local node that produces the output
    size_t output = 0;       // its index among that node's outputs
    int64_t offset = 0;      // the region's first element in the buffer
    int64_t row_stride = 0;  // the buffer's row length when the region is its columns; 0: contiguous
    bool whole = false;      // the region is the whole buffer
  };
  std::vector<std::vector<OutWrite>> out_writes_;  // by Forward instruction
  std::vector<char> tile_;                         // by collect: its region of a fresh buffer that its collects tile
  std::vector<char> wrote_;  // by CollectOut: the kernel wrote it in place this time (2: into fresh zeros, 1: added)
  const PInstr* views_base_ = nullptr;
  struct ActiveOut {
    int t;
    float* data;
    int64_t row_stride;
    bool accumulate;
  };
  std::vector<ActiveOut> active_outs_;  // the running Forward's outputs written in place
  // Gradient partial sums added up by their kernels (plan_executor_chains.cpp).
  struct GradChain {
    int collect = -1;   // the CollectGrad left with nothing to add
    int carrier = -1;   // the run's first CollectGrad, whose kernel's block takes the sum
    int node = -1;      // the backward node that makes the gradient
    size_t output = 0;  // its index among that node's outputs
  };
  std::vector<std::vector<GradChain>> grad_chains_;  // by Backward instruction
  std::vector<char> chained_;                        // by CollectGrad: its gradient was added by its kernel
  void plan_grad_chains();
  void prepare_grad_chains(const PInstr& in);  // Backward: its gradients that join a chain
  bool chained(const PInstr& in);              // a CollectGrad whose gradient is in the chain (clears the mark)
  void plan_views();
  void plan_tiles();
  void plan_out_writes();
  size_t instr_index(const PInstr& in) const;  // P.instrs.size() for an instruction outside P
  void prepare_out_writes(const PInstr& in);   // Forward: which outputs go in place, and how
  bool tile_write(const PInstr& in);           // a collect that writes its tile (no add, no zeros)
  int written_in_place(const PInstr& in);      // a CollectOut its kernel wrote: wrote_'s mark, cleared
  std::vector<DeviceBuffer> packed_;    // run_local: strided inputs packed for a backend that reads them packed
  // By local tensor id: held in bf16 (bf16 activation storage,
  // lowering/bf16_storage.h); empty when every tensor keeps its dtype.
  std::vector<char> bf16_local_;
  // Local tensor t holds bf16 in its own block (not read in place from an f32 buffer).
  bool local_bf16(int t) const {
    return !bf16_local_.empty() && bf16_local_[static_cast<size_t>(t)] && (*alias_cur)[static_cast<size_t>(t)] < 0;
  }
  TensorView fview(const DeviceBuffer& b) const { return TensorView{b.data(), sema::DType::F32, {b.numel()}}; }
  void run_local(int n);
  void track(int64_t delta);
  void finish_transfers();
  void load_input(const PInstr& in);

  std::map<std::pair<int, int64_t>, DeviceBuffer> input_cache_;  // (input buffer, data index) -> its piece
  std::map<int, DeviceBuffer> data_;  // input tensor -> the data file, whole, uploaded once (empty: synthetic data)
  // Posted operations whose results have consumers: receives (pipelined
  // programs post them early; the Wait on the buffer is their first
  // consumer) and bucketed gradient allreduces (the first instruction
  // touching a bucket's gradients: Update, the norm, the step end).
  PendingTable pending_;
  PendingTable late_;
  std::set<int> recv_open_;  // receives posted and not yet reached by their Wait (a lowering bug at the step end)  // the consume-before-wait hook's buckets: completed at the step end only
  // Sends in flight until their release point or the step's end, by
  // buffer; a buffer freed while a send of it is in flight is parked (its
  // data and memory kept) until then.
  using Sends = std::vector<std::unique_ptr<PendingCollective>>;
  std::map<int, Sends> send_pending_;
  std::map<int, std::pair<DeviceBuffer, Sends>> send_parked_;
  // (peer, tag) of a Wait -> the sends it completes (buffer, request), from
  // the Sends' release points (PInstr::index).
  std::map<std::pair<int, uint32_t>, std::vector<std::pair<int, PendingCollective*>>> send_release_;
  void release_sends(const PInstr& wait);
  void post_bucket(const PInstr& in);
};

}  // namespace nns::backend
