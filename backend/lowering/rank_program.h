// RankProgram: what one rank executes for one training step of a plan, as
// data. lower_plan (lower_plan.h) builds one per rank; the plan executor
// (backend/runtime/plan_runtime.h) runs it instruction by instruction, the
// program verifier (program_check.h) reads every rank's list for the order
// and grouping of collectives, and `--emit=program` prints it. There is no
// other description of what a rank does.
//
// Buffers are pieces of full-graph tensors (a box, backend/lowering/
// geometry.h) that live from the instruction that creates them to the Free
// that lowering inserts after their last use; parameters and accumulated
// gradients live across steps. Each sub-op a rank runs is a kernel: the top-
// level op elaborated again on its slice into the program's local graph
// (its forward and backward nodes), so that it is printable and the runtime
// never calls the interpreter.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/geometry.h"
#include "semantics/autograd.h"
#include "semantics/graph.h"
#include "semantics/train_spec.h"

namespace nns::backend {

struct BufferDecl {
  enum Role : uint8_t {
    Param,    // a parameter's piece (persistent; the optimizer state lives beside it)
    Accum,    // a parameter's accumulated gradient for the step (persistent, read by last_gradients)
    Input,    // a data input's piece for one micro-batch
    Value,    // an op output's piece for one micro-batch
    Grad,     // a tensor's gradient piece for one micro-batch
    Contrib,  // an op's gradient contribution to one input, before its adapter
    Transit,  // an intermediate state of an adapter (after a collective, a copy)
    Bucket,   // a parameter gradient waiting for its bucket's fused allreduce
    Shard,    // zero1: the shard of a parameter's piece this rank updates (persistent, beside its optimizer state)
  };
  Role role = Value;
  int tensor = -1;  // full-graph tensor
  int mb = -1;      // micro-batch; -1 for buffers that live across micro-batches
  Piece piece;      // the box it holds (and the partial-sum / copy labels it was created with)
};
const char* role_name(BufferDecl::Role r);

// One sub-op this rank runs, elaborated on its slice.
struct SubOpKernel {
  int subop = -1;  // index into the plan's sub-ops
  int node = -1;   // the top-level op of the full graph
  std::vector<Piece> in_slices, out_slices;  // the sub-op's operand slices (full-tensor coordinates)
  // Elaborated into RankProgram::local (empty when lowered for structure only).
  bool elaborated = false;
  sema::OpInstance inst;
  std::vector<int> dy;   // per output: the local tensor seeding its gradient (-1: not differentiable)
  sema::Backward bwd;    // backward nodes and the local gradients of inst.inputs
  // B/W split (zero-bubble schedules): bwd.nodes computes the gradients of
  // the activation inputs (B), wgrad_nodes those of the weights (W), run
  // later by BackwardW. Empty when the backward runs whole.
  std::vector<int> wgrad_nodes;
  float scale = 1.f;     // share of a mean-type loss this slice computes (registry fact)
  // A primitive linear: its nodes (linear and its backward) read inputs 0
  // and 1 (x, w) as matrices, which may be row-strided views of a buffer
  // (slice_row_stride). Set with or without the kernel's body, so that a
  // structure-only lowering reads its slices as the executed one does.
  bool row_strided_inputs = false;
  bool recompute = false;
  // Per input (empty: none): regather() — the input reaches the kernel
  // through all-gathers only and is dropped after the forward; the
  // backward gathers it again from the shard and slices it in anew
  // (lower_emit.cpp), so that only the shard stays between the two.
  std::vector<char> regather_inputs;
  bool regathers(size_t input) const { return input < regather_inputs.size() && regather_inputs[input]; }
  // When the executor drops a local tensor before FreeKernel, so that a
  // kernel's working set is what its remaining nodes still read, not every
  // tensor it made (plan_releases): per position in inst.nodes (resp.
  // bwd.nodes), the tensors whose last reader that node is. Never the
  // kernel's inputs and outputs, what the backward (B or W) reads, or the
  // gradients CollectGrad copies out.
  // A kernel that is not recomputed also drops, after its forward, the
  // input copies its backward does not read.
  std::vector<std::vector<int>> fwd_release, bwd_release;
  // Per output: dropped right after its CollectOut (the backward does not
  // read it; the buffer it was collected into holds the value).
  std::vector<char> drop_after_collect;
};

// Fills kn's release lists from its nodes (after its backward, and any
// B/W split, are final).
void plan_releases(const sema::Graph& local, SubOpKernel& kn);

struct RankProgram;
struct PInstr;
// Whether a SliceIn reads its source in place instead of copying it, and
// where (the element offset of the slice in the buffer; -1: a copy): an
// unscaled slice that is contiguous in the buffer (its whole piece, or
// rows of it: a head group of a weight), from a buffer nothing writes once
// kernels read it (a parameter, a data input, an op's value, an adapter's
// result). The kernel then holds no copy of its weights, and co-located
// kernels reading one activation (coshard pieces) share it: the buffer
// lives until its Free and the last kernel reading it has dropped it.
// A linear's x or w (SubOpKernel::row_strided_inputs) may also be
// row-strided: all of each row but the last dimension's columns (a
// contraction split: coshard), read in place with the buffer's row length
// as its stride (slice_row_stride; TensorView::row_stride in the runtime).
int64_t slice_in_place(const RankProgram& prog, const PInstr& in);
// The row stride of an in-place slice (elements), 0 when it is contiguous.
int64_t slice_row_stride(const RankProgram& prog, const PInstr& in);
// A CollectOut whose kernel output is the whole of its buffer, unscaled,
// and not a partial sum (which a collective may complete in place). Into a
// fresh buffer (allocated, untouched since: its zeros not yet made) the
// executor hands the kernel's block over instead of adding it, and a kernel
// that still needs its output then reads it there, in place; the memory
// replay counts the same (memory_replay.h).
bool collect_out_whole(const RankProgram& prog, const PInstr& in);

struct PInstr {
  enum Kind : uint8_t {
    // buffers
    Alloc,      // b: zero-filled (re-zeroed if it exists)
    Free,       // a
    LoadInput,  // b <- this rank's piece of data input `tensor` for micro-batch mb
    Extract,    // b <- the box of b read from a, times `scale` (a value part cut finer)
    AddTo,      // b += scale * a (same box)
    Insert,     // the part of b's box inside a's box <- a (assembling a piece from received parts)
    // compute
    SliceIn,      // kernel's local input `index` <- its slice read from a, times `scale`
    Forward,      // run the kernel's forward nodes (again, for a recompute)
    CollectOut,   // b += kernel output `index` (times the kernel's loss share)
    DropForward,  // free the kernel's forward outputs (recompute: only its inputs stay)
    SeedGrad,     // b = 1 (the loss gradient)
    SliceGrad,    // kernel's output gradient `index` <- its slice of a (zeros when a < 0), times `scale`
    Backward,     // run the kernel's backward nodes (its B part when split)
    BackwardW,    // run the kernel's weight-gradient nodes (W of a B/W split)
    CollectGrad,  // b += the kernel's gradient of input `index`
    FreeKernel,   // free every local tensor of the kernel
    // communication: `group` indexes LoweredPlan::groups (global ranks, in
    // the order of the collective's members); `edge`/`step` name the comm
    // edge and adapter step a collective realises; `geom` its block boxes
    AllReduce,        // a, in place (partial sums summed)
    AllGather,        // a -> b
    ReduceScatter,    // a -> b
    AllToAll,         // a -> b
    Send,             // a to global rank `peer`, `tag`; `index`: the tag of the peer's message whose
                      // Wait completes this send (the peer sends it only after waiting for ours), where
                      // a's memory goes if a Free came first; -1: the step's end (lower_releases.cpp)
    Recv,             // b from global rank `peer`, `tag`: posted, completes at the Wait on b
    Wait,             // until the Recv into a has arrived
    BucketAllReduce,  // the buffers of bucket `index`, fused into one allreduce
    ReplicaAverage,   // a, allreduced over the replicas' same device, times `scale`;
    // consecutive ones over one group with one scale are the replicas'
    // gradient bucket: they run as one allreduce of their concatenation.
    // With count > 1 (LowerOptions::distributed_optimizer) a reduce-scatter
    // instead: only this replica's part of a, the box of its ParamSlot's
    // Shard (1/count of a's box), holds the average, which Update reads
    // (A ReduceScatter or AllGather with edge -1 is a zero1 parameter's:
    // its bucketed gradient a -> the shard's gradient b, or its updated
    // Shard a -> its Param b; `index` is the ParamSlot; with count > 1 the
    // distributed optimizer's, gathered with the others of bucket `step`.)
    // step
    LossShare,      // the step loss += scale * a's scalar / micro-batches (scale: 1 / the loss's copies)
    LossAllReduce,  // step loss and squared gradient norm, over `group` (every rank)
    Clip,           // global-norm clipping of every Accum buffer
    Update,         // optimizer update of parameter a with gradient b; `index`: its ParamSlot
    // (a a Shard: the part of b in a's box when b's box is larger)
  };
  Kind kind = Alloc;
  int16_t mb = -1;  // micro-batch (lower_plan refuses more than 32,767)
  int a = -1, b = -1;
  int kernel = -1, index = -1;
  int edge = -1, step = -1, geom = -1;
  int group = -1, peer = -1;
  uint32_t tag = 0;
  int32_t count = 0;  // AllToAll: elements per member block (32-bit: lowering refuses larger blocks)
  float scale = 1.f;
  bool is_collective() const;
};
// 52 bytes: a 1,000-micro-batch program holds millions of them.
static_assert(sema::kMaxMicroBatches <= std::numeric_limits<int16_t>::max(), "PInstr::mb holds every micro-batch");
static_assert(sizeof(PInstr) <= 52, "PInstr grew");
const char* instr_name(PInstr::Kind k);

// Block boxes of a collective, in member order: AllGather reads block i of
// the result from member i (recv); ReduceScatter sends member i the box
// send[i]; AllToAll sends send[i] and receives recv[i].
struct CollectiveGeom {
  std::vector<Piece> send, recv;
};

struct ParamSlot {
  int tensor = -1;
  int param = -1;  // Param buffer
  int accum = -1;  // Accum buffer; -1 when this rank receives no gradient for it
  bool trainable = false;  // has optimizer state
  int shard = -1;  // zero1: the Shard buffer that Update updates and the optimizer state covers; -1: the whole Param
  int state() const { return shard >= 0 ? shard : param; }  // the buffer whose box the optimizer state covers
};

struct RankProgram {
  int rank = 0, device = 0, replica = 0;
  sema::Graph local;                   // the kernels' elaborated local graphs
  std::vector<SubOpKernel> kernels;
  std::vector<BufferDecl> buffers;
  std::vector<PInstr> instrs;          // one training step, micro-batches unrolled (in schedule order)
  // Pipeline schedules: the tasks this rank runs, in program order, and
  // where each starts in instrs (for --emit=schedule and the trace).
  struct TaskSpan {
    int segment = -1, mb = 0;
    uint8_t phase = 0;  // sema::PipeTask::Phase
    int first = 0, last = 0;  // instruction range [first, last)
  };
  std::vector<TaskSpan> tasks;
  std::vector<CollectiveGeom> geoms;
  std::vector<std::vector<int>> buckets;  // per bucket (key order): its Bucket buffers, in tensor order
  std::vector<ParamSlot> params;       // parameters this rank holds, in tensor order
  uint32_t tags = 0;                   // send/recv tags used per step
  int replayed = 0;                    // micro-batches whose emission was micro-batch 1's, copied (lower_replay.cpp)
  // A skeleton (LowerOptions::moved_skeletons): this device's program is
  // program `moved_from` of its LoweredPlan (its orbit's representative)
  // moved along the plan's symmetry (rank_symmetry.h), and only its
  // communication and update instructions are held, each at instr_at[i] of
  // the whole moved program. Its buffers, kernels, parameters and buckets
  // are the representative's moved, which keeps every extent, role,
  // tensor and count: LoweredPlan::body gives them. -1: a whole program.
  int moved_from = -1;
  std::vector<uint32_t> instr_at;
  // Instruction i's place in the whole program.
  size_t place(size_t i) const { return instr_at.empty() ? i : instr_at[i]; }
};

struct LoweredPlan {
  std::string plan;
  int devices = 1, replicas = 1, micro_batches = 1;
  int ranks() const { return devices * replicas; }
  // The derived communication the programs were lowered from: its own copy,
  // or the caller's when LowerOptions::share_comm says it outlives this.
  // (Empty, not null, in a LoweredPlan built by hand.)
  std::shared_ptr<const CommPlan> comm = std::make_shared<const CommPlan>();
  std::vector<int> edges;                // the comm edges the programs run, ascending
  std::vector<std::vector<int>> groups;  // interned collective groups (global ranks)
  std::vector<RankProgram> programs;     // by rank (one, for a rank lowering only itself)
  std::vector<std::string> notes;        // what lowering decided that a user should know (zero1 parameters left whole)
  // Rank symmetry (rank_symmetry.h): the period the plan's devices repeat
  // with (0: none found or not looked for), and how many programs were
  // moved from their orbit's representative instead of lowered.
  int symmetry_period = 0, moved = 0;
  double symmetry_ms = 0;  // how long finding the symmetry took
  double moved_ms = 0;     // how long moving the programs (or making the skeletons) took
  // The whole program whose buffers, kernels, parameters and buckets p's
  // instructions refer to: p itself, or the representative a skeleton was
  // moved from (RankProgram::moved_from).
  const RankProgram& body(const RankProgram& p) const {
    return p.moved_from >= 0 ? programs[static_cast<size_t>(p.moved_from)] : p;
  }
  // How many programs are skeletons.
  int skeletons = 0;
  // --emit=program: every program, deterministic.
  std::string dump(const sema::Graph& g) const;
  std::string dump_rank(const sema::Graph& g, const RankProgram& p) const;
  // One instruction of p as --emit=program prints it, without indentation
  // ("mb0 allreduce b5 count 32 over ranks {0,1}  (%3 embedding#0 -> add#0, step 1)").
  std::string instr_text(const sema::Graph& g, const RankProgram& p, const PInstr& in) const;
  // The collectives a rank issues in one step, one line each, as the
  // Communicator's trace writes them (NNS_COMM_TRACE): "allreduce 2048 {0,1}".
  std::vector<std::string> collective_trace(const RankProgram& p) const;
};

}  // namespace nns::backend
