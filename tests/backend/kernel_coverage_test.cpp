// Completeness: every registry row (semantics/op_registry.h) has a kernel
// on every backend, for the op and for its "<op>_backward", plus the nodes
// autograd adds (fill, add_n). A row without a kernel would elaborate and
// pass the checker, then fail at the first training step.
#include <map>

#include <catch2/catch.hpp>

#include "backend/runtime/backend.h"
#include "rows_without_backward.h"
#include "semantics/op_registry.h"

namespace nns::backend::test {

TEST_CASE("kernels: every registry row runs forward and backward on every backend", "[backend][kernels]") {
  for (bool reference : {false, true}) {
    std::unique_ptr<Backend> b = make_cpu_backend(reference);
    INFO("backend " << b->name());
    for (const std::string& op : sema::op_row_names()) {
      INFO("op " << op);
      CHECK(b->has_kernel(op));
      if (rows_without_backward().count(op)) CHECK_FALSE(b->has_kernel(op + "_backward"));  // the list stays exact
      else CHECK(b->has_kernel(op + "_backward"));
    }
    CHECK(b->has_kernel("fill"));
    CHECK(b->has_kernel("add_n"));
    CHECK_FALSE(b->has_kernel("no_such_op"));
  }
  // The exceptions are registry rows (a renamed row cannot hide here), and
  // those with tensor inputs are rows autograd never differentiates.
  for (const auto& [op, why] : rows_without_backward()) {
    INFO(op);
    const sema::OpRow* row = sema::find_op_row(op);
    REQUIRE(row != nullptr);
    bool constant = op == "full" || op == "arange" || op.rfind("swin_", 0) == 0 || op == "t5_relative_bucket";
    CHECK(row->no_grad != constant);
  }
}

}  // namespace nns::backend::test
