#include "backend/runtime/comm/nccl_communicator.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace nns::backend {

namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Non-blocking communicators: a call may return ncclInProgress and finish in
// the background, which ncclCommGetAsyncError reports; that polling is what
// lets a timeout (and ncclCommAbort) end a wait on a rank that died.
ncclConfig_t nonblocking_config() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  return c;
}

void validate(const Group& g, int size) {
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] < 0 || g[i] >= size || (i > 0 && g[i] <= g[i - 1]))
      throw std::invalid_argument("NCCL group " + group_name(g) + ": members must be distinct global ranks in ascending order below " +
                                  std::to_string(size));
  }
  if (g.empty()) throw std::invalid_argument("NCCL group {}: create_groups lists explicit members ({} is the world, which always exists)");
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& host, int device, std::chrono::milliseconds timeout)
    : rank_(host.rank()), size_(host.size()), device_(device), timeout_(timeout) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  ncclUniqueId id{};
  if (rank_ == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) fail("ncclGetUniqueId", {}, ncclGetErrorString(r));
  }
  // The id is opaque bytes: the host rendezvous carries them unchanged.
  host.broadcast_bytes(&id, sizeof id, 0);
  ncclConfig_t config = nonblocking_config();
  world_.members = host.world();
  // The handle exists once the call returns (its setup may go on in the
  // background): read it only then.
  ncclResult_t r = ncclCommInitRankConfig(&world_.comm, size_, id, rank_, &config);
  check(r, world_.comm, "ncclCommInitRankConfig", {});
}

NcclCommunicator::~NcclCommunicator() {
  // A clean close flushes queued work (ncclCommFinalize, polled within the
  // timeout); after a failure, or if that does not finish, abort instead.
  if (!broken_) {
    try {
      auto close = [&](ncclComm_t c) {
        if (!c) return;
        ncclResult_t r = ncclCommFinalize(c);
        if (r == ncclInProgress) wait_ready(c, "ncclCommFinalize", {});
        else if (r != ncclSuccess) fail("ncclCommFinalize", {}, ncclGetErrorString(r));
      };
      for (auto& [g, s] : groups_) close(s.comm);
      for (auto& [pr, c] : channels_) close(c.comm);
      close(world_.comm);
      for (auto& [g, s] : groups_)
        if (s.comm) ncclCommDestroy(s.comm);
      for (auto& [pr, c] : channels_)
        if (c.comm) ncclCommDestroy(c.comm);
      channels_.clear();
      if (world_.comm) ncclCommDestroy(world_.comm);
      groups_.clear();
      world_.comm = nullptr;
    } catch (const CommError&) {
      // fail() aborted every communicator already.
    }
  }
  for (auto& [pr, c] : channels_)
    if (c.stream) cudaStreamDestroy(c.stream);
  if (ready_) cudaEventDestroy(ready_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::abort_all() {
  broken_ = true;
  for (auto& [g, s] : groups_)
    if (s.comm) ncclCommAbort(s.comm);
  for (auto& [pr, c] : channels_)
    if (c.comm) {
      ncclCommAbort(c.comm);
      c.comm = nullptr;  // the stream stays, destroyed with the communicator
    }
  if (world_.comm) ncclCommAbort(world_.comm);
  groups_.clear();
  world_.comm = nullptr;
}

void NcclCommunicator::fail(const std::string& what, const Group& group, const std::string& cause) {
  abort_all();
  throw CommError("NCCL " + what + " on group " + group_name(group.empty() ? world_.members : group) + " (rank " + std::to_string(rank_) +
                  "): " + cause + "; this rank's NCCL communicators were aborted");
}

void NcclCommunicator::usable(const char* what) const {
  if (broken_) throw CommError(std::string("NCCL ") + what + ": the communicator failed earlier and was aborted");
}

void NcclCommunicator::wait_ready(ncclComm_t comm, const char* what, const Group& group) {
  const Clock::time_point end = deadline();
  while (true) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) fail(what, group, std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const char* last = ncclGetLastError(comm);
      fail(what, group, std::string(ncclGetErrorString(state)) + (last && *last ? std::string(" (") + last + ")" : ""));
    }
    if (Clock::now() > end)
      fail(what, group, "not done after " + std::to_string(timeout_.count()) + " ms (a rank died or never joined?)");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::check(ncclResult_t r, ncclComm_t comm, const char* what, const Group& group) {
  if (r == ncclSuccess) return;
  if (r == ncclInProgress && comm) return wait_ready(comm, what, group);
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  fail(what, group, std::string(ncclGetErrorString(r)) + (last && *last ? std::string(" (") + last + ")" : ""));
}

void NcclCommunicator::create_groups(const std::vector<Group>& groups) {
  usable("ncclCommSplit");
  for (const Group& g : groups) validate(g, size_);
  for (const Group& g : groups) {
    if (groups_.count(g)) continue;  // every rank holds the same groups, so every rank skips it
    const bool member = std::binary_search(g.begin(), g.end(), rank_);
    const int color = next_color_++;
    ncclConfig_t config = nonblocking_config();
    Sub s;
    s.members = g;
    ncclResult_t r = ncclCommSplit(world_.comm, member ? color : NCCL_SPLIT_NOCOLOR, rank_, &s.comm, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, world_.comm, "ncclCommSplit", g);
    // A non-member gets no communicator: its part of the split completes on the world's.
    wait_ready(member ? s.comm : world_.comm, "ncclCommSplit", g);
    groups_.emplace(g, std::move(s));
  }
}

const NcclCommunicator::Sub& NcclCommunicator::sub(const Group& group) const {
  if (group.empty()) return world_;
  auto it = groups_.find(group);
  if (it == groups_.end())
    throw std::invalid_argument("NCCL group " + group_name(group) + " was not created: create_groups() must list every group up front");
  if (!it->second.comm) throw std::invalid_argument("NCCL group " + group_name(group) + ": rank " + std::to_string(rank_) + " is not a member");
  return it->second;
}

int NcclCommunicator::member_index(const Sub& s, int global_rank, const char* what) {
  for (size_t i = 0; i < s.members.size(); ++i)
    if (s.members[i] == global_rank) return static_cast<int>(i);
  throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(global_rank) + " is not in group " + group_name(s.members));
}

void NcclCommunicator::allreduce(float* buf, size_t count, const Group& group) {
  usable("ncclAllReduce");
  const Sub& s = sub(group);
  check(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, s.comm, stream_), s.comm, "ncclAllReduce", group);
}

void NcclCommunicator::allgather(const float* in, float* out, size_t chunk, const Group& group) {
  usable("ncclAllGather");
  const Sub& s = sub(group);
  check(ncclAllGather(in, out, chunk, ncclFloat, s.comm, stream_), s.comm, "ncclAllGather", group);
}

void NcclCommunicator::reduce_scatter(const float* in, float* out, size_t chunk, const Group& group) {
  usable("ncclReduceScatter");
  const Sub& s = sub(group);
  check(ncclReduceScatter(in, out, chunk, ncclFloat, ncclSum, s.comm, stream_), s.comm, "ncclReduceScatter", group);
}

void NcclCommunicator::all_to_all(const float* in, float* out, size_t chunk, const Group& group) {
  usable("all_to_all");
  const Sub& s = sub(group);
  const int n = static_cast<int>(s.members.size());
  check(ncclGroupStart(), s.comm, "ncclGroupStart (all_to_all)", group);
  for (int i = 0; i < n; ++i) {
    // Peers are member indices of the group's communicator.
    check(ncclSend(in + static_cast<size_t>(i) * chunk, chunk, ncclFloat, i, s.comm, stream_), s.comm, "ncclSend (all_to_all)", group);
    check(ncclRecv(out + static_cast<size_t>(i) * chunk, chunk, ncclFloat, i, s.comm, stream_), s.comm, "ncclRecv (all_to_all)", group);
  }
  check(ncclGroupEnd(), s.comm, "ncclGroupEnd (all_to_all)", group);
}

void NcclCommunicator::broadcast(float* buf, size_t count, int root, const Group& group) {
  usable("ncclBroadcast");
  const Sub& s = sub(group);
  const int root_index = member_index(s, root, "broadcast root");
  check(ncclBroadcast(buf, buf, count, ncclFloat, root_index, s.comm, stream_), s.comm, "ncclBroadcast", group);
}

void NcclCommunicator::send(const float* buf, size_t count, int dst) { send_recv(buf, count, dst, nullptr, 0, -1); }

void NcclCommunicator::recv(float* buf, size_t count, int src) { send_recv(nullptr, 0, -1, buf, count, src); }

void NcclCommunicator::send_recv(const float* send_buf, size_t send_count, int dst, float* recv_buf, size_t recv_count, int src) {
  usable("send/recv");
  if ((send_count > 0 && (dst < 0 || dst >= size_)) || (recv_count > 0 && (src < 0 || src >= size_)))
    throw std::invalid_argument("NCCL send/recv: peer outside the world of " + std::to_string(size_) + " rank(s)");
  ncclComm_t c = world_.comm;
  check(ncclGroupStart(), c, "ncclGroupStart (send/recv)", {});
  if (send_count > 0) check(ncclSend(send_buf, send_count, ncclFloat, dst, c, stream_), c, "ncclSend", {});
  if (recv_count > 0) check(ncclRecv(recv_buf, recv_count, ncclFloat, src, c, stream_), c, "ncclRecv", {});
  check(ncclGroupEnd(), c, "ncclGroupEnd (send/recv)", {});
}

void NcclCommunicator::create_channels(const std::vector<std::pair<int, int>>& pairs) {
  usable("ncclCommSplit (channels)");
  for (auto [src, dst] : pairs)
    if (src < 0 || dst < 0 || src >= size_ || dst >= size_ || src == dst)
      throw std::invalid_argument("NCCL channel " + std::to_string(src) + " -> " + std::to_string(dst) + ": two distinct ranks below " +
                                  std::to_string(size_));
  for (auto pr : pairs) {
    if (channels_.count(pr)) continue;  // every rank holds the same channels, so every rank skips it
    const bool member = pr.first == rank_ || pr.second == rank_;
    const int color = next_color_++;
    ncclConfig_t config = nonblocking_config();
    Channel c;
    // key: the sender is member 0, the receiver member 1.
    ncclResult_t r = ncclCommSplit(world_.comm, member ? color : NCCL_SPLIT_NOCOLOR, pr.first == rank_ ? 0 : 1, &c.comm, &config);
    const Group g{std::min(pr.first, pr.second), std::max(pr.first, pr.second)};
    if (r != ncclSuccess && r != ncclInProgress) check(r, world_.comm, "ncclCommSplit (channel)", g);
    wait_ready(member ? c.comm : world_.comm, "ncclCommSplit (channel)", g);
    if (member) check_cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (channel)");
    channels_.emplace(pr, c);
  }
}

const NcclCommunicator::Channel& NcclCommunicator::channel(int src, int dst) const {
  auto it = channels_.find({src, dst});
  if (it == channels_.end() || !it->second.comm)
    throw std::invalid_argument("NCCL channel " + std::to_string(src) + " -> " + std::to_string(dst) + " was not created on rank " +
                                std::to_string(rank_) + ": create_channels() must list it up front");
  return it->second;
}

cudaStream_t NcclCommunicator::channel_stream(int src, int dst) const { return channel(src, dst).stream; }

void NcclCommunicator::channel_send(const float* buf, size_t count, int dst) {
  usable("ncclSend (channel)");
  const Channel& c = channel(rank_, dst);
  check(ncclSend(buf, count, ncclFloat, 1, c.comm, c.stream), c.comm, "ncclSend (channel)", {std::min(rank_, dst), std::max(rank_, dst)});
}

void NcclCommunicator::channel_recv(float* buf, size_t count, int src) {
  usable("ncclRecv (channel)");
  const Channel& c = channel(src, rank_);
  check(ncclRecv(buf, count, ncclFloat, 0, c.comm, c.stream), c.comm, "ncclRecv (channel)", {std::min(rank_, src), std::max(rank_, src)});
}

void NcclCommunicator::signal(cudaStream_t on, cudaStream_t consumer) {
  // An event per signal: the consumer's wait binds to the work recorded
  // now, and the event may be destroyed once the wait is queued.
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t r = cudaEventRecord(e, on);
  if (r == cudaSuccess) r = cudaStreamWaitEvent(consumer, e, 0);
  cudaEventDestroy(e);
  check_cuda(r, "cudaEventRecord / cudaStreamWaitEvent");
}

void NcclCommunicator::wait_for(cudaStream_t producer) {
  check_cuda(cudaEventRecord(ready_, producer), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
}

void NcclCommunicator::synchronize() {
  usable("synchronize");
  const Clock::time_point end = deadline();
  while (true) {
    cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) fail("synchronize", {}, std::string("cudaStreamQuery: ") + cudaGetErrorString(e));
    // An NCCL kernel waiting on a dead peer never finishes: its
    // communicator's asynchronous error (or the timeout) ends the wait.
    auto poll = [&](const Sub& s, const Group& g) {
      if (!s.comm) return;
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(s.comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
        fail("synchronize", g, std::string("asynchronous error: ") + ncclGetErrorString(state));
    };
    poll(world_, {});
    for (const auto& [g, s] : groups_) poll(s, g);
    if (Clock::now() > end)
      fail("synchronize", {}, "the collective stream is not done after " + std::to_string(timeout_.count()) + " ms (a rank died or never joined?)");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace nns::backend
