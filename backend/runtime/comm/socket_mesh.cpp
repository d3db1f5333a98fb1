#include "backend/runtime/comm/socket_mesh.h"

#include <fcntl.h>
#include <gloo/rendezvous/store.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "backend/runtime/comm/deadline.h"
#include "backend/runtime/comm/launcher.h"

namespace nns::backend {
namespace {

using Ms = std::chrono::milliseconds;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

// Closes the descriptor when the scope ends unless released.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

addrinfo* resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res)
    fail("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return res;
}

// Waits until fd has `events` or the deadline passes (then throws `what`).
void wait_for(int fd, short events, const Deadline& deadline, const std::string& what) {
  pollfd p{fd, events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, static_cast<int>(deadline.left().count()));
    if (rc > 0) return;
    if (rc == 0 && deadline.expired()) fail(what + ": timed out");
    if (rc < 0 && errno != EINTR) fail_errno(what);
  }
}

// Small messages go out at once rather than waiting to be coalesced, and
// the mesh's sockets never block the caller (poll() does the waiting).
void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Writes or reads exactly `bytes` on a blocking-mode exchange of the
// handshake, bounded by the deadline.
void transfer_all(int fd, void* buf, size_t bytes, bool send, const Deadline& deadline, const std::string& what) {
  char* p = static_cast<char*>(buf);
  while (bytes > 0) {
    wait_for(fd, send ? POLLOUT : POLLIN, deadline, what);
    ssize_t r = send ? ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (r == 0) fail(what + ": connection closed");
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      fail_errno(what);
    }
    p += r;
    bytes -= static_cast<size_t>(r);
  }
}

// A socket listening on `host` at an ephemeral port; returns the fd and
// sets `address` to "numeric-host port" for the others to connect to.
int listen_on(const std::string& host, int backlog, std::string& address) {
  addrinfo* res = resolve(host, "0");
  FdGuard fd{::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (fd.fd < 0 || ::bind(fd.fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd.fd, backlog) != 0) {
    int e = errno;
    ::freeaddrinfo(res);
    errno = e;
    fail_errno("listening on '" + host + "'");
  }
  ::freeaddrinfo(res);
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  char num[NI_MAXHOST], port[NI_MAXSERV];
  if (::getsockname(fd.fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, num, sizeof num, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    fail_errno("reading the listening address");
  address = std::string(num) + " " + port;
  return fd.release();
}

// Connects to "host port" without blocking past the deadline.
int connect_to(const std::string& address, const Deadline& deadline, const std::string& what) {
  std::istringstream in(address);
  std::string host, port;
  in >> host >> port;
  addrinfo* res = resolve(host, port);
  FdGuard fd{::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  int rc = fd.fd < 0 ? -1 : ::connect(fd.fd, res->ai_addr, res->ai_addrlen);
  int e = errno;
  ::freeaddrinfo(res);
  errno = e;
  if (rc != 0 && errno != EINPROGRESS) fail_errno(what);
  if (rc != 0) {
    wait_for(fd.fd, POLLOUT, deadline, what);
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      fail_errno(what);
    }
  }
  return fd.release();
}

// The part of [header, payload] from byte `done` on, as iovecs.
int remaining_iov(void* h, size_t h_bytes, void* payload, size_t bytes, size_t done, iovec* iov) {
  int k = 0;
  if (done < h_bytes) iov[k++] = {static_cast<char*>(h) + done, h_bytes - done};
  size_t in_payload = done > h_bytes ? done - h_bytes : 0;
  if (in_payload < bytes) iov[k++] = {static_cast<char*>(payload) + in_payload, bytes - in_payload};
  return k;
}

}  // namespace

SocketMesh::SocketMesh(gloo::rendezvous::Store& store, int index, int n, const std::string& host, Ms timeout)
    : index_(index), n_(n), fds_(n, -1), sent_seq_(n, 0), recv_seq_(n, 0) {
  const Deadline deadline(timeout);
  std::string address;
  FdGuard listener{listen_on(host, n, address)};
  store.set("mesh/" + std::to_string(index), std::vector<char>(address.begin(), address.end()));
  try {
    // Lower members are listening already (they published first); a
    // connection waits in their backlog until they accept it.
    for (int p = 0; p < index; ++p) {
      std::vector<char> a = store.get("mesh/" + std::to_string(p));
      const std::string what = "connecting to member " + std::to_string(p);
      fds_[p] = connect_to(std::string(a.begin(), a.end()), deadline, what);
      int32_t me = index;
      transfer_all(fds_[p], &me, sizeof me, true, deadline, what);
    }
    for (int k = index + 1; k < n; ++k) {
      wait_for(listener.fd, POLLIN, deadline, "waiting for members above " + std::to_string(index));
      FdGuard fd{::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)};
      if (fd.fd < 0) fail_errno("accepting a member");
      int32_t who = -1;
      transfer_all(fd.fd, &who, sizeof who, false, deadline, "reading a member's index");
      if (who <= index || who >= n || fds_[who] >= 0) fail("bad member index " + std::to_string(who) + " in the handshake");
      fds_[who] = fd.release();
    }
  } catch (...) {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
    throw;
  }
  for (int fd : fds_)
    if (fd >= 0) tune(fd);
}

SocketMesh::~SocketMesh() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

// Sends to and receives from every peer at once: whatever a socket takes
// now is written, whatever has arrived is read, and poll() sleeps until
// one of them can go on. No ordering among peers, so no two members can
// wait for each other however large the messages.
void SocketMesh::exchange(const std::vector<Out>& to, const std::vector<In>& from, Ms timeout) {
  const Deadline deadline(timeout);
  std::vector<Header> out(n_), in(n_);
  std::vector<size_t> sent(n_, 0), got(n_, 0), send_total(n_, 0), recv_total(n_, 0);
  for (int p = 0; p < n_; ++p) {
    if (p == index_) continue;
    if (to[p].set) out[p] = {sent_seq_[p]++, to[p].bytes}, send_total[p] = sizeof(Header) + to[p].bytes;
    if (from[p].set) recv_total[p] = sizeof(Header) + from[p].bytes;
  }
  std::vector<char> readable(n_, 0);
  std::vector<pollfd> waits;
  std::vector<int> who;  // who[k]: the member of waits[k]
  for (;;) {
    for (int p = 0; p < n_; ++p) {
      if (sent[p] < send_total[p]) sent[p] += send_some(p, out[p], to[p], sent[p]);
      if (got[p] < recv_total[p] && readable[p]) {
        readable[p] = 0;
        got[p] += receive_some(p, in[p], from[p], got[p]);
        if (got[p] >= sizeof(Header)) check_header(p, in[p], from[p].bytes);
      }
    }
    waits.clear();
    who.clear();
    for (int p = 0; p < n_; ++p) {
      short ev = (sent[p] < send_total[p] ? POLLOUT : 0) | (got[p] < recv_total[p] ? POLLIN : 0);
      if (ev) waits.push_back({fds_[p], ev, 0}), who.push_back(p);
    }
    if (waits.empty()) break;
    // Polls without sleeping for a while first (launcher.h, comm_spin): a
    // rank put to sleep is slow to wake on this kind of VM.
    int rc = poll_after_spin(waits.data(), waits.size(), static_cast<int>(deadline.left().count()));
    if (rc < 0 && errno != EINTR) fail_errno("poll");
    if (rc == 0 && deadline.expired()) fail("timed out waiting for the other members");
    for (size_t k = 0; k < waits.size(); ++k)
      if (waits[k].revents & (POLLIN | POLLHUP | POLLERR)) readable[who[k]] = 1;
  }
  for (int p = 0; p < n_; ++p)
    if (p != index_ && from[p].set) ++recv_seq_[p];
}

// Writes what the socket to p takes now of [header, message] from byte
// `done` on; returns the bytes written (0 when the socket is full).
size_t SocketMesh::send_some(int p, Header& h, const Out& msg, size_t done) {
  iovec iov[2];
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = remaining_iov(&h, sizeof h, const_cast<void*>(msg.data), msg.bytes, done, iov);
  ssize_t r = ::sendmsg(fds_[p], &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (r >= 0) return static_cast<size_t>(r);
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail_errno("sending to member " + std::to_string(p));
  return 0;
}

// Reads what has arrived from p of [header, message]; returns the bytes.
size_t SocketMesh::receive_some(int p, Header& h, const In& msg, size_t done) {
  iovec iov[2];
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = remaining_iov(&h, sizeof h, msg.data, msg.bytes, done, iov);
  ssize_t r = ::recvmsg(fds_[p], &m, MSG_DONTWAIT);
  if (r == 0) fail("member " + std::to_string(p) + " closed its connection");
  if (r > 0) return static_cast<size_t>(r);
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail_errno("receiving from member " + std::to_string(p));
  return 0;
}

void SocketMesh::check_header(int p, const Header& h, size_t bytes) {
  if (h.seq == recv_seq_[p] && h.bytes == bytes) return;
  fail("member " + std::to_string(p) + " sent message " + std::to_string(h.seq) + " of " + std::to_string(h.bytes) +
       " bytes where this member expects message " + std::to_string(recv_seq_[p]) + " of " + std::to_string(bytes) +
       " bytes (the members issued different collectives)");
}

void SocketMesh::all_gather(const void* mine, void* copies, size_t bytes, Ms timeout) {
  std::vector<Out> to(n_, Out{mine, bytes, true});
  std::vector<In> from(n_);
  for (int p = 0; p < n_; ++p) from[p] = In{static_cast<char*>(copies) + size_t(p) * bytes, bytes, true};
  exchange(to, from, timeout);
}

}  // namespace nns::backend
