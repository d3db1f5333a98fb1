// Collectives between GPU ranks over NCCL: the operations of the CPU
// Communicator (communicator.h) on device pointers, for the CUDA backend.
// Built only when CMake found NCCL (target nns_nccl, NNS_HAVE_NCCL=1).
//
// Setup: rank 0 makes an ncclUniqueId and the host Communicator (Gloo, the
// existing rendezvous) broadcasts its bytes to every rank; each rank then
// joins the world NCCL communicator on its CUDA device. The host
// Communicator is used for nothing else.
//
// Streams: every operation is queued on the communicator's own collective
// stream (stream()) and returns without waiting for the GPU. wait_for(s)
// makes the collective stream wait for the work queued on a compute stream
// so far (an event, no device-wide synchronisation); synchronize() blocks
// the host until the collective stream is idle. Buffers must stay alive and
// unchanged until then.
//
// Groups: as in Communicator, a sorted list of distinct global ranks ({} is
// the world). NCCL makes sub-communicators with ncclCommSplit, which is
// collective over the whole world (non-members pass NCCL_SPLIT_NOCOLOR), so
// they cannot be made lazily on a member's first use: create_groups() takes
// every group of the run, in the same order on every rank, and splits one
// communicator per group (color = the group's index in the run, key = the
// global rank, so member indices follow the group's order). They are cached
// for the communicator's lifetime; a collective on a group not created so is
// an std::invalid_argument.
//
// Point-to-point: send/recv between global ranks on the world communicator.
// NCCL has no tags: a pair's transfers match in the order they are queued.
// A send holds its stream until the peer's receive runs, so an exchange
// in both directions (or with this rank itself) goes through send_recv,
// which queues both as one NCCL group.
//
// Channels (the plan executor's pipeline transfers, posted early and
// waited late): one communicator of two ranks and one stream per directed
// pair src -> dst, made by create_channels() (collective over the world,
// the same list on every rank, like create_groups). On channel src -> dst
// only src sends and only dst receives, in the order they are queued, so a
// send blocked on its peer holds up only that direction: this rank's other
// transfers and collectives, on other streams, go on.
//
// Failures: every NCCL call runs in non-blocking mode and is polled with
// ncclCommGetAsyncError until done, bounded by the timeout, as is
// synchronize(). An NCCL error (ncclGetErrorString, and NCCL's last-error
// text) or a timeout throws CommError naming the call, the group and this
// rank, after ncclCommAbort of every communicator of this rank, so that a
// rank that died never leaves the others spinning in a kernel. The
// NcclCommunicator is unusable afterwards (later calls throw at once).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "backend/runtime/comm/communicator.h"

namespace nns::backend {

class NcclCommunicator {
 public:
  // Collective over every rank of `host`: joins the world NCCL
  // communicator on CUDA device `device` (made current on this thread).
  NcclCommunicator(Communicator& host, int device, std::chrono::milliseconds timeout);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  cudaStream_t stream() const { return stream_; }

  // Collective over the world: one ncclCommSplit per group not created yet
  // (see the header comment). Throws std::invalid_argument for a malformed group.
  void create_groups(const std::vector<Group>& groups);

  // The Communicator's contracts, on device memory (fp32), queued on stream().
  void allreduce(float* buf, size_t count, const Group& group = {});
  void allgather(const float* in, float* out, size_t chunk, const Group& group = {});
  void reduce_scatter(const float* in, float* out, size_t chunk, const Group& group = {});
  // Grouped ncclSend/ncclRecv with every member (itself included).
  void all_to_all(const float* in, float* out, size_t chunk, const Group& group = {});
  void broadcast(float* buf, size_t count, int root, const Group& group = {});
  void send(const float* buf, size_t count, int dst);
  void recv(float* buf, size_t count, int src);
  // Sends `send_count` to `dst` and receives `recv_count` from `src` as one
  // NCCL group (either count may be 0 to leave that side out).
  void send_recv(const float* send_buf, size_t send_count, int dst, float* recv_buf, size_t recv_count, int src);

  // Collective over the world: one ncclCommSplit and one stream per
  // directed pair (src, dst) not made yet; `pairs` holds distinct pairs of
  // distinct global ranks, in the same order on every rank.
  void create_channels(const std::vector<std::pair<int, int>>& pairs);
  // Queued on channel (rank(), dst) / (src, rank()); std::invalid_argument
  // for a channel not created.
  void channel_send(const float* buf, size_t count, int dst);
  void channel_recv(float* buf, size_t count, int src);
  cudaStream_t channel_stream(int src, int dst) const;

  // The collective stream waits for the work queued on `producer` so far.
  void wait_for(cudaStream_t producer);
  // `consumer` waits for the work queued on `on` (the collective stream or
  // a channel's) so far: an event, no host synchronisation.
  void signal(cudaStream_t on, cudaStream_t consumer);
  // Blocks until every operation queued so far has finished on the GPU.
  void synchronize();

 private:
  struct Sub {
    ncclComm_t comm = nullptr;
    Group members;
  };
  const Sub& sub(const Group& group) const;  // {} = the world
  static int member_index(const Sub& s, int global_rank, const char* what);
  // `r` of NCCL call `what` on `comm`: ncclInProgress is polled to the end.
  void check(ncclResult_t r, ncclComm_t comm, const char* what, const Group& group);
  void wait_ready(ncclComm_t comm, const char* what, const Group& group);
  [[noreturn]] void fail(const std::string& what, const Group& group, const std::string& cause);
  void usable(const char* what) const;
  void abort_all();
  std::chrono::steady_clock::time_point deadline() const { return std::chrono::steady_clock::now() + timeout_; }

  int rank_ = 0, size_ = 1, device_ = 0;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // wait_for's event
  Sub world_;
  std::map<Group, Sub> groups_;
  struct Channel {
    ncclComm_t comm = nullptr;  // null on ranks outside the pair
    cudaStream_t stream = nullptr;
  };
  std::map<std::pair<int, int>, Channel> channels_;
  const Channel& channel(int src, int dst) const;
  int next_color_ = 0;
  bool broken_ = false;
};

}  // namespace nns::backend
