// Unit tests for semantics/op_registry: the annotation generators of
// argument-dependent primitive ops, their errors and their cost rules. Each
// generated annotation is also bound to the call's shapes, as the
// interpreter does, so the output shapes it implies are checked too.
#include <catch2/catch.hpp>

#include <algorithm>

#include "semantics/op_registry.h"
#include "semantics/plan.h"

using namespace nns::sema;

namespace {

struct Generated {
  GeneratedAnno gen;
  std::string canonical;  // normalised text, as graph dumps print it
  BoundAnno bound;
};

// Runs row `op` on tensors of `shapes` with attributes `attrs` and binds the result.
Generated generate(const std::string& op, const std::vector<Shape>& shapes, std::map<std::string, Attr> attrs = {}) {
  const OpRow* row = find_op_row(op);
  REQUIRE(row != nullptr);
  REQUIRE(row->annotate != nullptr);
  OpCall call;
  call.attrs = &attrs;
  for (const Shape& s : shapes) {
    call.inputs.push_back(InputShape{true, s});
    call.dtypes.push_back(DType::F32);
  }
  Generated g;
  g.gen = row->annotate(call);
  OpAnno anno = parse_normalized(g.gen.text);
  g.canonical = anno.to_string();
  std::map<std::string, int64_t> sizes = g.gen.sizes;
  for (const auto& [k, v] : attrs)
    if (auto* i = std::get_if<int64_t>(&v)) sizes.emplace(k, *i);
  g.bound = nns::sema::bind(anno, call.inputs, sizes);
  return g;
}

// The OpArgError message a row raises for this call ("" if it raises none).
std::string arg_error(const std::string& op, const std::vector<Shape>& shapes, std::map<std::string, Attr> attrs = {}) {
  const OpRow* row = find_op_row(op);
  REQUIRE(row != nullptr);
  OpCall call;
  call.attrs = &attrs;
  for (const Shape& s : shapes) {
    call.inputs.push_back(InputShape{true, s});
    call.dtypes.push_back(DType::F32);
  }
  try {
    row->annotate(call);
  } catch (const OpArgError& e) {
    return e.message;
  }
  return "";
}

using Shapes = std::vector<Shape>;
using Catch::Matchers::Contains;

}  // namespace

// ---- the table ------------------------------------------------------------------

TEST_CASE("op registry: rows are found by name, unknown names are not", "[op_registry]") {
  CHECK(find_op_row("matmul") != nullptr);
  CHECK(find_op_row("reshape") != nullptr);
  CHECK(find_op_row("no_such_op") == nullptr);
  std::vector<std::string> names = op_row_names();
  CHECK(std::find(names.begin(), names.end(), "conv2d") != names.end());
  CHECK(std::find(names.begin(), names.end(), "layer_norm") != names.end());
  // Fixed-annotation ops take the stdlib's; generated ones have a generator.
  CHECK(find_op_row("gelu")->annotate == nullptr);
  CHECK(find_op_row("add")->annotate != nullptr);
}

TEST_CASE("op registry: value splits only for ops linear in their first input", "[op_registry]") {
  CHECK(find_op_row("matmul")->value_split);
  CHECK(find_op_row("linear")->value_split);
  CHECK(find_op_row("sum")->value_split);
  CHECK_FALSE(find_op_row("gelu")->value_split);
  CHECK_FALSE(find_op_row("softmax")->value_split);
}

TEST_CASE("op registry: dtype rules of the constant generators", "[op_registry]") {
  REQUIRE(find_op_row("swin_relative_index")->out_dtype.has_value());
  CHECK(*find_op_row("swin_relative_index")->out_dtype == DType::I32);
  CHECK_FALSE(find_op_row("add")->out_dtype.has_value());
}

TEST_CASE("op registry: OpCall attribute accessors", "[op_registry]") {
  std::map<std::string, Attr> attrs{{"n", int64_t{3}}, {"flag", true}, {"dims", std::vector<int64_t>{1, 2}}, {"s", std::string("x")}};
  OpCall c;
  c.attrs = &attrs;
  CHECK(c.int_attr("n") == 3);
  CHECK(c.int_attr("flag") == 1);
  CHECK(c.ints_attr("dims") == std::vector<int64_t>{1, 2});
  CHECK(c.ints_attr("n") == std::vector<int64_t>{3});  // an int is a 1-list
  CHECK(c.bool_attr("flag"));
  CHECK(c.bool_attr("n"));
  CHECK(c.bool_attr("missing", true));
  CHECK_FALSE(c.bool_attr("missing"));
  CHECK_THROWS_AS(c.int_attr("missing"), OpArgError);
  CHECK_THROWS_AS(c.int_attr("dims"), OpArgError);
  CHECK_THROWS_AS(c.ints_attr("s"), OpArgError);
  CHECK_THROWS_AS(c.bool_attr("s"), OpArgError);
}

// ---- broadcasting -------------------------------------------------------------------

TEST_CASE("op registry: same-shape elementwise ops share every identifier", "[op_registry]") {
  Generated g = generate("add", {{2, 3}, {2, 3}});
  CHECK(g.canonical == "a b, a b -> a b");
  CHECK(g.bound.output_shapes == Shapes{{2, 3}});
}

TEST_CASE("op registry: broadcasting aligns from the right; size-1 dims are literal 1", "[op_registry]") {
  Generated g = generate("add", {{4, 1, 3}, {5, 3}});
  CHECK(g.canonical == "a 1^ c, b c -> a b c");
  CHECK(g.bound.output_shapes == Shapes{{4, 5, 3}});

  g = generate("mul", {{3}, {5, 3}});
  CHECK(g.canonical == "b, a b -> a b");
  CHECK(g.bound.output_shapes == Shapes{{5, 3}});

  g = generate("sub", {{5, 3}, {1, 1}});
  CHECK(g.canonical == "a b, 1^ 1^ -> a b");
  CHECK(g.bound.output_shapes == Shapes{{5, 3}});

  g = generate("div", {{1, 1}, {1, 1}});
  CHECK(g.canonical == "1^ 1^, 1^ 1^ -> 1^ 1^");
  CHECK(g.bound.output_shapes == Shapes{{1, 1}});

  g = generate("add", {{2, 1}, {1, 7}});
  CHECK(g.canonical == "a 1^, 1^ b -> a b");
  CHECK(g.bound.output_shapes == Shapes{{2, 7}});
}

TEST_CASE("op registry: shapes that cannot broadcast", "[op_registry]") {
  CHECK_THAT(arg_error("add", {{2, 3}, {2, 4}}), Contains("cannot broadcast shapes [2, 3] and [2, 4]") && Contains("dim 1: 3 vs 4"));
  CHECK_THAT(arg_error("mul", {{4, 2, 3}, {5, 3}}), Contains("dim 1: 2 vs 5"));
}

// ---- reductions -----------------------------------------------------------------------

TEST_CASE("op registry: sum/mean make the reduced dim a partial sum", "[op_registry]") {
  Generated g = generate("sum", {{2, 3, 4}}, {{"dim", int64_t{1}}, {"keepdim", false}});
  CHECK(g.canonical == "a b+ c -> a c");
  CHECK(g.bound.output_shapes == Shapes{{2, 4}});

  g = generate("mean", {{2, 3, 4}}, {{"dim", int64_t{-1}}, {"keepdim", true}});
  CHECK(g.canonical == "a b c+ -> a b 1^");
  CHECK(g.bound.output_shapes == Shapes{{2, 3, 1}});

  // Reducing the only dim leaves one element.
  g = generate("sum", {{6}}, {{"dim", int64_t{0}}, {"keepdim", false}});
  CHECK(g.canonical == "a+ -> 1^");
  CHECK(g.bound.output_shapes == Shapes{{1}});

  // A size-1 reduced dim stays a literal (nothing to split).
  g = generate("sum", {{4, 1}}, {{"dim", int64_t{1}}, {"keepdim", false}});
  CHECK(g.canonical == "a 1^ -> a");

  CHECK_THAT(arg_error("sum", {{2, 3}}, {{"dim", int64_t{2}}, {"keepdim", false}}),
             Contains("dim 2 is out of range for a rank-2 tensor"));
  CHECK_THAT(arg_error("sum", {{2, 3}}, {{"dim", int64_t{-3}}, {"keepdim", false}}), Contains("out of range"));
}

TEST_CASE("op registry: amax/amin/argmax freeze the reduced dim", "[op_registry]") {
  Generated g = generate("amax", {{2, 3, 4}}, {{"dim", int64_t{1}}, {"keepdim", false}});
  CHECK(g.canonical == "a b^ c -> a c");
  CHECK(g.bound.output_shapes == Shapes{{2, 4}});

  g = generate("amin", {{2, 3, 4}}, {{"dim", int64_t{-1}}, {"keepdim", true}});
  CHECK(g.canonical == "a b c^ -> a b 1^");
  CHECK(g.bound.output_shapes == Shapes{{2, 3, 1}});

  g = generate("argmax", {{6}}, {{"dim", int64_t{0}}, {"keepdim", false}});
  CHECK(g.canonical == "a^ -> 1^");
  REQUIRE(find_op_row("argmax")->out_dtype.has_value());
  CHECK(*find_op_row("argmax")->out_dtype == DType::I32);
  CHECK_FALSE(find_op_row("amax")->value_split);  // a max of partial maxima is not a sum

  CHECK_THAT(arg_error("amax", {{2, 3}}, {{"dim", int64_t{2}}, {"keepdim", false}}), Contains("dim 2 is out of range for a rank-2 tensor"));
}

TEST_CASE("op registry: maximum, minimum and comparisons broadcast like add", "[op_registry]") {
  for (const char* op : {"maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"}) {
    INFO(op);
    Generated g = generate(op, {{4, 1, 3}, {5, 3}});
    CHECK(g.canonical == "a 1^ c, b c -> a b c");
    CHECK(g.bound.output_shapes == Shapes{{4, 5, 3}});
  }
  CHECK_THAT(arg_error("gt", {{2, 3}, {2, 4}}), Contains("cannot broadcast shapes [2, 3] and [2, 4]") && Contains("dim 1: 3 vs 4"));
  // A comparison is a float mask whatever its operands.
  REQUIRE(find_op_row("lt")->out_dtype.has_value());
  CHECK(*find_op_row("lt")->out_dtype == DType::F32);
}

// sdpa_bias: the bias splits with the leading dims it has (heads), is
// replicated along those it lacks (batch) or holds as 1.
TEST_CASE("op registry: sdpa_bias broadcasts its bias over the leading dims", "[op_registry]") {
  Generated g = generate("sdpa_bias", {{2, 3, 5, 4}, {2, 3, 4, 6}, {2, 3, 6, 7}, {3, 5, 6}});
  CHECK(g.canonical == "a b c^ d^, a b d^ e^, a b e^ f, b c^ e^ -> a b c^ f");
  CHECK(g.bound.output_shapes == Shapes{{2, 3, 5, 7}});
  g = generate("sdpa_bias", {{2, 3, 5, 4}, {2, 3, 4, 6}, {2, 3, 6, 7}, {2, 1, 5, 6}});
  CHECK(g.canonical == "a b c^ d^, a b d^ e^, a b e^ f, a 1^ c^ e^ -> a b c^ f");
  g = generate("sdpa_bias", {{5, 4}, {4, 6}, {6, 7}, {5, 6}});
  CHECK(g.canonical == "a^ b^, b^ c^, c^ d, a^ c^ -> a^ d");
  CHECK_THAT(arg_error("sdpa_bias", {{2, 3, 5, 4}, {2, 3, 4, 6}, {2, 3, 6, 7}, {4, 5, 6}}),
             Contains("bias [4, 5, 6] does not broadcast against q [2, 3, 5, 4] (dim 0: 4 vs 3)"));
  CHECK_THAT(arg_error("sdpa_bias", {{5, 4}, {4, 6}, {6, 7}, {2, 5, 6}}), Contains("must be [..., s, t]"));
}

TEST_CASE("op registry: where broadcasts all three operands", "[op_registry]") {
  Generated g = generate("where", {{4, 1}, {3}, {1, 1}});
  CHECK(g.canonical == "a 1^, b, 1^ 1^ -> a b");
  CHECK(g.bound.output_shapes == Shapes{{4, 3}});

  g = generate("where", {{2, 3}, {2, 3}, {2, 3}});
  CHECK(g.canonical == "a b, a b, a b -> a b");

  CHECK_THAT(arg_error("where", {{2, 3}, {2, 1}, {4, 3}}), Contains("cannot broadcast shapes [2, 3] and [4, 3] (dim 0: 2 vs 4)"));
  CHECK_THAT(arg_error("where", {{2, 3}, {3}}), Contains("missing tensor operand 2"));
}

TEST_CASE("op registry: which ops pass no gradient", "[op_registry]") {
  auto node = [](const std::string& kind, bool composite = false) {
    OpNode n;
    n.kind = kind;
    n.composite = composite;
    return n;
  };
  for (const char* op : {"detach", "eq", "ne", "lt", "le", "gt", "ge", "argmax", "zeros_like", "ones_like"}) {
    INFO(op);
    CHECK(find_op_row(op)->no_grad);
    CHECK_FALSE(passes_gradient(node(op), 0));
  }
  // where: to a and b, never to the condition.
  CHECK_FALSE(passes_gradient(node("where"), 0));
  CHECK(passes_gradient(node("where"), 1));
  CHECK(passes_gradient(node("where"), 2));
  for (const char* op : {"maximum", "amax", "exp", "pow_scalar", "add"}) CHECK(passes_gradient(node(op), 0));
  // A composite op is differentiated through its body, whatever its name.
  CHECK(passes_gradient(node("eq", true), 0));
}

TEST_CASE("op registry: cumsum and topk freeze their dim", "[op_registry]") {
  Generated g = generate("cumsum", {{2, 3, 4}}, {{"dim", int64_t{1}}});
  CHECK(g.canonical == "a b^ c -> a b^ c");
  CHECK(g.bound.output_shapes == Shapes{{2, 3, 4}});
  g = generate("cumsum", {{5, 1}}, {{"dim", int64_t{-2}}});
  CHECK(g.canonical == "a^ 1^ -> a^ 1^");  // numbers print with ^ (nnScaler)

  g = generate("topk", {{2, 6, 4}}, {{"dim", int64_t{1}}, {"k", int64_t{3}}});
  CHECK(g.canonical == "a xn^ c -> a tk^ c, a tk^ c");
  CHECK(g.bound.output_shapes == Shapes{{2, 3, 4}, {2, 3, 4}});
  g = generate("topk", {{6}}, {{"dim", int64_t{-1}}, {"k", int64_t{1}}});
  CHECK(g.bound.output_shapes == Shapes{{1}, {1}});
  // Two outputs of two dtypes: the values and their positions.
  CHECK(find_op_row("topk")->out_dtypes == std::vector<DType>{DType::F32, DType::I32});

  CHECK_THAT(arg_error("topk", {{2, 6}}, {{"dim", int64_t{1}}, {"k", int64_t{7}}}), Contains("k = 7 is not in [1, 6]"));
  CHECK_THAT(arg_error("topk", {{2, 6}}, {{"dim", int64_t{1}}, {"k", int64_t{0}}}), Contains("k = 0 is not in [1, 6]"));
  CHECK_THAT(arg_error("cumsum", {{2, 6}}, {{"dim", int64_t{2}}}), Contains("dim 2 is out of range"));
}

TEST_CASE("op registry: gather splits its index's dim, scatter_add does not", "[op_registry]") {
  Generated g = generate("gather", {{4, 6, 8}, {4, 3, 8}}, {{"dim", int64_t{1}}});
  CHECK(g.canonical == "a xn^ c, a ix c -> a ix c");
  CHECK(g.bound.output_shapes == Shapes{{4, 3, 8}});
  g = generate("scatter_add", {{4, 6, 8}, {4, 3, 8}, {4, 3, 8}}, {{"dim", int64_t{1}}});
  // Splitting the index dim would add x once per part.
  CHECK(g.canonical == "a xn^ c, a ix^ c, a ix^ c -> a xn^ c");
  CHECK(g.bound.output_shapes == Shapes{{4, 6, 8}});

  CHECK_THAT(arg_error("gather", {{4, 6}, {3, 2}}, {{"dim", int64_t{1}}}), Contains("must agree in every dim but dim 1"));
  CHECK_THAT(arg_error("gather", {{4, 6}, {4}}, {{"dim", int64_t{1}}}), Contains("index has rank 1 but x has rank 2"));
  CHECK_THAT(arg_error("scatter_add", {{4, 6}, {4, 2}, {4, 3}}, {{"dim", int64_t{1}}}),
             Contains("src has shape [4, 3] but index has [4, 2]"));
}

TEST_CASE("op registry: which ops read only f32 operands", "[op_registry]") {
  for (const char* op : {"exp", "add", "matmul", "sum", "where", "gt", "cumsum", "topk", "gather", "scatter_add", "softmax"}) {
    INFO(op);
    CHECK(find_op_row(op)->float_operands);
  }
  for (const char* op : {"reshape", "view", "permute", "transpose", "concat", "split", "chunk", "pad", "roll", "detach",
                         "zeros_like", "ones_like", "index_select", "to_f32", "to_i32"}) {
    INFO(op);
    CHECK_FALSE(find_op_row(op)->float_operands);
  }
  CHECK(*find_op_row("to_i32")->out_dtype == DType::I32);
  CHECK(find_op_row("to_i32")->no_grad);
  CHECK(*find_op_row("to_f32")->out_dtype == DType::F32);
  CHECK_FALSE(find_op_row("to_f32")->no_grad);
}

// ---- reshape ------------------------------------------------------------------------

TEST_CASE("op registry: reshape splitting a dim makes a bracket on the input", "[op_registry]") {
  Generated g = generate("reshape", {{2, 6, 4}}, {{"shape", std::vector<int64_t>{2, 2, 3, 4}}});
  CHECK(g.canonical == "a (b c^) d -> a b c^ d");
  CHECK(g.gen.sizes.at("b") == 2);
  CHECK(g.gen.sizes.at("c") == 3);
  CHECK(g.bound.output_shapes == Shapes{{2, 2, 3, 4}});
}

TEST_CASE("op registry: reshape merging dims makes a bracket on the output", "[op_registry]") {
  Generated g = generate("reshape", {{2, 6, 4}}, {{"shape", std::vector<int64_t>{12, 4}}});
  CHECK(g.canonical == "a b^ c -> (a b^) c");
  CHECK(g.bound.output_shapes == Shapes{{12, 4}});
}

TEST_CASE("op registry: reshape infers one -1", "[op_registry]") {
  Generated g = generate("reshape", {{2, 6, 4}}, {{"shape", std::vector<int64_t>{2, -1}}});
  CHECK(g.canonical == "a b c^ -> a (b c^)");
  CHECK(g.bound.output_shapes == Shapes{{2, 24}});

  g = generate("view", {{2, 6, 4}}, {{"shape", std::vector<int64_t>{-1}}});
  CHECK(g.bound.output_shapes == Shapes{{48}});
}

TEST_CASE("op registry: reshape keeps size-1 dims as literals", "[op_registry]") {
  Generated g = generate("reshape", {{2, 6, 4}}, {{"shape", std::vector<int64_t>{2, 1, 6, 1, 4}}});
  CHECK(g.canonical == "a b c -> a 1^ b 1^ c");
  CHECK(g.bound.output_shapes == Shapes{{2, 1, 6, 1, 4}});

  g = generate("reshape", {{1, 8}}, {{"shape", std::vector<int64_t>{8}}});
  CHECK(g.canonical == "1^ a -> a");

  g = generate("reshape", {{1}}, {{"shape", std::vector<int64_t>{1, 1}}});
  CHECK(g.canonical == "1^ -> 1^ 1^");
  CHECK(g.bound.output_shapes == Shapes{{1, 1}});
}

TEST_CASE("op registry: reshape with no clean grouping freezes the group as numbers", "[op_registry]") {
  Generated g = generate("reshape", {{2, 6, 4}}, {{"shape", std::vector<int64_t>{3, 4, 4}}});
  CHECK(g.canonical == "2^ 6^ a -> 3^ 4^ a");
  CHECK(g.bound.output_shapes == Shapes{{3, 4, 4}});
}

TEST_CASE("op registry: reshape errors", "[op_registry]") {
  CHECK_THAT(arg_error("reshape", {{4, 6}}, {{"shape", std::vector<int64_t>{5, 5}}}),
             Contains("cannot reshape [4, 6] (24 elements) to [5, 5] (25 elements)"));
  CHECK_THAT(arg_error("reshape", {{4, 6}}, {{"shape", std::vector<int64_t>{-1, -1}}}), Contains("only one dimension can be -1"));
  CHECK_THAT(arg_error("reshape", {{4, 6}}, {{"shape", std::vector<int64_t>{5, -1}}}), Contains("cannot infer -1"));
  CHECK_THAT(arg_error("reshape", {{4, 6}}, {{"shape", std::vector<int64_t>{0, 24}}}), Contains("dimension 0 is not positive"));
  CHECK_THAT(arg_error("reshape", {{4, 6}}, {{"shape", std::vector<int64_t>{-2, 12}}}), Contains("is not positive"));
  CHECK_THAT(arg_error("reshape", {}, {{"shape", std::vector<int64_t>{1}}}), Contains("missing tensor operand 0"));
  CHECK_THAT(arg_error("reshape", {{4, 6}}), Contains("missing argument 'shape'"));
}

// ---- permute / transpose / roll ---------------------------------------------------------

TEST_CASE("op registry: permute renames dims in the new order", "[op_registry]") {
  Generated g = generate("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{2, 0, 1}}});
  CHECK(g.canonical == "a b c -> c a b");
  CHECK(g.bound.output_shapes == Shapes{{4, 2, 3}});

  g = generate("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{0, -1, -2}}});
  CHECK(g.canonical == "a b c -> a c b");
  CHECK(g.bound.output_shapes == Shapes{{2, 4, 3}});
}

TEST_CASE("op registry: permute errors", "[op_registry]") {
  CHECK_THAT(arg_error("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{1, 0}}}), Contains("2 dims given for a rank-3 tensor"));
  CHECK_THAT(arg_error("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{0, 1, 1}}}), Contains("dim 1 appears twice"));
  CHECK_THAT(arg_error("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{0, 2, -1}}}), Contains("dim -1 appears twice"));
  CHECK_THAT(arg_error("permute", {{2, 3}}, {{"dims", std::vector<int64_t>{0, 2}}}), Contains("permute dim 2 is out of range for a rank-2 tensor"));
}

TEST_CASE("op registry: transpose swaps two dims, negative dims count from the end", "[op_registry]") {
  Generated g = generate("transpose", {{2, 3, 4}}, {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}});
  CHECK(g.canonical == "a b c -> c b a");
  CHECK(g.bound.output_shapes == Shapes{{4, 3, 2}});

  g = generate("transpose", {{2, 3}}, {{"dim0", int64_t{1}}, {"dim1", int64_t{1}}});
  CHECK(g.canonical == "a b -> a b");

  CHECK_THAT(arg_error("transpose", {{2, 3}}, {{"dim0", int64_t{0}}, {"dim1", int64_t{-3}}}), Contains("dim1 -3 is out of range"));
  CHECK_THAT(arg_error("transpose", {{2, 3}}, {{"dim0", int64_t{5}}, {"dim1", int64_t{0}}}), Contains("dim0 5 is out of range"));
}

TEST_CASE("op registry: roll freezes the rolled dims only", "[op_registry]") {
  Generated g = generate("roll", {{2, 8, 8, 3}}, {{"shifts", std::vector<int64_t>{-1, -1}}, {"dims", std::vector<int64_t>{1, 2}}});
  CHECK(g.canonical == "a b^ c^ d -> a b^ c^ d");
  CHECK(g.bound.output_shapes == Shapes{{2, 8, 8, 3}});

  g = generate("roll", {{4, 5}}, {{"shifts", int64_t{2}}, {"dims", int64_t{-1}}});
  CHECK(g.canonical == "a b^ -> a b^");

  CHECK_THAT(arg_error("roll", {{4, 4}}, {{"shifts", std::vector<int64_t>{1, 1}}, {"dims", std::vector<int64_t>{0}}}),
             Contains("shifts and dims must have the same length"));
  CHECK_THAT(arg_error("roll", {{4, 4}}, {{"shifts", std::vector<int64_t>{1}}, {"dims", std::vector<int64_t>{2}}}),
             Contains("roll dim 2 is out of range"));
}

// ---- concat / split / chunk -----------------------------------------------------------

TEST_CASE("op registry: concat freezes the joined dim and sums its sizes", "[op_registry]") {
  Generated g = generate("concat", {{2, 3}, {2, 5}, {2, 1}}, {{"dim", int64_t{1}}});
  CHECK(g.canonical == "a c0^, a c1^, a c2^ -> a cat^");
  CHECK(g.gen.sizes.at("cat") == 9);
  CHECK(g.bound.output_shapes == Shapes{{2, 9}});

  g = generate("concat", {{4, 3}}, {{"dim", int64_t{-2}}});
  CHECK(g.bound.output_shapes == Shapes{{4, 3}});
}

TEST_CASE("op registry: concat errors", "[op_registry]") {
  CHECK_THAT(arg_error("concat", {}, {{"dim", int64_t{0}}}), Contains("concat needs at least one tensor"));
  CHECK_THAT(arg_error("concat", {{2, 3}, {2, 3, 1}}, {{"dim", int64_t{0}}}), Contains("tensor 1 has rank 3, expected 2"));
  CHECK_THAT(arg_error("concat", {{2, 3}, {2, 4}}, {{"dim", int64_t{0}}}),
             Contains("tensor 1 has shape [2, 4] but tensor 0 has [2, 3]; only dim 0 may differ"));
  CHECK_THAT(arg_error("concat", {{2, 3}}, {{"dim", int64_t{2}}}), Contains("dim 2 is out of range"));
}

TEST_CASE("op registry: split gives one output per piece", "[op_registry]") {
  Generated g = generate("split", {{6, 2}}, {{"sizes", std::vector<int64_t>{2, 4}}, {"dim", int64_t{0}}});
  CHECK(g.canonical == "s^ b -> p0^ b, p1^ b");
  CHECK(g.bound.output_shapes == Shapes{{2, 2}, {4, 2}});

  CHECK_THAT(arg_error("split", {{6, 2}}, {{"sizes", std::vector<int64_t>{2, 3}}, {"dim", int64_t{0}}}),
             Contains("sizes add up to 5 but dim 0 is 6"));
  CHECK_THAT(arg_error("split", {{6, 2}}, {{"sizes", std::vector<int64_t>{6, 0}}, {"dim", int64_t{0}}}),
             Contains("piece size 0 is not positive"));
}

TEST_CASE("op registry: chunk splits into equal pieces", "[op_registry]") {
  Generated g = generate("chunk", {{2, 9}}, {{"chunks", int64_t{3}}, {"dim", int64_t{-1}}});
  CHECK(g.bound.output_shapes == Shapes{{2, 3}, {2, 3}, {2, 3}});
  CHECK(g.canonical == "a s^ -> a p0^, a p1^, a p2^");

  CHECK_THAT(arg_error("chunk", {{6, 2}}, {{"chunks", int64_t{4}}, {"dim", int64_t{0}}}), Contains("6 does not divide into 4 equal chunks"));
  CHECK_THAT(arg_error("chunk", {{6, 2}}, {{"chunks", int64_t{0}}, {"dim", int64_t{0}}}), Contains("does not divide"));
}

// ---- pad / conv2d / index_select / mse --------------------------------------------------

TEST_CASE("op registry: pad freezes padded dims and grows them", "[op_registry]") {
  Generated g = generate("pad", {{2, 3}}, {{"pads", std::vector<int64_t>{0, 0, 1, 2}}});
  CHECK(g.canonical == "a b^ -> a ob^");
  CHECK(g.gen.sizes.at("ob") == 6);
  CHECK(g.bound.output_shapes == Shapes{{2, 6}});

  CHECK_THAT(arg_error("pad", {{2, 3}}, {{"pads", std::vector<int64_t>{1, 1}}}), Contains("expected 4 values (before/after per dim), got 2"));
  CHECK_THAT(arg_error("pad", {{2, 3}}, {{"pads", std::vector<int64_t>{0, 0, -1, 0}}}), Contains("negative padding"));
}

TEST_CASE("op registry: conv2d output size from stride and padding", "[op_registry]") {
  Generated g = generate("conv2d", {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", int64_t{1}}, {"padding", int64_t{0}}});
  CHECK(g.canonical == "n ic+ h^ w^, oc ic+ kh^ kw^ -> n oc oh^ ow^");
  CHECK(g.bound.output_shapes == Shapes{{1, 4, 6, 6}});

  g = generate("conv2d", {{2, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", int64_t{2}}, {"padding", int64_t{1}}});
  CHECK(g.bound.output_shapes == Shapes{{2, 4, 4, 4}});  // (8 + 2 - 3) / 2 + 1

  // Patch embedding: kernel = stride.
  g = generate("conv2d_bias", {{2, 3, 8, 8}, {16, 3, 4, 4}, {16}}, {{"stride", int64_t{4}}, {"padding", int64_t{0}}});
  CHECK(g.canonical == "n ic^ h^ w^, oc ic^ kh^ kw^, oc -> n oc oh^ ow^");  // a bias forbids splitting ic
  CHECK(g.bound.output_shapes == Shapes{{2, 16, 2, 2}});
}

TEST_CASE("op registry: conv2d errors", "[op_registry]") {
  std::map<std::string, Attr> plain{{"stride", int64_t{1}}, {"padding", int64_t{0}}};
  CHECK_THAT(arg_error("conv2d", {{3, 8, 8}, {4, 3, 3, 3}}, plain), Contains("conv2d expects x [n, c, h, w]"));
  CHECK_THAT(arg_error("conv2d", {{1, 3, 4, 4}, {8, 3, 5, 5}}, plain), Contains("kernel larger than the padded input"));
  CHECK_THAT(arg_error("conv2d", {{1, 3, 8, 8}, {8, 3, 3, 3}}, {{"stride", int64_t{0}}, {"padding", int64_t{0}}}),
             Contains("stride must be positive"));
  CHECK_THAT(arg_error("conv2d", {{1, 3, 8, 8}, {8, 3, 3, 3}}, {{"stride", int64_t{1}}, {"padding", int64_t{-1}}}),
             Contains("padding non-negative"));
}

TEST_CASE("op registry: max_pool2d / avg_pool2d split images and channels, freeze the map", "[op_registry]") {
  for (const char* op : {"max_pool2d", "avg_pool2d"}) {
    INFO(op);
    // ResNet's stem pooling: kernel 3, stride 2, padding 1 on 112x112.
    Generated g = generate(op, {{2, 64, 112, 112}}, {{"kernel", int64_t{3}}, {"stride", int64_t{2}}, {"padding", int64_t{1}}});
    CHECK(g.canonical == "n c h^ w^ -> n c oh^ ow^");
    CHECK(g.bound.output_shapes == Shapes{{2, 64, 56, 56}});  // (112 + 2 - 3) / 2 + 1
    g = generate(op, {{1, 3, 7, 5}}, {{"kernel", int64_t{2}}, {"stride", int64_t{2}}, {"padding", int64_t{0}}});
    CHECK(g.bound.output_shapes == Shapes{{1, 3, 3, 2}});  // the last row / column left over is dropped

    std::map<std::string, Attr> k3{{"kernel", int64_t{3}}, {"stride", int64_t{1}}, {"padding", int64_t{0}}};
    CHECK_THAT(arg_error(op, {{3, 8, 8}}, k3), Contains("pooling expects x [n, c, h, w]"));
    CHECK_THAT(arg_error(op, {{1, 1, 2, 2}}, k3), Contains("kernel larger than the padded input"));
    CHECK_THAT(arg_error(op, {{1, 1, 8, 8}}, {{"kernel", int64_t{3}}, {"stride", int64_t{0}}, {"padding", int64_t{0}}}),
               Contains("kernel and stride must be positive"));
    CHECK_THAT(arg_error(op, {{1, 1, 8, 8}}, {{"kernel", int64_t{3}}, {"stride", int64_t{1}}, {"padding", int64_t{2}}}),
               Contains("padding 2 exceeds half the kernel 3"));
  }
}

TEST_CASE("op registry: index_select gathers rows of a table", "[op_registry]") {
  Generated g = generate("index_select", {{9, 2}, {4, 4}});
  CHECK(g.canonical == "t^ r1, i0 i1 -> i0 i1 r1");
  CHECK(g.bound.output_shapes == Shapes{{4, 4, 2}});

  g = generate("index_select", {{7}, {3}});
  CHECK(g.bound.output_shapes == Shapes{{3}});
}

TEST_CASE("op registry: mse reduces every dim to one element", "[op_registry]") {
  Generated g = generate("mse", {{4, 8}, {4, 8}});
  CHECK(g.canonical == "a+ b+, a+ b+ -> 1^");
  CHECK(g.bound.output_shapes == Shapes{{1}});
}

TEST_CASE("op registry: constant generators size their outputs from arguments", "[op_registry]") {
  Generated g = generate("swin_relative_index", {}, {{"window", int64_t{3}}});
  CHECK(g.bound.output_shapes == Shapes{{81}});

  g = generate("swin_shift_mask", {}, {{"height", int64_t{8}}, {"width", int64_t{8}}, {"window", int64_t{4}}, {"shift", int64_t{2}}});
  CHECK(g.bound.output_shapes == Shapes{{4, 16, 16}});

  CHECK_THAT(arg_error("swin_relative_index", {}, {{"window", int64_t{0}}}), Contains("window must be positive"));
  CHECK_THAT(arg_error("swin_shift_mask", {}, {{"height", int64_t{10}}, {"width", int64_t{10}}, {"window", int64_t{4}}, {"shift", int64_t{2}}}),
             Contains("window 4 must divide the resolution 10x10"));

  auto bucket_attrs = [](int64_t q, int64_t k, int64_t buckets, int64_t dist, bool bidir) {
    return std::map<std::string, Attr>{{"qlen", q}, {"klen", k}, {"buckets", buckets}, {"max_distance", dist}, {"bidirectional", bidir}};
  };
  g = (generate)("t5_relative_bucket", {}, bucket_attrs(7, 300, 32, 128, true));
  CHECK(g.bound.output_shapes == Shapes{{7, 300}});
  CHECK_THAT((arg_error)("t5_relative_bucket", {}, bucket_attrs(4, 4, 33, 128, true)), Contains("buckets must be at least 4 and even"));
  CHECK_THAT((arg_error)("t5_relative_bucket", {}, bucket_attrs(4, 4, 32, 16, false)), Contains("max_distance must exceed the 16 exact buckets"));
  CHECK_THAT((arg_error)("t5_relative_bucket", {}, bucket_attrs(0, 4, 32, 128, false)), Contains("qlen and klen must be positive"));
}

TEST_CASE("op registry: full and arange size their outputs from their arguments", "[op_registry]") {
  Generated g = generate("full", {}, {{"shape", std::vector<int64_t>{2, 1, 3}}, {"value", 0.5}});
  CHECK(g.canonical == "-> a^ 1^ c^");
  CHECK(g.bound.output_shapes == Shapes{{2, 1, 3}});
  REQUIRE(find_op_row("full")->out_dtype.has_value());
  CHECK(*find_op_row("full")->out_dtype == DType::F32);

  CHECK_THAT(arg_error("full", {}, {{"shape", std::vector<int64_t>{}}, {"value", 0.5}}), Contains("the shape needs at least one dim"));
  CHECK_THAT(arg_error("full", {}, {{"shape", std::vector<int64_t>{2, 0}}, {"value", 0.5}}), Contains("dim 0 of the shape is not positive"));
  g = generate("arange", {}, {{"n", int64_t{5}}});
  CHECK(g.canonical == "-> n^");
  CHECK(g.bound.output_shapes == Shapes{{5}});
  CHECK_THAT(arg_error("arange", {}, {{"n", int64_t{0}}}), Contains("n must be positive (got 0)"));
}

// ---- costs -----------------------------------------------------------------------------

TEST_CASE("op registry: matmul-like macs are the product of all identifiers", "[op_registry]") {
  const OpRow* linear = find_op_row("linear");
  REQUIRE(linear->macs != nullptr);
  OpAnno anno = parse_normalized("* k+, n k+ -> * n");
  BoundAnno b = nns::sema::bind(anno, {InputShape{true, {2, 3, 8}}, InputShape{true, {16, 8}}});
  OpCall call;
  CHECK(linear->macs(b, call) == 2 * 3 * 8 * 16);

  CHECK(find_op_row("gelu")->macs == nullptr);
}

TEST_CASE("op registry: conv2d macs are output elements times the kernel volume", "[op_registry]") {
  Generated g = generate("conv2d", {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", int64_t{1}}, {"padding", int64_t{0}}});
  std::map<std::string, Attr> attrs{{"stride", int64_t{1}}, {"padding", int64_t{0}}};
  OpCall call;
  call.attrs = &attrs;
  call.inputs = {InputShape{true, {1, 3, 8, 8}}, InputShape{true, {4, 3, 3, 3}}};
  CHECK(find_op_row("conv2d")->macs(g.bound, call) == (1 * 4 * 6 * 6) * (3 * 3 * 3));
}

// ---- slice facts (per-rank lowering) ---------------------------------------------------

namespace {

// One top-level node `kind` of a graph, on inputs of `shapes` (input `ints`
// is int32), with one output of `out`.
struct SliceFixture {
  Graph g;
  int node = -1;
  SliceFixture(const std::string& kind, const std::vector<Shape>& shapes, const Shape& out, std::map<std::string, Attr> attrs = {},
               bool composite = false, int ints = -1) {
    OpNode n;
    n.kind = kind;
    n.name = kind + "#0";
    n.composite = composite;
    n.attrs = std::move(attrs);
    for (size_t i = 0; i < shapes.size(); ++i) {
      TensorInfo t;
      t.kind = TensorKind::Input;
      t.name = "in" + std::to_string(i);
      t.shape = shapes[i];
      t.dtype = static_cast<int>(i) == ints ? DType::I32 : DType::F32;
      n.inputs.push_back(g.add_tensor(t));
    }
    TensorInfo o;
    o.shape = out;
    n.outputs.push_back(g.add_tensor(o));
    node = g.add_node(n);
  }
  const OpNode& whole() const { return g.node(node); }
  // The whole op with input `i` cut to [start, start + length) per dim.
  SubOp slice(size_t i, const Shape& start, const Shape& length) const {
    SubOp s = whole_op(g, node);
    s.inputs[i].start = start;
    s.inputs[i].length = length;
    return s;
  }
  // The primitive node a sub-op runs (for a primitive op: the op itself).
  OpNode local(const std::string& kind = "") const {
    OpNode n = whole();
    if (!kind.empty()) n.kind = kind;
    n.composite = false;
    return n;
  }
};

bool has_attr(const OpNode& n, const std::string& k) { return n.attrs.count(k) > 0; }
int64_t int_attr(const OpNode& n, const std::string& k) { return std::get<int64_t>(n.attrs.at(k)); }

}  // namespace

TEST_CASE("op registry: exactly dropout, embedding and index_select have slice attrs; losses and mean a share", "[op_registry]") {
  for (const std::string& name : op_row_names()) {
    const OpRow* r = find_op_row(name);
    bool attrs = name == "dropout" || name == "embedding" || name == "index_select";
    bool share = name == "cross_entropy" || name == "mse" || name == "mean";
    INFO(name);
    CHECK((r->slice_attrs != nullptr) == attrs);
    CHECK((r->slice_share != nullptr) == share);
  }
}

TEST_CASE("op registry: an active dropout split along dim 0 gets the element offset of its slice", "[op_registry]") {
  SliceFixture f("dropout", {{8, 3, 5}}, {8, 3, 5}, {{"p", 0.1}, {"seed", int64_t{7}}});
  OpNode op = f.local();
  apply_slice_position(f.g, f.whole(), f.slice(0, {6, 0, 0}, {2, 3, 5}), op);
  CHECK(int_attr(op, "element_offset") == 6 * 15);
  CHECK(op.attrs.size() == 3);  // p, seed and the offset: nothing else touched
  // A slice of length 0 along dim 0 divides by 1, not by 0.
  OpNode empty = f.local();
  apply_slice_position(f.g, f.whole(), f.slice(0, {4, 0, 0}, {0, 3, 5}), empty);
  CHECK(int_attr(empty, "element_offset") == 0);
}

TEST_CASE("op registry: dropout needs no offset when inactive or whole", "[op_registry]") {
  SliceFixture off("dropout", {{8, 4}}, {8, 4}, {{"p", 0.0}});
  OpNode op = off.local();
  apply_slice_position(off.g, off.whole(), off.slice(0, {0, 2}, {8, 2}), op);  // p = 0: even a dim-1 split is fine
  CHECK_FALSE(has_attr(op, "element_offset"));
  SliceFixture int_p("dropout", {{8, 4}}, {8, 4}, {{"p", int64_t{1}}});  // p must be a float > 0 to count
  op = int_p.local();
  apply_slice_position(int_p.g, int_p.whole(), int_p.slice(0, {0, 2}, {8, 2}), op);
  CHECK_FALSE(has_attr(op, "element_offset"));
  SliceFixture no_p("dropout", {{8, 4}}, {8, 4});
  op = no_p.local();
  apply_slice_position(no_p.g, no_p.whole(), no_p.slice(0, {0, 2}, {8, 2}), op);
  CHECK_FALSE(has_attr(op, "element_offset"));
  SliceFixture on("dropout", {{8, 4}}, {8, 4}, {{"p", 0.5}});
  op = on.local();
  apply_slice_position(on.g, on.whole(), whole_op(on.g, on.node), op);
  CHECK_FALSE(has_attr(op, "element_offset"));
}

TEST_CASE("op registry: a dropout slice that is not contiguous cannot run", "[op_registry]") {
  SliceFixture f("dropout", {{8, 4}}, {8, 4}, {{"p", 0.5}});
  OpNode op = f.local();
  CHECK_THROWS_WITH(apply_slice_position(f.g, f.whole(), f.slice(0, {0, 2}, {8, 2}), op),
                    "dropout#0: dropout split other than along its first dim is not supported yet");
  CHECK_THROWS_AS(apply_slice_position(f.g, f.whole(), f.slice(0, {4, 2}, {4, 2}), op), std::runtime_error);
  CHECK_FALSE(has_attr(op, "element_offset"));
}

TEST_CASE("op registry: an active dropout inside a split composite op cannot run", "[op_registry]") {
  // The body's dropout sees the composite's slice, even split along dim 0
  // (the composite's input 0 need not be the dropout's input).
  SliceFixture f("block", {{8, 4}}, {8, 4}, {}, /*composite=*/true);
  OpNode op = f.local("dropout");
  op.attrs["p"] = 0.1;
  CHECK_THROWS_WITH(apply_slice_position(f.g, f.whole(), f.slice(0, {4, 0}, {4, 4}), op),
                    "block#0: dropout split other than along its first dim is not supported yet");
  // The whole composite op runs as is.
  apply_slice_position(f.g, f.whole(), whole_op(f.g, f.node), op);
  CHECK_FALSE(has_attr(op, "element_offset"));
}

TEST_CASE("op registry: a primitive embedding learns which vocab rows its table slice holds", "[op_registry]") {
  // embedding(ids, table): the table is input 1.
  SliceFixture f("embedding", {{2, 5}, {13, 6}}, {2, 5, 6}, {}, false, 0);
  OpNode op = f.local();
  apply_slice_position(f.g, f.whole(), f.slice(1, {5, 0}, {5, 6}), op);
  CHECK(int_attr(op, "vocab_offset") == 5);
  CHECK(int_attr(op, "vocab_size") == 13);
  // Set for the whole op too (offset 0, the full table).
  OpNode w = f.local();
  apply_slice_position(f.g, f.whole(), whole_op(f.g, f.node), w);
  CHECK(int_attr(w, "vocab_offset") == 0);
  CHECK(int_attr(w, "vocab_size") == 13);
  // A batch split leaves the table whole.
  OpNode b = f.local();
  apply_slice_position(f.g, f.whole(), f.slice(0, {1, 0}, {1, 5}), b);
  CHECK(int_attr(b, "vocab_offset") == 0);
  CHECK(int_attr(b, "vocab_size") == 13);
}

TEST_CASE("op registry: a primitive index_select's table is input 0", "[op_registry]") {
  SliceFixture f("index_select", {{12, 3}, {7}}, {7, 3}, {}, false, 1);
  OpNode op = f.local();
  apply_slice_position(f.g, f.whole(), f.slice(0, {8, 0}, {4, 3}), op);
  CHECK(int_attr(op, "vocab_offset") == 8);
  CHECK(int_attr(op, "vocab_size") == 12);
}

TEST_CASE("op registry: gathers inside a composite op get no vocab attrs", "[op_registry]") {
  SliceFixture f("embed_block", {{2, 5}, {13, 6}}, {2, 5, 6}, {}, /*composite=*/true, 0);
  for (const char* kind : {"embedding", "index_select"}) {
    OpNode op = f.local(kind);
    apply_slice_position(f.g, f.whole(), f.slice(1, {5, 0}, {5, 6}), op);
    CHECK_FALSE(has_attr(op, "vocab_offset"));
    CHECK_FALSE(has_attr(op, "vocab_size"));
  }
}

TEST_CASE("op registry: ops without a slice rule are left unchanged", "[op_registry]") {
  SliceFixture f("softmax", {{8, 4}}, {8, 4});
  OpNode op = f.local();
  apply_slice_position(f.g, f.whole(), f.slice(0, {0, 0}, {4, 4}), op);
  CHECK(op.attrs.empty());
  OpNode user = f.local("not_a_row");
  apply_slice_position(f.g, f.whole(), f.slice(0, {0, 0}, {4, 4}), user);
  CHECK(user.attrs.empty());
}

TEST_CASE("op registry: a loss slice's share is its fraction of input 0's elements", "[op_registry]") {
  SliceFixture ce("cross_entropy", {{8, 10}, {8}}, {1}, {}, false, 1);
  CHECK(slice_loss_share(ce.g, ce.whole(), ce.slice(0, {2, 0}, {2, 10})) == 0.25f);
  CHECK(slice_loss_share(ce.g, ce.whole(), whole_op(ce.g, ce.node)) == 1.f);
  SliceFixture mse("mse", {{6, 4}, {6, 4}}, {1});
  SubOp s = mse.slice(0, {0, 0}, {2, 4});
  s.inputs[1].length = {2, 4};
  CHECK(slice_loss_share(mse.g, mse.whole(), s) == static_cast<float>(8.0 / 24.0));
  // Computed in double, rounded once.
  SliceFixture odd("mse", {{7, 3}, {7, 3}}, {1});
  CHECK(slice_loss_share(odd.g, odd.whole(), odd.slice(0, {0, 0}, {1, 3})) == static_cast<float>(3.0 / 21.0));
}

TEST_CASE("op registry: a mean slice's share is its fraction of the reduced dim", "[op_registry]") {
  SliceFixture last("mean", {{4, 6, 10}}, {4, 6});  // no dim attr: the last dim
  CHECK(slice_loss_share(last.g, last.whole(), last.slice(0, {0, 0, 5}, {4, 6, 5})) == 0.5f);
  CHECK(slice_loss_share(last.g, last.whole(), last.slice(0, {2, 0, 0}, {2, 6, 10})) == 1.f);  // reduced dim whole
  SliceFixture neg("mean", {{4, 6, 10}}, {4, 10}, {{"dim", int64_t{-2}}});
  CHECK(slice_loss_share(neg.g, neg.whole(), neg.slice(0, {0, 2, 0}, {4, 2, 10})) == static_cast<float>(2.0 / 6.0));
  SliceFixture pos("mean", {{4, 6, 10}}, {6, 10}, {{"dim", int64_t{0}}});
  CHECK(slice_loss_share(pos.g, pos.whole(), pos.slice(0, {3, 0, 0}, {1, 6, 10})) == 0.25f);
}

TEST_CASE("op registry: no share for other ops, composite ops and whole slices", "[op_registry]") {
  SliceFixture sum("sum", {{4, 6}}, {4}, {{"dim", int64_t{1}}});
  CHECK(slice_loss_share(sum.g, sum.whole(), sum.slice(0, {0, 0}, {4, 3})) == 1.f);
  SliceFixture comp("mean", {{4, 6}}, {4}, {}, /*composite=*/true);  // a composite op named like a row
  CHECK(slice_loss_share(comp.g, comp.whole(), comp.slice(0, {0, 0}, {4, 3})) == 1.f);
  SliceFixture user("my_loss", {{4, 6}}, {1});
  CHECK(slice_loss_share(user.g, user.whole(), user.slice(0, {0, 0}, {2, 6})) == 1.f);
  // Whole means every input complete: a slice of input 1 alone still counts.
  SliceFixture ce("cross_entropy", {{8, 10}, {8}}, {1}, {}, false, 1);
  SubOp s = whole_op(ce.g, ce.node);
  s.inputs[1].start = {4};
  s.inputs[1].length = {4};
  CHECK(slice_loss_share(ce.g, ce.whole(), s) == 1.f);  // input 0 complete: 80 / 80
}
