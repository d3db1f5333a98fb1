// Collective communication for CPU ranks: one Communicator per rank (per
// process), wrapping Gloo over TCP. It is what the runtime executes for the
// adapters of docs/architecture.md, "Layouts and adapters" (V→R allreduce, V→D reduce_scatter, D→R
// allgather, Di→Dj all_to_all, send/recv and broadcast between device sets).
//
// Configuration, read by CommConfig::from_env (the launcher sets these;
// torchrun's, Slurm's and Open MPI's own variables are read in their place
// when a rank was started by one of them: launch_env.h):
//   NNS_RANK          this rank, 0 <= rank < world size        (default 0)
//   NNS_WORLD_SIZE    number of ranks                          (default 1)
//   NNS_MASTER_ADDR   host of rank 0, which serves the rendezvous store
//                                                            (default 127.0.0.1)
//   NNS_MASTER_PORT   TCP port of that store                   (default 29500)
//   NNS_STORE_DIR     if set, rendezvous through files in this directory of a
//                     shared file system instead of the TCP store (use a
//                     fresh, empty directory per run)
//   NNS_COMM_HOST     address this rank's Gloo transport binds and advertises
//                     (default 127.0.0.1 when the master is local, else this
//                     host's name)
//   NNS_COMM_TIMEOUT  collective timeout in seconds               (default 60)
//   NNS_STORE_SECRET  a shared secret every rank must present to the TCP
//                     store (tcp_store.h); set it for a master that is not
//                     on loopback, where the store listens on all addresses
//   NNS_HEARTBEAT_TIMEOUT  seconds a rank may fall silent before the others
//                     report it stopped and exit 70 (default 8, 0: off;
//                     heartbeat.h)
//
// Groups. Every collective runs over a sub-group of ranks given as a sorted
// list of distinct global ranks that includes this rank ({} or world() means
// all ranks). The first use of a group creates a Gloo context for it (a full
// mesh of TCP connections among its members) and a second mesh of plain
// sockets for its collectives, cached for the Communicator's lifetime. Creation is collective: every member must create
// the group, and all members must create their new groups in the same order (otherwise two ranks can each wait for the
// other inside different groups). Call create_group() up front to make that order explicit. Point-to-point send/recv
// use a private socket per pair of ranks (no Gloo context), created on the first exchange between them, with the same
// rule.
//
// Ordering and threads: within a group, members must issue the same
// collectives in the same order. Different groups may be used from
// different threads at once (each group has its own lock); one group is used
// by one thread at a time.
//
// Failures: every collective is bounded by timeout() (default 60 s). A peer
// that dies makes the collectives waiting on it fail at once (connection
// closed); a peer that is alive but never joins makes them fail when the
// timeout passes. Either way a CommError names the collective, the group
// and this rank, and the group is unusable afterwards (later calls on it
// throw at once): communication state after a partial collective is
// undefined, so the run must stop. set_timeout() applies to the calls
// that follow it.
//
// Algorithms: allreduce, allgather, all-to-all, barrier and small
// broadcasts go over a second mesh of plain sockets per group, one or two
// rounds of messages all in flight at once, sent and received by the
// calling thread (socket_mesh.h, mesh_collectives.h): Gloo's ring takes
// 2(n-1) dependent steps, each a round trip through both processes' Gloo
// event-loop threads. Allreduce sums bit for bit as Gloo's ring allreduce
// does. Send/recv go over the pair's mesh socket (p2p_channel.h). Larger
// broadcasts use Gloo's binomial tree. reduce_scatter is one all-to-all
// over the mesh and a sum of this member's blocks in member order.
//
// Lifetime: rank 0's Communicator serves the rendezvous store, so it must
// stay alive while other ranks may still create groups.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/runtime/backend.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace nns::backend {

class SocketMesh;

// A communication failure (timeout, dead peer, rendezvous failure). It is a
// RuntimeError, so the driver reports it and exits 70.
struct CommError : RuntimeError {
  using RuntimeError::RuntimeError;
};

struct CommConfig {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_dir;  // non-empty: FileStore rendezvous instead of TCP
  std::string host;       // transport address; empty: see NNS_COMM_HOST
  std::chrono::milliseconds timeout{60000};
  // The job this rank belongs to (NNS_JOB_ID, which nns's own launcher
  // makes; else torchrun's TORCHELASTIC_RUN_ID or Slurm's SLURM_JOB_ID);
  // empty: unknown, not checked. Rank 0 publishes it at the rendezvous and
  // every other rank compares, so a rank of another job on the same
  // MASTER_PORT is refused before it joins.
  std::string job_id;
  std::string store_secret;  // NNS_STORE_SECRET; empty: none
  // Silence after which a peer is reported stopped (heartbeat.h); 0: off.
  std::chrono::milliseconds heartbeat_limit{8000};

  // Reads the NNS_* variables above; throws CommError on malformed values.
  static CommConfig from_env();
};

using Group = std::vector<int>;

class Communicator {
 public:
  // Joins the run: connects to the rendezvous store (rank 0 starts it) and
  // creates the world group. Collective over all ranks; throws CommError
  // if the others do not arrive within the timeout.
  explicit Communicator(const CommConfig& config);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Group world() const;

  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds t);

  // Creates (collectively) and caches the context for `group`; a no-op if
  // it exists. Collectives call it implicitly.
  void create_group(const Group& group);

  // All buffers are fp32 and must not overlap unless stated. `group` lists
  // global ranks in ascending order; this rank's index in it is its
  // "member index" m, and n = group size.

  // buf[0..count) := elementwise sum over the group, in place.
  void allreduce(float* buf, size_t count, const Group& group = {});
  // out[i*chunk .. (i+1)*chunk) := member i's in[0..chunk).
  void allgather(const float* in, float* out, size_t chunk, const Group& group = {});
  // out[0..chunk) := sum over members of their in[m*chunk .. (m+1)*chunk).
  // `in` holds n*chunk elements and is only read. Keeps scratch per group
  // for reuse: 3*chunk floats, or 3n/4*chunk for power-of-two n.
  void reduce_scatter(const float* in, float* out, size_t chunk, const Group& group = {});
  // out[i*chunk ..) := member i's in[m*chunk ..); in and out hold n*chunk.
  void all_to_all(const float* in, float* out, size_t chunk, const Group& group = {});
  // buf[0..count) := root's buf; root is a global rank in the group.
  void broadcast(float* buf, size_t count, int root, const Group& group = {});
  // bytes[0..n) := root's bytes, moved unchanged (no arithmetic): how an
  // opaque token such as NCCL's unique id reaches every member
  // (nccl_communicator.h). Carried by broadcast() in 4-byte words.
  void broadcast_bytes(void* bytes, size_t n, int root, const Group& group = {});
  // Returns when every member has entered the barrier.
  void barrier(const Group& group = {});

  // Point-to-point between global ranks; a send matches the recv with the
  // same (peer, tag). Both block until the transfer completes (a send waits
  // for the matching recv to be posted), bounded by timeout().
  void send(const float* buf, size_t count, int dst, uint32_t tag = 0);
  void recv(float* buf, size_t count, int src, uint32_t tag = 0);

  // Non-blocking point-to-point (pipelined programs: a stage posts its
  // receives a task ahead and its sends as soon as the data is ready, and
  // computes while they are in flight). The call posts the transfer and
  // returns; Request::wait() completes it, bounded by timeout(). The buffer
  // must stay alive and unchanged until then. Matching is by (peer, tag),
  // as for send/recv, so posts need not come in the same order on both
  // sides. A Request destroyed unwaited waits for it first.
  class Request {
   public:
    ~Request();
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    void wait();  // throws CommError on failure or timeout
    bool waited() const { return waited_; }

   private:
    friend class Communicator;
    Request() = default;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    bool waited_ = false;
  };
  std::unique_ptr<Request> isend(const float* buf, size_t count, int dst, uint32_t tag = 0);
  std::unique_ptr<Request> irecv(float* buf, size_t count, int src, uint32_t tag = 0);
  // Creates the point-to-point context with `peer` (collective between the
  // two); a no-op if it exists. Call for every peer in ascending order of
  // the pair before posting, so that no two ranks wait on each other's
  // context creation.
  void connect_peer(int peer);

  // The Gloo context of a group (created if needed), for benchmarks and
  // tests that compare against raw Gloo calls on the same connections.
  std::shared_ptr<gloo::Context> gloo_context(const Group& group);

 private:
  struct GroupState;

  // Refuses a rank whose job differs from rank 0's (CommConfig::job_id).
  void check_job_identity(const CommConfig& cfg);

  // Returns the state of `group` (normalized: {} = world), creating its
  // context on first use. Validates the member list.
  GroupState& group_state(const Group& group, const std::string& kind = "g");
  // Runs fn under the group's lock and turns any failure into a CommError
  // naming `what`; a failure marks the group broken.
  template <class Fn>
  void run(const char* what, GroupState& gs, Fn&& fn);
  [[noreturn]] void fail(const char* what, GroupState& gs, const std::string& cause);
  std::unique_ptr<Request> post_p2p(bool send, float* buf, size_t count, int peer, uint32_t tag);

  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<class TcpStoreServer> server_;  // rank 0 with the TCP store
  std::unique_ptr<class Heartbeat> heartbeat_;    // multi-rank runs with heartbeats on
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::string host_;  // the address this rank's transports bind
  mutable std::mutex mu_;         // guards groups_ and timeout_
  std::mutex create_mu_;          // group creation is one at a time (see header)
  std::map<std::string, std::unique_ptr<GroupState>> groups_;
  // NNS_COMM_TRACE=PREFIX: every collective and send/recv this rank issues
  // is appended to PREFIX.rank-<rank>, one line each ("allreduce 2048
  // {0,1}", "send 512 to 1"), so tests can compare what ran with what the
  // lowered program lists.
  std::FILE* trace_ = nullptr;
  void trace(const std::string& line);
};

// "{0,2,3}": how messages name a group.
std::string group_name(const Group& group);

}  // namespace nns::backend
