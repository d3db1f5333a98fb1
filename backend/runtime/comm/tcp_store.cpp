#include "backend/runtime/comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "backend/runtime/comm/communicator.h"

namespace nns::backend {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAuth = 4 };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kDenied = 2 };

// Values are a few hundred bytes; anything far larger means a corrupt or
// foreign peer, which must not make us allocate gigabytes.
constexpr uint32_t kMaxLen = 64u << 20;

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_u32(int fd, uint32_t v) {
  v = htonl(v);
  return write_all(fd, &v, 4);
}

bool read_u32(int fd, uint32_t& v) {
  if (!read_all(fd, &v, 4)) return false;
  v = ntohl(v);
  return true;
}

bool read_bytes(int fd, std::vector<char>& out) {
  uint32_t n = 0;
  if (!read_u32(fd, n) || n > kMaxLen) return false;
  out.resize(n);
  return n == 0 || read_all(fd, out.data(), n);
}

bool write_bytes(int fd, const char* p, size_t n) { return write_u32(fd, static_cast<uint32_t>(n)) && write_all(fd, p, n); }

}  // namespace

// ---- server -----------------------------------------------------------------

TcpStoreServer::TcpStoreServer(const std::string& addr, int port, std::string secret) : secret_(std::move(secret)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw CommError(std::string("rendezvous store: socket: ") + std::strerror(errno));
  // The launcher probes a free port and closes it just before rank 0 binds
  // it; SO_REUSEADDR lets that bind succeed while the probe is in TIME_WAIT.
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    ::close(listen_fd_);
    throw CommError("rendezvous store: bad bind address '" + addr + "'");
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(listen_fd_, 128) != 0) {
    std::string err = std::strerror(errno);
    ::close(listen_fd_);
    throw CommError("rendezvous store: cannot listen on " + addr + ":" + std::to_string(port) + ": " + err);
  }
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  // shutdown() wakes the threads blocked in accept()/recv(); closing the
  // descriptors happens only after they are joined so that no number is
  // reused while a thread still holds it.
  ::shutdown(listen_fd_, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  acceptor_.join();
  for (auto& t : threads_) t.join();
  for (int fd : client_fds_) ::close(fd);
  ::close(listen_fd_);
}

void TcpStoreServer::accept_loop() {
  while (!stop_) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      ::close(fd);
      return;
    }
    client_fds_.push_back(fd);
    threads_.emplace_back([this, fd] { serve(fd); });
  }
}

bool TcpStoreServer::wait_key(std::unique_lock<std::mutex>& lock, const std::string& key,
                              std::chrono::steady_clock::time_point deadline) {
  cv_.wait_until(lock, deadline, [&] { return stop_ || data_.count(key) > 0; });
  return data_.count(key) > 0;
}

// One thread per client: a client sends one request at a time, and a
// blocking get must not hold up the other ranks' requests.
void TcpStoreServer::serve(int fd) {
  bool trusted = secret_.empty();
  for (;;) {
    uint8_t op = 0;
    std::vector<char> key;
    if (!read_all(fd, &op, 1) || !read_bytes(fd, key)) return;
    if (op == kAuth) {
      // Without a secret of our own an auth request is a mismatch too: the
      // client believes the job has one.
      trusted = !secret_.empty() && secret_matches(key);
      const uint8_t st = trusted ? kOk : kDenied;
      if (!write_all(fd, &st, 1) || !trusted) return;
      continue;
    }
    std::string k(key.begin(), key.end());
    if (op == kSet) {
      std::vector<char> value;
      if (!read_bytes(fd, value)) return;
      if (!trusted) {
        // The whole request is read first, so that closing does not reset
        // the connection before the client reads why.
        const uint8_t st = kDenied;
        write_all(fd, &st, 1);
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        data_[k] = std::move(value);
      }
      cv_.notify_all();
      uint8_t st = kOk;
      if (!write_all(fd, &st, 1)) return;
    } else if (op == kGet || op == kWait) {
      uint32_t timeout_ms = 0;
      if (!read_u32(fd, timeout_ms)) return;
      if (!trusted) {
        const uint8_t st = kDenied;
        write_all(fd, &st, 1);
        return;
      }
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      std::vector<char> value;
      bool found;
      {
        std::unique_lock<std::mutex> lock(mu_);
        found = wait_key(lock, k, deadline);
        if (found && op == kGet) value = data_[k];
      }
      uint8_t st = found ? kOk : kTimeout;
      if (!write_all(fd, &st, 1)) return;
      if (found && op == kGet && !write_bytes(fd, value.data(), value.size())) return;
    } else {
      return;  // protocol error: drop the client
    }
  }
}

bool TcpStoreServer::secret_matches(const std::vector<char>& given) const {
  // Every byte is compared whatever the first difference, so the time
  // taken does not tell a prober how much of a guess was right.
  unsigned diff = given.size() == secret_.size() ? 0u : 1u;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(secret_[i % secret_.size()]);
  return diff == 0;
}

// ---- client -----------------------------------------------------------------

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout, const std::string& secret)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error;
  while (fd_ < 0) {
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai && fd_ < 0; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          last_error = std::strerror(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) break;
    // The master may not listen yet (it is another process starting up).
    if (std::chrono::steady_clock::now() >= deadline)
      throw CommError("rendezvous store: cannot connect to " + where_ + " within " +
                      std::to_string(timeout.count()) + " ms: " + last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!secret.empty()) request(kAuth, secret, nullptr, timeout_, nullptr);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStore::request(uint8_t op, const std::string& key, const std::vector<char>* value,
                       std::chrono::milliseconds timeout, std::vector<char>* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) throw CommError("rendezvous store " + where_ + ": connection lost earlier");
  // A server that stops answering (host gone, no FIN) must not hang us
  // forever: the socket read times out a little after the server's own
  // deadline would have answered.
  timeval tv{};
  auto guard = timeout + std::chrono::seconds(5);
  tv.tv_sec = guard.count() / 1000;
  tv.tv_usec = (guard.count() % 1000) * 1000;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  bool ok = write_all(fd_, &op, 1) && write_bytes(fd_, key.data(), key.size());
  if (ok && op == kSet) ok = write_bytes(fd_, value->data(), value->size());
  if (ok && op != kSet && op != kAuth)
    ok = write_u32(fd_, static_cast<uint32_t>(std::min<int64_t>(timeout.count(), UINT32_MAX)));
  uint8_t st = 0;
  ok = ok && read_all(fd_, &st, 1);
  if (ok && st == kDenied) {
    ::close(fd_);
    fd_ = -1;
    throw CommError("rendezvous store " + where_ +
                    " refused this rank: the job's store requires a shared secret (NNS_STORE_SECRET) that this "
                    "rank " +
                    std::string(op == kAuth ? "does not match" : "lacks") +
                    "; give every rank the same NNS_STORE_SECRET");
  }
  if (ok && st == kOk && reply) ok = read_bytes(fd_, *reply);
  if (!ok) {
    // The stream is out of sync now; refuse further use.
    ::close(fd_);
    fd_ = -1;
    throw CommError("rendezvous store " + where_ + ": connection to the master (rank 0) lost");
  }
  if (st == kTimeout)
    throw CommError("rendezvous store " + where_ + ": timed out after " + std::to_string(timeout.count()) +
                    " ms waiting for key '" + key + "' (did every rank start and join?)");
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  request(kSet, key, &data, timeout_, nullptr);
}

std::vector<char> TcpStore::get(const std::string& key) {
  std::vector<char> out;
  request(kGet, key, nullptr, timeout_, &out);
  return out;
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  // One deadline for the whole list, as the Store interface promises.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& k : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() < 1) left = std::chrono::milliseconds(1);
    request(kWait, k, nullptr, left, nullptr);
  }
}

}  // namespace nns::backend
