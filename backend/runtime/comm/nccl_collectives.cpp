#include "backend/runtime/comm/nccl_collectives.h"

#include <algorithm>
#include <map>
#include <set>

#include "backend/lowering/rank_program.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/nccl_communicator.h"

namespace nns::backend {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Every rank's list of integer records, concatenated in rank order: how the
// ranks learn the groups and channels of the whole run (each lowered only
// its own program). Floats carry the integers exactly (ranks < 2^24).
std::vector<int> gather_all(Communicator& host, const std::vector<int>& mine) {
  const int n = host.size();
  float len = static_cast<float>(mine.size());
  std::vector<float> lens(static_cast<size_t>(n));
  host.allgather(&len, lens.data(), 1);
  size_t longest = 0;
  for (float l : lens) longest = std::max(longest, static_cast<size_t>(l));
  std::vector<float> padded(longest, 0.f), all(longest * static_cast<size_t>(n));
  for (size_t i = 0; i < mine.size(); ++i) padded[i] = static_cast<float>(mine[i]);
  if (longest > 0) host.allgather(padded.data(), all.data(), longest);
  std::vector<int> out;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < static_cast<size_t>(lens[static_cast<size_t>(r)]); ++i) out.push_back(static_cast<int>(all[static_cast<size_t>(r) * longest + i]));
  return out;
}

// A posted operation: an event recorded on the stream it was queued on,
// right after it; wait() makes the compute stream wait for that event.
class DevicePending : public PendingCollective {
 public:
  DevicePending(cudaStream_t on, cudaStream_t compute) : compute_(compute) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(event_, on), "cudaEventRecord");
  }
  ~DevicePending() override {
    // Unwaited (an exception unwinding the step): the compute stream still
    // must not reuse the memory before NCCL is done with it.
    if (!waited_) cudaStreamWaitEvent(compute_, event_, 0);
    cudaEventDestroy(event_);
  }
  void wait() override {
    if (waited_) return;
    check_cuda(cudaStreamWaitEvent(compute_, event_, 0), "cudaStreamWaitEvent");
    waited_ = true;
  }

 private:
  cudaStream_t compute_;
  cudaEvent_t event_ = nullptr;
  bool waited_ = false;
};

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(Communicator& host, Backend& be, int device, std::chrono::milliseconds timeout)
      : host_(host), compute_(static_cast<cudaStream_t>(be.native_stream())), nccl_(host, device, timeout) {}
  std::string name() const override { return "nccl"; }
  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }
  void connect_peer(int) override {}  // the channels were made up front (make_nccl_collectives)
  NcclCommunicator& nccl() { return nccl_; }

  void allreduce(void* buf, int64_t count, const Group& group, bool round) override {
    no_rounding(round);
    before();
    nccl_.allreduce(static_cast<float*>(buf), static_cast<size_t>(count), group);
    after();
  }
  void allgather(const void* in, void* out, int64_t chunk, const Group& group) override {
    before();
    nccl_.allgather(static_cast<const float*>(in), static_cast<float*>(out), static_cast<size_t>(chunk), group);
    after();
  }
  void reduce_scatter(void* in, void* out, int64_t chunk, const Group& group, bool round) override {
    no_rounding(round);
    before();
    nccl_.reduce_scatter(static_cast<const float*>(in), static_cast<float*>(out), static_cast<size_t>(chunk), group);
    after();
  }
  void all_to_all(const void* in, void* out, int64_t chunk, const Group& group) override {
    before();
    nccl_.all_to_all(static_cast<const float*>(in), static_cast<float*>(out), static_cast<size_t>(chunk), group);
    after();
  }
  std::unique_ptr<PendingCollective> post_allreduce(void* buf, int64_t count, const Group& group, bool round) override {
    no_rounding(round);
    before();
    nccl_.allreduce(static_cast<float*>(buf), static_cast<size_t>(count), group);
    return std::make_unique<DevicePending>(nccl_.stream(), compute_);
  }
  // NCCL has no tags: the channel's order is the match (checked at setup).
  std::unique_ptr<PendingCollective> post_send(const void* buf, int64_t count, int peer, uint32_t) override {
    cudaStream_t s = nccl_.channel_stream(nccl_.rank(), peer);
    nccl_.signal(compute_, s);
    nccl_.channel_send(static_cast<const float*>(buf), static_cast<size_t>(count), peer);
    return std::make_unique<DevicePending>(s, compute_);
  }
  std::unique_ptr<PendingCollective> post_recv(void* buf, int64_t count, int peer, uint32_t) override {
    cudaStream_t s = nccl_.channel_stream(peer, nccl_.rank());
    nccl_.signal(compute_, s);  // the buffer's allocation and zero-fill are compute-stream work
    nccl_.channel_recv(static_cast<float*>(buf), static_cast<size_t>(count), peer);
    return std::make_unique<DevicePending>(s, compute_);
  }
  void allreduce_host(float* values, size_t count, const Group& group) override { host_.allreduce(values, count, group); }

 private:
  // The selection (choose_collectives) keeps grad_reduce = "bf16" on the host path.
  static void no_rounding(bool round) {
    if (round) throw RuntimeError("internal: a bf16 gradient reduction on the NCCL path");
  }
  void before() { nccl_.wait_for(compute_); }
  void after() { nccl_.signal(nccl_.stream(), compute_); }

  Communicator& host_;
  cudaStream_t compute_;
  NcclCommunicator nccl_;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(Communicator& host, Backend& be, int device, const LoweredPlan& plan,
                                                   std::chrono::milliseconds timeout, bool host_fallback, std::string* note) {
  if (!be.native_stream()) throw RuntimeError("--comm nccl: the " + be.name() + " backend has no CUDA stream (NCCL needs --device cuda)");
  const RankProgram& P = plan.programs.at(0);
  // NCCL matches a channel's transfers in queue order: this rank must post
  // the transfers of each (peer, direction) in ascending tag order, as the
  // peer then does too. Every rank learns whether all can, before anything
  // waits on another.
  const std::string disorder = transfers_out_of_tag_order(P);
  float bad = disorder.empty() ? 0.f : 1.f;
  host.allreduce(&bad, 1);
  if (bad > 0) {
    const std::string why = "plan " + plan.plan + " posts its pipeline transfers out of tag order" +
                            (disorder.empty() ? " on another rank" : " (rank " + std::to_string(P.rank) + " " + disorder + ")") +
                            "; NCCL matches them in the order they are queued";
    if (!host_fallback) throw RuntimeError("--comm nccl: " + why + " (use --comm gloo)");
    if (note) *note = why;
    return make_host_collectives(&host, be, true);
  }

  // The run's groups and channels: the union of every rank's, sorted, so
  // that every rank splits them in the same order.
  std::vector<int> mine;
  for (const std::vector<int>& g : plan.groups)
    if (g.size() > 1) {
      mine.push_back(static_cast<int>(g.size()));
      mine.insert(mine.end(), g.begin(), g.end());
    }
  std::set<Group> groups;
  std::vector<int> all = gather_all(host, mine);
  for (size_t i = 0; i < all.size(); i += static_cast<size_t>(all[i]) + 1) groups.emplace(all.begin() + static_cast<long>(i) + 1, all.begin() + static_cast<long>(i) + 1 + all[i]);
  std::vector<int> sends;
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::Send) sends.insert(sends.end(), {P.rank, in.peer});
  std::set<std::pair<int, int>> channels;
  std::vector<int> pairs = gather_all(host, sends);
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) channels.emplace(pairs[i], pairs[i + 1]);

  auto c = std::make_unique<NcclCollectives>(host, be, device, timeout);
  c->nccl().create_groups(std::vector<Group>(groups.begin(), groups.end()));
  c->nccl().create_channels(std::vector<std::pair<int, int>>(channels.begin(), channels.end()));
  return c;
}

}  // namespace nns::backend
