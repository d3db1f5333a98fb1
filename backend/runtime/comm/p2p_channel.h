// Point-to-point messages between two ranks over one plain TCP socket of
// their pair's SocketMesh: what Communicator::isend / irecv run on.
//
// Why not Gloo's unbound buffers: each post and each completion passes
// through Gloo's event-loop thread and a condition variable; on the 2-core
// VM a post cost ~200 us and a wait sometimes a whole scheduler tick (4 ms)
// when both cores were busy (bench/simulate_cpu.sh, pipeline plans).
//
// Sends: the posting thread writes what the socket takes at once (a message
// that fits the socket buffer completes in the call, no other thread
// involved); a remainder goes to the channel's writer thread, which
// finishes it in order, so a send makes progress while its owner is busy
// elsewhere (in a collective with the very peer that must read it).
// Receives: the waiting thread reads the socket itself, sleeping in poll().
// A message whose receive is not posted yet is kept (by tag) until it is.
// Every message carries its tag and size; a posted receive whose size
// differs from the message's is an error, as is a closed connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace nns::backend {

class P2pChannel {
 public:
  // `fd`: a connected, non-blocking stream socket to the peer (not owned:
  // it must outlive the channel).
  explicit P2pChannel(int fd);
  ~P2pChannel();
  P2pChannel(const P2pChannel&) = delete;
  P2pChannel& operator=(const P2pChannel&) = delete;

  using Id = uint64_t;
  // The buffers must stay valid (and a send's unchanged) until wait(id).
  Id post_send(const void* data, size_t bytes, uint32_t tag);
  Id post_recv(void* data, size_t bytes, uint32_t tag);
  // Until request `id` is complete; throws std::runtime_error when the
  // connection fails, sizes disagree or `timeout` passes.
  void wait(Id id, std::chrono::milliseconds timeout);

 private:
  struct Header {
    uint32_t tag;
    uint32_t reserved;
    uint64_t bytes;
  };
  struct Outgoing {
    Id id;
    Header h;
    const char* data;
    size_t done;  // bytes of [header, payload] written
  };
  Id new_id();
  bool write_some(Outgoing& o);  // true when all of it is written
  void writer_loop();
  void read_available();  // under recv_mu_
  void fail_recv(const std::string& why);

  int fd_;
  Id next_id_ = 1;  // sends and receives share one count (under id_mu_)
  std::mutex id_mu_;

  // Sends.
  std::mutex send_mu_;
  std::condition_variable send_cv_;
  std::deque<Outgoing> queue_;  // remainders, in order; the writer finishes them
  std::set<Id> sends_open_;     // posted, not yet fully written
  std::string send_error_;
  bool stop_ = false;
  std::thread writer_;

  // Receives.
  std::mutex recv_mu_;
  struct Posted {
    char* data;
    size_t bytes;
    uint32_t tag;
    bool done = false;
  };
  std::map<Id, Posted> posted_;
  std::map<uint32_t, Id> posted_by_tag_;
  std::map<uint32_t, std::vector<char>> unexpected_;  // arrived before their receive
  Header in_h_{};
  size_t in_done_ = 0;  // bytes of the incoming [header, payload] read
  char* in_target_ = nullptr;
  Id in_posted_ = 0;  // the receive it completes; 0: into unexpected_
  std::string recv_error_;
  bool peer_closed_ = false;  // end of stream read: no more messages will come
};

}  // namespace nns::backend
