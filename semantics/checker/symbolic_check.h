// Symbolic sizes: proving the size obligations of a plan for every
// admissible size (symbolic_check.cpp).
#pragma once

#include "semantics/checker/encoder.h"

namespace nns::sema::check {

// After the directive check succeeded at the witness sizes: when the graph
// has symbolic sizes, proves every split's divisibility (and the model's
// own size equalities) for all sizes the config admits, or turns `result`
// Illegal with a counter-example. Sets result.symbolic.
void prove_symbolic(Encoder& e, CheckResult& result);

}  // namespace nns::sema::check
