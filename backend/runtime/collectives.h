// Where the plan executor's collectives run (issue 11, part 4).
//
// The executor keeps every buffer in Backend memory and hands its
// collectives to a Collectives implementation:
//   - host collectives ("gloo", make_host_collectives): the Gloo/socket-mesh
//     Communicator on host floats; on a backend whose memory is not the
//     host's (the CUDA backend, its emulation, or NNS_TEST_HOST_STAGING=1)
//     each buffer is staged through a host copy;
//   - device collectives ("nccl", comm/nccl_collectives.h, built with NCCL):
//     NCCL on the device pointers themselves, on the NCCL communicator's own
//     stream, ordered against the backend's compute stream by events.
//
// Two kinds of operation:
//   - in order (allreduce, allgather, reduce_scatter, all_to_all): the
//     result is what the next backend call sees. Host: done when the call
//     returns. Device: queued on the collective stream after the work the
//     compute stream had queued, and the compute stream waits for it (an
//     event, no host or device-wide synchronisation).
//   - posted (post_allreduce, post_send, post_recv): the call starts the
//     operation and returns a PendingCollective; its wait() is where the
//     compute stream (device) or the host (Gloo's point-to-point) starts
//     depending on it. Until then the buffers must stay alive and nothing
//     may read a result or write an input. The host allreduce completes
//     inside post (a blocking Gloo call) and its wait() does nothing: the
//     executor's bookkeeping (PendingTable) is the same on both paths, so
//     the CPU tests exercise it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/runtime/backend.h"

namespace nns::backend {

class Communicator;
struct PInstr;
struct RankProgram;
using Group = std::vector<int>;

class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Completes the operation for its consumers (idempotent); throws
  // CommError when it failed.
  virtual void wait() = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;  // "gloo" or "nccl": the banner's word
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Point-to-point setup with `peer`, called for every peer in ascending
  // order of the pair before the first post (communicator.h's rule).
  virtual void connect_peer(int peer) = 0;

  // In-order operations on backend memory (fp32); groups as in
  // communicator.h. `round_bf16`: grad_reduce = "bf16", the summands are
  // rounded to bfloat16 first (the caller's buffer may be rounded in place).
  virtual void allreduce(void* buf, int64_t count, const Group& group, bool round_bf16) = 0;
  virtual void allgather(const void* in, void* out, int64_t chunk, const Group& group) = 0;
  virtual void reduce_scatter(void* in, void* out, int64_t chunk, const Group& group, bool round_bf16) = 0;
  virtual void all_to_all(const void* in, void* out, int64_t chunk, const Group& group) = 0;

  // Posted operations (see the header comment). Send/recv match by (peer,
  // tag) on the host path; NCCL matches a pair's transfers in the order
  // they are posted (nccl_communicator.h).
  virtual std::unique_ptr<PendingCollective> post_allreduce(void* buf, int64_t count, const Group& group, bool round_bf16) = 0;
  virtual std::unique_ptr<PendingCollective> post_send(const void* buf, int64_t count, int peer, uint32_t tag) = 0;
  virtual std::unique_ptr<PendingCollective> post_recv(void* buf, int64_t count, int peer, uint32_t tag) = 0;

  // Host scalars (the step's loss and squared gradient norm): always the
  // host Communicator, whatever carries the buffers.
  virtual void allreduce_host(float* values, size_t count, const Group& group) = 0;

  // Bytes staged through host memory (host path on a backend whose memory
  // is not the host's), since construction.
  int64_t staged_to_device = 0, staged_to_host = 0;
};

// The host path: `comm` (null: one rank) on `be`'s memory, staged through
// host copies when `stage` (a backend whose memory is not the host's).
std::unique_ptr<Collectives> make_host_collectives(Communicator* comm, Backend& be, bool stage);

// Every plan buffer an instruction reads, writes or frees (the buffers a
// posted collective's consumers are found by). Kernel instructions name
// their buffers in a and b; the step-wide ones (LossAllReduce, Clip) touch
// every buffer, reported as `all`.
void instr_buffers(const RankProgram& prog, const PInstr& in, std::vector<int>& out, bool& all);

// Per instruction of prog: 1 for an AddTo whose source `a` the program
// frees before any other instruction touches it (instr_buffers; a step-wide
// one touches every buffer). The executor hands such a source's block to a
// fresh target instead of copying it (a contribution into its bucket, a
// bucket into its accumulator).
std::vector<char> add_to_sources_freed_next(const RankProgram& prog);

// The executor's "post now, wait at first use" bookkeeping: posted
// operations keyed by the plan buffers whose values they change (a bucket's
// gradients, a receive's buffer). Before an instruction runs, settle()
// completes every operation on a buffer it touches; finish() completes the
// rest (the step end). Each entry's completion runs its `done` callback
// after the PendingCollective's wait() (the executor copies a bucket's
// reduced values back there), exactly once.
class PendingTable {
 public:
  struct Entry {
    std::vector<int> buffers;
    std::unique_ptr<PendingCollective> op;  // null: nothing to wait for
    std::function<void()> done;
  };
  void post(Entry e);
  // Completes the entries touching the buffers of `in`; returns how many.
  int settle(const RankProgram& prog, const PInstr& in);
  // Completes the entries touching buffer b; returns how many.
  int complete(int b);
  int finish();
  bool empty() const { return entries_.empty(); }
  bool pending(int b) const { return by_buffer_.count(b) > 0; }

 private:
  void complete_entry(int id);
  std::map<int, Entry> entries_;              // by post order
  std::multimap<int, int> by_buffer_;         // buffer -> entry id
  int next_ = 0;
  std::vector<int> scratch_;
};

// NCCL matches a pair's transfers in the order they are queued, the host
// path by tag. Both ends queue them in the same order when every rank posts
// the transfers of each (peer, direction) in ascending tag order (a send
// and its receive share the tag). Empty when `prog` does; else which
// transfers break it ("sends to rank 2").
std::string transfers_out_of_tag_order(const RankProgram& prog);

// Which Collectives a run uses (`nns run --comm auto|gloo|nccl`).
struct CommFacts {
  std::string device;       // the resolved --device: cpu, cuda, cuda-emulation
  bool nccl_built = false;  // this nns was built with NCCL (NNS_HAVE_NCCL)
  int ranks = 1;            // ranks of the run
  int local_ranks = 1;      // ranks on this host
  int visible_gpus = 0;     // CUDA devices this process sees
  bool bf16_reduce = false;  // grad_reduce = "bf16": rounds on the host, no device path yet
};
// "gloo" or "nccl" in `out`; false with `err` (a one-line reason) when
// `requested` is not auto|gloo|nccl (`usage` true) or nccl was forced where
// it cannot run. auto takes NCCL for the real CUDA backend built with NCCL
// when every rank of the host has a GPU of its own (NCCL refuses two ranks
// on one device), else Gloo with host staging. One rank has no collectives
// to run: auto gives gloo there. `why` says why auto chose what it did.
bool choose_collectives(const std::string& requested, const CommFacts& f, std::string& out, std::string& why, std::string& err, bool& usage);

}  // namespace nns::backend
