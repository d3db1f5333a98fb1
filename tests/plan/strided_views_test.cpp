// Row-strided in-place reads (slice_in_place / slice_row_stride,
// backend/lowering/rank_program.h): Swin's coshard plan splits linears
// along their contraction, so their kernels read columns of a rank's
// activation and weight pieces; those slice-ins read the buffer in place
// with its row length as stride instead of copying. A column slice read by
// anything but a primitive linear (a composite's body, gelu), or a scaled
// one, is still copied.
#include <catch2/catch.hpp>

#include <string>

#include "backend/lowering/lower_plan.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;
using namespace nns::backend;

TEST_CASE("coshard's contraction-split linears read their column slices in place, row-strided", "[lowering]") {
  test::Elaboration e("tiny");
  REQUIRE(e.load(std::string(NNS_SOURCE_DIR) + "/examples/swin.nns"));
  sema::Plan plan;
  REQUIRE(e.evaluate_plan("coshard", 2, plan));
  LowerOptions o;
  o.only_rank = 0;
  o.elaborate = e.elaborator();
  LoweredPlan lp = lower_plan(e.interp->graph(), plan, *e.interp->train(), o);
  const RankProgram& P = lp.programs.at(0);
  int slice_ins = 0, copies = 0, strided = 0;
  for (const PInstr& in : P.instrs) {
    if (in.kind != PInstr::SliceIn) continue;
    ++slice_ins;
    const int64_t at = slice_in_place(P, in);
    const SubOpKernel& k = P.kernels[static_cast<size_t>(in.kernel)];
    const int t = k.inst.inputs[static_cast<size_t>(in.index)];
    bool linears_only = true;
    for (const std::vector<int>* list : {&k.inst.nodes, &k.bwd.nodes})
      for (int n : *list)
        for (int x : P.local.node(n).inputs)
          if (x == t) linears_only = linears_only && P.local.node(n).kind.rfind("linear", 0) == 0;
    if (at < 0) {
      // Still copied: column slices read inside the composite attention
      // kernels (the relative position bias table's head columns, the
      // projection weight's), whose bodies a structure-only lowering does
      // not see (SubOpKernel::row_strided_inputs).
      ++copies;
      CHECK_FALSE(k.row_strided_inputs);
      continue;
    }
    const int64_t stride = slice_row_stride(P, in);
    if (stride == 0) continue;
    ++strided;
    // A primitive linear's x or w, and its rows are the buffer's rows.
    CHECK(k.row_strided_inputs);
    CHECK(in.index <= 1);
    CHECK(linears_only);
    const Piece& have = P.buffers[static_cast<size_t>(in.a)].piece;
    const Piece& want = k.in_slices[static_cast<size_t>(in.index)];
    CHECK(stride == have.length.back());
    CHECK(want.length.back() < have.length.back());
    // A scaled slice is a copy, strided or not.
    PInstr scaled = in;
    scaled.scale = 0.5f;
    CHECK(slice_in_place(P, scaled) == -1);
  }
  INFO(slice_ins << " slice-ins, " << strided << " row-strided, " << copies << " copied");
  CHECK(strided > 0);
  // The backward's dy: fc1's output gradient is columns of the gathered
  // gradient buffer (each piece's n columns), read in place with its row
  // length as stride; every other slice-grad stays contiguous or copied.
  int strided_dy = 0;
  for (const PInstr& in : P.instrs) {
    if (in.kind != PInstr::SliceGrad || in.a < 0) continue;
    const int64_t at = slice_in_place(P, in), stride = slice_row_stride(P, in);
    const SubOpKernel& k = P.kernels[static_cast<size_t>(in.kernel)];
    const Piece& have = P.buffers[static_cast<size_t>(in.a)].piece;
    const Piece& want = k.out_slices[static_cast<size_t>(in.index)];
    const bool columns = want.length.back() < have.length.back();
    if (!columns) continue;
    INFO("slice-grad of " << e.interp->graph().node(k.node).name);
    REQUIRE(k.row_strided_inputs);  // in this plan only the linears split their outputs' columns
    CHECK(at >= 0);
    CHECK(stride == have.length.back());
    ++strided_dy;
    PInstr scaled = in;  // a scaled slice-grad is a copy
    scaled.scale = 0.5f;
    CHECK(slice_in_place(P, scaled) == -1);
  }
  CHECK(strided_dy == 16);  // fc1's four pieces in each of the four blocks
}

TEST_CASE("a column slice read by a non-linear is still copied", "[lowering]") {
  // gelu split in two along its columns, both parts on the one device
  // (coshard's form): each part's kernel reads half the columns of the
  // device's whole activation.
  const std::string text = R"(
config small { batch = 8  dim = 16 }
model Net(d) {
  param w: [d, d] = normal(0.2)
  fn forward(x) { return gelu(linear(x, w)) }
}
train {
  model = Net(cfg.dim)
  input x: [cfg.batch, cfg.dim] = randn()
  input y: [cfg.batch, cfg.dim] = randn()
  loss = mse(model(x), y)
  optimizer = sgd(lr = 0.1)
  steps = 1
}
plan cols(ngpus) {
  for op in select("gelu#0") {
    let parts = trans(op, idx = 0, dim = 1, num = 2)
    for i in 0..2 { assign(parts[i], 0) }
  }
  replicate(unassigned(), 0..ngpus)
}
)";
  test::TrainingModel m("strided_views", text);
  sema::Plan plan;
  REQUIRE(m.evaluate_plan("cols", 1, plan));
  LowerOptions o;
  o.only_rank = 0;
  o.elaborate = m.elaborator();
  LoweredPlan lp = lower_plan(m.interp->graph(), plan, m.spec, o);
  const RankProgram& P = lp.programs.at(0);
  int gelu_slices = 0;
  for (const PInstr& in : P.instrs) {
    if (in.kind != PInstr::SliceIn) continue;
    const SubOpKernel& k = P.kernels[static_cast<size_t>(in.kernel)];
    if (m.interp->graph().node(k.node).kind != "gelu") continue;
    ++gelu_slices;
    const Piece& have = P.buffers[static_cast<size_t>(in.a)].piece;
    REQUIRE(k.in_slices[0].length.back() < have.length.back());  // columns of the buffer
    CHECK(slice_in_place(P, in) == -1);
    CHECK(slice_row_stride(P, in) == 0);
  }
  CHECK(gelu_slices == 2);
}
