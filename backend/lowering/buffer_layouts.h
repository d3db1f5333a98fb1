// The buffer check's table of layouts (buffer_check.cpp): what every
// rank's run reads of the derived communication's layouts, built once for
// all ranks: each layout's value parts and which devices it holds, as a
// bitset. Each rank looking its layouts up in the device lists (holds) was
// most of the check at 1024 devices.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/lowering/rank_program.h"

namespace nns::backend {

struct BufferLayouts {
  // Layouts are numbered per edge: `first[e] + s` is the layout before step
  // s of edge e (s = steps: after the last).
  std::vector<size_t> first;      // by edge
  std::vector<int64_t> produced;  // by tensor: the layout its forward edges start from, -1 when none
  std::vector<int64_t> vparts;    // by layout: the product of its V factors
  std::vector<uint64_t> member;   // by layout, `words` each: bit d set when it holds device d
  size_t words = 0;

  // (Every activation a program reads reaches it through an edge, so
  // `produced` covers them.)
  BufferLayouts(const sema::Graph& g, const LoweredPlan& lp);

  // The value parts `device`'s piece is split into under layout i (0: it
  // holds none, e.g. a corrupted group).
  int64_t parts(size_t i, int device) const {
    if (device < 0 || static_cast<size_t>(device) >= words * 64) return 0;
    const bool held = (member[i * words + static_cast<size_t>(device) / 64] >> (device % 64)) & 1;
    return held ? vparts[i] : 0;
  }
};

}  // namespace nns::backend
