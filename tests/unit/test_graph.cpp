// Unit tests for semantics/graph: the operator graph arena, its summary
// (what `nns check` prints), number formatting and the deterministic
// --emit=graph dump.
#include <catch2/catch.hpp>

#include "semantics/graph.h"

using namespace nns::sema;

namespace {

int add_tensor(Graph& g, TensorKind kind, const std::string& name, Shape shape, DType dtype = DType::F32,
               InitSpec init = {}) {
  TensorInfo t;
  t.kind = kind;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.init = std::move(init);
  return g.add_tensor(std::move(t));
}

// An op node whose annotation is bound to its inputs' shapes; one output.
int add_op(Graph& g, const std::string& kind, const std::string& name, std::vector<int> inputs, const std::string& anno,
           int64_t macs = 0, int parent = -1, std::map<std::string, Attr> attrs = {}) {
  std::vector<InputShape> shapes;
  for (int t : inputs) shapes.push_back(InputShape{true, g.tensor(t).shape});
  OpNode n;
  n.kind = kind;
  n.name = name;
  n.inputs = inputs;
  n.attrs = std::move(attrs);
  n.anno = nns::sema::bind(parse_normalized(anno), shapes);
  n.macs = macs;
  n.parent = parent;
  n.loc = nns::front::SourceLoc{0, 3, 7, 1};
  int id = g.add_node(std::move(n));
  if (parent >= 0) g.node(parent).children.push_back(id);
  int out = add_tensor(g, TensorKind::Activation, "t", g.node(id).anno.output_shapes[0]);
  g.tensor(out).producer = id;
  g.node(id).outputs = {out};
  return id;
}

// x [4, 8] -> linear(w1 [16, 8]) -> composite "block" { gelu, mul_scalar } -> loss
Graph small_graph() {
  Graph g;
  int w1 = add_tensor(g, TensorKind::Param, "fc.w", {16, 8}, DType::F32, InitSpec{"normal", {0.02}});
  int x = add_tensor(g, TensorKind::Input, "x", {4, 8}, DType::F32, InitSpec{"randn", {1}});
  int lin = add_op(g, "linear", "fc.linear#0", {x, w1}, "* k+, n k+ -> * n", 4 * 8 * 16);
  int h = g.node(lin).outputs[0];
  OpNode comp;
  comp.kind = "block";
  comp.name = "block#0";
  comp.composite = true;
  comp.inputs = {h};
  comp.anno = nns::sema::bind(parse_normalized("a b -> a b"), {InputShape{true, {4, 16}}});
  comp.loc = nns::front::SourceLoc{0, 5, 1, 1};
  int c = g.add_node(std::move(comp));
  int gelu = add_op(g, "gelu", "block#0.gelu#0", {h}, "* -> *", 0, c);
  int scaled = add_op(g, "mul_scalar", "block#0.mul_scalar#0", {g.node(gelu).outputs[0]}, "* -> *", 0, c, {{"s", 0.5}});
  int out = g.node(scaled).outputs[0];
  g.tensor(out).producer = c;  // the composite's output, as the interpreter re-points it
  g.node(c).outputs = {out};
  add_op(g, "mean", "mean#0", {out}, "a+ b+ -> 1");
  g.loss = g.node(g.nodes().back().id).outputs[0];
  return g;
}

}  // namespace

TEST_CASE("graph: dtypes, shapes and attributes print and size as expected", "[graph]") {
  CHECK(std::string(dtype_name(DType::BF16)) == "bf16");
  CHECK(dtype_bytes(DType::F32) == 4);
  CHECK(dtype_bytes(DType::F16) == 2);
  CHECK(dtype_bytes(DType::I64) == 8);
  CHECK(dtype_bytes(DType::Bool) == 1);
  DType t = DType::F32;
  CHECK(dtype_from_name("i32", t));
  CHECK(t == DType::I32);
  CHECK_FALSE(dtype_from_name("f64", t));
  CHECK(dtype_is_float(DType::BF16));
  CHECK_FALSE(dtype_is_float(DType::I32));
  CHECK(shape_to_string({4, 32, 64}) == "[4, 32, 64]");
  CHECK(shape_to_string({}) == "[]");
  CHECK(numel({4, 32, 64}) == 8192);
  CHECK(numel({}) == 1);
  CHECK(attr_to_string(Attr{int64_t{-3}}) == "-3");
  CHECK(attr_to_string(Attr{0.5}) == "0.5");
  CHECK(attr_to_string(Attr{true}) == "true");
  CHECK(attr_to_string(Attr{std::string("x")}) == "\"x\"");
  CHECK(attr_to_string(Attr{std::vector<int64_t>{1, 2}}) == "[1, 2]");
  CHECK(InitSpec{"uniform", {-1, 1}}.to_string() == "uniform(-1, 1)");
  CHECK(InitSpec{}.to_string().empty());
}

TEST_CASE("graph: format_count uses K/M/B/T with two decimals", "[graph]") {
  CHECK(format_count(0) == "0");
  CHECK(format_count(999) == "999");
  CHECK(format_count(1000) == "1.00K");
  CHECK(format_count(1234) == "1.23K");
  CHECK(format_count(1.5e6) == "1.50M");
  CHECK(format_count(27.3e9) == "27.30B");
  CHECK(format_count(2e12) == "2.00T");
  CHECK(format_count(5e15) == "5000.00T");  // no unit past T
}

TEST_CASE("graph: format_bytes uses binary units", "[graph]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(1024 * 1024) == "1.00 MiB");
  CHECK(format_bytes(int64_t{3} << 30) == "3.00 GiB");
}

TEST_CASE("graph: arena ids, params, inputs, top-level and flattened nodes", "[graph]") {
  Graph g = small_graph();
  CHECK(g.params() == std::vector<int>{0});
  CHECK(g.inputs() == std::vector<int>{1});
  for (size_t i = 0; i < g.nodes().size(); ++i) CHECK(g.node(static_cast<int>(i)).id == static_cast<int>(i));
  // linear, block, mean at top level; the block's body is its children.
  CHECK(g.top_level_nodes() == std::vector<int>{0, 1, 4});
  CHECK(g.node(1).children == std::vector<int>{2, 3});
  // What one device runs: the composite replaced by its body.
  CHECK(g.flat_forward() == std::vector<int>{0, 2, 3, 4});
}

TEST_CASE("graph: summarize counts params, inputs, activations and macs", "[graph]") {
  Graph g = small_graph();
  GraphSummary s = summarize(g);
  CHECK(s.top_level_ops == 3);
  CHECK(s.all_ops == 5);
  CHECK(s.param_count == 16 * 8);
  CHECK(s.param_bytes == 16 * 8 * 4);
  CHECK(s.input_bytes == 4 * 8 * 4);
  CHECK(s.forward_macs == 4 * 8 * 16);
  // Top-level outputs: linear [4,16], block [4,16], mean [1]; inside the
  // block, gelu's [4,16] is live too (mul_scalar's output is the block's).
  CHECK(s.activation_bytes == (64 + 64 + 1 + 64) * 4);
}

TEST_CASE("graph: backward and optimizer nodes are outside the forward summary", "[graph]") {
  Graph g = small_graph();
  GraphSummary before = summarize(g);
  OpNode grad;
  grad.phase = Phase::Backward;
  grad.forward_of = 0;
  grad.kind = "linear_grad";
  grad.name = "fc.linear#0.grad";
  grad.macs = 1000;
  g.add_node(grad);
  OpNode step;
  step.phase = Phase::Optimizer;
  step.kind = "sgd";
  step.name = "sgd#0";
  g.add_node(step);
  GraphSummary after = summarize(g);
  CHECK(after.all_ops == before.all_ops);
  CHECK(after.forward_macs == before.forward_macs);
  CHECK(after.activation_bytes == before.activation_bytes);
  CHECK(g.flat_forward() == std::vector<int>{0, 2, 3, 4});
  std::string dump = g.dump();
  CHECK(dump.find("  # training: backward and optimizer\n") != std::string::npos);
  CHECK(dump.find("grad of op0  macs 1000") != std::string::npos);
  CHECK(dump.find("    optimizer  @") != std::string::npos);
}

TEST_CASE("graph: the dump is exact and deterministic", "[graph]") {
  Graph g = small_graph();
  std::string dump = g.dump();
  CHECK(dump ==
        "graph {\n"
        "  param %0 fc.w: f32[16, 8] = normal(0.02)\n"
        "  input %1 x: f32[4, 8] = randn(1)\n"
        "  op0 fc.linear#0 = linear(%1(x), %0(fc.w)) -> %2:f32[4, 16]\n"
        "      anno \"*0 k+, n k+ -> *0 n\"  macs 512  @3:7\n"
        "  op1 block#0 = block(%2) -> %4:f32[4, 16]\n"
        "      anno \"a b -> a b\"  @5:1\n"
        "    op2 block#0.gelu#0 = gelu(%2) -> %3:f32[4, 16]\n"
        "        anno \"*0 *1 -> *0 *1\"  @3:7\n"
        "    op3 block#0.mul_scalar#0 = mul_scalar(%3, s=0.5) -> %4:f32[4, 16]\n"
        "        anno \"*0 *1 -> *0 *1\"  @3:7\n"
        "  op4 mean#0 = mean(%4) -> %5:f32[1]\n"
        "      anno \"a+ b+ -> 1^\"  @3:7\n"
        "  loss %5\n"
        "}\n");
  CHECK(small_graph().dump() == dump);
}

TEST_CASE("graph: an op without tensor inputs prints its attributes alone", "[graph]") {
  Graph g;
  OpNode n;
  n.kind = "swin_relative_index";
  n.name = "idx#0";
  n.attrs = {{"window", int64_t{2}}};
  n.anno = nns::sema::bind(parse_normalized("-> n^"), {}, {{"n", 16}});
  g.add_node(std::move(n));
  CHECK(g.dump().find("op0 idx#0 = swin_relative_index(window=2) -> \n") != std::string::npos);
  CHECK(summarize(g).all_ops == 1);
}
