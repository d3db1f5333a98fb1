// The buffer check (backend/lowering/buffer_check.h): small programs built
// by hand, one per diagnosis (read before any write, use after free, a
// partial sum reduced twice in place, ...), each next to its correct
// version, which passes; the full lowerings the runtime executes (kernels
// and their in-place reads included) pass; and the seeded bug of issue 25
// is caught by the buffer check alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/lowering/buffer_check.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/program_check.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;
using backend::BufferDecl;
using backend::PInstr;

namespace {

// One tensor %0 of 4 elements, produced as 2 partial sums on devices 0 and
// 1 (V(2)) and read by two ops, each through an allreduce (edges 0 and 1).
struct HandBuilt {
  sema::Graph g;
  backend::LoweredPlan lp;
  backend::RankProgram& p;

  HandBuilt() : p(init()) {}

  backend::RankProgram& init() {
    sema::TensorInfo t;
    t.shape = {4};
    g.add_tensor(t);
    lp.devices = 2;
    lp.groups = {{0, 1}};
    auto comm = std::make_shared<backend::CommPlan>();
    for (int consumer = 0; consumer < 2; ++consumer) {
      backend::CommEdge e;
      e.tensor = 0;
      e.from.devices = {0, 1};
      e.from.factors = {{backend::LayoutFactor::V, -1, 2, 0}};
      e.to.devices = {0, 1};
      e.to.factors = {{backend::LayoutFactor::R, -1, 2, 0}};
      backend::AdapterStep st;
      st.prim = backend::AdapterStep::AllReduce;
      st.groups = {{0, 1}};
      st.after = e.to;
      e.adapter.steps = {st};
      comm->edges.push_back(e);
    }
    lp.comm = comm;
    lp.programs.resize(1);
    return lp.programs[0];
  }
  int buffer(BufferDecl::Role role, int mb = 0) {
    BufferDecl d;
    d.role = role;
    d.tensor = 0;
    d.mb = mb;
    d.piece.start = {0};
    d.piece.length = {4};
    p.buffers.push_back(d);
    return static_cast<int>(p.buffers.size()) - 1;
  }
  void op(PInstr::Kind kind, int a, int b, int edge = -1) {
    PInstr in;
    in.kind = kind;
    in.a = a;
    in.b = b;
    in.mb = 0;
    in.edge = edge;
    in.step = edge >= 0 ? 0 : -1;
    in.group = kind == PInstr::AllReduce || kind == PInstr::ReplicaAverage ? 0 : -1;
    p.instrs.push_back(in);
  }
  std::vector<std::string> check() {
    std::vector<std::string> errors;
    backend::check_buffers(g, lp, errors);
    return errors;
  }
};

std::string all(const std::vector<std::string>& errors) {
  std::string s;
  for (const std::string& e : errors) s += e + "\n";
  return s;
}

}  // namespace

TEST_CASE("buffer check: a partial sum read by two ops is reduced on copies, not twice in place", "[buffer_check]") {
  HandBuilt h;
  int v = h.buffer(BufferDecl::Value);
  SECTION("correct: each allreduce sums its own copy") {
    int c0 = h.buffer(BufferDecl::Transit), c1 = h.buffer(BufferDecl::Transit);
    h.op(PInstr::Alloc, -1, v);
    h.op(PInstr::Extract, v, c0);
    h.op(PInstr::AllReduce, c0, -1, 0);
    h.op(PInstr::Extract, v, c1);
    h.op(PInstr::Free, v, -1);
    h.op(PInstr::AllReduce, c1, -1, 1);
    h.op(PInstr::Free, c0, -1);
    h.op(PInstr::Free, c1, -1);
    auto errors = h.check();
    INFO(all(errors));
    CHECK(errors.empty());
  }
  SECTION("the bug: both allreduces in place on the producer's buffer") {
    h.op(PInstr::Alloc, -1, v);
    h.op(PInstr::AllReduce, v, -1, 0);
    h.op(PInstr::AllReduce, v, -1, 1);
    h.op(PInstr::Free, v, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(
        errors[0].rfind(
            "rank 0, instruction 2 (mb0 allreduce b0 count 4 over ranks {0,1}  (%0 storage -> update, step 1)): allreduces b0 "
            "(value of %0, mb0), a partial sum of 2 parts, but instruction 1 (mb0 allreduce b0",
            0) == 0);
    CHECK(errors[0].find("the partial sum is reduced twice (its reduction count is 2)") != std::string::npos);
  }
}

TEST_CASE("buffer check: lifetimes", "[buffer_check]") {
  HandBuilt h;
  int a = h.buffer(BufferDecl::Value), b = h.buffer(BufferDecl::Transit);
  SECTION("read before any write") {
    h.op(PInstr::Send, a, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(
        errors[0] ==
        "rank 0, instruction 0 (mb0 send b0 count 4 to rank -1 tag 0): reads b0 (value of %0, mb0) before anything writes it");
  }
  SECTION("read after free") {
    h.op(PInstr::Alloc, -1, a);
    h.op(PInstr::Free, a, -1);
    h.op(PInstr::Extract, a, b);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "rank 0, instruction 2 (mb0 extract b1 <- b0): reads b0 (value of %0, mb0) after its free at instruction 1");
  }
  SECTION("write after free, and a second free") {
    h.op(PInstr::Alloc, -1, a);
    h.op(PInstr::Alloc, -1, b);
    h.op(PInstr::Free, b, -1);
    h.op(PInstr::AddTo, a, b);
    h.op(PInstr::Free, b, -1);
    h.op(PInstr::Free, a, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 2);
    CHECK(
        errors[0] ==
        "rank 0, instruction 3 (mb0 add-to b1 += b0): writes to b1 (transit of %0, mb0) after its free at instruction 2");
    CHECK(errors[1] ==
          "rank 0, instruction 4 (mb0 free b1): frees b1 (transit of %0, mb0) again (first freed at instruction 2)");
  }
  SECTION("a buffer the step leaves live") {
    h.op(PInstr::Alloc, -1, a);
    h.op(PInstr::Extract, a, b);
    h.op(PInstr::Free, a, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] == "rank 0: b1 (transit of %0, mb0) is never freed (the step leaves it live)");
  }
  SECTION("a receive never waited for, and a wait without a receive") {
    h.op(PInstr::Recv, -1, b);
    h.op(PInstr::Wait, a, -1);
    h.op(PInstr::Free, b, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 2);
    CHECK(errors[0] ==
          "rank 0, instruction 1 (mb0 wait b0): waits for b0 (value of %0, mb0), into which no receive is posted");
    CHECK(errors[1] ==
          "rank 0, instruction 2 (mb0 free b1): frees b1 (transit of %0, mb0) while its receive is not waited for");
  }
}

TEST_CASE("buffer check: a send in flight is not overwritten; a full sum is not read as a partial one",
          "[buffer_check]") {
  HandBuilt h;
  int v = h.buffer(BufferDecl::Value);
  SECTION("overwritten while sent") {
    h.op(PInstr::Alloc, -1, v);
    h.op(PInstr::Send, v, -1);
    h.op(PInstr::AllReduce, v, -1, 0);
    h.op(PInstr::Free, v, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("writes b0 (value of %0, mb0) while its send (instruction 1) may still be in flight") !=
          std::string::npos);
  }
  SECTION("an allreduce of a value already whole (a ValueSplit cut it finer: 4 parts where 2 are expected)") {
    int c = h.buffer(BufferDecl::Transit);
    h.op(PInstr::Alloc, -1, v);
    h.op(PInstr::Extract, v, c);
    h.p.instrs.back().scale = 0.5f;
    h.op(PInstr::AllReduce, c, -1, 0);
    h.op(PInstr::Free, v, -1);
    h.op(PInstr::Free, c, -1);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(
        errors[0].find(
            "allreduces b1 (transit of %0, mb0) expecting a partial sum of 2 parts but it holds a partial sum of 4 parts") !=
        std::string::npos);
  }
}

TEST_CASE("buffer check: replica averages and updates", "[buffer_check]") {
  HandBuilt h;
  h.lp.replicas = 2;
  h.g.tensor(0).kind = sema::TensorKind::Param;
  h.g.tensor(0).name = "w";
  int w = h.buffer(BufferDecl::Param, -1), acc = h.buffer(BufferDecl::Accum, -1), grad = h.buffer(BufferDecl::Grad);
  backend::ParamSlot slot;
  slot.tensor = 0;
  slot.param = w;
  slot.accum = acc;
  slot.trainable = true;
  h.p.params.push_back(slot);
  h.op(PInstr::Alloc, -1, grad);
  h.op(PInstr::SeedGrad, -1, grad);
  h.op(PInstr::Alloc, -1, acc);
  h.op(PInstr::AddTo, grad, acc);
  h.op(PInstr::Free, grad, -1);
  SECTION("averaged once: fine") {
    h.op(PInstr::ReplicaAverage, acc, -1);
    h.op(PInstr::Update, w, acc);
    auto errors = h.check();
    INFO(all(errors));
    CHECK(errors.empty());
  }
  SECTION("averaged twice") {
    h.op(PInstr::ReplicaAverage, acc, -1);
    h.op(PInstr::ReplicaAverage, acc, -1);
    h.op(PInstr::Update, w, acc);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(
        errors[0].find(
            "averages b1 (accum of w) over the replicas again (instruction 5 already did): the gradient is divided twice") !=
        std::string::npos);
  }
  SECTION("never averaged") {
    h.op(PInstr::Update, w, acc);
    auto errors = h.check();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("updates b0 (param of w) with b1 (accum of w), which no replica average reached") !=
          std::string::npos);
  }
}

namespace {

struct Lowered : test::PlannedElaboration {
  Lowered(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices)
      : PlannedElaboration(NNS_SOURCE_DIR, file, config, plan_name, devices) {}
  // The full lowering the runtime executes: kernels, their slices and
  // in-place reads.
  backend::LoweredPlan lower(int replicas) {
    backend::LowerOptions o;
    o.replicas = replicas;
    o.elaborate = elaborator();
    return backend::lower_plan(interp->graph(), plan, *interp->train(), o);
  }
};

// A kernel's slice-in that reads an op's value in place (none: end), and
// an allreduce of that buffer in place, which put right after the read
// writes what the kernel still reads.
std::vector<PInstr>::iterator in_place_value_read(backend::RankProgram& p) {
  return std::find_if(p.instrs.begin(), p.instrs.end(), [&](const PInstr& in) {
    return in.kind == PInstr::SliceIn && backend::slice_in_place(p, in) >= 0 &&
           p.buffers[static_cast<size_t>(in.a)].role == BufferDecl::Value;
  });
}
PInstr allreduce_in_place(const PInstr& read) {
  PInstr ar;
  ar.kind = PInstr::AllReduce;
  ar.a = read.a;
  ar.group = 0;
  ar.mb = read.mb;
  return ar;
}

}  // namespace

TEST_CASE("buffer check: the full lowerings the runtime executes pass (kernel reads, in-place slices, pipelines)",
          "[buffer_check]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t devices;
    int replicas;
  };
  for (Case c :
       {Case{"tests/plan/plans/shared_partial.nns", "small", "vs", 2, 1},
        Case{"examples/gpt.nns", "tiny", "megatron", 2, 2}, Case{"examples/gpt.nns", "tiny_pipe", "pipeline", 2, 1},
        Case{"examples/gpt.nns", "tiny", "dp_zero1", 4, 1}, Case{"examples/swin.nns", "tiny", "coshard", 2, 1},
        Case{"examples/moe.nns", "tiny", "ep_recompute", 4, 1}, Case{"examples/t5.nns", "tiny", "interlaced", 2, 1},
        Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2, 1},
        Case{"examples/alphafold2.nns", "tiny", "dap", 2, 1},
        Case{"examples/alphafold2.nns", "tiny", "pipeline3f1b", 2, 1},
        Case{"examples/llama.nns", "tiny", "hybrid", 4, 1},
        Case{"tests/plan/plans/recompute.nns", "small", "megatron", 2, 1},
        Case{"tests/plan/plans/recompute.nns", "small", "pipeline", 2, 1},
        Case{"tests/plan/plans/zero1.nns", "small", "hybrid", 4, 1},
        Case{"tests/plan/plans/collectives.nns", "small", "alltoall", 4, 1},
        Case{"tests/plan/plans/collectives.nns", "small", "reducescatter", 4, 1},
        Case{"tests/plan/plans/collectives.nns", "small", "stages", 4, 1},
        Case{"tests/plan/plans/layouts.nns", "small", "disjoint", 4, 1},
        Case{"tests/plan/plans/pipeline.nns", "small", "interleaved", 4, 1}}) {
    INFO(c.file << " " << c.plan << " on " << c.devices << " x " << c.replicas);
    Lowered l(c.file, c.config, c.plan, c.devices);
    backend::LoweredPlan lp = l.lower(c.replicas);
    std::vector<std::string> errors;
    backend::BufferCheckStats s = backend::check_buffers(l.interp->graph(), lp, errors);
    INFO(all(errors));
    CHECK(errors.empty());
    CHECK(s.buffers > 0);
  }
}

TEST_CASE("buffer check: the double in-place allreduce of issue 25 is caught by the buffer check alone",
          "[buffer_check]") {
  Lowered l("tests/plan/plans/shared_partial.nns", "small", "vs", 2);
  backend::ProgramCheck pc = backend::verify_programs(
      l.interp->graph(), l.plan, 1, backend::SeededBug::DoubleInplaceAllreduce, &*l.interp->train(), nullptr);
  INFO(all(pc.errors));
  CHECK(pc.applied.find("run twice in place on the producer's buffer (no copies) on 2 rank(s)") != std::string::npos);
  CHECK_FALSE(pc.ok);
  // The value and order halves find nothing: every diagnosis is the
  // buffer check's (the bug this check exists for).
  CHECK(pc.buffer_errors > 0);
  CHECK(pc.buffer_errors == static_cast<int>(pc.errors.size()));
  REQUIRE_FALSE(pc.errors.empty());
  // With the kernels' instructions (what nns check lowers) the second
  // allreduce is both a write under a kernel's in-place read and a second
  // reduction of a whole sum; both are said.
  CHECK(pc.errors[0].find("while a kernel still reads it in place") != std::string::npos);
  CHECK(all(pc.errors).find("the partial sum is reduced twice") != std::string::npos);
  // Unseeded, the plan verifies.
  backend::ProgramCheck clean =
      backend::verify_programs(l.interp->graph(), l.plan, 1, backend::SeededBug::None, &*l.interp->train(), nullptr);
  INFO(all(clean.errors));
  CHECK(clean.ok);
}

TEST_CASE("buffer check: nns check's lowering carries the kernels' reads, and a read after a free is caught",
          "[buffer_check]") {
  Lowered l("examples/gpt.nns", "tiny", "megatron", 2);
  // Communication only, as verification lowers: with kernel_buffers the
  // kernels' instructions are there (unelaborated), without them none.
  backend::LowerOptions o;
  o.communication_only = true;
  backend::LoweredPlan bare = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
  o.kernel_buffers = true;
  backend::LoweredPlan with = backend::lower_plan(l.interp->graph(), l.plan, *l.interp->train(), o);
  auto slice_ins = [](const backend::LoweredPlan& lp) {
    return std::count_if(lp.programs[0].instrs.begin(), lp.programs[0].instrs.end(),
                         [](const PInstr& in) { return in.kind == PInstr::SliceIn; });
  };
  CHECK(slice_ins(bare) == 0);
  CHECK(slice_ins(with) > 0);
  CHECK(slice_ins(with) == slice_ins(l.lower(1)));  // the same reads the runtime's lowering makes
  std::string applied;
  CHECK_FALSE(backend::seed_kernel_read_after_free(l.interp->graph(), bare, applied));
  std::vector<std::string> errors;
  backend::check_buffers(l.interp->graph(), with, errors);
  INFO(all(errors));
  CHECK(errors.empty());
  // Through verify_programs: only the buffer check sees it, naming the read.
  backend::ProgramCheck pc = backend::verify_programs(
      l.interp->graph(), l.plan, 1, backend::SeededBug::KernelReadAfterFree, &*l.interp->train(), nullptr);
  INFO(all(pc.errors));
  CHECK(pc.applied.find("rank 0 frees b") != std::string::npos);
  CHECK_FALSE(pc.ok);
  CHECK(pc.buffer_errors == static_cast<int>(pc.errors.size()));
  REQUIRE_FALSE(pc.errors.empty());
  CHECK(pc.errors[0].find("slice-in") != std::string::npos);
  CHECK(pc.errors[0].find("after its free at instruction") != std::string::npos);
}

TEST_CASE("buffer check: mistakes put into a full lowering are caught there", "[buffer_check]") {
  Lowered l("examples/gpt.nns", "tiny", "megatron", 2);
  backend::LoweredPlan lp = l.lower(1);
  backend::RankProgram& p = lp.programs[0];
  std::vector<std::string> errors;
  SECTION("an activation's allreduce dropped: the consumer's kernel reads a partial sum") {
    auto it = std::find_if(p.instrs.begin(), p.instrs.end(), [&](const PInstr& in) {
      return in.kind == PInstr::AllReduce && in.edge >= 0 && !lp.comm->edges[static_cast<size_t>(in.edge)].backward;
    });
    REQUIRE(it != p.instrs.end());
    p.instrs.erase(it);
    backend::check_buffers(l.interp->graph(), lp, errors);
    REQUIRE_FALSE(errors.empty());
    CHECK(errors[0].find("slice-in") != std::string::npos);
    CHECK(errors[0].find("a kernel input reads") != std::string::npos);
    CHECK(errors[0].find("expecting the full sum but it holds a partial sum of 2 parts") != std::string::npos);
  }
  SECTION("an in-place write into a value a kernel still reads in place") {
    auto it = in_place_value_read(p);
    REQUIRE(it != p.instrs.end());
    const PInstr ar = allreduce_in_place(*it);
    const size_t at = static_cast<size_t>(it - p.instrs.begin()) + 1;
    p.instrs.insert(p.instrs.begin() + static_cast<long>(at), ar);
    backend::check_buffers(l.interp->graph(), lp, errors);
    REQUIRE_FALSE(errors.empty());
    CHECK(errors[0].find("rank 0, instruction " + std::to_string(at)) == 0);
    CHECK(errors[0].find("while a kernel still reads it in place") != std::string::npos);
  }
  // Whether a held read is in place is asked only when its buffer is
  // written (buffer_check.cpp, read_in_place): through the last reader's
  // kernel, or, once that kernel is freed, the others'.
  SECTION("an in-place read held by a kernel other than the buffer's last reader") {
    auto it = std::find_if(p.instrs.begin(), p.instrs.end(), [&](const PInstr& in) {
      return in.kind == PInstr::SliceIn && backend::slice_in_place(p, in) >= 0 &&
             p.buffers[static_cast<size_t>(in.a)].role == BufferDecl::Value;
    });
    REQUIRE(it != p.instrs.end());
    REQUIRE(p.kernels.size() > 1);
    const PInstr read = *it;
    // Another kernel reads the buffer too and is freed at once: the buffer's
    // last reader holds nothing when the allreduce writes it.
    PInstr other = read;
    other.kernel = read.kernel == 0 ? 1 : 0;
    other.index = 0;
    PInstr done;
    done.kind = PInstr::FreeKernel;
    done.kernel = other.kernel;
    done.mb = other.mb;
    PInstr ar;
    ar.kind = PInstr::AllReduce;
    ar.a = read.a;
    ar.group = 0;
    ar.mb = read.mb;
    const size_t at = static_cast<size_t>(it - p.instrs.begin()) + 1;
    p.instrs.insert(p.instrs.begin() + static_cast<long>(at), {other, done, ar});
    backend::check_buffers(l.interp->graph(), lp, errors);
    const std::string want = "rank 0, instruction " + std::to_string(at + 2);
    CHECK(std::any_of(errors.begin(), errors.end(), [&](const std::string& e) {
      return e.find(want) == 0 && e.find("while a kernel still reads it in place") != std::string::npos;
    }));
  }
  SECTION("a free moved before the last read of its buffer") {
    size_t i = 1;
    while (i < p.instrs.size() && !(p.instrs[i].kind == PInstr::Free && p.instrs[i - 1].a == p.instrs[i].a)) ++i;
    REQUIRE(i < p.instrs.size());
    std::swap(p.instrs[i - 1], p.instrs[i]);
    backend::check_buffers(l.interp->graph(), lp, errors);
    REQUIRE_FALSE(errors.empty());
    CHECK(errors[0].find("rank 0, instruction " + std::to_string(i)) == 0);
    CHECK(errors[0].find("after its free at instruction " + std::to_string(i - 1)) != std::string::npos);
  }
}

// A held read that copies never makes a write an overwrite: whether a read
// is in place is decided when the buffer is written (read_in_place).
TEST_CASE("buffer check: a write into a buffer a kernel reads by copy is no overwrite", "[buffer_check]") {
  Lowered l("examples/gpt.nns", "tiny", "megatron", 2);
  backend::LoweredPlan lp = l.lower(1);
  backend::RankProgram& p = lp.programs[0];
  auto it = in_place_value_read(p);
  REQUIRE(it != p.instrs.end());
  const PInstr ar = allreduce_in_place(*it);
  std::vector<std::string> errors;
  SECTION("read in place: the write is caught") {
    p.instrs.insert(it + 1, ar);
    backend::check_buffers(l.interp->graph(), lp, errors);
    REQUIRE_FALSE(errors.empty());
    CHECK(errors[0].find("while a kernel still reads it in place") != std::string::npos);
  }
  SECTION("the same read scaled, so copied: the write is not an overwrite") {
    it->scale = 0.5f;  // a scaled slice is copied (slice_in_place)
    REQUIRE(backend::slice_in_place(p, *it) < 0);
    p.instrs.insert(it + 1, ar);
    backend::check_buffers(l.interp->graph(), lp, errors);
    for (const std::string& e : errors) CHECK(e.find("in place") == std::string::npos);
  }
}
