// A full mesh of plain TCP sockets among the members of one group, for the
// collectives whose cost is latency alone (a small allreduce, a barrier).
//
// Why not Gloo's connections: every Gloo message passes through its
// device's event-loop thread and a condition variable, and a send waits
// for the receiver to announce the matching receive. A message thus costs
// several thread wake-ups in each process; on loopback a Gloo round trip
// measured 95 us where a blocking socket round trip takes 14 us (on the
// 2-core VM of README's "Measured numbers"). Here the calling thread writes
// and reads the sockets itself and sleeps in poll() when it must wait:
// nothing spins, nothing else wakes.
//
// Every exchange sends a header (a sequence number and the byte count) and
// checks the peer's, so members that disagree about the collective they are
// in fail with a message instead of reading each other's bytes.
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

  // Sends mine[0..bytes) to every other member and receives member p's
  // into copies[p*bytes ..); copies[index*bytes ..) is left alone. Every
  // member calls it with the same bytes, in the same order. Throws
  // std::runtime_error when a peer closes its end or `timeout` passes.
  void all_gather(const void* mine, void* copies, size_t bytes, std::chrono::milliseconds timeout);

 private:
  int index_, n_;
  std::vector<int> fds_;  // fds_[p]: the socket to member p; -1 for ourselves
  uint64_t seq_ = 0;      // exchanges so far, the same on every member
};

}  // namespace nns::backend
