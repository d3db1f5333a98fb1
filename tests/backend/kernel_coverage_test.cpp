// Completeness: every registry row (semantics/op_registry.h) has a kernel
// on every backend, for the op and for its "<op>_backward", plus the nodes
// autograd adds (fill, add_n). A row without a kernel would elaborate and
// pass the checker, then fail at the first training step.
#include <map>

#include <catch2/catch.hpp>

#include "backend/runtime/backend.h"
#include "semantics/op_registry.h"

namespace nns::backend::test {

// Rows with no backward, and why. Autograd differentiates only float
// outputs that depend on a parameter; these rows never have one.
const std::map<std::string, std::string>& rows_without_backward() {
  static const std::map<std::string, std::string> rows = {
      {"swin_relative_index", "a constant int32 index table computed from an int argument (no tensor input)"},
      {"swin_shift_mask", "a constant attention mask computed from int arguments (no tensor input)"},
      {"t5_relative_bucket", "a constant int32 bucket table computed from int arguments (no tensor input)"},
      {"detach", "identity in forward that stops the gradient: autograd never differentiates through it"},
  };
  return rows;
}

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
  // The exceptions are registry rows (a renamed row cannot hide here).
  for (const auto& [op, why] : rows_without_backward()) {
    INFO(op);
    CHECK(sema::find_op_row(op) != nullptr);
  }
}

}  // namespace nns::backend::test
