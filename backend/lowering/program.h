// A Program: what the one-device oracle (Trainer: one rank without --plan,
// and --verify's reference) runs for one training step — the training
// graph's nodes in a legal order with the buffer plan made explicit (every
// buffer is freed right after its last use). lower_single_device builds it.
// It is not what ranks run: every multi-rank run (a --plan, or the implicit
// data-parallel plan without one) is lowered by lower_plan to a RankProgram
// per rank (rank_program.h), a different structure (sub-op kernels,
// slices, collectives, the step end).
#pragma once

#include <string>
#include <vector>

#include "semantics/autograd.h"
#include "semantics/graph.h"

namespace nns::backend {

struct Instr {
  enum Kind { Run, Free, Update } kind = Run;
  int node = -1;    // Run, Update
  int tensor = -1;  // Free
};

struct Program {
  std::vector<Instr> instrs;
  std::vector<int> persistent;  // tensors that live across steps (params, inputs, the loss)
  std::string dump(const sema::Graph& g) const;  // --emit=program
};

Program lower_single_device(const sema::Graph& g, const sema::TrainingGraphInfo& info);

}  // namespace nns::backend
