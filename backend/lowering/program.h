// A Program: what one device runs for one training step — an instruction
// list in a legal order with the buffer plan made explicit (every buffer is
// freed right after its last use). lower_single_device builds it from a
// training graph. The parallel lowering produces a RankProgram per rank
// instead (rank_program.h), with collectives, buckets and transfers.
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
