// Registry rows with no "<op>_backward" kernel, and why: shared by the
// coverage tests of every backend (tests/backend, tests/cuda).
#pragma once

#include <map>
#include <string>

namespace nns::backend::test {

// Rows with no backward, and why. Autograd differentiates only float
// outputs that depend on a parameter; these rows never have one.
inline const std::map<std::string, std::string>& rows_without_backward() {
  static const std::map<std::string, std::string> rows = {
      {"swin_relative_index", "a constant int32 index table computed from an int argument (no tensor input)"},
      {"swin_shift_mask", "a constant attention mask computed from int arguments (no tensor input)"},
      {"t5_relative_bucket", "a constant int32 bucket table computed from int arguments (no tensor input)"},
      {"detach", "identity in forward that stops the gradient: autograd never differentiates through it"},
      {"eq", "a 0/1 mask: no gradient flows through a comparison"},
      {"ne", "a 0/1 mask: no gradient flows through a comparison"},
      {"lt", "a 0/1 mask: no gradient flows through a comparison"},
      {"le", "a 0/1 mask: no gradient flows through a comparison"},
      {"gt", "a 0/1 mask: no gradient flows through a comparison"},
      {"ge", "a 0/1 mask: no gradient flows through a comparison"},
      {"argmax", "an int32 index: no gradient"},
      {"full", "a constant computed from its arguments (no tensor input)"},
      {"arange", "a constant computed from its argument (no tensor input)"},
      {"zeros_like", "a constant of its input's shape: no gradient to the input"},
      {"ones_like", "a constant of its input's shape: no gradient to the input"},
      {"to_i32", "an int32 result: no gradient"},
  };
  return rows;
}

}  // namespace nns::backend::test
