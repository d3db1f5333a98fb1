// Seeded bug `kernel-read-after-free` (buffer_check.h): a kernel's read of
// a buffer moved after the buffer's free, which only the buffer check can
// see, and only in a lowering that carries the kernels' instructions.
#include <algorithm>

#include "backend/lowering/buffer_check.h"

namespace nns::backend {

namespace {

bool persistent(BufferDecl::Role r) {
  return r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard;
}

// The first SliceIn of `p` reading a buffer that a later Free ends: the
// indices of both, or false.
bool find_read_and_free(const RankProgram& p, size_t& read, size_t& free) {
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const PInstr& in = p.instrs[i];
    if (in.kind != PInstr::SliceIn || in.a < 0 || persistent(p.buffers[static_cast<size_t>(in.a)].role)) continue;
    for (size_t j = i + 1; j < p.instrs.size(); ++j)
      if (p.instrs[j].kind == PInstr::Free && p.instrs[j].a == in.a) {
        read = i;
        free = j;
        return true;
      }
  }
  return false;
}

}  // namespace

bool seed_kernel_read_after_free(const sema::Graph& g, LoweredPlan& lp, std::string& applied) {
  for (RankProgram& p : lp.programs) {
    size_t read = 0, free = 0;
    if (p.moved_from >= 0) continue;  // a skeleton holds no kernel instructions
    if (!find_read_and_free(p, read, free)) continue;
    const PInstr slice = p.instrs[read];
    const std::string before = lp.instr_text(g, p, slice);
    // The Free moves to just before the read; the instructions between
    // shift by one, and so do the task spans' bounds among them.
    std::rotate(p.instrs.begin() + static_cast<std::ptrdiff_t>(read),
                p.instrs.begin() + static_cast<std::ptrdiff_t>(free),
                p.instrs.begin() + static_cast<std::ptrdiff_t>(free) + 1);
    for (RankProgram::TaskSpan& t : p.tasks) {
      if (t.first > static_cast<int>(read) && t.first <= static_cast<int>(free)) ++t.first;
      if (t.last > static_cast<int>(read) && t.last <= static_cast<int>(free)) ++t.last;
    }
    applied = "rank " + std::to_string(p.rank) + " frees b" + std::to_string(slice.a) +
              " before its kernel's read (instruction " + std::to_string(read + 1) + ": " + before + ")";
    return true;
  }
  return false;
}

}  // namespace nns::backend
