// P2pChannel (send/recv over one socket): messages matched by tag in any
// order, large messages both ways at once (the writer thread finishes a
// send while its owner waits on a receive), size mismatches and a peer
// that goes away. Two channels over a socketpair in one process.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <numeric>
#include <thread>
#include <vector>

#include "backend/runtime/comm/p2p_channel.h"

using nns::backend::P2pChannel;
using Ms = std::chrono::milliseconds;

namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0);
    for (int f : fd) ::fcntl(f, F_SETFL, ::fcntl(f, F_GETFL) | O_NONBLOCK);
  }
  ~Pair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST_CASE("p2p channel: receives match tags whatever the order", "[p2p]") {
  Pair p;
  P2pChannel a(p.fd[0]), b(p.fd[1]);
  auto x = ramp(10, 0), y = ramp(20, 100), z = ramp(5, 1000);
  auto s1 = a.post_send(x.data(), x.size() * 4, 1);
  auto s2 = a.post_send(y.data(), y.size() * 4, 2);
  auto s3 = a.post_send(z.data(), z.size() * 4, 3);
  // Posted in another order than sent: 2 and 1 arrive before their receive.
  std::vector<float> gy(20), gz(5), gx(10);
  auto r3 = b.post_recv(gz.data(), gz.size() * 4, 3);
  b.wait(r3, Ms(2000));
  auto r2 = b.post_recv(gy.data(), gy.size() * 4, 2);
  auto r1 = b.post_recv(gx.data(), gx.size() * 4, 1);
  b.wait(r1, Ms(2000));
  b.wait(r2, Ms(2000));
  for (auto id : {s1, s2, s3}) a.wait(id, Ms(2000));
  CHECK(gx == x);
  CHECK(gy == y);
  CHECK(gz == z);
}

TEST_CASE("p2p channel: large messages both ways at once do not deadlock", "[p2p]") {
  Pair p;
  P2pChannel a(p.fd[0]), b(p.fd[1]);
  // 16 MiB each way: far more than a socket buffer. Each side posts its
  // send first, then waits on its receive; the writer threads finish the
  // sends while the owners read.
  const size_t n = size_t(4) << 20;
  auto xa = ramp(n, 1), xb = ramp(n, 7);
  std::vector<float> ga(n), gb(n);
  std::thread tb([&] {
    auto s = b.post_send(xb.data(), n * 4, 9);
    auto r = b.post_recv(gb.data(), n * 4, 8);
    b.wait(r, Ms(20000));
    b.wait(s, Ms(20000));
  });
  auto s = a.post_send(xa.data(), n * 4, 8);
  auto r = a.post_recv(ga.data(), n * 4, 9);
  a.wait(r, Ms(20000));
  a.wait(s, Ms(20000));
  tb.join();
  CHECK(ga == xb);
  CHECK(gb == xa);
}

TEST_CASE("p2p channel: a size mismatch and a vanished peer are errors", "[p2p]") {
  SECTION("sizes disagree") {
    Pair p;
    P2pChannel a(p.fd[0]), b(p.fd[1]);
    auto x = ramp(8, 0);
    std::vector<float> g(4);
    auto s = a.post_send(x.data(), 32, 5);
    auto r = b.post_recv(g.data(), 16, 5);
    CHECK_THROWS_WITH(b.wait(r, Ms(2000)), Catch::Contains("sent 32 bytes with tag 5 where this rank receives 16"));
    a.wait(s, Ms(2000));
  }
  SECTION("the peer closes: a completed message stands, a missing one fails") {
    Pair p;
    P2pChannel b(p.fd[1]);
    std::vector<float> g(4), h(4);
    {
      P2pChannel a(p.fd[0]);
      auto x = ramp(4, 3);
      a.wait(a.post_send(x.data(), 16, 1), Ms(2000));
    }
    ::close(p.fd[0]);
    p.fd[0] = -1;
    auto r1 = b.post_recv(g.data(), 16, 1);
    b.wait(r1, Ms(2000));
    CHECK(g == ramp(4, 3));
    auto r2 = b.post_recv(h.data(), 16, 2);
    CHECK_THROWS_WITH(b.wait(r2, Ms(2000)), Catch::Contains("closed its connection"));
  }
  SECTION("nothing arrives: the wait times out") {
    Pair p;
    P2pChannel b(p.fd[1]);
    std::vector<float> g(4);
    auto r = b.post_recv(g.data(), 16, 1);
    CHECK_THROWS_WITH(b.wait(r, Ms(100)), Catch::Contains("timed out"));
  }
}

TEST_CASE("p2p channel: a receive posted while its message is still arriving gets all of it", "[p2p]") {
  Pair p;
  P2pChannel a(p.fd[0]), b(p.fd[1]);
  // A small message (tag 1) and, behind it, one far larger than a socket
  // buffer (tag 2). b waits for tag 1 first: reading it, it starts reading
  // tag 2's message too, before any receive for tag 2 exists, and puts
  // that start aside. Only then is tag 2's receive posted. It must get the
  // whole message, the part put aside and the rest still arriving (it used
  // to get the part put aside followed by zeros).
  const size_t n = size_t(2) << 20;
  auto small = ramp(4, 5), big = ramp(n, 3);
  std::vector<float> gs(4), gb(n, 0.f);
  auto s1 = a.post_send(small.data(), small.size() * 4, 1);
  auto s2 = a.post_send(big.data(), n * 4, 2);
  auto r1 = b.post_recv(gs.data(), gs.size() * 4, 1);
  b.wait(r1, Ms(5000));
  auto r2 = b.post_recv(gb.data(), n * 4, 2);
  b.wait(r2, Ms(20000));
  a.wait(s1, Ms(5000));
  a.wait(s2, Ms(20000));
  CHECK(gs == small);
  CHECK(gb == big);
}
