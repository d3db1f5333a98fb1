// The tensor-parallel model of the checker tests (checker_test.cpp,
// memory_check_test.cpp, bf16_storage_test.cpp): one text, so their line
// references agree, and its plan `tp` lowered, the fixture of the tests
// that read the lowered programs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/lowering/lower_plan.h"
#include "tests/test_util.h"

namespace nns::test {

// Tensor parallel: linear#0 split on its output columns (line 14-15),
// linear#1 on its reduction dim (16-17), the rest replicated (18).
inline const char* kTensorParallelModel =
    "model M() {\n"
    "  param w1: [16, 8] = normal(0.02)\n"
    "  param w2: [16, 8] = normal(0.02)\n"
    "  fn forward(x) { return gelu(linear(x, w1)) + linear(x, w2) }\n"
    "}\n"
    "train {\n"
    "  model = M()\n"
    "  input x: [4, 8] = randn()\n"
    "  input y: [4, 16] = randn()\n"
    "  loss = mse(model(x), y)\n"
    "  optimizer = adamw(lr = 0.1)\n"
    "}\n"
    "plan tp(ngpus) {\n"                                                    // line 13
    "  let a = trans(select(\"linear#0\")[0], dim = \"n\", num = ngpus)\n"  // 14
    "  for i in 0..ngpus { assign(a[i], i) }\n"                             // 15
    "  let b = trans(select(\"linear#1\")[0], dim = \"k\", num = ngpus)\n"  // 16
    "  for i in 0..ngpus { assign(b[i], i) }\n"                             // 17
    "  replicate(unassigned(), 0..ngpus)\n"                                 // 18
    "}\n";

// kTensorParallelModel's plan `tp` on `ngpus` devices, lowered (kernels
// elaborated unless communication_only).
struct TensorParallelLowered : Elaboration {
  sema::Plan plan;
  backend::LoweredPlan lp;

  explicit TensorParallelLowered(int64_t ngpus, bool communication_only = false) {
    const std::string path = write_temp("tp_model", "model", kTensorParallelModel);
    REQUIRE(interp->parse(path));
    std::remove(path.c_str());
    REQUIRE(interp->evaluate());
    REQUIRE(evaluate_plan("tp", ngpus, plan));
    backend::LowerOptions lo;
    lo.communication_only = communication_only;
    sema::Interpreter& in = *interp;
    if (!communication_only)
      lo.elaborate = [&in](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                           const std::map<std::string, int64_t>& divisors,
                           sema::Graph& local) { return in.instantiate_op(node, ins, outs, divisors, local); };
    lp = backend::lower_plan(interp->graph(), plan, *interp->train(), lo);
  }
};

}  // namespace nns::test
