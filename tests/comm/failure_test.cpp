// Failure handling: a rank that never joins a collective (timeout), a rank
// that dies (the others' collectives fail fast, the launcher stops the
// run), the launcher's SIGTERM-then-SIGKILL policy and its messages, rank
// output routing and environment, and no orphans when the launcher dies.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <csignal>
#include <thread>

#include "comm_test_util.h"

using namespace nns::backend;
using namespace nns::comm_test;
using Clock = std::chrono::steady_clock;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Written then renamed, so a reader never sees a half-written file.
void publish(const std::string& path, const std::string& text) {
  write_file(path + ".tmp", text);
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

TEST_CASE("a rank that never joins makes the collective time out with CommError", "[comm][failure]") {
  int rc = launch_local_ranks(3, [](int rank) {
    auto c = env_comm(std::chrono::seconds(2));
    if (rank == 2) {
      sleep_s(3.0);  // alive and connected, but never calls allreduce
      return 0;
    }
    std::vector<float> buf(1000, 1.0f);
    auto start = Clock::now();
    try {
      c->allreduce(buf.data(), buf.size());
      RANK_CHECK(false, "allreduce returned without rank 2");
    } catch (const CommError& e) {
      double took = seconds_since(start);
      std::string msg = e.what();
      RANK_CHECK(took > 1.5 && took < 3.5, "failed after " << took << " s: " << msg);
      RANK_CHECK(contains(msg, "allreduce over group {0,1,2} failed on rank " + std::to_string(rank)), msg);
      RANK_CHECK(contains(msg, "timeout 2 s"), msg);
    }
    // The group is unusable afterwards, and says so at once.
    start = Clock::now();
    try {
      c->barrier();
      RANK_CHECK(false, "barrier on a broken group returned");
    } catch (const CommError& e) {
      RANK_CHECK(seconds_since(start) < 0.5, "slow");
      RANK_CHECK(contains(e.what(), "unusable after an earlier failure"), e.what());
    }
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("a rank that exits early fails the others' collectives and the launcher returns 70", "[comm][failure]") {
  // 100000 floats go around Gloo's ring, 10 over the socket mesh.
  const size_t count = GENERATE(100000, 10);
  INFO("allreduce of " << count);
  const std::string dir = make_temp_dir();
  CaptureFd err(2, dir + "/stderr");
  auto start = Clock::now();
  int rc = launch_local_ranks(3, [&](int rank) {
    auto c = env_comm(std::chrono::seconds(2));
    if (rank == 2) return 3;  // dies right after joining
    // Outlive the launcher's SIGTERM long enough to record what we saw
    // (its SIGKILL would come 3 s later).
    std::signal(SIGTERM, SIG_IGN);
    std::vector<float> buf(count, 1.0f);
    auto t0 = Clock::now();
    std::string result = "no error";
    try {
      for (int i = 0; i < 100; ++i) c->allreduce(buf.data(), buf.size());
    } catch (const CommError& e) {
      result = "CommError after " + std::to_string(seconds_since(t0)) + " s: " + e.what();
    }
    publish(dir + "/rank" + std::to_string(rank), result);
    return 0;
  });
  double took = seconds_since(start);
  std::string log = err.text();
  INFO(log);
  REQUIRE(rc == 3);  // the failed rank's own code
  REQUIRE(contains(log, "nns: rank 2 failed (exit code 3); stopping the other ranks"));
  REQUIRE(took < 3.0);
  for (int r : {0, 1}) {
    std::string seen = read_file(dir + "/rank" + std::to_string(r));
    INFO("rank " << r << ": " << seen);
    REQUIRE(contains(seen, "CommError after"));
    REQUIRE(contains(seen, "allreduce over group {0,1,2} failed on rank " + std::to_string(r)));
    // Within the timeout: a dead peer is noticed, not waited for.
    REQUIRE(std::stod(seen.substr(std::string("CommError after ").size())) < 2.5);
  }
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("the launcher stops the other ranks when one fails", "[comm][launcher]") {
  const std::string dir = make_temp_dir();
  SECTION("non-zero exit: SIGTERM stops the rest at once") {
    CaptureFd err(2, dir + "/stderr");
    auto start = Clock::now();
    int rc = launch_local_ranks(3, [](int rank) {
      if (rank == 1) {
        sleep_s(0.1);
        return 5;
      }
      sleep_s(20);
      return 0;
    });
    double took = seconds_since(start);
    std::string log = err.text();
    INFO(log);
    REQUIRE(rc == 5);
    REQUIRE(contains(log, "nns: rank 1 failed (exit code 5); stopping the other ranks"));
    REQUIRE(took < 2.5);
  }
  SECTION("killed by a signal: a rank ignoring SIGTERM gets SIGKILL after 3 s") {
    CaptureFd err(2, dir + "/stderr");
    auto start = Clock::now();
    int rc = launch_local_ranks(2, [](int rank) {
      if (rank == 1) {
        sleep_s(0.2);
        std::raise(SIGKILL);
      }
      std::signal(SIGTERM, SIG_IGN);
      sleep_s(20);
      return 0;
    });
    double took = seconds_since(start);
    std::string log = err.text();
    INFO(log);
    REQUIRE(rc == kRankFailedExit);
    REQUIRE(contains(log, "nns: rank 1 failed (signal 9); stopping the other ranks"));
    REQUIRE(took > 3.0);
    REQUIRE(took < 6.0);
  }
  SECTION("an exception escaping a rank is reported and exits 70") {
    CaptureFd err(2, dir + "/stderr");
    int rc = launch_local_ranks(1, [](int) -> int { throw std::runtime_error("boom"); });
    std::string log = err.text();
    INFO(log);
    REQUIRE(rc == kRankFailedExit);
    REQUIRE(contains(log, "[rank 0] nns: rank 0: error: boom"));
    REQUIRE(contains(log, "nns: rank 0 failed (exit code 70)"));
  }
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("rank environment and output routing", "[comm][launcher]") {
  const std::string dir = make_temp_dir();
  const char* saved_threads = std::getenv("NNS_THREADS");
  std::string saved = saved_threads ? saved_threads : "";
  ::unsetenv("NNS_THREADS");
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int cores = CPU_COUNT(&set);
  auto body = [cores](int rank) {
    RANK_CHECK(std::getenv("NNS_RANK") == std::to_string(rank), "NNS_RANK");
    RANK_CHECK(std::getenv("NNS_WORLD_SIZE") == std::string("2"), "NNS_WORLD_SIZE");
    RANK_CHECK(std::getenv("NNS_MASTER_ADDR") == std::string("127.0.0.1"), "NNS_MASTER_ADDR");
    RANK_CHECK(std::atoi(std::getenv("NNS_MASTER_PORT")) > 0, "NNS_MASTER_PORT");
    RANK_CHECK(rank_threads() == std::max(1, cores / 2), "threads " << rank_threads() << " cores " << cores);
    std::printf("stdout from rank %d\n", rank);
    std::fprintf(stderr, "stderr from rank %d\nno newline", rank);
    return 0;
  };
  for (bool verbose : {false, true}) {
    if (verbose) ::setenv("NNS_VERBOSE_RANKS", "1", 1);
    std::string out_text, err_text;
    int rc;
    {
      CaptureFd out(1, dir + "/stdout"), err(2, dir + "/stderr");
      rc = launch_local_ranks(2, body);
      err_text = err.text();
      out_text = out.text();
    }
    ::unsetenv("NNS_VERBOSE_RANKS");
    INFO("stdout:\n" << out_text << "stderr:\n" << err_text);
    REQUIRE(rc == 0);
    REQUIRE(contains(out_text, "stdout from rank 0\n"));
    REQUIRE(contains(out_text, "stdout from rank 1\n") == verbose);
    REQUIRE(contains(err_text, "[rank 0] stderr from rank 0\n"));
    REQUIRE(contains(err_text, "[rank 1] stderr from rank 1\n"));
    REQUIRE(contains(err_text, "[rank 1] no newline\n"));
  }
  if (saved_threads) ::setenv("NNS_THREADS", saved.c_str(), 1);
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("ranks die with their launcher", "[comm][launcher]") {
  const std::string dir = make_temp_dir();
  // The ranks are our grandchildren; as a subreaper we inherit (and can
  // reap) them once their launcher is gone.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    int rc = launch_local_ranks(2, [&](int rank) {
      publish(dir + "/pid" + std::to_string(rank), std::to_string(::getpid()));
      sleep_s(30);
      return 0;
    });
    ::_exit(rc);
  }
  std::vector<pid_t> ranks;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  for (int r = 0; r < 2; ++r) {
    std::string text;
    while ((text = read_file(dir + "/pid" + std::to_string(r))).empty() && Clock::now() < deadline) sleep_s(0.01);
    REQUIRE(!text.empty());
    ranks.push_back(std::stoi(text));
  }
  ::kill(launcher, SIGKILL);
  REQUIRE(::waitpid(launcher, nullptr, 0) == launcher);
  for (pid_t p : ranks) {
    int st = 0;
    pid_t got = 0;
    auto until = Clock::now() + std::chrono::seconds(5);
    while ((got = ::waitpid(p, &st, WNOHANG)) != p && Clock::now() < until) sleep_s(0.01);
    INFO("rank pid " << p);
    REQUIRE(got == p);
    REQUIRE(WIFSIGNALED(st));
    REQUIRE(WTERMSIG(st) == SIGKILL);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}
