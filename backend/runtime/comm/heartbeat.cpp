#include "backend/runtime/comm/heartbeat.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "backend/runtime/comm/env_vars.h"
#include "backend/runtime/comm/socket_mesh.h"

namespace nns::backend {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

constexpr char kBeat = 'h';
constexpr char kGoodbye = 'b';

}  // namespace

Ms Heartbeat::interval_for(Ms limit) { return std::max(Ms(10), std::min(Ms(1000), limit / 5)); }

Heartbeat::Heartbeat(gloo::rendezvous::Store& store, int rank, int size, const std::string& host, Ms connect_timeout,
                     Ms limit, OnSilent on_silent)
    : rank_(rank), size_(size), limit_(limit), interval_(interval_for(limit)), on_silent_(std::move(on_silent)) {
  mesh_ = std::make_unique<SocketMesh>(store, rank, size, host, connect_timeout);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("heartbeat: pipe failed");
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  char c = 1;
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  // Peers that read this stop watching us; one that misses it sees the
  // socket close when the mesh is destroyed, which ends its watch too.
  for (int p = 0; p < size_; ++p)
    if (p != rank_) ::send(mesh_->fd(p), &kGoodbye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  mesh_.reset();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

// Beats every interval and reads whatever the peers sent in between. A
// beat that does not fit (the peer's buffer is full because it stopped
// reading) is simply dropped: only arrivals count.
void Heartbeat::loop() {
  std::vector<bool> watched(static_cast<size_t>(size_), true);
  std::vector<Clock::time_point> last_seen(static_cast<size_t>(size_), Clock::now());
  watched[static_cast<size_t>(rank_)] = false;
  auto next_beat = Clock::now();
  while (!stop_) {
    const auto now = Clock::now();
    if (now >= next_beat) {
      for (int p = 0; p < size_; ++p)
        if (watched[static_cast<size_t>(p)]) ::send(mesh_->fd(p), &kBeat, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      next_beat = now + interval_;
    }
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<int> who;
    for (int p = 0; p < size_; ++p)
      if (watched[static_cast<size_t>(p)]) fds.push_back({mesh_->fd(p), POLLIN, 0}), who.push_back(p);
    const auto wait = std::chrono::duration_cast<Ms>(next_beat - Clock::now());
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (stop_) return;
    const auto seen = Clock::now();
    for (size_t i = 1; i < fds.size(); ++i) {
      const int p = who[i - 1];
      if (fds[i].revents == 0) continue;
      char buf[64];
      const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      // Closed or failed (the peer exited) or a goodbye: no longer watched.
      if (n <= 0 || std::find(buf, buf + n, kGoodbye) != buf + n) {
        watched[static_cast<size_t>(p)] = false;
        continue;
      }
      last_seen[static_cast<size_t>(p)] = seen;
    }
    for (int p = 0; p < size_; ++p) {
      const auto silence = std::chrono::duration_cast<Ms>(seen - last_seen[static_cast<size_t>(p)]);
      if (!watched[static_cast<size_t>(p)] || silence <= limit_) continue;
      watched[static_cast<size_t>(p)] = false;
      on_silent_(p, silence);
    }
  }
}

Ms heartbeat_limit_from_env() {
  const char* text = std::getenv("NNS_HEARTBEAT_TIMEOUT");
  if (!text || !*text) return Ms(8000);
  // check_nns_variables has refused malformed and out-of-range values.
  return Ms(static_cast<int64_t>(std::strtod(text, nullptr) * 1000));
}

}  // namespace nns::backend
