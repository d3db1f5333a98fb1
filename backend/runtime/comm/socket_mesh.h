// A full mesh of plain TCP sockets among the members of one group, for the
// collectives whose cost is latency alone (a small allreduce, a barrier).
//
// Why not Gloo's connections: every Gloo message passes through its
// device's event-loop thread and a condition variable, and a send waits
// for the receiver to announce the matching receive. A message thus costs
// several thread wake-ups in each process; on loopback a Gloo round trip
// measured 95 us where a blocking socket round trip takes 14 us (on the
// 2-core VM of README's "Measured numbers"). Here the calling thread writes
// and reads the sockets itself and, when it must wait, polls them for a
// bounded while (comm_spin(): only while the host's ranks have a core
// each) and then sleeps in poll(); nothing else wakes.
//
// Every message carries a header (its number on that connection and its
// byte count) that the receiver checks, so members that disagree about the
// collective they are in fail with a message instead of reading each
// other's bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gloo::rendezvous {
class Store;
}

namespace nns::backend {

class SocketMesh {
 public:
  // Collective over the n members: each listens on `host` (an ephemeral
  // port), publishes "host port" in `store` under "mesh/<index>", then
  // connects to the lower members and accepts the higher ones. Throws
  // std::runtime_error when a member does not arrive within `timeout`.
  SocketMesh(gloo::rendezvous::Store& store, int index, int n, const std::string& host,
             std::chrono::milliseconds timeout);
  ~SocketMesh();
  SocketMesh(const SocketMesh&) = delete;
  SocketMesh& operator=(const SocketMesh&) = delete;

  // One message each way per peer at most, all in flight at once: to[p] is
  // sent to member p (if set), from[p] receives member p's message (if
  // set); entries for this member are ignored. Both ends of a pair must
  // agree on the message and its size (the header checks it). Throws
  // std::runtime_error when a peer closes its end, sizes disagree or
  // `timeout` passes.
  struct Out {
    const void* data = nullptr;
    size_t bytes = 0;
    bool set = false;
  };
  struct In {
    void* data = nullptr;
    size_t bytes = 0;
    bool set = false;
  };
  void exchange(const std::vector<Out>& to, const std::vector<In>& from, std::chrono::milliseconds timeout);

  // Sends mine[0..bytes) to every other member and receives member p's
  // into copies[p*bytes ..); copies[index*bytes ..) is left alone.
  void all_gather(const void* mine, void* copies, size_t bytes, std::chrono::milliseconds timeout);

  int index() const { return index_; }
  int size() const { return n_; }
  // The (non-blocking) socket to member p, for a P2pChannel of a pair.
  int fd(int p) const { return fds_[static_cast<size_t>(p)]; }

 private:
  struct Header {
    uint64_t seq;    // the message's number on its connection and direction
    uint64_t bytes;  // what follows
  };
  size_t send_some(int p, Header& h, const Out& msg, size_t done);
  size_t receive_some(int p, Header& h, const In& msg, size_t done);
  void check_header(int p, const Header& h, size_t bytes);

  int index_, n_;
  std::vector<int> fds_;  // fds_[p]: the socket to member p; -1 for ourselves
  // Messages so far per peer and direction: the sender's count travels in
  // the header and must equal the receiver's.
  std::vector<uint64_t> sent_seq_, recv_seq_;
};

}  // namespace nns::backend
