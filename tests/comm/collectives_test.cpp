// Every collective on 2, 3 and 4 forked ranks against reference results
// computed locally from the same deterministic inputs: the world group,
// sub-groups (overlapping, disjoint, used from two threads at once),
// send/recv, the file-store rendezvous and the one-rank communicator.
#include <catch2/catch.hpp>
#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "comm_test_util.h"

using namespace nns::backend;
using namespace nns::comm_test;

namespace {

// Runs every collective over `g` (this rank must be a member) for each
// size and checks the result against the local reference.
void check_collectives(Communicator& c, const Group& group, const std::vector<size_t>& sizes, int salt) {
  const Group g = group.empty() ? c.world() : group;  // {} means the world
  const size_t n = g.size();
  int m = 0;
  while (g[m] != c.rank()) ++m;
  const std::string where = " on group " + group_name(g) + " rank " + std::to_string(c.rank());

  for (size_t count : sizes) {
    auto buf = filled(c.rank(), count, salt);
    c.allreduce(buf.data(), count, group);
    std::vector<float> want(count, 0.0f);
    for (int r : g)
      for (size_t i = 0; i < count; ++i) want[i] += value(r, i, salt);
    expect_equal(buf, want, "allreduce " + std::to_string(count) + where);
  }

  for (size_t chunk : sizes) {
    auto in = filled(c.rank(), chunk, salt + 1);
    std::vector<float> out(n * chunk, -1.0f), want;
    c.allgather(in.data(), out.data(), chunk, group);
    for (int r : g) {
      auto part = filled(r, chunk, salt + 1);
      want.insert(want.end(), part.begin(), part.end());
    }
    expect_equal(out, want, "allgather " + std::to_string(chunk) + where);
  }

  for (size_t chunk : sizes) {
    auto in = filled(c.rank(), n * chunk, salt + 2);
    const auto in_copy = in;
    std::vector<float> out(chunk, -1.0f), want(chunk, 0.0f);
    c.reduce_scatter(in.data(), out.data(), chunk, group);
    for (int r : g)
      for (size_t j = 0; j < chunk; ++j) want[j] += value(r, m * chunk + j, salt + 2);
    expect_equal(out, want, "reduce_scatter " + std::to_string(chunk) + where);
    expect_equal(in, in_copy, "reduce_scatter leaves its input" + where);
  }

  for (size_t chunk : sizes) {
    auto in = filled(c.rank(), n * chunk, salt + 3);
    std::vector<float> out(n * chunk, -1.0f), want(n * chunk);
    c.all_to_all(in.data(), out.data(), chunk, group);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < chunk; ++j) want[i * chunk + j] = value(g[i], m * chunk + j, salt + 3);
    expect_equal(out, want, "all_to_all " + std::to_string(chunk) + where);
  }

  for (int root : g) {
    const size_t count = sizes.back();
    auto buf = c.rank() == root ? filled(root, count, salt + 4) : std::vector<float>(count, -1.0f);
    c.broadcast(buf.data(), count, root, group);
    expect_equal(buf, filled(root, count, salt + 4), "broadcast from " + std::to_string(root) + where);
  }
  c.barrier(group);
}

// Each rank sends to the next and receives from the previous one. Sends
// block until matched, so even ranks send first and odd ranks receive
// first (which also works around an odd ring).
void check_ring_send_recv(Communicator& c, size_t count, uint32_t tag) {
  const int w = c.size(), r = c.rank();
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  auto mine = filled(r, count, 9 + static_cast<int>(tag));
  std::vector<float> got(count, -1.0f);
  if (r % 2 == 0) {
    c.send(mine.data(), count, next, tag);
    c.recv(got.data(), count, prev, tag);
  } else {
    c.recv(got.data(), count, prev, tag);
    c.send(mine.data(), count, next, tag);
  }
  expect_equal(got, filled(prev, count, 9 + static_cast<int>(tag)),
               "recv from " + std::to_string(prev) + " tag " + std::to_string(tag));
}

}  // namespace

TEST_CASE("collectives on the world group match local sums", "[comm]") {
  for (int world : {2, 3, 4}) {
    INFO("world size " << world);
    int rc = launch_local_ranks(world, [](int) {
      auto c = env_comm();
      // 300001 floats span several of the ring's 1 MiB segments.
      check_collectives(*c, c->world(), {1, 7, 1000, 300001}, 0);
      // Again with the default group ({} = world) and reused scratch.
      check_collectives(*c, {}, {7, 1000}, 5);
      check_ring_send_recv(*c, 1, 0);
      check_ring_send_recv(*c, 250000, 7);
      return 0;
    });
    REQUIRE(rc == 0);
  }
}

TEST_CASE("collectives over sub-groups", "[comm]") {
  SECTION("overlapping pairs of 3 ranks, then the world") {
    int rc = launch_local_ranks(3, [](int) {
      auto c = env_comm();
      // One global order of groups; each rank takes those it belongs to.
      for (Group g : {Group{0, 2}, Group{0, 1}, Group{1, 2}, Group{0, 1, 2}, Group{1}}) {
        if (std::find(g.begin(), g.end(), c->rank()) == g.end()) continue;
        check_collectives(*c, g, {1, 33, 5000}, g[0] * 10 + static_cast<int>(g.size()));
      }
      return 0;
    });
    REQUIRE(rc == 0);
  }
  SECTION("4 ranks: disjoint groups run concurrently") {
    int rc = launch_local_ranks(4, [](int) {
      auto c = env_comm();
      const std::vector<Group> order = {{0, 1}, {2, 3}, {0, 2}, {1, 3}, {1, 2, 3}, {0, 1, 2, 3}};
      for (const Group& g : order) {
        if (std::find(g.begin(), g.end(), c->rank()) == g.end()) continue;
        check_collectives(*c, g, {3, 4099, 100000}, static_cast<int>(g.size()));
      }
      return 0;
    });
    REQUIRE(rc == 0);
  }
  SECTION("rank 0 drives two groups from two threads at once") {
    int rc = launch_local_ranks(3, [](int) {
      auto c = env_comm();
      const Group a{0, 1}, b{0, 2};
      // Creation is collective and ordered; the concurrent use is not.
      if (c->rank() != 2) c->create_group(a);
      if (c->rank() != 1) c->create_group(b);
      auto loop = [&](const Group& g) {
        for (int it = 0; it < 10; ++it) check_collectives(*c, g, {17, 20000}, it);
      };
      if (c->rank() == 0) {
        std::thread t([&] { loop(b); });
        loop(a);
        t.join();
      } else {
        loop(c->rank() == 1 ? a : b);
      }
      return 0;
    });
    REQUIRE(rc == 0);
  }
}

TEST_CASE("large reduce_scatter and allreduce span many segments", "[comm]") {
  // 3 ranks take the ring, 4 recursive halving.
  for (int world : {3, 4}) {
    INFO("world size " << world);
    int rc = launch_local_ranks(world, [world](int) {
      auto c = env_comm();
      // 1M + 3 floats per member: several 1 MiB segments per step, the
      // last one short; run twice to reuse the group's scratch blocks.
      const size_t chunk = (size_t(1) << 20) + 3, total = world * chunk;
      for (int salt : {3, 4}) {
        auto in = filled(c->rank(), total, salt);
        std::vector<float> out(chunk, -1.0f), want(chunk, 0.0f);
        c->reduce_scatter(in.data(), out.data(), chunk);
        for (int r = 0; r < world; ++r)
          for (size_t j = 0; j < chunk; ++j) want[j] += value(r, c->rank() * chunk + j, salt);
        expect_equal(out, want, "reduce_scatter");
        c->allreduce(in.data(), total);
        for (size_t i = 0; i < total; i += 101) {
          float sum = 0;
          for (int r = 0; r < world; ++r) sum += value(r, i, salt);
          RANK_CHECK(in[i] == sum, "allreduce at " << i);
        }
      }
      return 0;
    });
    REQUIRE(rc == 0);
  }
}

// Floats of mixed signs and magnitudes, so that sums round and their
// order shows in the bits.
std::vector<float> rough(int rank, size_t n, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(std::sin(0.37 * double(i + 1) * (rank + 2) + salt) * std::pow(10.0, double((i * 7 + rank) % 9) - 4));
  return v;
}

// What Gloo's ring allreduce makes of the same buffer, on the group's own
// connections (what Communicator::allreduce called before it went over the
// socket mesh).
std::vector<float> gloo_ring(Communicator& c, const Group& g, std::vector<float> buf, uint32_t tag) {
  gloo::AllreduceOptions o(c.gloo_context(g));
  o.setOutput(buf.data(), buf.size());
  o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  o.setTag(tag);
  gloo::allreduce(o);
  return buf;
}

TEST_CASE("allreduces sum bit for bit as Gloo's ring", "[comm]") {
  for (int world : {2, 3, 4, 5}) {
    INFO("world size " << world);
    int rc = launch_local_ranks(world, [](int) {
      auto c = env_comm();
      // Sub-groups too: the order is the member's, not the global rank's.
      std::vector<Group> groups = {c->world()};
      if (c->size() >= 4) groups.push_back({1, 2, 3});
      // 16384 floats on 5 ranks send exactly the direct path's limit;
      // 70000 take the cut path on any group, 3000001 (12 MB) with several
      // of the ring's 1 MiB segments per member.
      for (const Group& g : groups) {
        if (std::find(g.begin(), g.end(), c->rank()) == g.end()) continue;
        uint32_t tag = 1u << 28;
        for (size_t count : {1, 2, 3, 7, 10, 64, 1001, 16384, 70000, 3000001}) {
          int salt = static_cast<int>(count % 13);
          auto mine = rough(c->rank(), count, salt);
          auto want = gloo_ring(*c, g, mine, tag++);
          c->allreduce(mine.data(), count, g);
          for (size_t i = 0; i < count; ++i)
            RANK_CHECK(std::memcmp(&mine[i], &want[i], sizeof(float)) == 0,
                       "allreduce of " << count << " on " << group_name(g) << ": element " << i << " is " << std::hexfloat << mine[i]
                                       << ", Gloo's ring gives " << want[i]);
        }
      }
      c->barrier();
      return 0;
    });
    REQUIRE(rc == 0);
  }
}

TEST_CASE("rendezvous through a file store directory", "[comm]") {
  const std::string dir = make_temp_dir();
  int rc = launch_local_ranks(2, [&](int) {
    ::setenv("NNS_STORE_DIR", dir.c_str(), 1);
    auto c = env_comm();
    check_collectives(*c, c->world(), {5, 1000}, 2);
    return 0;
  });
  REQUIRE(rc == 0);
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("broadcast_bytes moves any bytes unchanged", "[comm]") {
  // 130 bytes (not a whole number of words) whose words include NaN and
  // signalling-NaN patterns, as an opaque id (NCCL's unique id) may.
  auto pattern = [](int salt) {
    std::vector<unsigned char> b(130);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 37 + salt);
    const unsigned char nan[4] = {0x01, 0x00, 0x80, 0x7f}, qnan[4] = {0x00, 0x00, 0xc0, 0xff};
    std::memcpy(b.data() + 8, nan, 4);
    std::memcpy(b.data() + 12, qnan, 4);
    return b;
  };
  int rc = launch_local_ranks(3, [&](int) {
    auto c = env_comm();
    std::vector<unsigned char> b = c->rank() == 1 ? pattern(5) : std::vector<unsigned char>(130, 0xee);
    c->broadcast_bytes(b.data(), b.size(), 1);
    RANK_CHECK(b == pattern(5), "rank " << c->rank() << " received other bytes");
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("a one-rank communicator runs every collective locally", "[comm]") {
  CommConfig cfg;  // rank 0 of 1: no store, no sockets
  Communicator c(cfg);
  check_collectives(c, c.world(), {1, 100}, 0);
  REQUIRE_THROWS_AS(c.allreduce(nullptr, 0, {0, 1}), std::invalid_argument);
  REQUIRE_THROWS_AS(c.send(nullptr, 1, 0), std::invalid_argument);
}

TEST_CASE("bad groups are refused with a message", "[comm]") {
  int rc = launch_local_ranks(3, [](int) {
    auto c = env_comm();
    float x = 1;
    auto expect_invalid = [&](const Group& g, const std::string& text) {
      try {
        c->allreduce(&x, 1, g);
      } catch (const std::invalid_argument& e) {
        RANK_CHECK(std::string(e.what()).find(text) != std::string::npos, e.what());
        return;
      }
      RANK_CHECK(false, "group " << group_name(g) << " was accepted");
    };
    expect_invalid({2, 0}, "ascending");
    expect_invalid({0, 0}, "ascending");
    expect_invalid({0, 3}, "ascending");
    if (c->rank() != 1) expect_invalid(c->rank() == 0 ? Group{1, 2} : Group{0, 1}, "not a member");
    return 0;
  });
  REQUIRE(rc == 0);
}
