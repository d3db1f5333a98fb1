// Early release of sent buffers (lower_releases.cpp): a Send names the
// Wait at which its rank knows the peer received it; the memory replay,
// the buffer check and program verification (program_release.cpp) all
// read that point. Hand-built programs pin each rule next to its
// counterpart without a release point; a lowered pipeline shows lowering
// names one for every forward send, verification accepts it, and the
// replayed peak drops.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "backend/lowering/buffer_check.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_replay.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/program_order.h"
#include "tests/test_util.h"

using namespace nns;
using backend::BufferDecl;
using backend::PInstr;

namespace {

// Two ranks exchanging one 4-element tensor %0: rank 0 sends b0 (tag 1) and
// later waits for rank 1's answer (tag 2, into b1); rank 1 receives tag 1
// into b0 and sends its b1 back as tag 2.
struct Pair {
  sema::Graph g;
  backend::LoweredPlan lp;

  Pair() {
    sema::TensorInfo t;
    t.shape = {4};
    g.add_tensor(t);
    lp.devices = 2;
    lp.programs.resize(2);
    for (int r = 0; r < 2; ++r) {
      lp.programs[static_cast<size_t>(r)].rank = r;
      lp.programs[static_cast<size_t>(r)].device = r;
      for (int b = 0; b < 3; ++b) buffer(r);
    }
  }
  backend::RankProgram& p(int r) { return lp.programs[static_cast<size_t>(r)]; }
  void buffer(int r) {
    BufferDecl d;
    d.role = BufferDecl::Transit;
    d.tensor = 0;
    d.mb = 0;
    d.piece.start = {0};
    d.piece.length = {4};
    p(r).buffers.push_back(d);
  }
  PInstr& op(int r, PInstr::Kind kind, int a, int b, int peer = -1, uint32_t tag = 0) {
    PInstr in;
    in.kind = kind;
    in.a = a;
    in.b = b;
    in.mb = 0;
    in.peer = peer;
    in.tag = tag;
    p(r).instrs.push_back(in);
    return p(r).instrs.back();
  }
  // Rank 0: make b0, send it (release at tag 2 when `release`), free it,
  // receive and wait for tag 2 into b1, then make b2 (as large as b0).
  void rank0(bool release) {
    op(0, PInstr::Alloc, -1, 0);
    op(0, PInstr::Send, 0, -1, 1, 1).index = release ? 2 : -1;
    op(0, PInstr::Free, 0, -1);
    op(0, PInstr::Recv, -1, 1, 1, 2);
    op(0, PInstr::Wait, 1, -1, 1, 2);
    op(0, PInstr::Alloc, -1, 2);
    op(0, PInstr::Free, 2, -1);
    op(0, PInstr::Free, 1, -1);
  }
  // Rank 1: receive tag 1, then either wait for it before sending tag 2
  // (the answer) or send tag 2 first.
  void rank1(bool answer_after_wait) {
    op(1, PInstr::Recv, -1, 0, 0, 1);
    op(1, PInstr::Alloc, -1, 1);
    if (answer_after_wait) op(1, PInstr::Wait, 0, -1, 0, 1);
    op(1, PInstr::Send, 1, -1, 0, 2);
    if (!answer_after_wait) op(1, PInstr::Wait, 0, -1, 0, 1);
    op(1, PInstr::Free, 0, -1);
    op(1, PInstr::Free, 1, -1);
  }
  std::vector<std::string> releases() {
    std::vector<std::string> errors;
    backend::detail::check_send_releases(g, lp, errors);
    return errors;
  }
};

}  // namespace

TEST_CASE("send release: the memory replay frees a parked sent buffer at its release point", "[send_release][memory]") {
  for (bool release : {true, false}) {
    Pair h;
    h.rank0(release);
    backend::MemoryPeak m = backend::peak_memory(h.p(0), 4);
    // b0 (16 bytes) parked from its free; with a release point it goes at the
    // wait, before b2 is made: b1 and b2 at most. Without one it stays to
    // the step's end: b0, b1 and b2.
    CHECK(m.peak == (release ? 32.0 : 48.0));
  }
}

TEST_CASE("send release: the buffer check lets a released buffer be written and diagnoses a release never reached",
          "[send_release][buffer_check]") {
  Pair h;
  h.op(0, PInstr::Alloc, -1, 0);
  h.op(0, PInstr::Send, 0, -1, 1, 1).index = 2;
  h.op(0, PInstr::Recv, -1, 1, 1, 2);
  SECTION("written after its release point") {
    h.op(0, PInstr::Wait, 1, -1, 1, 2);
    h.op(0, PInstr::AddTo, 1, 0);  // b0 += b1: a write
    h.op(0, PInstr::Free, 0, -1);
    h.op(0, PInstr::Free, 1, -1);
    std::vector<std::string> errors;
    backend::check_buffers(h.g, h.lp, errors);
    CHECK(errors.empty());
  }
  SECTION("written before it") {
    h.op(0, PInstr::Alloc, -1, 2);
    h.op(0, PInstr::AddTo, 2, 0);  // b0 += b2 before the wait for tag 2
    h.op(0, PInstr::Wait, 1, -1, 1, 2);
    h.op(0, PInstr::Free, 0, -1);
    h.op(0, PInstr::Free, 1, -1);
    h.op(0, PInstr::Free, 2, -1);
    std::vector<std::string> errors;
    backend::check_buffers(h.g, h.lp, errors);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("writes b0 (transit of %0, mb0) while its send (instruction 1) may still be in flight") !=
          std::string::npos);
  }
  SECTION("a release point this rank never reaches after the send") {
    h.p(0).instrs[1].index = 7;
    h.op(0, PInstr::Wait, 1, -1, 1, 2);
    h.op(0, PInstr::Free, 0, -1);
    h.op(0, PInstr::Free, 1, -1);
    std::vector<std::string> errors;
    backend::check_buffers(h.g, h.lp, errors);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "rank 0, instruction 1 (mb0 send b0 count 4 to rank 1 tag 1 released at tag 7): releases b0 (transit of %0, "
          "mb0) at tag 7 from rank 1, which this rank never waits for after the send");
  }
}

TEST_CASE("send release: verification checks that the peer answers only after receiving ours",
          "[send_release][verify]") {
  Pair h;
  h.rank0(true);
  SECTION("the peer waits, then answers") {
    h.rank1(true);
    CHECK(h.releases().empty());
  }
  SECTION("the peer answers before it waits") {
    h.rank1(false);
    std::vector<std::string> errors = h.releases();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "rank 0 releases its send of tag 1 to rank 1 (b0, %0, mb0) at its wait for tag 2, but rank 1 sends tag 2 "
          "(instruction 2) before it waits for tag 1 (instruction 3): the send may still be in flight when its buffer "
          "is freed");
  }
  SECTION("the peer never sends the releasing message") {
    h.op(1, PInstr::Recv, -1, 0, 0, 1);
    h.op(1, PInstr::Wait, 0, -1, 0, 1);
    std::vector<std::string> errors = h.releases();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "rank 0 releases its send of tag 1 to rank 1 (b0, %0, mb0) at its wait for tag 2, which rank 1 never "
          "sends to it");
  }
}

TEST_CASE("send release: lowering names the gradient's wait for every activation sent down a pipeline",
          "[send_release][lower]") {
  test::PlannedElaboration ev(NNS_SOURCE_DIR, "examples/gpt.nns", "tiny_pipe", "pipeline", 2);
  backend::LowerOptions o;
  o.elaborate = ev.elaborator();
  backend::LoweredPlan lp = backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), o);
  REQUIRE(lp.programs.size() == 2);
  const backend::RankProgram& first = lp.programs[0];
  int sends = 0, released = 0;
  for (const PInstr& in : first.instrs)
    if (in.kind == PInstr::Send) {
      ++sends;
      released += in.index >= 0 ? 1 : 0;
    }
  // Every activation sent on is released at its gradient's wait; wte's
  // transfer (tied to the output layer on rank 1) runs once per step, its
  // gradient comes back once: it stays to the step's end.
  CHECK(sends == 5);
  CHECK(released == 4);
  std::vector<std::string> errors;
  backend::detail::check_send_releases(ev.interp->graph(), lp, errors);
  CHECK(errors.empty());
  // Each release point is a later wait of the same rank on the same peer.
  for (size_t i = 0; i < first.instrs.size(); ++i) {
    const PInstr& s = first.instrs[i];
    if (s.kind != PInstr::Send || s.index < 0) continue;
    bool later = false;
    for (size_t j = i + 1; j < first.instrs.size() && !later; ++j)
      later = first.instrs[j].kind == PInstr::Wait && first.instrs[j].peer == s.peer &&
              first.instrs[j].tag == static_cast<uint32_t>(s.index);
    CHECK(later);
  }
  // A rank lowering only itself (what a rank process runs) and the
  // verification's lowering (structure only) name the same points.
  auto points = [](const backend::RankProgram& p) {
    std::vector<std::pair<uint32_t, int>> out;  // (send tag, release tag)
    for (const PInstr& in : p.instrs)
      if (in.kind == PInstr::Send) out.emplace_back(in.tag, in.index);
    return out;
  };
  for (int r = 0; r < 2; ++r) {
    backend::LowerOptions own = o;
    own.only_rank = r;
    backend::LoweredPlan alone = backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), own);
    REQUIRE(alone.programs.size() == 1);
    CHECK(points(alone.programs[0]) == points(lp.programs[static_cast<size_t>(r)]));
  }
  backend::LoweredPlan verified =
      backend::lower_plan(ev.interp->graph(), ev.plan, *ev.interp->train(), backend::verification_lowering(1, nullptr));
  for (int r = 0; r < 2; ++r)
    CHECK(points(verified.programs[static_cast<size_t>(r)]) == points(lp.programs[static_cast<size_t>(r)]));
  // Without the release points the sent activations stay to the step's end.
  backend::RankProgram parked = first;
  for (PInstr& in : parked.instrs)
    if (in.kind == PInstr::Send) in.index = -1;
  CHECK(backend::peak_memory(first).peak < backend::peak_memory(parked).peak);
}
