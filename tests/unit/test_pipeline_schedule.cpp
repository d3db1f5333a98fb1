// Unit tests for semantics/pipeline_schedule: golden per-rank orders of
// every schedule, structural invariants over a sweep of sizes, the unit-time
// simulator (bubbles against theory, deadlock detection, collectives),
// activation peaks, the timeline text and make_schedule's checks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>

#include "semantics/pipeline_schedule.h"

using namespace nns::sema;

namespace {

PipeTask T(PipeTask::Phase ph, int stage, int mb) {
  PipeTask t;
  t.phase = ph;
  t.stage = stage;
  t.mb = mb;
  return t;
}

std::vector<std::string> rows(const PipeOrder& o) {
  std::vector<std::string> out;
  for (const auto& r : o) out.push_back(to_string(r));
  return out;
}

// nnScaler's docstring notation "4F3" (stage 4, forward, micro-batch 3) to
// ours ("F4.3"), so its published traces serve as test data verbatim.
std::string from_nnscaler(const std::string& line) {
  std::string out, word;
  auto flush = [&] {
    if (word.empty()) return;
    size_t k = word.find_first_of("FB");
    if (!out.empty()) out += ' ';
    out += word[k] + word.substr(0, k) + "." + word.substr(k + 1);
    word.clear();
  };
  for (char c : line) {
    if (std::isspace(static_cast<unsigned char>(c))) flush();
    else word += c;
  }
  flush();
  return out;
}

ChainDeps deps_for(const std::string& kind, int p, int v = 1, int recycles = 0) {
  ChainDeps d;
  d.kind = kind;
  d.p = p;
  d.v = v;
  d.recycles = recycles;
  return d;
}

struct Sim {
  PipeOrder order;
  PipeTimes times;
  double bubble = 0;
  std::vector<int> peak;
};

Sim run(const std::string& kind, int p, int m, int v = 1, int recycles = 0) {
  Sim s;
  std::string why;
  REQUIRE(make_schedule(kind, p, v, m, recycles, s.order, why));
  INFO(why);
  REQUIRE(simulate(s.order, deps_for(kind, p, v, recycles), s.times, why));
  s.bubble = bubble_fraction(s.order, s.times);
  s.peak = peak_stashed(s.order);
  return s;
}

int64_t busy_slots(const PipeOrder& o) {
  int64_t busy = 0;
  for (const auto& r : task_slots(o))
    for (int x : r) busy += x;
  return busy;
}

// The complete task set a schedule must contain, per rank.
std::vector<std::set<PipeTask>> expected_tasks(const std::string& kind, int p, int m, int v, int R) {
  std::vector<std::set<PipeTask>> want(p);
  for (int r = 0; r < p; ++r)
    for (int mb = 0; mb < m; ++mb) {
      if (kind == "interleaved") {
        for (int c = 0; c < v; ++c) {
          want[r].insert(T(PipeTask::F, c * p + r, mb));
          want[r].insert(T(PipeTask::B, c * p + r, mb));
        }
      } else if (kind == "nf1b") {
        for (int k = 0; k <= R; ++k) want[r].insert(T(PipeTask::F, k * p + r, mb));
        want[r].insert(T(PipeTask::B, R * p + r, mb));
      } else {
        want[r].insert(T(PipeTask::F, r, mb));
        want[r].insert(T(PipeTask::B, r, mb));
        if (kind == "zb-h1" && r > 0) want[r].insert(T(PipeTask::W, r, mb));
        if (kind == "interlaced")
          for (int st : {p, p + 1}) {
            want[r].insert(T(PipeTask::F, st, mb));
            want[r].insert(T(PipeTask::B, st, mb));
          }
      }
    }
  return want;
}

}  // namespace

TEST_CASE("PipeTask: names and ordering", "[schedule]") {
  CHECK(T(PipeTask::F, 3, 1).to_string() == "F3.1");
  CHECK(T(PipeTask::B, 0, 0).to_string() == "B0.0");
  CHECK(T(PipeTask::W, 1, 2).to_string() == "W1.2");
  CHECK(to_string({T(PipeTask::F, 0, 0), T(PipeTask::B, 12, 10)}) == "F0.0 B12.10");
  CHECK(to_string(std::vector<PipeTask>{}).empty());
  // A strict total order (used as a map key by the simulator).
  CHECK(T(PipeTask::F, 0, 5) < T(PipeTask::F, 1, 0));
  CHECK(T(PipeTask::F, 1, 5) < T(PipeTask::B, 1, 0));
  CHECK(T(PipeTask::B, 1, 0) < T(PipeTask::B, 1, 1));
  CHECK_FALSE(T(PipeTask::B, 1, 1) < T(PipeTask::B, 1, 1));
  CHECK(T(PipeTask::W, 2, 3) == T(PipeTask::W, 2, 3));
  CHECK_FALSE(T(PipeTask::W, 2, 3) == T(PipeTask::B, 2, 3));
}

// ---- golden orders ----------------------------------------------------------

TEST_CASE("gpipe: all forwards then all backwards", "[schedule]") {
  CHECK(rows(gpipe_order(2, 3)) == std::vector<std::string>{
                                       "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2",
                                       "F1.0 F1.1 F1.2 B1.0 B1.1 B1.2",
                                   });
}

TEST_CASE("1f1b: Megatron's warm-up, steady pairs and cool-down", "[schedule]") {
  CHECK(rows(one_f_one_b_order(4, 8)) ==
        std::vector<std::string>{
            "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 F0.6 B0.3 F0.7 B0.4 B0.5 B0.6 B0.7",
            "F1.0 F1.1 F1.2 B1.0 F1.3 B1.1 F1.4 B1.2 F1.5 B1.3 F1.6 B1.4 F1.7 B1.5 B1.6 B1.7",
            "F2.0 F2.1 B2.0 F2.2 B2.1 F2.3 B2.2 F2.4 B2.3 F2.5 B2.4 F2.6 B2.5 F2.7 B2.6 B2.7",
            "F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 F3.4 B3.4 F3.5 B3.5 F3.6 B3.6 F3.7 B3.7",
        });
  // Fewer micro-batches than stages: the warm-up is capped at m.
  CHECK(rows(one_f_one_b_order(4, 2)) == std::vector<std::string>{
                                             "F0.0 F0.1 B0.0 B0.1",
                                             "F1.0 F1.1 B1.0 B1.1",
                                             "F2.0 F2.1 B2.0 B2.1",
                                             "F3.0 B3.0 F3.1 B3.1",
                                         });
  CHECK(rows(one_f_one_b_order(1, 2)) == std::vector<std::string>{"F0.0 B0.0 F0.1 B0.1"});
}

TEST_CASE("interleaved: nnScaler's sched_1f1b_interleaved traces (4 devices, 8 stages)", "[schedule]") {
  // microsoft/nnscaler, nnscaler/graph/schedule/predefined.py, the
  // docstring of sched_1f1b_interleaved (Megatron's order, blanks removed).
  SECTION("8 micro-batches") {
    CHECK(rows(interleaved_order(4, 2, 8)) ==
          std::vector<std::string>{
              from_nnscaler("0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 4F7 0B1 "
                            "0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7"),
              from_nnscaler("1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 5F4 1B0 5F5 1B1 5F6 1B2 "
                            "5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7"),
              from_nnscaler("2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 2F7 2B1 6F4 2B2 6F5 2B3 "
                            "6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7"),
              from_nnscaler("3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 7F4 7B4 "
                            "7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7"),
          });
  }
  SECTION("4 micro-batches: warm-up capped at m*v on ranks 0 and 1") {
    CHECK(rows(interleaved_order(4, 2, 4)) ==
          std::vector<std::string>{
              from_nnscaler("0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4B0 4B1 4B2 4B3 0B0 0B1 0B2 0B3"),
              from_nnscaler("1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 5B0 5B1 5B2 5B3 1B0 1B1 1B2 1B3"),
              from_nnscaler("2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 6B2 6B3 2B0 2B1 2B2 2B3"),
              from_nnscaler("3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3B0 3B1 3B2 3B3"),
          });
  }
  SECTION("warm-up counts follow min(2(p-1-r) + (v-1)p, m*v)") {
    const int p = 4, v = 3, m = 8;
    PipeOrder o = interleaved_order(p, v, m);
    for (int r = 0; r < p; ++r) {
      // The leading forwards are the warm-up plus the first steady pair's F.
      size_t leading = 0;
      while (leading < o[r].size() && o[r][leading].phase == PipeTask::F) ++leading;
      CHECK(leading == size_t(std::min(2 * (p - 1 - r) + (v - 1) * p + 1, m * v)));
    }
  }
  SECTION("one chunk is plain 1F1B") {
    CHECK(interleaved_order(4, 1, 6) == one_f_one_b_order(4, 6));
  }
}

TEST_CASE("zb-h1: split B, W delayed by the rank, leftovers at the end", "[schedule]") {
  CHECK(rows(zb_h1_order(4, 8)) ==
        std::vector<std::string>{
            // rank 0 never splits: exactly 1F1B
            "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 F0.6 B0.3 F0.7 B0.4 B0.5 B0.6 B0.7",
            "F1.0 F1.1 F1.2 B1.0 F1.3 B1.1 W1.0 F1.4 B1.2 W1.1 F1.5 B1.3 W1.2 F1.6 B1.4 W1.3 F1.7 B1.5 W1.4 "
            "B1.6 W1.5 B1.7 W1.6 W1.7",
            "F2.0 F2.1 B2.0 F2.2 B2.1 F2.3 B2.2 W2.0 F2.4 B2.3 W2.1 F2.5 B2.4 W2.2 F2.6 B2.5 W2.3 F2.7 B2.6 W2.4 "
            "B2.7 W2.5 W2.6 W2.7",
            "F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 W3.0 F3.4 B3.4 W3.1 F3.5 B3.5 W3.2 F3.6 B3.6 W3.3 F3.7 B3.7 "
            "W3.4 W3.5 W3.6 W3.7",
        });
  // p = 3, m = 2: rank 1 pops W1.0 after B1.1; on rank 2 every k < s, so
  // both Ws wait for the end.
  CHECK(rows(zb_h1_order(3, 2)) == std::vector<std::string>{
                                       "F0.0 F0.1 B0.0 B0.1",
                                       "F1.0 F1.1 B1.0 B1.1 W1.0 W1.1",
                                       "F2.0 B2.0 F2.1 B2.1 W2.0 W2.1",
                                   });
  CHECK(zb_h1_order(1, 3) == one_f_one_b_order(1, 3));
}

TEST_CASE("interlaced: head and tail on every rank, one global order", "[schedule]") {
  // p = 2: head = stage 2, tail = stage 3. Step table (stage 0: F0 @0, F1
  // @2, B0 @3, B1 @5; stage 1: F0 @1, B0 @2, F1 @3, B1 @4); head F before
  // stage 0's F, tail F and B after stage 1's F, head B after stage 0's B.
  CHECK(rows(interlaced_order(2, 2)) == std::vector<std::string>{
                                            "F2.0 F0.0 F3.0 B3.0 F2.1 F0.1 B0.0 B2.0 F3.1 B3.1 B0.1 B2.1",
                                            "F2.0 F1.0 F3.0 B3.0 F2.1 B1.0 F1.1 B2.0 F3.1 B3.1 B1.1 B2.1",
                                        });
  // One stage: head, stage 0, tail in a chain on the only rank.
  CHECK(rows(interlaced_order(1, 2)) ==
        std::vector<std::string>{"F1.0 F0.0 F2.0 B2.0 B0.0 B1.0 F1.1 F0.1 F2.1 B2.1 B0.1 B1.1"});
  SECTION("the head and tail tasks keep one relative order on every rank") {
    for (int p : {2, 3, 4, 5})
      for (int m : {1, 3, 8}) {
        PipeOrder o = interlaced_order(p, m);
        std::vector<std::string> shared;
        for (const auto& r : o) {
          std::vector<PipeTask> mine;
          for (const PipeTask& t : r)
            if (t.stage >= p) mine.push_back(t);
          shared.push_back(to_string(mine));
        }
        for (int r = 1; r < p; ++r) CHECK(shared[r] == shared[0]);
      }
  }
}

TEST_CASE("nf1b / 3f1b: no-grad recycling passes along anti-diagonals", "[schedule]") {
  // p = 2, R = 1: pass 0 = stages 0, 1 (no grad); pass 1 = stages 2, 3.
  CHECK(rows(nf1b_order(2, 3, 1)) == std::vector<std::string>{
                                         "F0.0 F0.1 F2.0 F0.2 F2.1 B2.0 F2.2 B2.1 B2.2",
                                         "F1.0 F1.1 F3.0 B3.0 F1.2 F3.1 B3.1 F3.2 B3.2",
                                     });
  // "3f1b" = R = 2: warm-up diagonals (pass 0, mb 0), (pass 1, mb 0),
  // (pass 0, mb 1), then per step the no-grad forwards of the next
  // diagonal, the grad forward, the backward.
  CHECK(rows(nf1b_order(2, 2, 2)) == std::vector<std::string>{
                                         "F0.0 F2.0 F0.1 F2.1 F4.0 F4.1 B4.0 B4.1",
                                         "F1.0 F3.0 F1.1 F3.1 F5.0 B5.0 F5.1 B5.1",
                                     });
  PipeOrder alias, direct = nf1b_order(3, 4, 2);
  std::string why;
  REQUIRE(make_schedule("3f1b", 3, 1, 4, 0, alias, why));
  CHECK(alias == direct);
  // No recycling: exactly 1F1B.
  CHECK(nf1b_order(4, 6, 0) == one_f_one_b_order(4, 6));
}

// ---- invariants over a sweep ------------------------------------------------

TEST_CASE("every schedule: each task once, per-rank F < B < W, simulates, respects deps", "[schedule]") {
  struct Kind {
    std::string name;
    int v, R;
  };
  const std::vector<Kind> kinds = {{"gpipe", 1, 0},       {"1f1b", 1, 0},  {"interleaved", 2, 0}, {"interleaved", 3, 0},
                                   {"zb-h1", 1, 0},       {"interlaced", 1, 0}, {"nf1b", 1, 1},  {"nf1b", 1, 2},
                                   {"nf1b", 1, 3}};
  for (const Kind& k : kinds)
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 10; ++m) {
        if (k.name == "interleaved" && m % p != 0) continue;
        INFO(k.name << " p=" << p << " m=" << m << " v=" << k.v << " R=" << k.R);
        PipeOrder o;
        std::string why;
        REQUIRE(make_schedule(k.name, p, k.v, m, k.R, o, why));
        REQUIRE(o.size() == size_t(p));
        const auto want = expected_tasks(k.name == "interleaved" ? "interleaved" : k.name, p, m, k.v, k.R);
        for (int r = 0; r < p; ++r) {
          std::set<PipeTask> got(o[r].begin(), o[r].end());
          CHECK(got.size() == o[r].size());  // no repeats
          CHECK(got == want[r]);             // nothing missing or foreign
          // Each (stage, mb): F before B before W on the rank.
          std::map<std::pair<int, int>, int> last_phase;
          for (const PipeTask& t : o[r]) {
            auto key = std::make_pair(t.stage, t.mb);
            int before = last_phase.count(key) ? last_phase[key] : -1;
            CHECK(int(t.phase) == before + 1);
            last_phase[key] = int(t.phase);
          }
        }
        ChainDeps d = deps_for(k.name, p, k.v, k.R);
        PipeTimes t;
        REQUIRE(simulate(o, d, t, why));
        // The simulated slots honour the rank order and every dependency,
        // collectives start together, and the makespan is the last end.
        const auto slots = task_slots(o);
        std::map<PipeTask, int64_t> start_of, end_of;
        int64_t last = 0;
        for (int r = 0; r < p; ++r) {
          int64_t free_at = 0;
          for (size_t i = 0; i < o[r].size(); ++i) {
            const int64_t s = t.start[r][i];
            CHECK(s >= free_at);
            free_at = s + slots[r][i];
            last = std::max(last, free_at);
            if (start_of.count(o[r][i])) CHECK(start_of[o[r][i]] == s);
            start_of[o[r][i]] = s;
            end_of[o[r][i]] = std::max(end_of[o[r][i]], free_at);
          }
        }
        CHECK(t.makespan == last);
        for (const auto& [task, s] : start_of)
          for (const PipeTask& dep : d.of(task)) CHECK(end_of.at(dep) <= s);
        // Bubble = idle / capacity.
        CHECK(bubble_fraction(o, t) == Approx(1.0 - double(busy_slots(o)) / double(p * t.makespan)).margin(1e-12));
      }
}

// ---- bubbles ------------------------------------------------------------------

TEST_CASE("bubbles against theory with F = B = W = 1 slot", "[schedule]") {
  SECTION("gpipe and 1f1b: (p-1)/(m+p-1); idle 3(p-1) slots per rank") {
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 12; ++m)
        for (const char* kind : {"gpipe", "1f1b"}) {
          Sim s = run(kind, p, m);
          INFO(kind << " p=" << p << " m=" << m);
          CHECK(s.times.makespan == 3 * (m + p - 1));
          CHECK(s.bubble == Approx(double(p - 1) / double(m + p - 1)).margin(1e-9));
        }
  }
  SECTION("interleaved: (p-1)/(v*m) of ideal, i.e. (p-1)/(v*m + p-1); below 1F1B's") {
    for (int p = 2; p <= 6; ++p)
      for (int v = 2; v <= 4; ++v)
        for (int m = p; m <= 3 * p; m += p) {
          Sim s = run("interleaved", p, m, v);
          INFO("p=" << p << " v=" << v << " m=" << m);
          // Slots are chunk times: a stage's F is v slots of its chunks.
          CHECK(s.times.makespan == 3 * (v * m + p - 1));
          CHECK(s.bubble == Approx(double(p - 1) / double(v * m + p - 1)).margin(1e-9));
          CHECK(s.bubble < run("1f1b", p, m).bubble);
        }
  }
  SECTION("zb-h1: idle (p-1)(T_F + T_B - T_W) = p-1 slots per rank, a third of 1F1B's") {
    for (int p = 1; p <= 6; ++p)
      for (int m = p; m <= 12; ++m) {
        Sim zb = run("zb-h1", p, m), ob = run("1f1b", p, m);
        INFO("p=" << p << " m=" << m);
        const int64_t idle_zb = zb.times.makespan - 3 * m, idle_1f1b = ob.times.makespan - 3 * m;
        CHECK(idle_zb == p - 1);
        CHECK(3 * idle_zb == idle_1f1b);
        CHECK(zb.bubble == Approx(double(p - 1) / double(3 * m + p - 1)).margin(1e-9));
      }
    // p = 4, m = 8: 3/27 against 9/33, a ratio of fractions of 11/27.
    Sim zb = run("zb-h1", 4, 8), ob = run("1f1b", 4, 8);
    CHECK(zb.bubble == Approx(1.0 / 9.0).margin(1e-9));
    CHECK(ob.bubble == Approx(3.0 / 11.0).margin(1e-9));
    CHECK(zb.bubble / ob.bubble == Approx(11.0 / 27.0).margin(1e-9));
  }
  SECTION("3f1b: (R+3)(m+p-1) slots for p <= 4, i.e. 1F1B's bubble fraction") {
    // Each rank works 5m slots; each steady iteration is 5 slots (2
    // no-grad F, grad F, B of 2) and the ramp costs (p-1) iterations. From
    // p = 5 on, a micro-batch's trip round the ring from one pass to the
    // next (p slots) no longer fits in one iteration and the steady phase
    // idles (the reference order's limit, see the header); it still never
    // deadlocks (sweep above).
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 10; ++m) {
        Sim s = run("3f1b", p, m);
        INFO("p=" << p << " m=" << m);
        CHECK(s.times.makespan == 5 * (m + p - 1));
        CHECK(s.bubble == Approx(double(p - 1) / double(m + p - 1)).margin(1e-9));
      }
    // R = 0 is 1F1B; R = 1 for p = 4, m = 8: 43 slots (32 of work).
    CHECK(run("nf1b", 4, 8, 1, 0).times.makespan == 33);
    CHECK(run("nf1b", 4, 8, 1, 1).times.makespan == 43);
  }
  SECTION("measured p=4,m=8 and p=2,m=8 (reported figures)") {
    CHECK(run("gpipe", 4, 8).bubble == Approx(9.0 / 33).margin(1e-9));
    CHECK(run("1f1b", 2, 8).bubble == Approx(3.0 / 27).margin(1e-9));
    CHECK(run("interleaved", 4, 8, 2).bubble == Approx(9.0 / 57).margin(1e-9));
    CHECK(run("interleaved", 2, 8, 2).bubble == Approx(3.0 / 51).margin(1e-9));
    CHECK(run("zb-h1", 2, 8).bubble == Approx(1.0 / 25).margin(1e-9));
    CHECK(run("interlaced", 4, 8).bubble == Approx(16.0 / 88).margin(1e-9));
    CHECK(run("interlaced", 2, 8).bubble == Approx(10.0 / 82).margin(1e-9));
    CHECK(run("3f1b", 4, 8).bubble == Approx(15.0 / 55).margin(1e-9));
    CHECK(run("3f1b", 2, 8).bubble == Approx(5.0 / 45).margin(1e-9));
  }
}

// ---- activation peaks -------------------------------------------------------

TEST_CASE("peak stash per rank", "[schedule]") {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 10; ++m) {
      INFO("p=" << p << " m=" << m);
      const auto gp = peak_stashed(gpipe_order(p, m));
      const auto ob = peak_stashed(one_f_one_b_order(p, m));
      const auto zb = peak_stashed(zb_h1_order(p, m));
      const auto nf = peak_stashed(nf1b_order(p, m, 2));
      for (int s = 0; s < p; ++s) {
        CHECK(gp[s] == m);
        CHECK(ob[s] == std::min(p - s, m));
        // The W delay keeps up to p micro-batches until their W on every
        // rank, never above 1F1B's rank-0 peak (the paper's p * M_B).
        CHECK(zb[s] == std::min(p, m));
        // Only the grad pass stashes: exactly 1F1B's.
        CHECK(nf[s] == std::min(p - s, m));
      }
      CHECK(*std::max_element(zb.begin(), zb.end()) <= *std::max_element(ob.begin(), ob.end()));
    }
  // Interleaved, in chunk activations: rank r holds its warm-up + 1, rank 0
  // vp + p - 1 (Megatron's p * (1 + (p-1)/(pv)) stage activations).
  CHECK(peak_stashed(interleaved_order(4, 2, 8)) == std::vector<int>{11, 9, 7, 5});
  CHECK(peak_stashed(interleaved_order(2, 2, 8)) == std::vector<int>{5, 3});
  // Interlaced: the head stashes like stage 0 on every rank (p), the tail
  // runs F and B back to back (0 in between).
  CHECK(peak_stashed(interlaced_order(4, 8)) == std::vector<int>{8, 7, 6, 5});
  CHECK(peak_stashed(interlaced_order(2, 8)) == std::vector<int>{4, 3});
  // No-grad stages (no B anywhere) never stash.
  CHECK(peak_stashed({{T(PipeTask::F, 0, 0), T(PipeTask::F, 0, 1)}}) == std::vector<int>{0});
  // A split backward holds until its W.
  CHECK(peak_stashed({{T(PipeTask::F, 0, 0), T(PipeTask::B, 0, 0), T(PipeTask::F, 0, 1), T(PipeTask::W, 0, 0)}}) ==
        std::vector<int>{2});
}

// ---- simulator --------------------------------------------------------------

TEST_CASE("simulate: unit times, unsplit B takes two slots", "[schedule]") {
  PipeOrder o = gpipe_order(2, 1);
  PipeTimes t;
  std::string why;
  REQUIRE(simulate(o, deps_for("gpipe", 2), t, why));
  CHECK(t.start == std::vector<std::vector<int64_t>>{{0, 4}, {1, 2}});
  CHECK(t.makespan == 6);
  CHECK(task_slots(o) == std::vector<std::vector<int>>{{1, 2}, {1, 2}});
  CHECK(task_slots(zb_h1_order(2, 1)) == std::vector<std::vector<int>>{{1, 2}, {1, 1, 1}});
}

TEST_CASE("simulate: deadlocks are reported with the blocked tasks", "[schedule]") {
  PipeTimes t;
  std::string why;
  SECTION("each rank runs B before the F it depends on") {
    PipeOrder o = {{T(PipeTask::B, 0, 0), T(PipeTask::F, 0, 0)}, {T(PipeTask::B, 1, 0), T(PipeTask::F, 1, 0)}};
    CHECK_FALSE(simulate(o, deps_for("1f1b", 2), t, why));
    CHECK(why.find("deadlock") != std::string::npos);
    CHECK(why.find("rank 0: B0.0 waits for F0.0") != std::string::npos);
    CHECK(why.find("rank 1: B1.0 waits for F1.0") != std::string::npos);
  }
  SECTION("a cycle across ranks") {
    // Rank 0 waits for B0.0 <- B1.0, rank 1 runs B1.0 only after F1.1 <-
    // F0.1, which rank 0 runs after B0.0.
    PipeOrder o = {{T(PipeTask::F, 0, 0), T(PipeTask::B, 0, 0), T(PipeTask::F, 0, 1), T(PipeTask::B, 0, 1)},
                   {T(PipeTask::F, 1, 0), T(PipeTask::F, 1, 1), T(PipeTask::B, 1, 0), T(PipeTask::B, 1, 1)}};
    CHECK_FALSE(simulate(o, deps_for("1f1b", 2), t, why));
    CHECK(why.find("rank 0: B0.0 waits for B1.0") != std::string::npos);
    CHECK(why.find("rank 1: F1.1 waits for F0.1") != std::string::npos);
  }
  SECTION("collectives in different relative orders") {
    PipeOrder o = interlaced_order(2, 2);
    // Swap two shared tasks on rank 1 only (F3.0 and F2.1): rank 0 then
    // waits in collective F3.0 for rank 1, which waits in F2.1 for rank 0.
    auto& r1 = o[1];
    auto a = std::find(r1.begin(), r1.end(), T(PipeTask::F, 2, 1));
    auto b = std::find(r1.begin(), r1.end(), T(PipeTask::F, 3, 0));
    std::iter_swap(a, b);
    CHECK_FALSE(simulate(o, deps_for("interlaced", 2), t, why));
    CHECK(why.find("collective") != std::string::npos);
  }
  SECTION("a task twice on a rank, a dependency nobody runs") {
    CHECK_FALSE(simulate({{T(PipeTask::F, 0, 0), T(PipeTask::F, 0, 0)}}, deps_for("1f1b", 1), t, why));
    CHECK(why == "rank 0 runs F0.0 twice");
    CHECK_FALSE(simulate({{T(PipeTask::F, 1, 0)}, {T(PipeTask::F, 0, 1)}}, deps_for("1f1b", 2), t, why));
    CHECK(why == "F1.0 depends on F0.0, which no rank runs");
  }
}

TEST_CASE("simulate: a collective starts together on every rank", "[schedule]") {
  Sim s = run("interlaced", 3, 4);
  std::map<PipeTask, std::set<int64_t>> starts;
  for (size_t r = 0; r < s.order.size(); ++r)
    for (size_t i = 0; i < s.order[r].size(); ++i)
      if (s.order[r][i].stage >= 3) starts[s.order[r][i]].insert(s.times.start[r][i]);
  CHECK(starts.size() == 4 * 4);
  for (const auto& [task, st] : starts) CHECK(st.size() == 1);
}

TEST_CASE("ChainDeps: data-flow predecessors per kind", "[schedule]") {
  auto deps = [](const ChainDeps& d, PipeTask t) { return to_string(d.of(t)); };
  ChainDeps d = deps_for("1f1b", 4);
  CHECK(deps(d, T(PipeTask::F, 0, 2)) == "");
  CHECK(deps(d, T(PipeTask::F, 2, 2)) == "F1.2");
  CHECK(deps(d, T(PipeTask::B, 3, 1)) == "F3.1");
  CHECK(deps(d, T(PipeTask::B, 1, 1)) == "F1.1 B2.1");
  CHECK(deps(d, T(PipeTask::W, 1, 1)) == "B1.1");
  d = deps_for("interleaved", 2, 3);  // chain of 6 stages
  CHECK(deps(d, T(PipeTask::F, 2, 0)) == "F1.0");
  CHECK(deps(d, T(PipeTask::B, 4, 0)) == "F4.0 B5.0");
  CHECK(deps(d, T(PipeTask::B, 5, 0)) == "F5.0");
  d = deps_for("interlaced", 2);  // head 2 -> 0 -> 1 -> tail 3
  CHECK(deps(d, T(PipeTask::F, 2, 1)) == "");
  CHECK(deps(d, T(PipeTask::F, 0, 1)) == "F2.1");
  CHECK(deps(d, T(PipeTask::F, 3, 1)) == "F1.1");
  CHECK(deps(d, T(PipeTask::B, 3, 1)) == "F3.1");
  CHECK(deps(d, T(PipeTask::B, 1, 1)) == "F1.1 B3.1");
  CHECK(deps(d, T(PipeTask::B, 0, 1)) == "F0.1 B1.1");
  CHECK(deps(d, T(PipeTask::B, 2, 1)) == "F2.1 B0.1");
  d = deps_for("nf1b", 4, 1, 1);  // passes: stages 0..3, 4..7
  CHECK(deps(d, T(PipeTask::F, 4, 0)) == "F3.0");
  CHECK(deps(d, T(PipeTask::B, 6, 0)) == "F6.0 B7.0");
  d = deps_for("3f1b", 2);
  CHECK(deps(d, T(PipeTask::F, 4, 0)) == "F3.0");
  CHECK(deps(d, T(PipeTask::B, 5, 0)) == "F5.0");
  CHECK_THROWS_AS(deps_for("chimera", 2).of(T(PipeTask::F, 0, 0)), std::invalid_argument);
  CHECK_THROWS_AS(deps_for("1f1b", 2).of(T(PipeTask::F, 2, 0)), std::invalid_argument);
}

// ---- timeline -----------------------------------------------------------------

TEST_CASE("timeline: one aligned column per slot", "[schedule]") {
  Sim s = run("gpipe", 2, 1);
  CHECK(timeline(s.order, s.times) ==
        "rank 0 | F0.0 .    .    .    B0.0 -\n"
        "rank 1 | .    F1.0 B1.0 -    .    .\n");
  CHECK(timeline(s.order, s.times, {"first", "b"}) ==
        "first | F0.0 .    .    .    B0.0 -\n"
        "b     | .    F1.0 B1.0 -    .    .\n");
  // Columns widen to the longest name; split B and W take one slot each.
  Sim z = run("zb-h1", 2, 1);
  CHECK(timeline(z.order, z.times) ==
        "rank 0 | F0.0 .    .    B0.0 -\n"
        "rank 1 | .    F1.0 B1.0 W1.0 .\n");
  Sim w = run("nf1b", 4, 1, 1, 2);
  const std::string text = timeline(w.order, w.times);
  CHECK(text.find("F11.0 B11.0 -     ") != std::string::npos);
}

// ---- by name ----------------------------------------------------------------

TEST_CASE("make_schedule: names and size checks", "[schedule]") {
  PipeOrder o;
  std::string why;
  REQUIRE(make_schedule("1f1b", 3, 1, 5, 0, o, why));
  CHECK(o == one_f_one_b_order(3, 5));
  REQUIRE(make_schedule("interleaved", 2, 2, 4, 0, o, why));
  CHECK(o == interleaved_order(2, 2, 4));
  REQUIRE(make_schedule("interleaved", 3, 1, 5, 0, o, why));  // v = 1: m free
  REQUIRE(make_schedule("zb-h1", 3, 1, 5, 0, o, why));
  CHECK(o == zb_h1_order(3, 5));
  REQUIRE(make_schedule("interlaced", 3, 1, 5, 0, o, why));
  CHECK(o == interlaced_order(3, 5));
  REQUIRE(make_schedule("nf1b", 3, 1, 5, 1, o, why));
  CHECK(o == nf1b_order(3, 5, 1));
  REQUIRE(make_schedule("3f1b", 3, 1, 5, 2, o, why));
  CHECK(o == nf1b_order(3, 5, 2));

  auto fails = [&](const std::string& kind, int p, int v, int m, int R, const std::string& needle) {
    INFO(kind << " p=" << p << " v=" << v << " m=" << m << " R=" << R);
    CHECK_FALSE(make_schedule(kind, p, v, m, R, o, why));
    INFO(why);
    CHECK(why.find(needle) != std::string::npos);
  };
  fails("chimera", 4, 1, 8, 0, "unknown pipeline schedule 'chimera'");
  fails("1f1b", 0, 1, 8, 0, "p must be >= 1");
  fails("gpipe", 2, 1, 0, 0, "m must be >= 1");
  fails("interleaved", 2, 0, 4, 0, "v must be >= 1");
  fails("interleaved", 4, 2, 6, 0, "must be a multiple of p");
  fails("1f1b", 4, 2, 8, 0, "only applies to 'interleaved'");
  fails("gpipe", 4, 1, 8, 1, "only applies to 'nf1b'");
  fails("nf1b", 4, 1, 8, -1, "recycles must be >= 0");
  fails("3f1b", 4, 1, 8, 3, "nf1b with 2 recycles");

  CHECK_THROWS_AS(one_f_one_b_order(0, 4), std::invalid_argument);
  CHECK_THROWS_AS(gpipe_order(2, 0), std::invalid_argument);
  CHECK_THROWS_AS(interleaved_order(4, 2, 6), std::invalid_argument);
  CHECK_THROWS_AS(nf1b_order(2, 2, -1), std::invalid_argument);
}
