// The bf16 activation storage rule (backend/lowering/bf16_storage.h) on a
// tensor-parallel plan, and the memory replay that follows it: what is
// bf16 (activations, activation gradients), what stays f32 (parameter
// gradients, the loss, partial sums of a split reduction), and the replay's
// bytes for each.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <memory>

#include "backend/lowering/bf16_storage.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_replay.h"
#include "semantics/interpreter.h"
#include "tp_model.h"

using namespace nns;

namespace {

struct Lowered : test::TensorParallelLowered {
  Lowered() : TensorParallelLowered(2) {}
};

bool marked(const std::vector<char>& m, int t) {
  return t >= 0 && static_cast<size_t>(t) < m.size() && m[static_cast<size_t>(t)];
}

}  // namespace

TEST_CASE("bf16 storage: a plan's activations are bf16, its partial sums and parameter gradients f32", "[bf16]") {
  Lowered l;
  const backend::RankProgram& prog = l.lp.programs[0];
  const std::vector<char> half = backend::bf16_local_tensors(prog);
  REQUIRE(half.size() == prog.local.tensors().size());
  int linears = 0, partial_linears = 0, gelus = 0;
  for (const backend::SubOpKernel& kn : prog.kernels) {
    if (!kn.elaborated || kn.inst.nodes.empty() || kn.inst.outputs.empty()) continue;
    const std::string& kind = prog.local.node(kn.inst.nodes[0]).kind;
    const int out = kn.inst.outputs[0];
    if (kind == "linear") {
      ++linears;
      const bool partial = kn.out_slices[0].value_parts > 1;
      partial_linears += partial;
      INFO("linear kernel, partial output " << partial);
      CHECK(marked(half, out) == !partial);  // linear#1's part is summed in f32 first
      // The weight's gradient (input 1) feeds the optimizer: f32.
      auto g = kn.bwd.grads.find(kn.inst.inputs[1]);
      REQUIRE(g != kn.bwd.grads.end());
      CHECK_FALSE(marked(half, g->second));
    }
    if (kind == "gelu") {
      ++gelus;
      CHECK(marked(half, out));
      auto g = kn.bwd.grads.find(kn.inst.inputs[0]);  // an activation's gradient: bf16
      REQUIRE(g != kn.bwd.grads.end());
      CHECK(marked(half, g->second));
    }
    if (kind == "mse") CHECK_FALSE(marked(half, out));  // the loss
  }
  CHECK(linears == 2);
  CHECK(partial_linears == 1);
  CHECK(gelus == 1);

  // The one-device reference of --verify keeps linear#1's output in f32 as
  // the plan does; on its own it holds it in bf16.
  const sema::Graph& g = l.interp->graph();
  const std::vector<int> partial = backend::partial_sum_tensors(prog, g);
  REQUIRE_FALSE(partial.empty());
  const std::vector<char> one = backend::bf16_graph_tensors(g), ref = backend::bf16_graph_tensors(g, partial);
  for (int t : partial) {
    INFO("tensor " << g.tensor(t).name);
    CHECK_FALSE(marked(ref, t));
  }
  CHECK(std::count(one.begin(), one.end(), 1) > std::count(ref.begin(), ref.end(), 1));
  CHECK_FALSE(marked(one, g.loss));
  for (int p : g.params()) CHECK_FALSE(marked(one, p));
  for (const sema::TensorInfo& t : g.tensors())
    if (t.grad_of >= 0 && g.tensor(t.grad_of).kind == sema::TensorKind::Param) CHECK_FALSE(marked(one, t.id));
}

TEST_CASE("bf16 storage: the memory replay costs the bf16 tensors at 2 bytes and the rest as before",
          "[bf16][memory]") {
  Lowered l;
  for (const backend::RankProgram& prog : l.lp.programs) {
    const backend::MemoryPeak f32 = backend::peak_memory(prog, 4, 2), half = backend::peak_memory(prog, 4, 2, true);
    // Weights, gradients and optimizer state stay f32; only kernel tensors shrink.
    CHECK(half.persistent == f32.persistent);
    CHECK(half.optimizer == f32.optimizer);
    CHECK(half.peak < f32.peak);
    CHECK(half.peak >= f32.persistent);
    // The CPU executor's uniform 2-byte model is another thing: it halves the weights too.
    CHECK(backend::peak_memory(prog, 2, 2).weights == f32.weights / 2);
  }
}
