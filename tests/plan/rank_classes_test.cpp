// Rank classes for the capacity check (backend/lowering/rank_classes.h):
// ranks with equal structure signatures get one representative's memory
// peak. The claim is tested against the full lowering: every rank lowered
// with its kernel bodies and replayed gives its class's peak, to the byte.
#include <catch2/catch.hpp>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_check.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_classes.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

struct Classed : test::PlannedElaboration {
  Classed(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices)
      : PlannedElaboration(NNS_SOURCE_DIR, file, config, plan_name, devices) {}
  backend::LoweredPlan structure() {
    return backend::lower_plan(interp->graph(), plan, *interp->train(), backend::verification_lowering(1, nullptr));
  }
  backend::LoweredPlan bodies(std::vector<int> ranks = {}) {
    backend::LowerOptions o;
    o.ranks = std::move(ranks);
    o.elaborate = elaborator();
    return backend::lower_plan(interp->graph(), plan, *interp->train(), o);
  }
};

}  // namespace

TEST_CASE("rank classes: each rank's class peak equals its own replayed peak", "[rank_classes]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t devices;
    size_t most_classes;  // symmetric plans fold into fewer classes than ranks
  };
  for (Case c :
       {Case{"examples/gpt.nns", "tiny", "dp", 4, 4}, Case{"examples/gpt.nns", "tiny", "megatron", 4, 4},
        Case{"examples/gpt.nns", "tiny", "hybrid", 4, 4}, Case{"examples/gpt.nns", "tiny_pipe", "pipeline", 2, 2},
        Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2, 2}, Case{"examples/swin.nns", "tiny", "coshard", 2, 2},
        Case{"examples/alphafold2.nns", "tiny", "dap", 2, 2}, Case{"examples/moe.nns", "tiny", "ep_recompute", 4, 4},
        Case{"tests/plan/plans/zero1.nns", "small", "hybrid", 4, 4},
        Case{"examples/01_mlp.nns", "small", "dp", 4, 2}}) {
    INFO(c.file << " " << c.plan << " on " << c.devices);
    Classed l(c.file, c.config, c.plan, c.devices);
    const backend::LoweredPlan s = l.structure();
    const std::vector<int> rep = backend::memory_classes(l.plan, s);
    REQUIRE(rep.size() == static_cast<size_t>(c.devices));
    std::set<int> reps(rep.begin(), rep.end());
    CHECK(reps.size() <= c.most_classes);
    const backend::LoweredPlan full = l.bodies();
    REQUIRE(full.programs.size() == rep.size());
    for (size_t r = 0; r < rep.size(); ++r) {
      INFO("rank " << r << " in the class of rank " << rep[r]);
      CHECK(rep[r] <= static_cast<int>(r));
      CHECK(rep[static_cast<size_t>(rep[r])] == rep[r]);
      const double own = backend::peak_memory(full.programs[r]).peak;
      const double of_class = backend::peak_memory(full.programs[static_cast<size_t>(rep[r])]).peak;
      CHECK(own == of_class);
    }
    // The class-based check reports what the full one does.
    std::vector<int> rep_ranks(reps.begin(), reps.end());
    const backend::LoweredPlan some = l.bodies(rep_ranks);
    std::vector<backend::ClassMember> members;
    for (size_t r = 0; r < rep.size(); ++r)
      members.push_back({static_cast<int>(r), static_cast<int>(r),
                         static_cast<int>(std::find(rep_ranks.begin(), rep_ranks.end(), rep[r]) - rep_ranks.begin())});
    const backend::MemoryCheck by_class = backend::check_memory_classes(l.interp->graph(), l.plan, some, members, {});
    const backend::MemoryCheck every = backend::check_memory(l.interp->graph(), l.plan, full, {});
    CHECK(by_class.programs == static_cast<int>(reps.size()));
    CHECK(by_class.worst == every.worst);
    CHECK(backend::memory_line(by_class, {}) == backend::memory_line(every, {}));
  }
}

TEST_CASE("rank classes: a data-parallel plan is one class; a changed program leaves it", "[rank_classes]") {
  Classed l("examples/gpt.nns", "tiny", "dp", 4);
  backend::LoweredPlan s = l.structure();
  std::vector<int> rep = backend::memory_classes(l.plan, s);
  CHECK(rep == std::vector<int>{0, 0, 0, 0});
  // A buffer one row larger on rank 2: its peak may differ, so it is its own class.
  backend::BufferDecl& b = s.programs[2].buffers.back();
  REQUIRE_FALSE(b.piece.length.empty());
  b.piece.length[0] += 1;
  rep = backend::memory_classes(l.plan, s);
  CHECK(rep == std::vector<int>{0, 0, 2, 0});
  // Every hash equal (the mask keeps no bit): the element-by-element
  // comparison alone tells the classes apart, with the same result.
  CHECK(backend::memory_classes(l.plan, s, -1, 0) == std::vector<int>{0, 0, 2, 0});
  // Rank 3 like rank 2: the first program equal to it, not its hash's first.
  s.programs[3].buffers.back().piece.length[0] += 1;
  CHECK(backend::memory_classes(l.plan, s) == std::vector<int>{0, 0, 2, 2});
  CHECK(backend::memory_classes(l.plan, s, -1, 0) == std::vector<int>{0, 0, 2, 2});
  // So is a rank whose instructions differ (a free moved).
  s = l.structure();
  std::vector<backend::PInstr>& in = s.programs[1].instrs;
  auto it =
      std::find_if(in.begin(), in.end(), [](const backend::PInstr& x) { return x.kind == backend::PInstr::Free; });
  REQUIRE(it != in.end());
  std::iter_swap(it, it + 1);
  rep = backend::memory_classes(l.plan, s);
  CHECK(rep == std::vector<int>{0, 1, 0, 0});
  CHECK(backend::memory_classes(l.plan, s, -1, 0) == std::vector<int>{0, 1, 0, 0});
  // Only the first `count` programs are classed (one plan replica).
  CHECK(backend::memory_classes(l.plan, s, 2) == std::vector<int>{0, 1});
}

// memory_classes compares programs field by field (same_memory_signature)
// instead of building their signatures: the two must agree on every
// change, one field of each part of the signature at a time.
TEST_CASE("rank classes: the field-by-field comparison agrees with the signatures", "[rank_classes]") {
  for (const char* plan : {"dp", "megatron"}) {
    INFO(plan);
    Classed l("examples/gpt.nns", "tiny", plan, 4);
    const backend::LoweredPlan s = l.structure();
    auto agree = [&](const backend::RankProgram& a, const backend::RankProgram& b) {
      const bool same = backend::memory_signature(l.plan, a) == backend::memory_signature(l.plan, b);
      CHECK(backend::same_memory_signature(l.plan, a, b) == same);
      return same;
    };
    for (size_t i = 0; i < s.programs.size(); ++i)
      for (size_t j = 0; j < s.programs.size(); ++j) agree(s.programs[i], s.programs[j]);
    const backend::RankProgram& base = s.programs[0];
    using Change = std::function<bool(backend::RankProgram&)>;  // false: nothing to change in this program
    auto first_of = [](backend::RankProgram& p, backend::PInstr::Kind kind) -> backend::PInstr* {
      for (backend::PInstr& in : p.instrs)
        if (in.kind == kind) return &in;
      return nullptr;
    };
    const std::vector<std::pair<const char*, Change>> changes = {
        {"buffer role", [](backend::RankProgram& p) { return p.buffers[0].role = backend::BufferDecl::Transit, true; }},
        {"buffer micro-batch", [](backend::RankProgram& p) { return ++p.buffers.back().mb, true; }},
        {"buffer value parts", [](backend::RankProgram& p) { return p.buffers.back().piece.value_parts *= 2, true; }},
        {"buffer place only (not in the signature)",
         [](backend::RankProgram& p) {
           return !p.buffers.back().piece.start.empty() && ++p.buffers.back().piece.start[0];
         }},
        {"kernel slice",
         [](backend::RankProgram& p) {
           return !p.kernels.empty() && !p.kernels[0].in_slices.empty() && ++p.kernels[0].in_slices[0].replicas;
         }},
        {"kernel recompute",
         [](backend::RankProgram& p) { return !p.kernels.empty() && (p.kernels[0].recompute = true); }},
        {"kernel sub-op",
         [](backend::RankProgram& p) {
           return p.kernels.size() > 1 && (p.kernels[0].subop = p.kernels[1].subop, true);
         }},
        {"instruction scale", [&](backend::RankProgram& p) { return p.instrs.back().scale *= 0.5f, true; }},
        {"instruction edge",
         [&](backend::RankProgram& p) {
           backend::PInstr* in = first_of(p, backend::PInstr::AllReduce);
           return in && ++in->edge;
         }},
        {"instruction peer only (not in the signature)",
         [&](backend::RankProgram& p) {
           backend::PInstr* in = first_of(p, backend::PInstr::AllReduce);
           return in && (in->group = -1, true);
         }},
        {"slice-in read in place or not",
         [&](backend::RankProgram& p) {
           backend::PInstr* in = first_of(p, backend::PInstr::SliceIn);
           return in && in->a >= 0 && (p.buffers[static_cast<size_t>(in->a)].role = backend::BufferDecl::Accum, true);
         }},
        {"parameter slot",
         [](backend::RankProgram& p) {
           return !p.params.empty() && (p.params[0].trainable = !p.params[0].trainable, true);
         }},
        {"bucket", [](backend::RankProgram& p) { return p.buckets.push_back({0}), true; }},
        {"one instruction more", [](backend::RankProgram& p) { return p.instrs.push_back(p.instrs.back()), true; }},
    };
    for (const auto& [what, change] : changes) {
      INFO(what);
      backend::RankProgram p = s.programs[1];
      if (!change(p)) continue;
      agree(base, p);
      agree(p, base);
      agree(s.programs[1], p);
    }
  }
}

// Plan replicas: verification lowers replicas 1.. one at a time and drops
// each program equal to replica 0's up to the renaming of ranks; one that
// differs in anything must be told apart, or a wrong replica would pass as
// replica 0's (already verified) program.
TEST_CASE("replicas: a program equal to replica 0's up to renaming is recognised, one that differs is caught",
          "[rank_classes]") {
  for (const char* plan : {"megatron", "hybrid", "pipeline"}) {
    INFO(plan);
    const std::string config = std::string(plan) == "pipeline" ? "tiny_pipe" : "tiny";
    const int64_t devices = std::string(plan) == "hybrid" ? 4 : 2;
    Classed l("examples/gpt.nns", config, plan, devices);
    const int replicas = 3, k = static_cast<int>(devices);
    backend::LowerOptions o = backend::verification_lowering(replicas, nullptr);
    const backend::LoweredPlan all = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
    REQUIRE(all.programs.size() == static_cast<size_t>(replicas * k));
    // Replica 2 lowered apart, as verification lowers it (its own group table).
    o.ranks.clear();
    for (int d = 0; d < k; ++d) o.ranks.push_back(2 * k + d);
    backend::LoweredPlan two = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
    for (int d = 0; d < k; ++d) {
      const backend::RankProgram& base = all.programs[static_cast<size_t>(d)];
      CHECK(backend::replica_difference(base, all.groups, all.programs[static_cast<size_t>(k + d)], all.groups, k) ==
            "");
      CHECK(backend::replica_difference(base, all.groups, two.programs[static_cast<size_t>(d)], two.groups, k) == "");
      // Replica 0 against itself: nothing to rename.
      CHECK(backend::replica_difference(base, all.groups, base, all.groups, k) == "");
    }
    backend::RankProgram p = two.programs[0];
    const backend::RankProgram& base = all.programs[0];
    // A replica average with another scale, a collective over another group,
    // a buffer of another box, one instruction more: each is a difference.
    for (backend::PInstr& in : p.instrs)
      if (in.kind == backend::PInstr::ReplicaAverage) {
        in.scale *= 2;
        break;
      }
    CHECK_THAT(backend::replica_difference(base, all.groups, p, two.groups, k),
               Catch::Contains("(replica-average): scale"));
    p = two.programs[0];
    for (backend::PInstr& in : p.instrs)
      if (in.kind == backend::PInstr::LossAllReduce) {
        in.group = -1;  // the loss reduced over no group
        break;
      }
    CHECK_THAT(backend::replica_difference(base, all.groups, p, two.groups, k), Catch::Contains("group"));
    p = two.programs[0];
    p.buffers.back().piece.length.back() += 1;
    CHECK_THAT(backend::replica_difference(base, all.groups, p, two.groups, k), Catch::Contains("buffer b"));
    p = two.programs[0];
    p.instrs.push_back(p.instrs.back());
    CHECK_THAT(backend::replica_difference(base, all.groups, p, two.groups, k), Catch::Contains("instruction count"));
    // Replica 0's program of another device is not this rank's.
    if (k > 1) CHECK(backend::replica_difference(all.programs[1], all.groups, two.programs[0], two.groups, k) != "");

    // Through verification: replica 0 held, the others compared and dropped.
    backend::ProgramCheck pc = backend::verify_programs(l.interp->graph(), l.plan, replicas, backend::SeededBug::None,
                                                        &*l.interp->train(), nullptr);
    INFO((pc.errors.empty() ? "" : pc.errors[0]));
    CHECK(pc.ok);
    CHECK(pc.ranks == replicas * k);
    CHECK(pc.replica_programs == (replicas - 1) * k);
    // A replica that differs (replica 1 averages with factor 1) is verified
    // on its own and its wrong scale reported.
    pc = backend::verify_programs(l.interp->graph(), l.plan, replicas, backend::SeededBug::ReplicaScale,
                                  &*l.interp->train(), nullptr);
    CHECK(!pc.ok);
    CHECK(pc.replica_programs == (replicas - 1) * k - 1);
    REQUIRE(!pc.errors.empty());
    CHECK_THAT(pc.errors[0], Catch::Contains("rank " + std::to_string(k) + ": the gradient of"));
    CHECK_THAT(pc.errors[0], Catch::Contains("but by 1/3 on the other replicas"));
  }
}
