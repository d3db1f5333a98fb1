// The lowering passes one by one (backend/lowering/lower_rank.cpp): each
// rank's RankBuild is run pass by pass and checked at the pass boundaries:
// emission leaves every instruction in a block and frees nothing, the
// schedule pairs every receive with its wait, the frees pass frees every
// micro-batch buffer once after its last use; run in order the passes give
// the program lower_plan() gives. A plan error found while lowering points
// at the directive that caused it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>

#include "backend/lowering/lower_internal.h"
#include "semantics/interpreter.h"

using namespace nns;
using backend::PInstr;

namespace {

struct Evaluated {
  front::SourceManager sources;
  front::DiagnosticEngine diags{sources};
  std::unique_ptr<sema::Interpreter> interp;
  sema::Plan plan;
  backend::LowerOptions opts;

  Evaluated(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices) {
    interp = std::make_unique<sema::Interpreter>(sources, diags, sema::EvalOptions{config, {}});
    REQUIRE(interp->parse(file));
    REQUIRE(interp->evaluate());
    REQUIRE(interp->evaluate_plan(plan_name, devices, plan));
    opts.elaborate = [this](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                            const std::map<std::string, int64_t>& div, sema::Graph& local) { return interp->instantiate_op(node, ins, outs, div, local); };
  }
};

size_t count_kind(const backend::RankProgram& p, PInstr::Kind k) {
  return static_cast<size_t>(std::count_if(p.instrs.begin(), p.instrs.end(), [k](const PInstr& in) { return in.kind == k; }));
}

// Runs the passes of one rank in order; `check` sees the build after each.
// The ranks share one group table, as in lower_plan (one id per group).
template <class Check>
backend::RankProgram run_passes(Evaluated& ev, const backend::detail::PlanAnalysis& analysis, backend::detail::GroupTable& table, int rank,
                                const Check& check) {
  backend::detail::RankBuild R(analysis, *ev.interp->train(), ev.opts, table, static_cast<int>(ev.plan.ngpus), rank);
  for (const backend::detail::LoweringPass& pass : backend::detail::lowering_passes()) {
    pass.run(R);
    check(std::string(pass.name), R);
  }
  R.P.tags = R.tag;
  return std::move(R.P);
}

}  // namespace

TEST_CASE("lowering passes: emission, schedule and frees each leave their property; in order they give lower_plan's program", "[lower][passes]") {
  struct Case { const char* file; const char* config; const char* plan; int64_t devices; };
  for (Case c : {Case{"examples/01_mlp.nns", "small", "pipeline", 2}, Case{"examples/gpt.nns", "tiny", "hybrid", 4},
                 Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2}}) {
    INFO(c.file << " " << c.plan);
    Evaluated ev(std::string(NNS_SOURCE_DIR) + "/" + c.file, c.config, c.plan, c.devices);
    backend::LoweredPlan whole = backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), ev.opts);
    backend::CommPlan comm = backend::derive_communication(ev.interp->graph(), ev.plan);
    backend::detail::PlanAnalysis analysis(ev.interp->graph(), ev.plan, comm);
    analysis.run();
    std::vector<std::vector<int>> groups;
    backend::detail::GroupTable table{{}, groups, {}, {}, -1};
    size_t recvs = 0;
    for (int rank = 0; rank < static_cast<int>(c.devices); ++rank) {
      INFO("rank " << rank);
      std::vector<std::string> seen;
      backend::RankProgram p = run_passes(ev, analysis, table, rank, [&](const std::string& pass, const backend::detail::RankBuild& R) {
        seen.push_back(pass);
        const backend::RankProgram& P = R.P;
        if (pass == "kernels") {
          CHECK(P.instrs.empty());
          CHECK(R.op_kernels.size() == R.A.ops.size());
        }
        if (pass == "emit") {
          // Every instruction belongs to a block (the schedule orders
          // blocks), nothing is freed or waited for yet, no update.
          CHECK(R.block_of.size() == P.instrs.size());
          CHECK(std::none_of(R.block_of.begin(), R.block_of.end(), [](int b) { return b < 0; }));
          CHECK(count_kind(P, PInstr::Free) == 0);
          CHECK(count_kind(P, PInstr::Wait) == 0);
          CHECK(count_kind(P, PInstr::Update) == 0);
          CHECK(count_kind(P, PInstr::Forward) > 0);
        }
        if (pass == "schedule") {
          // Each receive is completed by exactly one wait on its buffer.
          CHECK(count_kind(P, PInstr::Wait) == count_kind(P, PInstr::Recv));
          for (const PInstr& in : P.instrs)
            if (in.kind == PInstr::Recv) {
              ++recvs;
              CHECK(std::count_if(P.instrs.begin(), P.instrs.end(), [&](const PInstr& w) { return w.kind == PInstr::Wait && w.a == in.b; }) == 1);
            }
          CHECK(count_kind(P, PInstr::Free) == 0);
        }
        if (pass == "step_end") CHECK(count_kind(P, PInstr::Update) > 0);
        if (pass == "frees") {
          // Every micro-batch buffer that is used is freed once, after its last use.
          std::vector<int> frees(P.buffers.size(), 0), last_use(P.buffers.size(), -1), freed_at(P.buffers.size(), -1);
          for (size_t i = 0; i < P.instrs.size(); ++i) {
            const PInstr& in = P.instrs[i];
            if (in.kind == PInstr::Free) {
              ++frees[static_cast<size_t>(in.a)];
              freed_at[static_cast<size_t>(in.a)] = static_cast<int>(i);
              continue;
            }
            for (int b : {in.a, in.b})
              if (b >= 0) last_use[static_cast<size_t>(b)] = static_cast<int>(i);
          }
          for (size_t b = 0; b < P.buffers.size(); ++b) {
            backend::BufferDecl::Role r = P.buffers[b].role;
            bool stays = r == backend::BufferDecl::Param || r == backend::BufferDecl::Accum || r == backend::BufferDecl::Shard;
            if (stays || last_use[b] < 0) {
              CHECK(frees[b] == 0);
              continue;
            }
            CHECK(frees[b] == 1);
            CHECK(freed_at[b] > last_use[b]);
          }
        }
      });
      CHECK(seen == std::vector<std::string>{"kernels", "params", "emit", "schedule", "step_end", "frees"});
      CHECK(whole.dump_rank(ev.interp->graph(), p) == whole.dump_rank(ev.interp->graph(), whole.programs[static_cast<size_t>(rank)]));
    }
    if (std::string(c.plan) != "hybrid") CHECK(recvs > 0);  // the pipelines move activations by send/recv
  }
}

TEST_CASE("lowering passes: stop_after ends each rank's lowering after that pass", "[lower][passes]") {
  Evaluated ev(std::string(NNS_SOURCE_DIR) + "/examples/01_mlp.nns", "small", "pipeline", 2);
  ev.opts.stop_after = "emit";
  backend::LoweredPlan lp = backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), ev.opts);
  for (const backend::RankProgram& p : lp.programs) {
    CHECK(count_kind(p, PInstr::Forward) > 0);
    CHECK(count_kind(p, PInstr::Wait) == 0);
    CHECK(count_kind(p, PInstr::Free) == 0);
    CHECK(count_kind(p, PInstr::LossAllReduce) == 0);
  }
  ev.opts.stop_after = "no_such_pass";
  CHECK_THROWS_WITH(backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), ev.opts), Catch::Contains("no lowering pass no_such_pass"));
}

TEST_CASE("lowering passes: a plan error found at lowering carries the directive's location", "[lower][passes]") {
  // A dropout split along its second dim: legal for the checker, refused
  // when its slice is elaborated; the error points at the trans() call.
  std::string file = std::string(NNS_SOURCE_DIR) + "/tests/errors/plan_lowering_dropout_split_dim1.nns";
  Evaluated ev(file, "", "cols", 2);
  try {
    backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), ev.opts);
    FAIL("lowering did not fail");
  } catch (const backend::LoweringError& e) {
    CHECK(std::string(e.what()).find("dropout split other than along its first dim") != std::string::npos);
    REQUIRE(e.loc.valid());
    CHECK(e.loc.line == 13);
    CHECK(e.loc.col == 15);
  }
}
