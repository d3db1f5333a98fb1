// A small TCP key-value store for rendezvous: rank 0's process runs a
// TcpStoreServer, every rank (rank 0 included) talks to it through a
// TcpStore client, which implements gloo::rendezvous::Store so that Gloo's
// connectFullMesh can exchange transport addresses over it. It plays the
// role torchrun's TCPStore plays: ranks on several hosts only need to agree
// on the master's address and port (NNS_MASTER_ADDR / NNS_MASTER_PORT).
//
// Semantics: keys are write-once strings, values are byte strings; get()
// and wait() block until the key exists or the timeout passes (then they
// throw CommError). The store only carries a few hundred bytes per rank and
// group, so the protocol is one request and one reply at a time per
// connection, length-prefixed, in network byte order.
//
// Shared secret (NNS_STORE_SECRET): a server given a secret answers a
// connection only after its first request proves it, an auth request
// carrying the same secret; anything else is answered "denied" and the
// connection is closed, and a client told so stops with a message. The
// store then refuses strangers on the network (for a non-loopback master
// it listens on every address); the secret travels in clear text, so it
// authenticates ranks but does not hide traffic from an eavesdropper.
#pragma once

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nns::backend {

// Serves the store on addr:port until destroyed. addr is a numeric IPv4
// address to bind ("0.0.0.0" for every interface); port 0 picks a free one.
// Throws CommError if the port cannot be bound.
class TcpStoreServer {
 public:
  // A non-empty `secret` makes every client prove it first (see above).
  TcpStoreServer(const std::string& addr, int port, std::string secret = "");
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  void accept_loop();
  void serve(int fd);
  // Whether `given` is the secret, compared in constant time.
  bool secret_matches(const std::vector<char>& given) const;
  // Blocks until key is present, the deadline passes or the server stops;
  // returns whether the key is present. Called with mu_ held.
  bool wait_key(std::unique_lock<std::mutex>& lock, const std::string& key,
                std::chrono::steady_clock::time_point deadline);

  int listen_fd_ = -1;
  int port_ = 0;
  std::string secret_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
  std::vector<int> client_fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

// Client side. Connecting retries until `timeout` because rank 0 may start
// its server after the other ranks start. Thread-safe (one request at a
// time); each blocking request waits at most `timeout`.
class TcpStore : public gloo::rendezvous::Store {
 public:
  // A non-empty `secret` is sent first, for a server that requires it.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout, const std::string& secret = "");
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  // Sends one request and reads the status byte; throws CommError on I/O
  // failure or a timeout status.
  void request(uint8_t op, const std::string& key, const std::vector<char>* value,
               std::chrono::milliseconds timeout, std::vector<char>* reply);

  std::string where_;  // "host:port", for messages
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  int fd_ = -1;
};

}  // namespace nns::backend
