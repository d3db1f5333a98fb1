// Reading layouts off sub-ops (backend/lowering/comm_pieces.h): coshard
// pieces merged per device, the reasons a set of pieces is no layout, and
// OperandLayouts (each operand read once, by reference) agreeing with the
// free functions lowering reads the same operands with.
#include <catch2/catch.hpp>

#include "backend/lowering/comm_pieces.h"
#include "backend/lowering/comm_plan.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

sema::OperandSlice slice(std::vector<int64_t> start, std::vector<int64_t> length, int64_t vi = 0, int64_t vp = 1) {
  sema::OperandSlice s;
  s.start = std::move(start);
  s.length = std::move(length);
  s.value_index = vi;
  s.value_parts = vp;
  return s;
}

std::string read(const std::vector<std::pair<int, sema::OperandSlice>>& pieces, const sema::Shape& shape) {
  backend::Layout l;
  std::string why;
  return backend::layout_of_pieces(pieces, shape, l, why) ? l.to_string() : "error: " + why;
}

bool same_read(bool ok_a, const backend::Layout& a, const std::string& why_a, const backend::LayoutRead& b) {
  if (ok_a != b.ok) return false;
  if (!ok_a) return why_a == b.why;
  return a.devices == b.layout.devices && a.factors == b.layout.factors;
}

}  // namespace

TEST_CASE("coshard: the pieces one device holds merge before the layout is read", "[plan][pieces]") {
  const sema::Shape shape{8, 4};
  // Four quarters of dim 0, two per device: devices 0 and 1 each hold a half.
  CHECK(read({{1, slice({4, 0}, {2, 4})},
              {0, slice({0, 0}, {2, 4})},
              {0, slice({2, 0}, {2, 4})},
              {1, slice({6, 0}, {2, 4})}},
             shape) == "D0(2) over [0,1]");
  // Partial sums 0 and 1 of 4 merge into 0 of 2 (and 2, 3 into 1).
  CHECK(read({{0, slice({0, 0}, {8, 4}, 0, 4)},
              {0, slice({0, 0}, {8, 4}, 1, 4)},
              {1, slice({0, 0}, {8, 4}, 2, 4)},
              {1, slice({0, 0}, {8, 4}, 3, 4)}},
             shape) == "V(2) over [0,1]");
  // Quarters 0 and 2 are not neighbours: no single piece.
  CHECK(read({{0, slice({0, 0}, {2, 4})},
              {0, slice({4, 0}, {2, 4})},
              {1, slice({2, 0}, {2, 4})},
              {1, slice({6, 0}, {2, 4})}},
             shape) == "error: device 0 holds 2 pieces that do not merge into one");
  // A misaligned pair (quarters 1 and 2) would not be a regular split.
  CHECK(read({{0, slice({2, 0}, {2, 4})},
              {0, slice({4, 0}, {2, 4})},
              {1, slice({0, 0}, {2, 4})},
              {1, slice({6, 0}, {2, 4})}},
             shape)
            .rfind("error: ", 0) == 0);
}

TEST_CASE("pieces that are no layout say why", "[plan][pieces]") {
  const sema::Shape shape{8};
  CHECK(read({{0, slice({0}, {4})}, {1, slice({4}, {4})}, {2, slice({0}, {4})}}, shape) ==
        "error: pieces are replicated unevenly");
  CHECK(read({{0, slice({0}, {4})}, {1, slice({0}, {8})}}, shape) == "error: devices hold pieces of different sizes");
  CHECK(read({{0, slice({0}, {3})}, {1, slice({3}, {3})}}, shape) == "error: pieces do not split dim 0 evenly");
  CHECK(read({{0, slice({0}, {4})}, {1, slice({0}, {4})}}, shape) ==
        "error: the pieces do not cover the tensor exactly once per replica");
  // Replicas whose devices no mixed-radix order over [0..3] names: the
  // order is chosen (replica, then block), R outermost.
  CHECK(read({{0, slice({0}, {4})}, {1, slice({4}, {4})}, {3, slice({0}, {4})}, {2, slice({4}, {4})}}, shape) ==
        "R(2) D0(2) over [0,1,3,2]");
}

TEST_CASE("OperandLayouts reads what input_pieces, output_pieces and gradient_pieces give", "[plan][pieces]") {
  // Swin's coshard plan: several pieces per device; GPT's hybrid plan:
  // replicas and partial sums; GPT's pipeline: layers alike but for their
  // devices (read_all shares a read only between operands equal in full).
  for (auto [file, config, plan, devices] :
       {std::tuple<const char*, const char*, const char*, int>{"examples/swin.nns", "tiny", "coshard", 2},
        {"examples/gpt.nns", "tiny", "hybrid", 8},
        {"examples/gpt.nns", "tiny_pipe", "pipeline", 2}}) {
    test::PlannedElaboration e(NNS_SOURCE_DIR, file, config, plan, devices);
    const sema::Graph& g = e.interp->graph();
    backend::OperandLayouts layouts(g, e.plan), all(g, e.plan);
    // On all cores: the same reads, found by the calls below. Layers
    // repeat, so fewer reads run than there are operands.
    auto [ran, operands] = all.read_all();
    CHECK(ran > 0);
    CHECK(ran < operands);
    int compared = 0;
    for (size_t node = 0; node < e.plan.root_of_node.size(); ++node) {
      if (e.plan.root_of_node[node] < 0) continue;
      const int n = static_cast<int>(node);
      const sema::OpNode& op = g.node(n);
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const sema::Shape& shape = g.tensor(op.inputs[k]).shape;
        backend::Layout l;
        std::string why;
        bool ok = backend::layout_of_pieces(backend::input_pieces(e.plan, n, k), shape, l, why);
        CHECK(same_read(ok, l, why, layouts.input(n, k)));
        CHECK(same_read(ok, l, why, all.input(n, k)));
        why.clear();
        ok = backend::layout_of_pieces(backend::gradient_pieces(e.plan, n, k), shape, l, why);
        CHECK(same_read(ok, l, why, layouts.gradient(n, k)));
        CHECK(same_read(ok, l, why, all.gradient(n, k)));
        compared += 2;
      }
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        backend::Layout l;
        std::string why;
        bool ok =
            backend::layout_of_pieces(backend::output_pieces(e.plan, n, o), g.tensor(op.outputs[o]).shape, l, why);
        CHECK(same_read(ok, l, why, layouts.output(n, o)));
        CHECK(same_read(ok, l, why, all.output(n, o)));
        ++compared;
      }
    }
    CHECK(compared > 100);
  }
}
