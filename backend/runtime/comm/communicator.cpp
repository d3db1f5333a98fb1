#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/heartbeat.h"
#include "backend/runtime/comm/launch_env.h"

#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

#include "backend/runtime/comm/mesh_collectives.h"
#include "backend/runtime/comm/p2p_channel.h"
#include "backend/runtime/comm/socket_mesh.h"
#include "backend/runtime/comm/tcp_store.h"

namespace nns::backend {
namespace {

using Ms = std::chrono::milliseconds;

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

// Gloo prefixes messages with "[/path/file.cc:123] "; users want the text.
std::string strip_location(std::string msg) {
  if (!msg.empty() && msg[0] == '[') {
    auto close = msg.find("] ");
    if (close != std::string::npos) msg.erase(0, close + 2);
  }
  return msg;
}

std::string seconds(Ms t) {
  std::ostringstream s;
  s.precision(3);
  s << t.count() / 1000.0 << " s";
  return s.str();
}

// Gloo calls Store::get without waiting and FileStore waits a fixed 30 s;
// this adapter makes every blocking store call obey the communicator's
// current timeout.
class TimeoutStore : public gloo::rendezvous::Store {
 public:
  TimeoutStore(std::unique_ptr<gloo::rendezvous::Store> inner, std::function<Ms()> timeout)
      : inner_(std::move(inner)), timeout_(std::move(timeout)) {}
  void set(const std::string& key, const std::vector<char>& data) override { inner_->set(key, data); }
  std::vector<char> get(const std::string& key) override {
    inner_->wait({key}, timeout_());
    return inner_->get(key);
  }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(keys, timeout_()); }
  void wait(const std::vector<std::string>& keys, const Ms& timeout) override { inner_->wait(keys, timeout); }

 private:
  std::unique_ptr<gloo::rendezvous::Store> inner_;
  std::function<Ms()> timeout_;
};

// A peer fell silent (heartbeat.h): its process stopped running. This rank's
// main thread may be blocked in a collective waiting on it, which only the
// collective timeout (60 s) would end, or inside Gloo's transport, which
// cannot be interrupted; so the heartbeat thread reports and ends the
// process itself, with the runtime-fault code the launcher expects.
[[noreturn]] void stop_for_silent_peer(int rank, int peer, Ms silence) {
  const std::string msg = "nns comm: rank " + std::to_string(peer) + " sent no heartbeat for " + seconds(silence) +
                          ": it is stopped (SIGSTOP) or hung; rank " + std::to_string(rank) +
                          " stops (NNS_HEARTBEAT_TIMEOUT sets the limit)\n";
  (void)!::write(2, msg.data(), msg.size());
  ::_exit(70);
}

}  // namespace

struct Communicator::GroupState {
  Group members;
  int index = 0;  // this rank's member index
  std::string name;
  std::string key;  // kind + name: the group's prefix in the rendezvous store
  std::shared_ptr<gloo::Context> ctx;  // null for a one-member group and for a point-to-point pair
  std::mutex op_mu;
  bool broken = false;
  std::string broken_cause;
  uint32_t next_tag = 0;  // same op sequence on all members => same tags
  std::vector<float> scratch;  // reduce_scatter's work blocks, kept for reuse
  std::unique_ptr<SocketMesh> mesh;  // the collectives' sockets (mesh_collectives.h); a pair's p2p socket
  std::unique_ptr<P2pChannel> p2p;   // p2p pairs: send/recv over the mesh's socket (destroyed before it)
  std::vector<float> copies;         // the members' values an allreduce sums, kept for reuse
  int size() const { return static_cast<int>(members.size()); }
  int index_of(int global) const {
    auto it = std::lower_bound(members.begin(), members.end(), global);
    return it != members.end() && *it == global ? static_cast<int>(it - members.begin()) : -1;
  }
};

std::string group_name(const Group& group) {
  std::string s = "{";
  for (size_t i = 0; i < group.size(); ++i) s += (i ? "," : "") + std::to_string(group[i]);
  return s + "}";
}

CommConfig CommConfig::from_env() {
  CommConfig c;
  // Rank, world and master: nns's own variables, else torchrun's, Slurm's
  // or Open MPI's (launch_env.h).
  LaunchEnv launch;
  std::string err;
  if (!detect_launch_env(process_env(), launch, err)) throw CommError(err);
  c.rank = launch.rank;
  c.world_size = launch.world_size;
  c.master_addr = launch.master_addr;
  c.master_port = launch.master_port;
  if (const char* v = std::getenv("NNS_STORE_DIR"); v && *v) c.store_dir = v;
  for (const char* name : {"NNS_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
    if (const char* v = std::getenv(name); v && *v && c.job_id.empty()) c.job_id = std::string(name) + "=" + v;
  if (const char* v = std::getenv("NNS_COMM_HOST"); v && *v) c.host = v;
  if (const char* v = std::getenv("NNS_STORE_SECRET"); v && *v) c.store_secret = v;
  if (const char* v = std::getenv("NNS_COMM_TIMEOUT"); v && *v) {
    char* end = nullptr;
    double s = std::strtod(v, &end);
    if (*end != '\0' || !(s > 0))
      throw CommError(std::string("bad value for NNS_COMM_TIMEOUT: '") + v + "' (expected seconds > 0)");
    c.timeout = Ms(static_cast<int64_t>(s * 1000));
  }
  c.heartbeat_limit = heartbeat_limit_from_env();
  return c;
}

Communicator::Communicator(const CommConfig& cfg)
    : rank_(cfg.rank), size_(cfg.world_size), timeout_(cfg.timeout) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_)
    throw CommError("bad rank configuration: rank " + std::to_string(rank_) + " of world size " +
                    std::to_string(size_));
  if (timeout_.count() <= 0) throw CommError("communicator timeout must be positive");
  if (const char* t = std::getenv("NNS_COMM_TRACE"); t && *t) {
    std::string path = std::string(t) + ".rank-" + std::to_string(rank_);
    trace_ = std::fopen(path.c_str(), "w");
    if (!trace_) throw CommError("NNS_COMM_TRACE: cannot write " + path);
  }
  if (size_ > 1) {
    // Gloo writes to sockets with writev(), which raises SIGPIPE when a
    // peer has died; the default action would kill this rank silently
    // instead of letting the collective report the dead peer.
    struct sigaction old {};
    sigaction(SIGPIPE, nullptr, &old);
    if (old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);

    std::unique_ptr<gloo::rendezvous::Store> inner;
    if (!cfg.store_dir.empty()) {
      // Every rank may be first to arrive; a missing directory is made.
      if (::mkdir(cfg.store_dir.c_str(), 0755) != 0 && errno != EEXIST)
        throw CommError("rendezvous directory " + cfg.store_dir + ": " + std::strerror(errno));
      inner = std::make_unique<gloo::rendezvous::FileStore>(cfg.store_dir);
    } else {
      if (rank_ == 0) {
        // Listen on loopback only when the run is local.
        server_ = std::make_unique<TcpStoreServer>(is_loopback(cfg.master_addr) ? "127.0.0.1" : "0.0.0.0",
                                                   cfg.master_port, cfg.store_secret);
      }
      inner = std::make_unique<TcpStore>(cfg.master_addr, cfg.master_port, timeout_, cfg.store_secret);
    }
    store_ = std::make_unique<TimeoutStore>(std::move(inner), [this] { return timeout(); });
    check_job_identity(cfg);

    gloo::transport::tcp::attr attr;
    attr.hostname = cfg.host;
    if (attr.hostname.empty()) {
      if (is_loopback(cfg.master_addr)) {
        attr.hostname = "127.0.0.1";
      } else {
        char name[256] = {};
        ::gethostname(name, sizeof name - 1);
        attr.hostname = name;
      }
    }
    host_ = attr.hostname;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank_) + ": cannot create the TCP transport on '" + attr.hostname +
                      "': " + strip_location(e.what()));
    }
  }
  create_group(world());
  if (size_ > 1 && cfg.heartbeat_limit.count() > 0) {
    gloo::rendezvous::PrefixStore prefixed("nns/hb", *store_);
    try {
      heartbeat_ = std::make_unique<Heartbeat>(
          prefixed, rank_, size_, host_, timeout_, cfg.heartbeat_limit,
          [rank = rank_](int peer, Ms silence) { stop_for_silent_peer(rank, peer, silence); });
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank_) + ": setting up heartbeats with the other ranks failed: " +
                      strip_location(e.what()) + " (every rank must have the same NNS_HEARTBEAT_TIMEOUT, 0 or not)");
    }
  }
}

// Rank 0 publishes its job's identity; the others compare theirs before
// joining anything, so that a rank of job B that reached job A's store (one
// MASTER_PORT for both) stops with both names instead of training in A.
void Communicator::check_job_identity(const CommConfig& cfg) {
  const std::string key = "nns/job";
  const std::string mine = cfg.job_id.empty() ? "(none)" : cfg.job_id;
  if (rank_ == 0) {
    store_->set(key, std::vector<char>(mine.begin(), mine.end()));
    return;
  }
  std::vector<char> theirs_bytes = store_->get(key);
  const std::string theirs(theirs_bytes.begin(), theirs_bytes.end());
  if (theirs == mine || theirs == "(none)" || mine == "(none)") return;
  throw CommError("rank " + std::to_string(rank_) + " of job " + mine + " reached the rendezvous of another job (" +
                  theirs + ") at " + cfg.master_addr + ":" + std::to_string(cfg.master_port) +
                  "; give each job its own MASTER_PORT");
}

// Members' contexts close their connections; the store server stops last.
void Communicator::trace(const std::string& line) {
  std::fprintf(trace_, "%s\n", line.c_str());
  std::fflush(trace_);
}

Communicator::~Communicator() {
  if (trace_) std::fclose(trace_);
  heartbeat_.reset();  // goodbye first: peers stop watching a rank that is leaving
  groups_.clear();
  store_.reset();
  server_.reset();
}

Group Communicator::world() const {
  Group g(size_);
  for (int i = 0; i < size_; ++i) g[i] = i;
  return g;
}

Ms Communicator::timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeout_;
}

void Communicator::set_timeout(Ms t) {
  if (t.count() <= 0) throw CommError("communicator timeout must be positive");
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = t;
}

void Communicator::create_group(const Group& group) { group_state(group); }

std::shared_ptr<gloo::Context> Communicator::gloo_context(const Group& group) { return group_state(group).ctx; }

Communicator::GroupState& Communicator::group_state(const Group& requested, const std::string& kind) {
  const Group& members = requested.empty() ? world() : requested;
  const std::string key = kind + group_name(members);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(key);
    if (it != groups_.end()) return *it->second;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size_ || (i > 0 && members[i] <= members[i - 1]))
      throw std::invalid_argument("invalid group " + group_name(members) + ": members must be distinct ranks in [0, " +
                                  std::to_string(size_) + ") in ascending order");
  }
  auto gs = std::make_unique<GroupState>();
  gs->members = members;
  gs->name = group_name(members);
  gs->key = key;
  gs->index = gs->index_of(rank_);
  if (gs->index < 0)
    throw std::invalid_argument("rank " + std::to_string(rank_) + " is not a member of group " + gs->name);

  // Serialized so that one rank creates its groups in one order even when
  // several threads use new groups (the order rule in the header).
  std::lock_guard<std::mutex> create_lock(create_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(key);
    if (it != groups_.end()) return *it->second;
  }
  if (gs->size() > 1) {
    Ms t = timeout();
    auto start = std::chrono::steady_clock::now();
    try {
      // Each group's rendezvous keys live under their own prefix.
      gloo::rendezvous::PrefixStore prefixed("nns/" + key, *store_);
      if (kind != "p2p") {
        // Collectives' groups: a Gloo context (large broadcasts, gloo_context()).
        auto ctx = std::make_shared<gloo::rendezvous::Context>(gs->index, gs->size());
        ctx->setTimeout(t);
        ctx->connectFullMesh(prefixed, device_);
        // A member returns from connectFullMesh once its own side of every
        // connection is up; a peer may still be accepting one. Without this
        // barrier a member that finished and exited at once made such a
        // peer's creation fail with "connection closed" (seen in our tests).
        gloo::BarrierOptions barrier(ctx);
        barrier.setTag(gs->next_tag++);
        barrier.setTimeout(t);
        gloo::barrier(barrier);
        gs->ctx = ctx;
      }
      // Every group gets a socket mesh, made here so that it obeys the same
      // creation order: collectives' groups for their small allreduces and
      // barriers, point-to-point pairs for their messages (no Gloo context).
      gs->mesh = std::make_unique<SocketMesh>(prefixed, gs->index, gs->size(), host_, t);
      if (kind == "p2p") gs->p2p = std::make_unique<P2pChannel>(gs->mesh->fd(1 - gs->index));
    } catch (const std::exception& e) {
      auto took = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start);
      throw CommError("nns comm: creating group " + gs->name + " failed on rank " + std::to_string(rank_) +
                      " after " + seconds(took) + " (timeout " + seconds(t) + "): " + strip_location(e.what()));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  return *(groups_[key] = std::move(gs));
}

void Communicator::fail(const char* what, GroupState& gs, const std::string& cause) {
  gs.broken = true;
  gs.broken_cause = std::string(what) + " failed: " + cause;
  throw CommError("nns comm: " + std::string(what) + " over group " + gs.name + " failed on rank " +
                  std::to_string(rank_) + ": " + cause);
}

template <class Fn>
void Communicator::run(const char* what, GroupState& gs, Fn&& fn) {
  std::lock_guard<std::mutex> lock(gs.op_mu);
  if (gs.broken)
    throw CommError("nns comm: " + std::string(what) + " over group " + gs.name + " on rank " +
                    std::to_string(rank_) + ": the group is unusable after an earlier failure (" + gs.broken_cause +
                    ")");
  Ms t = timeout();
  auto start = std::chrono::steady_clock::now();
  try {
    fn(t, gs.next_tag++);
  } catch (const std::exception& e) {
    auto took = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start);
    fail(what, gs, "after " + seconds(took) + " (timeout " + seconds(t) + "): " + strip_location(e.what()));
  }
}

void Communicator::allreduce(float* buf, size_t count, const Group& group) {
  if (trace_) trace("allreduce " + std::to_string(count) + " " + group_name(group.empty() ? world() : group));
  GroupState& gs = group_state(group);
  if (gs.size() == 1 || count == 0) return;
  // Over the mesh (mesh_collectives.h): one or two rounds instead of the
  // ring's 2(n-1) steps, summed bit for bit as the ring sums.
  run("allreduce", gs, [&](Ms t, uint32_t) { mesh_allreduce(*gs.mesh, buf, count, gs.copies, t); });
}

void Communicator::allgather(const float* in, float* out, size_t chunk, const Group& group) {
  if (trace_) trace("allgather " + std::to_string(chunk) + " " + group_name(group.empty() ? world() : group));
  GroupState& gs = group_state(group);
  if (gs.size() == 1 || chunk == 0) {
    std::memmove(out, in, chunk * sizeof(float));
    return;
  }
  run("allgather", gs, [&](Ms t, uint32_t) { mesh_allgather(*gs.mesh, in, out, chunk, t); });
}

void Communicator::reduce_scatter(const float* in, float* out, size_t chunk, const Group& group) {
  if (trace_) trace("reduce-scatter " + std::to_string(chunk) + " " + group_name(group.empty() ? world() : group));
  GroupState& gs = group_state(group);
  const size_t n = static_cast<size_t>(gs.size());
  if (n == 1 || chunk == 0) {
    std::memmove(out, in + gs.index * chunk, chunk * sizeof(float));
    return;
  }
  // Over the mesh: every member's blocks in one all-to-all (the pairwise
  // algorithm's traffic, (n-1)/n of the input each), then this member's
  // block summed over the members in member order. Gloo's transport took
  // ~200 us per message post here (see p2p_channel.h).
  run("reduce_scatter", gs, [&](Ms t, uint32_t) {
    gs.scratch.resize(n * chunk);
    mesh_all_to_all(*gs.mesh, in, gs.scratch.data(), chunk, t);
    std::memcpy(out, gs.scratch.data(), chunk * sizeof(float));
    for (size_t i = 1; i < n; ++i) {
      const float* b = gs.scratch.data() + i * chunk;
      for (size_t j = 0; j < chunk; ++j) out[j] += b[j];
    }
  });
}

void Communicator::all_to_all(const float* in, float* out, size_t chunk, const Group& group) {
  if (trace_) trace("all-to-all " + std::to_string(chunk) + " " + group_name(group.empty() ? world() : group));
  GroupState& gs = group_state(group);
  if (gs.size() == 1 || chunk == 0) {
    std::memmove(out, in, chunk * sizeof(float));
    return;
  }
  run("all_to_all", gs, [&](Ms t, uint32_t) { mesh_all_to_all(*gs.mesh, in, out, chunk, t); });
}

void Communicator::broadcast(float* buf, size_t count, int root, const Group& group) {
  if (trace_) trace("broadcast " + std::to_string(count) + " " + group_name(group.empty() ? world() : group));
  GroupState& gs = group_state(group);
  const int root_index = gs.index_of(root);
  if (root_index < 0)
    throw std::invalid_argument("broadcast root " + std::to_string(root) + " is not in group " + gs.name);
  if (gs.size() == 1 || count == 0) return;
  if (mesh_broadcast_pays(count, gs.size())) {
    run("broadcast", gs, [&](Ms t, uint32_t) { mesh_broadcast(*gs.mesh, buf, count, root_index, t); });
    return;
  }
  run("broadcast", gs, [&](Ms t, uint32_t tag) {
    gloo::BroadcastOptions opts(gs.ctx);
    opts.setOutput(buf, count);  // root sends from it, others receive into it
    opts.setRoot(root_index);
    opts.setTag(tag);
    opts.setTimeout(t);
    gloo::broadcast(opts);
  });
}

void Communicator::broadcast_bytes(void* bytes, size_t n, int root, const Group& group) {
  // Whole words, the tail zero-padded. broadcast() only copies: a word
  // whose bits spell a NaN arrives as sent.
  std::vector<float> words((n + sizeof(float) - 1) / sizeof(float), 0.0f);
  std::memcpy(words.data(), bytes, n);
  broadcast(words.data(), words.size(), root, group);
  std::memcpy(bytes, words.data(), n);
}

void Communicator::barrier(const Group& group) {
  GroupState& gs = group_state(group);
  if (gs.size() == 1) return;
  // A one-byte exchange with every member: one round of the mesh instead
  // of Gloo's barrier (an allreduce of nothing, ring-shaped).
  run("barrier", gs, [&](Ms t, uint32_t) {
    char token = 1;
    std::vector<char> tokens(gs.size());
    gs.mesh->all_gather(&token, tokens.data(), 1, t);
  });
}

void Communicator::send(const float* buf, size_t count, int dst, uint32_t tag) {
  if (trace_) trace("send " + std::to_string(count) + " to " + std::to_string(dst));
  if (dst == rank_ || dst < 0 || dst >= size_)
    throw std::invalid_argument("send: bad destination rank " + std::to_string(dst) + " on rank " +
                                std::to_string(rank_));
  if (count == 0) return;
  GroupState& gs = group_state({std::min(rank_, dst), std::max(rank_, dst)}, "p2p");
  run("send", gs, [&](Ms t, uint32_t) { gs.p2p->wait(gs.p2p->post_send(buf, count * sizeof(float), tag), t); });
}

void Communicator::recv(float* buf, size_t count, int src, uint32_t tag) {
  if (trace_) trace("recv " + std::to_string(count) + " from " + std::to_string(src));
  if (src == rank_ || src < 0 || src >= size_)
    throw std::invalid_argument("recv: bad source rank " + std::to_string(src) + " on rank " + std::to_string(rank_));
  if (count == 0) return;
  GroupState& gs = group_state({std::min(rank_, src), std::max(rank_, src)}, "p2p");
  run("recv", gs, [&](Ms t, uint32_t) { gs.p2p->wait(gs.p2p->post_recv(buf, count * sizeof(float), tag), t); });
}

struct Communicator::Request::Impl {
  Communicator* comm = nullptr;
  GroupState* gs = nullptr;
  P2pChannel::Id id = 0;
  bool send = true;
};

Communicator::Request::~Request() {
  if (impl_ && !waited_) {
    try {
      wait();
    } catch (const std::exception&) {
      // Destroyed during unwinding after another failure: the run is stopping.
    }
  }
}

void Communicator::Request::wait() {
  if (waited_ || !impl_) return;
  waited_ = true;
  Impl& r = *impl_;
  const char* what = r.send ? "send" : "recv";
  Ms t = r.comm->timeout();
  auto start = std::chrono::steady_clock::now();
  bool ok = false;
  std::string cause;
  try {
    r.gs->p2p->wait(r.id, t);
    ok = true;
  } catch (const std::exception& e) {
    cause = strip_location(e.what());
  }
  if (!ok) {
    auto took = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start);
    std::lock_guard<std::mutex> lock(r.gs->op_mu);
    r.comm->fail(what, *r.gs, "after " + seconds(took) + " (timeout " + seconds(t) + "): " + cause);
  }
}

void Communicator::connect_peer(int peer) {
  if (peer == rank_ || peer < 0 || peer >= size_) return;
  group_state({std::min(rank_, peer), std::max(rank_, peer)}, "p2p");
}

// Posts one side of a point-to-point transfer on the pair's context.
std::unique_ptr<Communicator::Request> Communicator::post_p2p(bool send, float* buf, size_t count, int peer, uint32_t tag) {
  const char* what = send ? "send" : "recv";
  if (trace_) trace(std::string(what) + " " + std::to_string(count) + (send ? " to " : " from ") + std::to_string(peer));
  if (peer == rank_ || peer < 0 || peer >= size_)
    throw std::invalid_argument(std::string(what) + ": bad " + (send ? "destination" : "source") + " rank " + std::to_string(peer) + " on rank " +
                                std::to_string(rank_));
  std::unique_ptr<Request> req(new Request());
  if (count == 0) return req;
  GroupState& gs = group_state({std::min(rank_, peer), std::max(rank_, peer)}, "p2p");
  auto impl = std::make_unique<Request::Impl>();
  impl->comm = this;
  impl->gs = &gs;
  impl->send = send;
  run(what, gs, [&](Ms, uint32_t) {
    impl->id = send ? gs.p2p->post_send(buf, count * sizeof(float), tag) : gs.p2p->post_recv(buf, count * sizeof(float), tag);
  });
  req->impl_ = std::move(impl);
  return req;
}

std::unique_ptr<Communicator::Request> Communicator::isend(const float* buf, size_t count, int dst, uint32_t tag) {
  return post_p2p(true, const_cast<float*>(buf), count, dst, tag);  // only read
}

std::unique_ptr<Communicator::Request> Communicator::irecv(float* buf, size_t count, int src, uint32_t tag) {
  return post_p2p(false, buf, count, src, tag);
}

}  // namespace nns::backend
