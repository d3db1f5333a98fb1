// Skeletons (LowerOptions::moved_skeletons, rank_symmetry.h): what `nns
// check` holds of a device moved along the plan's symmetry. A skeleton must
// be the communication of the whole moved program, made exactly where the
// whole move is made, and program verification and the rank classes must
// read the same from it as from the whole programs.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "backend/lowering/lower_internal.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_classes.h"
#include "backend/lowering/rank_symmetry.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

struct Planned : test::PlannedElaboration {
  Planned(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices)
      : PlannedElaboration(NNS_SOURCE_DIR, file, config, plan_name, devices) {}
};

// An instruction as text, its group by its members (two lowerings intern
// groups apart).
std::string text(const backend::LoweredPlan& lp, const backend::PInstr& in) {
  return std::string(backend::instr_name(in.kind)) + " mb" + std::to_string(in.mb) + " a" + std::to_string(in.a) +
         " b" + std::to_string(in.b) + " k" + std::to_string(in.kernel) + " i" + std::to_string(in.index) + " e" +
         std::to_string(in.edge) + "." + std::to_string(in.step) + " g" +
         (in.group >= 0 ? backend::group_text(lp.groups[static_cast<size_t>(in.group)]) : "-") + " peer" +
         std::to_string(in.peer) + " tag" + std::to_string(in.tag) + " n" + std::to_string(in.count) + " x" +
         std::to_string(in.scale);
}

}  // namespace

TEST_CASE("a skeleton is the communication of the whole moved program, and verification reads the same from it",
          "[lower][symmetry][skeleton]") {
  struct Case {
    const char *file, *config, *plan;
    int64_t devices;
    int period;
  };
  for (const Case& c :
       {Case{"examples/alphafold2.nns", "tiny", "dap", 4, 1}, Case{"examples/gpt.nns", "tiny", "megatron", 4, 1},
        Case{"examples/gpt.nns", "tiny", "hybrid", 4, 2}, Case{"examples/swin.nns", "tiny", "coshard", 2, 1},
        Case{"examples/swin.nns", "tiny", "dp", 4, 1}, Case{"examples/moe.nns", "tiny", "ep_recompute", 4, 1},
        Case{"examples/llama.nns", "tiny", "megatron", 2, 1},
        Case{"examples/gpt.nns", "tiny_pipe", "pipeline", 2, 0}}) {
    INFO(c.file << " plan " << c.plan << " on " << c.devices);
    Planned l(c.file, c.config, c.plan, c.devices);
    const sema::Graph& g = l.interp->graph();
    const sema::TrainSpec& spec = *l.interp->train();
    backend::LowerOptions o = backend::verification_lowering(1, nullptr);
    backend::LoweredPlan whole = backend::lower_plan(g, l.plan, spec, o);
    o.moved_skeletons = true;
    backend::LoweredPlan skel = backend::lower_plan(g, l.plan, spec, o);
    CHECK(skel.symmetry_period == c.period);
    CHECK(skel.moved == whole.moved);
    CHECK(skel.skeletons == skel.moved);
    CHECK(skel.moved == (c.period > 0 ? static_cast<int>(c.devices) - c.period : 0));
    REQUIRE(skel.programs.size() == whole.programs.size());
    for (size_t r = 0; r < skel.programs.size(); ++r) {
      INFO("rank " << r);
      const backend::RankProgram &s = skel.programs[r], &w = whole.programs[r];
      CHECK(s.rank == w.rank);
      CHECK(s.device == w.device);
      if (s.moved_from < 0) {
        CHECK(skel.dump_rank(g, s) == whole.dump_rank(g, w));
        continue;
      }
      // Its representative: the device of its orbit below the period.
      REQUIRE(c.period > 0);
      CHECK(skel.programs[static_cast<size_t>(s.moved_from)].device == static_cast<int>(r) % c.period);
      CHECK(skel.programs[static_cast<size_t>(s.moved_from)].moved_from == -1);
      // Every collective, send, receive, wait and update of the whole moved
      // program, in order, at its place.
      std::vector<std::string> want, have;
      std::vector<uint32_t> at;
      for (size_t i = 0; i < w.instrs.size(); ++i) {
        const backend::PInstr& in = w.instrs[i];
        if (in.group < 0 && in.peer < 0 && in.kind != backend::PInstr::Update) continue;
        want.push_back(text(whole, in));
        at.push_back(static_cast<uint32_t>(i));
      }
      for (const backend::PInstr& in : s.instrs) have.push_back(text(skel, in));
      CHECK(have == want);
      CHECK(s.instr_at == at);
      CHECK(!want.empty());
      // What a skeleton's readers take from its representative is the
      // moved program's up to the move: extents, roles, tensors, counts.
      CHECK(backend::same_memory_signature(l.plan, skel.body(s), w));
    }
    // The rank classes and program verification read the same.
    CHECK(backend::memory_classes(l.plan, skel) == backend::memory_classes(l.plan, whole));
    const int whole_programs = static_cast<int>(skel.programs.size()) - skel.skeletons;
    backend::ProgramCheck a = backend::verify_programs(g, l.plan, std::move(whole), backend::SeededBug::None, &spec, 0);
    backend::ProgramCheck b = backend::verify_programs(g, l.plan, std::move(skel), backend::SeededBug::None, &spec, 0);
    CHECK(a.ok);
    CHECK(b.ok);
    CHECK(a.errors == b.errors);
    CHECK(a.collectives == b.collectives);
    CHECK(a.edges == b.edges);
    CHECK(b.buffer_programs == whole_programs);
    CHECK(a.buffer_programs == static_cast<int>(c.devices));
  }
}

// Whether a device moves is decided for a skeleton per distinct interval
// and label of the representative, for the whole program piece by piece:
// the two must agree on every device, also where a piece does not move.
TEST_CASE("a skeleton is made exactly where the whole program moves", "[lower][symmetry][skeleton]") {
  Planned l("examples/alphafold2.nns", "tiny", "dap", 4);
  const sema::Graph& g = l.interp->graph();
  const backend::CommPlan comm = backend::derive_communication(g, l.plan);
  backend::LowerOptions o = backend::verification_lowering(1, &comm);
  o.every_device = true;
  backend::LoweredPlan lp = backend::lower_plan(g, l.plan, *l.interp->train(), o);
  backend::detail::PlanAnalysis A(g, l.plan, comm);
  A.run();
  std::unique_ptr<backend::detail::RankSymmetry> sym = backend::detail::RankSymmetry::find(A, 4);
  REQUIRE(sym);
  REQUIRE(sym->period() == 1);
  backend::detail::GroupTable groups{{}, lp.groups, {}, {}, -1};
  // Device d's program from `rep` both ways: made or refused alike.
  auto agree = [&](const backend::RankProgram& rep, const std::vector<bool>& expect) {
    const backend::detail::RankSymmetry::SkeletonBase base = sym->skeleton_base(rep);
    for (int d = 1; d < 4; ++d) {
      INFO("device " << d);
      backend::RankProgram a, b;
      const bool whole = sym->move(rep, d, groups, a);
      const bool skeleton = sym->move_skeleton(rep, base, d, groups, b);
      CHECK(whole == skeleton);
      CHECK(whole == expect[static_cast<size_t>(d)]);
    }
  };
  const backend::RankProgram& rep = lp.programs[0];
  agree(rep, {true, true, true, true});
  // A buffer widened over the blocks of devices 2 and 3 of a four-way
  // split: one period on, its atoms land on blocks 3 and 0, not side by
  // side; two and three periods on they do.
  backend::RankProgram widened = rep;
  bool found = false;
  for (backend::BufferDecl& b : widened.buffers) {
    const sema::Shape& shape = g.tensor(b.tensor).shape;
    for (size_t i = 0; i < shape.size() && !found; ++i)
      if (b.piece.length[i] * 4 == shape[i] && b.piece.start[i] == 0) {
        b.piece.start[i] = 2 * b.piece.length[i];
        b.piece.length[i] *= 2;
        found = true;
      }
    if (found) break;
  }
  REQUIRE(found);
  agree(widened, {true, false, true, true});
  // A partial sum in three parts, which no layout of the plan has.
  backend::RankProgram thirds = rep;
  thirds.buffers[0].piece.value_parts = 3;
  agree(thirds, {true, false, false, false});
}
