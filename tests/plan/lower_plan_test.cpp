// lower_plan: the per-rank programs as data. The communication-only
// lowering that program verification reads must list exactly the
// communication, buffer-reduction and update instructions of the full
// lowering the runtime executes; buffers are freed after their last use and
// never used after their free; every kernel a program runs was elaborated.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>

#include "backend/lowering/comm_pieces.h"
#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_classes.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

struct Lowered : test::PlannedElaboration {
  // No plan name: the implicit plan of a run without --plan.
  Lowered(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices)
      : PlannedElaboration(NNS_SOURCE_DIR, file, config, plan_name, devices) {}
  // The full lowering (kernels elaborated) or the communication-only one.
  backend::LowerOptions options(int replicas, bool communication_only) {
    backend::LowerOptions o;
    o.replicas = replicas;
    o.communication_only = communication_only;
    if (!communication_only) o.elaborate = elaborator();
    return o;
  }
  backend::LoweredPlan lower(int replicas, bool communication_only, bool walk_every_op = false) {
    backend::LowerOptions o = options(replicas, communication_only);
    o.walk_every_op = walk_every_op;
    return backend::lower_plan(interp->graph(), plan, *interp->train(), o);
  }
};

// The instructions that neither touch a kernel nor free a buffer, as text.
std::vector<std::string> communication(const backend::LoweredPlan& lp, const backend::RankProgram& p) {
  std::vector<std::string> out;
  for (const backend::PInstr& in : p.instrs) {
    // Frees follow the last use, which compute instructions move.
    if (in.kernel >= 0 || in.kind == backend::PInstr::Free) continue;
    out.push_back(std::string(backend::instr_name(in.kind)) + " a" + std::to_string(in.a) + " b" + std::to_string(in.b) + " e" +
                  std::to_string(in.edge) + "." + std::to_string(in.step) + " g" +
                  (in.group >= 0 ? backend::group_text(lp.groups[static_cast<size_t>(in.group)]) : "-") + " peer" + std::to_string(in.peer) +
                  " tag" + std::to_string(in.tag) + " mb" + std::to_string(in.mb) + " x" + std::to_string(in.scale));
  }
  return out;
}

// A shipped plan lowered on `devices` x `replicas` ranks.
struct PlanCase {
  const char* file;
  const char* config;
  const char* plan;
  int64_t devices;
  int replicas;
};

}  // namespace

TEST_CASE("verification reads the runtime's communication: communication-only lowering equals the full one", "[lower]") {
  struct Case { const char* file; const char* config; const char* plan; int64_t devices; int replicas; };
  for (Case c : {Case{"examples/gpt.nns", "tiny", "megatron", 2, 1}, Case{"examples/gpt.nns", "tiny", "hybrid", 4, 1},
                 Case{"examples/gpt.nns", "tiny", "megatron", 2, 2}, Case{"examples/swin.nns", "tiny", "coshard", 2, 1},
                 Case{"examples/01_mlp.nns", "small", "pipeline", 2, 1}, Case{"tests/plan/plans/collectives.nns", "small", "alltoall", 4, 1},
                 Case{"tests/plan/plans/collectives.nns", "small", "stages", 4, 1}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices << " x " << c.replicas);
    Lowered l(c.file, c.config, c.plan, c.devices);
    backend::LoweredPlan full = l.lower(c.replicas, false), comm = l.lower(c.replicas, true);
    REQUIRE(full.programs.size() == static_cast<size_t>(c.devices * c.replicas));
    REQUIRE(comm.programs.size() == full.programs.size());
    size_t collectives = 0;
    for (size_t r = 0; r < full.programs.size(); ++r) {
      CHECK(communication(full, full.programs[r]) == communication(comm, comm.programs[r]));
      CHECK(comm.programs[r].kernels.empty());
      for (const backend::PInstr& in : full.programs[r].instrs) collectives += in.is_collective() ? 1 : 0;
    }
    CHECK(collectives > 0);
  }
}

// Each rank walks only the ops it takes part in (lower_internal.h,
// WalkPlan); walking every op, as lowering did before, checks at every op
// that the send/recv tag counter is the one recorded by a rank holding
// nothing, and must give the same programs, instruction for instruction.
TEST_CASE("a rank that walks only its own ops lowers the program a walk of every op gives", "[lower][walk]") {
  using Case = PlanCase;
  for (Case c :
       {Case{"examples/gpt.nns", "tiny", "hybrid", 4, 1}, Case{"examples/gpt.nns", "tiny", "megatron", 2, 2},
        Case{"examples/gpt.nns", "tiny_sc21_tp2_pp2_vp2", "megatron_sc21", 4, 1},
        Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2, 1}, Case{"examples/swin.nns", "tiny", "coshard", 2, 1},
        Case{"examples/01_mlp.nns", "small", "pipeline", 2, 1},
        Case{"tests/plan/plans/collectives.nns", "small", "alltoall", 4, 1},
        Case{"tests/plan/plans/collectives.nns", "small", "stages", 4, 1},
        Case{"tests/plan/plans/pipeline.nns", "small", "interleaved", 2, 1},
        Case{"tests/plan/plans/recompute.nns", "small", "pipeline", 2, 1},
        Case{"tests/plan/plans/recompute.nns", "small", "megatron", 2, 1},
        Case{"tests/plan/plans/shared_partial.nns", "small", "vs", 4, 1},
        Case{"examples/t5.nns", "tiny", "interlaced", 2, 1},
        Case{"examples/alphafold2.nns", "tiny", "pipeline3f1b", 2, 1},
        Case{"examples/bert.nns", "tiny_pipe", "pipeline", 2, 1}, Case{"examples/moe.nns", "tiny", "ep", 2, 1}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices << " x " << c.replicas);
    Lowered l(c.file, c.config, c.plan, c.devices);
    for (bool comm_only : {false, true}) {
      INFO("communication only: " << comm_only);
      backend::LoweredPlan own = l.lower(c.replicas, comm_only), every = l.lower(c.replicas, comm_only, true);
      REQUIRE(own.programs.size() == every.programs.size());
      size_t transfers = 0;
      for (size_t r = 0; r < own.programs.size(); ++r) {
        INFO("rank " << r);
        CHECK(own.dump_rank(l.interp->graph(), own.programs[r]) ==
              every.dump_rank(l.interp->graph(), every.programs[r]));
        CHECK(own.programs[r].tags == every.programs[r].tags);
        for (const backend::PInstr& in : own.programs[r].instrs) transfers += in.kind == backend::PInstr::Send ? 1 : 0;
      }
      if (std::string(c.plan) == "megatron_sc21") CHECK(transfers > 0);
    }
  }
}

// From 16 ranks up, lower_plan elaborates every rank's kernels on its own
// thread and runs the other passes on all cores: each program must be the
// one the rank lowered alone (LowerOptions::only_rank, one thread) gets.
TEST_CASE("ranks lowered on several threads after their kernels give the programs each lowered alone",
          "[lower][walk]") {
  Lowered l("examples/gpt.nns", "tiny_sc21_tp2_pp2", "megatron_sc21", 4);
  backend::LowerOptions o;
  o.replicas = 4;
  o.elaborate = l.elaborator();
  backend::LoweredPlan all = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
  REQUIRE(all.programs.size() == 16);
  for (int r = 0; r < 16; ++r) {
    INFO("rank " << r);
    o.only_rank = r;
    backend::LoweredPlan one = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
    REQUIRE(one.programs.size() == 1);
    CHECK(one.dump_rank(l.interp->graph(), one.programs[0]) ==
          all.dump_rank(l.interp->graph(), all.programs[static_cast<size_t>(r)]));
    CHECK(one.programs[0].kernels.size() == all.programs[static_cast<size_t>(r)].kernels.size());
    CHECK(one.programs[0].local.nodes().size() == all.programs[static_cast<size_t>(r)].local.nodes().size());
  }
}

TEST_CASE("under a schedule, verification lowers the order that runs: same tasks, same communication in the same places", "[lower][schedule]") {
  struct Case { const char* file; const char* config; const char* plan; int64_t devices; };
  for (Case c : {Case{"tests/plan/plans/pipeline.nns", "small", "onef1b", 2}, Case{"tests/plan/plans/pipeline.nns", "small", "zbh1", 2},
                 Case{"tests/plan/plans/pipeline.nns", "small", "interleaved", 2}, Case{"examples/t5.nns", "tiny", "interlaced", 2},
                 Case{"examples/alphafold2.nns", "tiny", "pipeline3f1b", 2}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices);
    Lowered l(c.file, c.config, c.plan, c.devices);
    REQUIRE(!l.plan.task_orders.empty());
    backend::LoweredPlan full = l.lower(1, false), comm = l.lower(1, true);
    size_t waits = 0;
    for (size_t r = 0; r < full.programs.size(); ++r) {
      const backend::RankProgram &f = full.programs[r], &v = comm.programs[r];
      CHECK(communication(full, f) == communication(comm, v));
      REQUIRE(f.tasks.size() == v.tasks.size());
      for (size_t t = 0; t < f.tasks.size(); ++t) {
        CHECK(f.tasks[t].segment == v.tasks[t].segment);
        CHECK(f.tasks[t].phase == v.tasks[t].phase);
        CHECK(f.tasks[t].mb == v.tasks[t].mb);
      }
      // Each wait lies in the same task of both lowerings.
      auto wait_tasks = [](const backend::RankProgram& p) {
        std::vector<int> out;
        for (size_t t = 0; t < p.tasks.size(); ++t)
          for (int i = p.tasks[t].first; i < p.tasks[t].last; ++i)
            if (p.instrs[static_cast<size_t>(i)].kind == backend::PInstr::Wait) out.push_back(static_cast<int>(t));
        return out;
      };
      CHECK(wait_tasks(f) == wait_tasks(v));
      waits += wait_tasks(f).size();
    }
    CHECK(waits > 0);
  }
}

TEST_CASE("the buffer plan: every buffer is created before use, freed once after its last use, never read after", "[lower]") {
  struct Case { const char* file; const char* config; const char* plan; int64_t devices; };
  for (Case c : {Case{"examples/gpt.nns", "tiny", "hybrid", 4}, Case{"tests/plan/plans/pipeline.nns", "small", "zbh1", 2},
                 Case{"tests/plan/plans/pipeline.nns", "small", "interleaved", 2}, Case{"examples/t5.nns", "tiny", "interlaced", 2}}) {
    INFO(c.file << " plan " << c.plan);
    Lowered l(c.file, c.config, c.plan, c.devices);
    backend::LoweredPlan lp = l.lower(1, false);
    for (const backend::RankProgram& p : lp.programs) {
      std::vector<int> freed(p.buffers.size(), -1);
      for (size_t i = 0; i < p.instrs.size(); ++i) {
        const backend::PInstr& in = p.instrs[i];
        for (int b : {in.a, in.b}) {
          if (b < 0) continue;
          INFO("rank " << p.rank << " instruction " << i << " " << backend::instr_name(in.kind) << " b" << b);
          CHECK(freed[static_cast<size_t>(b)] < 0);  // no use after free
        }
        if (in.kind == backend::PInstr::Free) freed[static_cast<size_t>(in.a)] = static_cast<int>(i);
        if (in.kernel >= 0) CHECK(p.kernels[static_cast<size_t>(in.kernel)].elaborated);
      }
      for (size_t b = 0; b < p.buffers.size(); ++b) {
        bool persistent = p.buffers[b].role == backend::BufferDecl::Param || p.buffers[b].role == backend::BufferDecl::Accum;
        INFO("rank " << p.rank << " buffer b" << b << " " << backend::role_name(p.buffers[b].role));
        CHECK((freed[b] >= 0) != persistent);
      }
    }
  }
}

TEST_CASE("a plan that cannot run is refused at lowering with the reason", "[lower]") {
  Lowered l("examples/gpt.nns", "tiny", "megatron", 2);
  sema::TrainSpec spec = *l.interp->train();
  spec.data.kind = "safetensors";
  backend::LowerOptions o;
  CHECK_THROWS_WITH(backend::lower_plan(l.interp->graph(), l.plan, spec, o), Catch::Contains("synthetic data only"));
}

TEST_CASE("the implicit plan: N replicas of one device, each gradient averaged once over all ranks, and verified", "[lower][implicit]") {
  for (int replicas : {2, 3}) {
    INFO(replicas << " replicas");
    Lowered l("examples/gpt.nns", "tiny", "", 1);
    const sema::Graph& g = l.interp->graph();
    // Every top-level forward op whole (unsplit) on device 0.
    size_t ops = 0;
    for (const sema::OpNode& n : g.nodes())
      if (n.parent < 0 && n.phase == sema::Phase::Forward) ++ops;
    REQUIRE(l.plan.subops.size() == ops);
    for (const sema::SubOp& s : l.plan.subops) {
      CHECK(s.leaf());
      CHECK(s.devices == std::vector<int>{0});
    }
    backend::LoweredPlan lp = l.lower(replicas, true);
    REQUIRE(lp.programs.size() == static_cast<size_t>(replicas));
    std::vector<int> all;
    for (int r = 0; r < replicas; ++r) all.push_back(r);
    for (const backend::RankProgram& p : lp.programs) {
      // The only collectives: one average per parameter gradient over
      // every rank (scaled by 1/N), and the loss.
      std::vector<int> averaged;
      int losses = 0;
      for (const backend::PInstr& in : p.instrs) {
        if (!in.is_collective()) continue;
        REQUIRE(in.group >= 0);
        CHECK(lp.groups[static_cast<size_t>(in.group)] == all);
        if (in.kind == backend::PInstr::LossAllReduce) {
          ++losses;
          continue;
        }
        REQUIRE(in.kind == backend::PInstr::ReplicaAverage);
        CHECK(in.scale == Approx(1.0 / replicas));
        averaged.push_back(p.buffers[static_cast<size_t>(in.a)].tensor);
      }
      CHECK(losses == 1);
      std::sort(averaged.begin(), averaged.end());
      std::vector<int> params;
      for (int t : g.params())
        if (!g.tensor(t).buffer) params.push_back(t);
      std::sort(params.begin(), params.end());
      CHECK(averaged == params);
    }
    backend::ProgramCheck pc = backend::verify_programs(g, l.plan, replicas, backend::SeededBug::None, &*l.interp->train(), nullptr);
    INFO((pc.errors.empty() ? "" : pc.errors[0]));
    CHECK(pc.ok);
    CHECK(pc.ranks == replicas);
  }
}

// Micro-batches 2 .. M-2 replay micro-batch 1's emission (lower_replay.cpp):
// the programs must be, instruction for instruction, what emitting every
// micro-batch gives (LowerOptions::every_micro_batch), with the full
// lowering and the communication-only one, and the replay must have run.
// Plans without a schedule are lowered with 6 micro-batches (the count
// changes nothing else there); pipelines with their own (4 to 8).
TEST_CASE("replaying the middle micro-batches gives the programs emitting every one gives", "[lower][replay]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t devices;
    int replicas;
    int micro_batches;  // 0: the config's (a schedule's)
  };
  for (Case c :
       {Case{"examples/gpt.nns", "tiny", "hybrid", 4, 1, 6}, Case{"examples/gpt.nns", "tiny", "megatron", 2, 2, 6},
        Case{"examples/gpt.nns", "tiny_sc21_tp2_pp2_vp2", "megatron_sc21", 4, 1, 0},
        Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2, 1, 0},
        Case{"examples/gpt.nns", "tiny", "dp_zero1", 2, 1, 6}, Case{"examples/swin.nns", "tiny", "coshard", 2, 1, 5},
        Case{"tests/plan/plans/collectives.nns", "small", "alltoall", 4, 1, 6},
        Case{"tests/plan/plans/pipeline.nns", "small", "gpipe", 2, 1, 0},
        Case{"tests/plan/plans/pipeline.nns", "small", "interleaved", 2, 1, 0},
        Case{"tests/plan/plans/pipeline.nns", "small", "zbh1", 2, 1, 0},
        Case{"tests/plan/plans/recompute.nns", "small", "megatron", 2, 1, 6},
        Case{"tests/plan/plans/recompute.nns", "small", "blocks", 2, 1, 6},
        Case{"tests/plan/plans/shared_partial.nns", "small", "vs", 4, 1, 6},
        Case{"examples/t5.nns", "tiny", "interlaced", 2, 1, 0}, Case{"examples/alphafold2.nns", "tiny", "dap", 2, 1, 5},
        Case{"examples/bert.nns", "tiny_pipe", "pipeline", 2, 1, 0}, Case{"examples/moe.nns", "tiny", "ep", 2, 1, 6}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices << " x " << c.replicas);
    Lowered l(c.file, c.config, c.plan, c.devices);
    sema::TrainSpec spec = *l.interp->train();
    if (c.micro_batches > 0) {
      REQUIRE(l.plan.task_orders.empty());
      spec.micro_batches = c.micro_batches;
    }
    REQUIRE(spec.micro_batches >= 4);
    for (bool comm_only : {false, true}) {
      INFO("communication only: " << comm_only);
      backend::LowerOptions o = l.options(c.replicas, comm_only);
      backend::LoweredPlan replayed = backend::lower_plan(l.interp->graph(), l.plan, spec, o);
      o.every_micro_batch = true;
      backend::LoweredPlan every = backend::lower_plan(l.interp->graph(), l.plan, spec, o);
      REQUIRE(replayed.programs.size() == every.programs.size());
      for (size_t r = 0; r < replayed.programs.size(); ++r) {
        INFO("rank " << r);
        const backend::RankProgram &a = replayed.programs[r], &b = every.programs[r];
        CHECK(a.replayed == static_cast<int>(spec.micro_batches) - 3);
        CHECK(b.replayed == 0);
        CHECK(replayed.dump_rank(l.interp->graph(), a) == every.dump_rank(l.interp->graph(), b));
        CHECK(a.tags == b.tags);
        REQUIRE(a.buffers.size() == b.buffers.size());
        for (size_t k = 0; k < a.buffers.size(); ++k) {
          CHECK(a.buffers[k].mb == b.buffers[k].mb);
          CHECK(a.buffers[k].role == b.buffers[k].role);
        }
        REQUIRE(a.tasks.size() == b.tasks.size());
        for (size_t k = 0; k < a.tasks.size(); ++k) CHECK(a.tasks[k].first == b.tasks[k].first);
      }
    }
  }
}

// Plan replicas 1.. get replica 0's programs renamed (replica_rename.cpp):
// each must be, instruction for instruction, what lowering the rank itself
// gives (LowerOptions::every_replica), and equal to replica 0's program of
// its device up to the renaming program verification assumes
// (replica_difference).
TEST_CASE("plan replicas renamed from replica 0 are the programs lowering each rank gives", "[lower][replicas]") {
  using Case = PlanCase;
  for (Case c :
       {Case{"examples/gpt.nns", "tiny", "megatron", 2, 2}, Case{"examples/gpt.nns", "tiny", "hybrid", 4, 2},
        Case{"examples/gpt.nns", "tiny_pipe", "pipeline", 2, 3}, Case{"examples/gpt.nns", "tiny", "dp_zero1", 2, 2},
        Case{"examples/swin.nns", "tiny", "coshard", 2, 2}, Case{"examples/moe.nns", "tiny", "ep", 2, 2},
        Case{"examples/t5.nns", "tiny", "interlaced", 2, 2}, Case{"examples/01_mlp.nns", "small", "", 1, 4}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices << " x " << c.replicas);
    Lowered l(c.file, c.config, c.plan, c.devices);
    for (bool comm_only : {false, true}) {
      INFO("communication only: " << comm_only);
      backend::LowerOptions o = l.options(c.replicas, comm_only);
      REQUIRE(backend::renames_replicas(o));
      backend::LoweredPlan renamed = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
      o.every_replica = true;
      backend::LoweredPlan each = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
      REQUIRE(renamed.programs.size() == static_cast<size_t>(c.devices * c.replicas));
      REQUIRE(each.programs.size() == renamed.programs.size());
      for (size_t r = 0; r < renamed.programs.size(); ++r) {
        INFO("rank " << r);
        const backend::RankProgram &a = renamed.programs[r], &b = each.programs[r];
        CHECK(a.rank == static_cast<int>(r));
        CHECK(a.replica == b.replica);
        CHECK(renamed.dump_rank(l.interp->graph(), a) == each.dump_rank(l.interp->graph(), b));
        CHECK(backend::replica_difference(renamed.programs[r % static_cast<size_t>(c.devices)], renamed.groups, a,
                                          renamed.groups, static_cast<int>(c.devices)) == "");
      }
      // One rank alone (what a rank process lowers) is the same program.
      o.every_replica = false;
      o.only_rank = static_cast<int>(c.devices * c.replicas) - 1;
      backend::LoweredPlan one = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
      REQUIRE(one.programs.size() == 1);
      CHECK(one.dump_rank(l.interp->graph(), one.programs[0]) ==
            each.dump_rank(l.interp->graph(), each.programs.back()));
    }
  }
}

// The replicas' gradient averages run in buckets: runs of ReplicaAverage
// instructions (each one collective). The lowering's own rule (a quarter
// of the gradients, at most 16 MiB) makes several for GPT tiny; a bucket
// size over all of them (LowerOptions::replica_bucket_bytes, what a device
// profile's gradient_buckets give nns simulate) makes one, after the last
// gradient is final; every gradient is averaged once either way.
TEST_CASE("replica gradient buckets follow LowerOptions::replica_bucket_bytes", "[lower][replicas]") {
  Lowered l("examples/gpt.nns", "tiny", "megatron", 2);
  auto buckets = [&](size_t cap, size_t& averaged) {
    backend::LowerOptions o = l.options(2, false);
    o.replica_bucket_bytes = cap;
    const backend::LoweredPlan lp = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
    const backend::RankProgram& p = lp.programs[0];
    size_t runs = 0;
    averaged = 0;
    bool in_run = false;
    for (const backend::PInstr& in : p.instrs) {
      const bool avg = in.kind == backend::PInstr::ReplicaAverage;
      if (avg) ++averaged;
      if (avg && !in_run) ++runs;
      // A Free between two averages does not end the run (the executor posts them as one).
      if (in.kind != backend::PInstr::Free) in_run = avg;
    }
    return runs;
  };
  size_t by_rule = 0, by_cap = 0, by_byte = 0;
  const size_t rule = buckets(0, by_rule), one = buckets(size_t{1} << 40, by_cap), many = buckets(1, by_byte);
  CHECK(by_rule > 0);
  CHECK(by_cap == by_rule);
  CHECK(by_byte == by_rule);
  CHECK(one == 1);
  CHECK(rule > 1);
  CHECK(many >= rule);
}

// Devices of one orbit of the plan's symmetry get their representative's
// program moved (rank_symmetry.h): each must be, instruction for
// instruction, buffer for buffer and kernel for kernel (bodies included),
// what lowering the device itself gives (LowerOptions::every_device), in the
// full lowering, the communication-only one and the one program
// verification reads; and a rank process lowering only itself must get it
// too. The cases name the period each plan repeats with (0: none).
TEST_CASE("programs moved along the plan's symmetry are the programs lowering each device gives", "[lower][symmetry]") {
  struct Case {
    PlanCase c;
    int period;
  };
  for (const Case& k : {Case{{"examples/alphafold2.nns", "tiny", "dap", 4, 1}, 1},
                        Case{{"examples/gpt.nns", "tiny", "megatron", 4, 1}, 1},
                        Case{{"examples/gpt.nns", "tiny", "hybrid", 4, 1}, 2},
                        Case{{"examples/gpt.nns", "tiny", "hybrid", 4, 2}, 2},
                        Case{{"examples/swin.nns", "tiny", "coshard", 2, 1}, 1},
                        Case{{"examples/swin.nns", "tiny", "dp", 4, 1}, 1},
                        Case{{"examples/moe.nns", "tiny", "ep_recompute", 4, 1}, 1},
                        Case{{"examples/llama.nns", "tiny", "megatron", 2, 1}, 1},
                        Case{{"examples/gpt.nns", "tiny_pipe", "pipeline", 2, 1}, 0}}) {
    const PlanCase& c = k.c;
    INFO(c.file << " plan " << c.plan << " on " << c.devices << " x " << c.replicas);
    Lowered l(c.file, c.config, c.plan, c.devices);
    const sema::Graph& g = l.interp->graph();
    for (int mode = 0; mode < 3; ++mode) {
      INFO("mode " << mode << " (0 full, 1 communication only, 2 verification's)");
      backend::LowerOptions o = mode == 2 ? backend::verification_lowering(c.replicas, nullptr) : l.options(c.replicas, mode == 1);
      backend::LoweredPlan moved = backend::lower_plan(g, l.plan, *l.interp->train(), o);
      o.every_device = true;
      backend::LoweredPlan each = backend::lower_plan(g, l.plan, *l.interp->train(), o);
      CHECK(moved.symmetry_period == k.period);
      CHECK(moved.moved == (k.period > 0 ? static_cast<int>(c.devices) - k.period : 0));
      CHECK(each.moved == 0);
      REQUIRE(moved.programs.size() == each.programs.size());
      for (size_t r = 0; r < moved.programs.size(); ++r) {
        INFO("rank " << r);
        const backend::RankProgram &a = moved.programs[r], &b = each.programs[r];
        CHECK(moved.dump_rank(g, a) == each.dump_rank(g, b));
        // What the dump does not print: every collective's block boxes.
        REQUIRE(a.instrs.size() == b.instrs.size());
        for (size_t i = 0; i < a.instrs.size(); ++i) {
          const int ga = a.instrs[i].geom, gb = b.instrs[i].geom;
          REQUIRE((ga < 0) == (gb < 0));
          if (ga < 0) continue;
          CHECK(backend::same_pieces(a.geoms[static_cast<size_t>(ga)].send, b.geoms[static_cast<size_t>(gb)].send));
          CHECK(backend::same_pieces(a.geoms[static_cast<size_t>(ga)].recv, b.geoms[static_cast<size_t>(gb)].recv));
        }
      }
      if (mode != 0) continue;
      // The last rank alone, as its process lowers it: moved, bodies its own.
      o.every_device = false;
      o.only_rank = static_cast<int>(c.devices * c.replicas) - 1;
      backend::LoweredPlan one = backend::lower_plan(g, l.plan, *l.interp->train(), o);
      REQUIRE(one.programs.size() == 1);
      CHECK(one.dump_rank(g, one.programs[0]) == each.dump_rank(g, each.programs.back()));
    }
  }
}

// share_comm: the lowered plan refers to the caller's derived communication
// instead of copying it, and lowers the same programs as from a copy.
TEST_CASE("a lowering that shares the caller's communication refers to it and lowers what a copy lowers", "[lower]") {
  Lowered l("examples/gpt.nns", "tiny", "hybrid", 4);
  const backend::CommPlan comm = backend::derive_communication(l.interp->graph(), l.plan);
  backend::LowerOptions o = l.options(1, true);
  o.comm = &comm;
  const backend::LoweredPlan copied = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
  o.share_comm = true;
  const backend::LoweredPlan shared = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
  CHECK(shared.comm.get() == &comm);
  CHECK(copied.comm.get() != &comm);
  REQUIRE(copied.comm->edges.size() == comm.edges.size());
  REQUIRE(shared.programs.size() == copied.programs.size());
  for (size_t r = 0; r < shared.programs.size(); ++r)
    CHECK(shared.dump_rank(l.interp->graph(), shared.programs[r]) ==
          copied.dump_rank(l.interp->graph(), copied.programs[r]));
}

// CommPlan::reads: the operand layouts the derivation read, kept for
// lowering's analysis, are what reading them again gives, and the analysis
// that takes them lowers the programs of one that reads its own.
TEST_CASE("the derivation's kept operand reads are what a fresh read gives, and lower the same programs", "[lower]") {
  for (const PlanCase& c :
       {PlanCase{"examples/gpt.nns", "tiny", "hybrid", 4, 1}, PlanCase{"examples/alphafold2.nns", "tiny", "dap", 4, 1},
        PlanCase{"examples/swin.nns", "tiny", "coshard", 2, 1}, PlanCase{"examples/moe.nns", "tiny", "ep", 2, 1},
        PlanCase{"examples/t5.nns", "tiny", "interlaced", 2, 1}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices);
    Lowered l(c.file, c.config, c.plan, c.devices);
    const sema::Graph& g = l.interp->graph();
    const backend::CommPlan kept = backend::derive_communication(g, l.plan);
    REQUIRE(kept.reads);
    CHECK(kept.reads->of(g, l.plan));
    backend::OperandLayouts fresh(g, l.plan);
    int compared = 0;
    for (size_t n = 0; n < l.plan.root_of_node.size(); ++n) {
      if (l.plan.root_of_node[n] < 0) continue;
      const int node = static_cast<int>(n);
      for (size_t k = 0; k < g.node(node).inputs.size(); ++k) {
        const backend::LayoutRead* r = kept.reads->input(node, k);
        REQUIRE(r);
        const backend::LayoutRead f = fresh.input(node, k);
        CHECK(r->ok == f.ok);
        CHECK(r->layout.to_string() == f.layout.to_string());
        ++compared;
      }
      for (size_t o = 0; o < g.node(node).outputs.size(); ++o) {
        const backend::LayoutRead* r = kept.reads->output(node, o);
        REQUIRE(r);
        CHECK(r->layout.to_string() == fresh.output(node, o).layout.to_string());
        ++compared;
      }
    }
    CHECK(compared > 0);
    backend::CommPlan own = kept;
    own.reads.reset();  // the analysis reads every operand itself
    backend::LowerOptions o = l.options(1, false);
    o.comm = &kept;
    const backend::LoweredPlan a = backend::lower_plan(g, l.plan, *l.interp->train(), o);
    o.comm = &own;
    const backend::LoweredPlan b = backend::lower_plan(g, l.plan, *l.interp->train(), o);
    REQUIRE(a.programs.size() == b.programs.size());
    for (size_t r = 0; r < a.programs.size(); ++r)
      CHECK(a.dump_rank(g, a.programs[r]) == b.dump_rank(g, b.programs[r]));
  }
  // Reads of another plan are not taken: its sub-ops differ.
  Lowered one("examples/gpt.nns", "tiny", "hybrid", 4), other("examples/gpt.nns", "tiny", "megatron", 4);
  const backend::CommPlan comm = backend::derive_communication(one.interp->graph(), one.plan);
  CHECK_FALSE(comm.reads->of(other.interp->graph(), other.plan));
}
