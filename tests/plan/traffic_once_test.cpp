// Traffic once (issue 26, item 3): which derived edges share a transfer
// (CommEdge::shared_with), which run once per step (per_step) or not at all
// (idle), and that the lowered programs send exactly what the comm plan
// counts for a step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "backend/lowering/lower_plan.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

struct Planned : test::PlannedElaboration {
  Planned(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices)
      : PlannedElaboration(NNS_SOURCE_DIR, file, config, plan_name, devices) {}
  // Per rank: its Send instructions' elements, by (micro-batch, tensor).
  std::vector<std::map<std::pair<int, int>, int64_t>> sends(const backend::LoweredPlan& lp) const {
    std::vector<std::map<std::pair<int, int>, int64_t>> out;
    for (const backend::RankProgram& p : lp.programs) {
      out.emplace_back();
      for (const backend::PInstr& in : p.instrs)
        if (in.kind == backend::PInstr::Send)
          out.back()[{in.mb, p.buffers[static_cast<size_t>(in.a)].tensor}] +=
              p.buffers[static_cast<size_t>(in.a)].piece.numel();
    }
    return out;
  }
  backend::LoweredPlan lower() const {
    backend::LowerOptions o;
    o.communication_only = true;
    return backend::lower_plan(interp->graph(), plan, *interp->train(), o);
  }
};

int64_t sent_bytes(const std::vector<std::map<std::pair<int, int>, int64_t>>& sends) {
  int64_t n = 0;
  for (const auto& rank : sends)
    for (const auto& [key, elems] : rank) n += 4 * elems;
  return n;
}

}  // namespace

TEST_CASE("gpt 1F1B: the residual stream's two consumers share one transfer each way, wte moves once per step",
          "[plan][traffic]") {
  Planned e("examples/gpt.nns", "tiny_pipe", "pipeline", 2);
  const sema::Graph& g = e.interp->graph();
  backend::CommPlan cp = backend::derive_communication(g, e.plan);
  std::vector<int> fwd, bwd;  // edges of the activation that crosses the boundary
  int wte_edges = 0;
  for (size_t i = 0; i < cp.edges.size(); ++i) {
    const backend::CommEdge& c = cp.edges[i];
    if (c.adapter.steps.empty() || c.idle) continue;
    if (g.tensor(c.tensor).kind == sema::TensorKind::Param) {
      CHECK(g.tensor(c.tensor).name == "wte");
      CHECK(c.per_step);
      CHECK(c.shared_with < 0);
      ++wte_edges;
      continue;
    }
    CHECK_FALSE(c.per_step);
    (c.backward ? bwd : fwd).push_back(static_cast<int>(i));
  }
  CHECK(wte_edges == 2);
  REQUIRE(fwd.size() == 2);
  REQUIRE(bwd.size() == 2);
  // Forward: the first consumer carries; backward: the first consumer in
  // graph order carries (its backward runs last, after the other's share).
  CHECK(cp.edges[fwd[0]].shared_with < 0);
  CHECK(cp.edges[fwd[1]].shared_with == fwd[0]);
  CHECK(cp.edges[bwd[0]].shared_with < 0);
  CHECK(cp.edges[bwd[1]].shared_with == bwd[0]);
  CHECK(cp.edges[bwd[0]].producer < cp.edges[bwd[1]].producer);
  // Per micro-batch: %69 each way (32 KiB); per step: wte each way (64 KiB).
  CHECK(cp.bytes() == 196608.0);
  CHECK(cp.step_bytes(4) == 4 * 65536.0 + 131072.0);
  CHECK(cp.step_collectives(4) == 10);

  backend::LoweredPlan lp = e.lower();
  REQUIRE(lp.programs.size() == 2);
  for (int i : {fwd[1], bwd[1]}) CHECK(std::find(lp.edges.begin(), lp.edges.end(), i) == lp.edges.end());
  auto sends = e.sends(lp);
  CHECK(sent_bytes(sends) == static_cast<int64_t>(cp.step_bytes(4)));
  const int act = cp.edges[fwd[0]].tensor;
  for (int r = 0; r < 2; ++r) {
    int activation = 0, weight = 0;
    for (const auto& [key, elems] : sends[static_cast<size_t>(r)]) {
      if (key.second == act) {
        ++activation;
        CHECK(elems == 8192);  // one send per micro-batch
      } else {
        ++weight;
        CHECK(g.tensor(key.second).name == "wte");
        CHECK(key.first == (r == 0 ? 0 : 3));  // received in the first micro-batch, the gradient sent in the last
      }
    }
    CHECK(activation == 4);
    CHECK(weight == 1);
  }
}

TEST_CASE(
    "alphafold2 3F1B: gradient edges of the no-grad recycling passes are idle, the step total is what the programs send",
    "[plan][traffic]") {
  Planned e("examples/alphafold2.nns", "tiny", "pipeline3f1b", 2);
  backend::CommPlan cp = backend::derive_communication(e.interp->graph(), e.plan);
  int idle = 0;
  for (const backend::CommEdge& c : cp.edges) idle += c.idle && !c.adapter.steps.empty() ? 1 : 0;
  CHECK(idle > 0);
  auto sends = e.sends(e.lower());
  CHECK(sent_bytes(sends) == static_cast<int64_t>(cp.step_bytes(static_cast<int>(e.interp->train()->micro_batches))));
}
