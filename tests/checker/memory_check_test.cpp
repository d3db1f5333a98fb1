// The capacity check on the lowered programs (backend/lowering/
// memory_check.h): each rank's peak is the replay of its program, split
// into weights, gradients, optimizer state and the rest; an overflow is one
// located error at the placements whose sub-ops hold what is live at the peak.
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <unistd.h>

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_check.h"
#include "semantics/interpreter.h"
#include "tp_model.h"

using namespace nns;

namespace {

// The tp fixture with the memory check of its programs.
struct Lowered : test::TensorParallelLowered {
  using TensorParallelLowered::TensorParallelLowered;
  backend::MemoryCheck check(backend::MemoryCheckOptions o) { return backend::check_memory(interp->graph(), plan, lp, o); }
};

}  // namespace

TEST_CASE("memory check: each rank's peak, by its parts", "[memory]") {
  Lowered l(2);
  backend::MemoryCheck m = l.check({});
  REQUIRE(m.ranks.size() == 2);
  const backend::MemoryPeak& p = m.ranks[0].peak;
  // Device 0 holds half of w1 and of w2 (64 floats each: 512 B), their
  // accumulated gradients (512 B) and AdamW's two fp32 moments (1 KiB).
  CHECK(p.weights == 512);
  CHECK(p.gradients == 512);
  CHECK(p.optimizer == 1024);
  CHECK(p.persistent == 2048);
  CHECK(p.activations() > 0);
  CHECK(p.peak == backend::peak_memory(l.lp.programs[0], 4, 2).peak);
  CHECK(m.fits);
  CHECK(backend::memory_line(m, {}).rfind("memory: peak ", 0) == 0);
}

TEST_CASE("memory check under mixed precision: 2-byte elements, fp32 moments and master weights", "[memory]") {
  Lowered l(2);
  backend::MemoryCheckOptions o;
  o.bytes_per_element = 2;
  backend::MemoryCheck fp32 = l.check({}), mixed = l.check(o);
  const backend::MemoryPeak& p = mixed.ranks[0].peak;
  CHECK(p.weights == 256);
  CHECK(p.gradients == 256);
  CHECK(p.optimizer == 64 * 2 * 4 * 3);  // 128 elements x (2 moments + master) x 4 B
  CHECK(p.activations() * 2 == fp32.ranks[0].peak.activations());
}

TEST_CASE("memory check: an overflow names the device, the excess and the placements", "[memory]") {
  Lowered l(2);
  const double peak = l.check({}).ranks[l.check({}).worst].peak.peak;
  backend::MemoryCheckOptions o;
  o.capacity = static_cast<int64_t>(peak);
  CHECK(l.check(o).fits);
  o.capacity = static_cast<int64_t>(peak) - 100;
  backend::MemoryCheck m = l.check(o);
  REQUIRE_FALSE(m.fits);
  REQUIRE(m.overflow);
  const front::Diagnostic& d = *m.overflow;
  CHECK(d.message.rfind("device ", 0) == 0);
  CHECK(d.message.find(" needs ") != std::string::npos);
  CHECK(d.message.find(": 100 B over; this directive places ") != std::string::npos);
  // The placement holding the most at the peak carries the error: linear#0's
  // pieces (line 15; the gelu of the replicated rest reads its own output
  // in its buffer, so the rest no longer holds a second copy); the others
  // are notes, in source order.
  CHECK(d.loc.line == 15);
  REQUIRE(d.notes.size() == 2);
  CHECK(d.notes[0].loc.line == 17);
  CHECK(d.notes[1].loc.line == 18);
  CHECK(d.notes[0].message.rfind("places ", 0) == 0);
}

TEST_CASE("the communication-only lowering has the same buffers but no kernels: the check needs the full one", "[memory]") {
  Lowered full(2), comm(2, true);
  for (size_t r = 0; r < 2; ++r) {
    const backend::RankProgram &a = full.lp.programs[r], &b = comm.lp.programs[r];
    REQUIRE(a.buffers.size() == b.buffers.size());
    for (size_t i = 0; i < a.buffers.size(); ++i) {
      CHECK(a.buffers[i].role == b.buffers[i].role);
      CHECK(a.buffers[i].piece.numel() == b.buffers[i].piece.numel());
    }
    // Program verification's lowering holds no kernel tensors: its replay
    // misses them, so the capacity check lowers with the kernel bodies.
    const backend::MemoryPeak pa = backend::peak_memory(a), pb = backend::peak_memory(b);
    CHECK(pa.persistent == pb.persistent);
    CHECK(pb.kernels_at_peak == 0);
    CHECK(pa.kernels_at_peak > 0);
    CHECK(pb.peak < pa.peak);
  }
}
