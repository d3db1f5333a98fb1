// Heartbeats among the ranks of a run, so that a rank that stops (SIGSTOP,
// a debugger, a swapped-out or frozen host) is found within seconds and
// named, instead of by the 60 s collective timeout with a message that
// blames whichever peer happened to wait on it.
//
// Each rank runs one thread with its own full mesh of sockets (made at the
// rendezvous like a group's, under the store prefix "hb"). Every
// `interval` it writes one byte to every peer and reads what they sent.
// The thread does nothing else, so a rank whose main thread is busy in a
// long kernel or a long collective keeps beating: only a rank whose whole
// process stopped running falls silent. A peer that closes its socket
// (exit, crash) or says goodbye (its Communicator is destroyed) is no
// longer watched: a dead peer is reported by the collectives, which see
// its sockets close at once.
//
// A peer silent for longer than `limit` calls on_silent(peer rank,
// silence) from the heartbeat thread, once. The communicator's handler
// prints the message and ends the process (communicator.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace gloo::rendezvous {
class Store;
}

namespace nns::backend {

class SocketMesh;

class Heartbeat {
 public:
  using OnSilent = std::function<void(int peer, std::chrono::milliseconds silence)>;
  // Collective over the `size` ranks (index = rank): builds the mesh
  // within `connect_timeout`, then starts the thread.
  Heartbeat(gloo::rendezvous::Store& store, int rank, int size, const std::string& host,
            std::chrono::milliseconds connect_timeout, std::chrono::milliseconds limit, OnSilent on_silent);
  // Says goodbye to every peer (they stop watching this rank) and joins
  // the thread.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // The beat period for a silence limit: a fifth of it, at most 1 s.
  static std::chrono::milliseconds interval_for(std::chrono::milliseconds limit);

 private:
  void loop();

  int rank_, size_;
  std::chrono::milliseconds limit_, interval_;
  OnSilent on_silent_;
  std::unique_ptr<SocketMesh> mesh_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor's write ends the thread's poll
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The silence limit from NNS_HEARTBEAT_TIMEOUT (seconds, default 8; 0
// turns heartbeats off and returns 0).
std::chrono::milliseconds heartbeat_limit_from_env();

}  // namespace nns::backend
