#include "backend/runtime/comm/p2p_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "backend/runtime/comm/launcher.h"

namespace nns::backend {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

P2pChannel::P2pChannel(int fd) : fd_(fd) { writer_ = std::thread([this] { writer_loop(); }); }

P2pChannel::~P2pChannel() {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    stop_ = true;
  }
  send_cv_.notify_all();
  writer_.join();
}

// Writes what the socket takes now of o's [header, payload].
bool P2pChannel::write_some(Outgoing& o) {
  const size_t total = sizeof(Header) + o.h.bytes;
  while (o.done < total) {
    iovec iov[2];
    int k = 0;
    if (o.done < sizeof(Header))
      iov[k++] = {reinterpret_cast<char*>(&o.h) + o.done, sizeof(Header) - o.done};
    size_t in_payload = o.done > sizeof(Header) ? o.done - sizeof(Header) : 0;
    if (in_payload < o.h.bytes) iov[k++] = {const_cast<char*>(o.data) + in_payload, o.h.bytes - in_payload};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(k);
    ssize_t r = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      o.done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    throw std::runtime_error(std::string("sending to the peer: ") + std::strerror(errno));
  }
  return true;
}

P2pChannel::Id P2pChannel::new_id() {
  std::lock_guard<std::mutex> lock(id_mu_);
  return next_id_++;
}

P2pChannel::Id P2pChannel::post_send(const void* data, size_t bytes, uint32_t tag) {
  const Id id = new_id();
  Outgoing o{id, Header{tag, 0, bytes}, static_cast<const char*>(data), 0};
  std::unique_lock<std::mutex> lock(send_mu_);
  if (!send_error_.empty()) throw std::runtime_error(send_error_);
  // Messages leave in posting order: the calling thread writes only when
  // nothing is queued ahead of it.
  if (queue_.empty()) {
    try {
      if (write_some(o)) return id;  // complete: wait(id) returns at once
    } catch (const std::exception& e) {
      send_error_ = e.what();
      throw;
    }
  }
  sends_open_.insert(id);
  queue_.push_back(o);
  lock.unlock();
  send_cv_.notify_all();
  return id;
}

// Finishes the queued remainders, in order, sleeping in poll() while the
// socket is full (briefly, to notice stop_).
void P2pChannel::writer_loop() {
  std::unique_lock<std::mutex> lock(send_mu_);
  for (;;) {
    send_cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && send_error_.empty()); });
    if (stop_) return;
    try {
      while (!queue_.empty()) {
        if (!write_some(queue_.front())) break;
        sends_open_.erase(queue_.front().id);
        queue_.pop_front();
        send_cv_.notify_all();
      }
    } catch (const std::exception& e) {
      send_error_ = e.what();
      send_cv_.notify_all();
      continue;
    }
    if (queue_.empty()) continue;
    lock.unlock();
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, 50);
    lock.lock();
  }
}

void P2pChannel::fail_recv(const std::string& why) {
  if (recv_error_.empty()) recv_error_ = why;
  throw std::runtime_error(recv_error_);
}

P2pChannel::Id P2pChannel::post_recv(void* data, size_t bytes, uint32_t tag) {
  const Id id = new_id();
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (!recv_error_.empty()) throw std::runtime_error(recv_error_);
  if (posted_by_tag_.count(tag)) fail_recv("two receives posted with tag " + std::to_string(tag));
  Posted p{static_cast<char*>(data), bytes, tag};
  auto early = unexpected_.find(tag);
  if (early != unexpected_.end()) {
    if (early->second.size() != bytes)
      fail_recv("the peer sent " + std::to_string(early->second.size()) + " bytes with tag " + std::to_string(tag) +
                " where this rank receives " + std::to_string(bytes));
    // The message may still be arriving (read_available put its start
    // aside): what came so far is copied, and the rest is read straight
    // into this receive. Copying a half-read message and dropping its
    // buffer left the receive with zeros past the part read and the rest
    // of the message written into freed memory.
    const bool arriving =
        in_posted_ == 0 && in_done_ >= sizeof(Header) && in_h_.tag == tag && in_target_ == early->second.data();
    const size_t got = arriving ? in_done_ - sizeof(Header) : bytes;
    std::memcpy(p.data, early->second.data(), got);
    unexpected_.erase(early);
    if (arriving) {
      in_target_ = p.data;
      in_posted_ = id;
      posted_by_tag_[tag] = id;
    } else {
      p.done = true;
    }
  } else {
    posted_by_tag_[tag] = id;
  }
  posted_[id] = p;
  return id;
}

// Reads whatever has arrived, message by message: into the posted receive
// of its tag, or aside until that receive is posted.
void P2pChannel::read_available() {
  for (;;) {
    iovec iov;
    if (in_done_ < sizeof(Header)) {
      iov = {reinterpret_cast<char*>(&in_h_) + in_done_, sizeof(Header) - in_done_};
    } else {
      size_t got = in_done_ - sizeof(Header);
      iov = {in_target_ + got, in_h_.bytes - got};
    }
    ssize_t r = iov.iov_len ? ::readv(fd_, &iov, 1) : 0;
    if (iov.iov_len && r == 0) {
      // The peer is gone. Everything it sent before has been read: a
      // receive it completed still stands; one it did not fails in wait().
      if (in_done_ > 0) fail_recv("the peer closed its connection in the middle of a message");
      peer_closed_ = true;
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      fail_recv(std::string("receiving from the peer: ") + std::strerror(errno));
    }
    in_done_ += static_cast<size_t>(r);
    if (in_done_ == sizeof(Header) && (iov.iov_len == 0 || r > 0)) {
      // A whole header: where its payload goes.
      auto it = posted_by_tag_.find(in_h_.tag);
      if (it != posted_by_tag_.end()) {
        Posted& p = posted_[it->second];
        if (p.bytes != in_h_.bytes)
          fail_recv("the peer sent " + std::to_string(in_h_.bytes) + " bytes with tag " + std::to_string(in_h_.tag) +
                    " where this rank receives " + std::to_string(p.bytes));
        in_target_ = p.data;
        in_posted_ = it->second;
      } else {
        if (unexpected_.count(in_h_.tag)) fail_recv("the peer sent tag " + std::to_string(in_h_.tag) + " twice");
        std::vector<char>& spill = unexpected_[in_h_.tag];
        spill.resize(in_h_.bytes);
        in_target_ = spill.data();
        in_posted_ = 0;
      }
    }
    if (in_done_ >= sizeof(Header) && in_done_ == sizeof(Header) + in_h_.bytes) {
      if (in_posted_ != 0) {
        Posted& p = posted_[in_posted_];
        p.done = true;
        posted_by_tag_.erase(p.tag);
      }
      in_done_ = 0;
      in_target_ = nullptr;
      in_posted_ = 0;
    }
  }
}

void P2pChannel::wait(Id id, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(std::min<int64_t>(left, 1000)) : 0;
  };
  {
    std::unique_lock<std::mutex> lock(recv_mu_);
    auto it = posted_.find(id);
    if (it != posted_.end()) {
      for (;;) {
        if (it->second.done) {
          posted_.erase(it);
          return;
        }
        if (!recv_error_.empty()) throw std::runtime_error(recv_error_);
        if (!peer_closed_) read_available();
        if (it->second.done) continue;
        if (peer_closed_) fail_recv("the peer closed its connection");
        if (Clock::now() >= deadline) throw std::runtime_error("timed out waiting for the peer's message");
        lock.unlock();
        pollfd p{fd_, POLLIN, 0};
        // Polls without sleeping for a while first (launcher.h, comm_spin):
        // a rank put to sleep is slow to wake on this kind of VM.
        poll_after_spin(&p, 1, left_ms());
        lock.lock();
      }
    }
  }
  // A send: complete once the writer has written all of it.
  std::unique_lock<std::mutex> lock(send_mu_);
  while (sends_open_.count(id)) {
    if (!send_error_.empty()) throw std::runtime_error(send_error_);
    if (send_cv_.wait_until(lock, deadline) == std::cv_status::timeout && sends_open_.count(id))
      throw std::runtime_error("timed out sending to the peer");
  }
}

}  // namespace nns::backend
