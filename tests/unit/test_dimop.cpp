// Unit tests for semantics/dimop: nnScaler's dimop annotation language.
#include <catch2/catch.hpp>

#include "semantics/dimop.h"

using namespace nns::sema;

namespace {

using Shape = std::vector<int64_t>;

InputShape tensor(Shape s) { return InputShape{true, std::move(s)}; }
InputShape scalar_arg() { return InputShape{false, {}}; }

template <typename F>
DimopError error_of(F f) {
  try {
    f();
  } catch (const DimopError& e) {
    return e;
  }
  FAIL("expected a DimopError");
  return {};
}

DimopError parse_error(const std::string& text) {
  return error_of([&] { parse_normalized(text); });
}

bool same_id(const DimId& a, const DimId& b) {
  return a.name == b.name && a.reduce == b.reduce && a.numeric == b.numeric;
}

bool same_operand(const OperandAnno& a, const OperandAnno& b) {
  if (a.non_tensor != b.non_tensor || a.dims.size() != b.dims.size()) return false;
  for (size_t d = 0; d < a.dims.size(); ++d) {
    const DimAnno &x = a.dims[d], &y = b.dims[d];
    if (x.bracketed != y.bracketed || x.star != y.star || x.unknown != y.unknown || x.ids.size() != y.ids.size())
      return false;
    for (size_t k = 0; k < x.ids.size(); ++k)
      if (!same_id(x.ids[k], y.ids[k])) return false;
  }
  return true;
}

bool same_anno(const OpAnno& a, const OpAnno& b) {
  if (a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (!same_operand(a.inputs[i], b.inputs[i])) return false;
  for (size_t o = 0; o < a.outputs.size(); ++o)
    if (!same_operand(a.outputs[o], b.outputs[o])) return false;
  return true;
}

// Compact view of a choice's effects: "S1" split dim 1, "R", "P", "N".
std::string effects(const std::vector<PartitionEffect>& es) {
  std::string s;
  for (const PartitionEffect& e : es) {
    if (!s.empty()) s += " ";
    switch (e.kind) {
      case PartitionEffect::Split: s += "S" + std::to_string(e.dim); break;
      case PartitionEffect::Replicated: s += "R"; break;
      case PartitionEffect::PartialSum: s += "P"; break;
      case PartitionEffect::NotTensor: s += "N"; break;
    }
  }
  return s;
}

}  // namespace

// ---- parsing ------------------------------------------------------------------

TEST_CASE("dimop: parses plain identifiers with reduce suffixes", "[dimop]") {
  OpAnno a = parse_annotation("m k+, k+ n -> m n");
  REQUIRE(a.inputs.size() == 2);
  REQUIRE(a.outputs.size() == 1);
  REQUIRE(a.inputs[0].dims.size() == 2);
  CHECK(a.inputs[0].dims[0].ids[0].name == "m");
  CHECK(a.inputs[0].dims[0].ids[0].reduce == Reduce::Spatial);
  CHECK(a.inputs[0].dims[1].ids[0].name == "k");
  CHECK(a.inputs[0].dims[1].ids[0].reduce == Reduce::Sum);
  CHECK(a.inputs[1].dims[1].ids[0].name == "n");
  CHECK_FALSE(a.inputs[0].dims[0].bracketed);
  CHECK(a.outputs[0].dims.size() == 2);
  CHECK(a.outputs[0].dims[1].ids[0].name == "n");
}

TEST_CASE("dimop: parses frozen identifiers, numbers and underscores", "[dimop]") {
  OpAnno a = parse_normalized("_b2 l^ 1 16 -> _b2 l^ 1");
  const auto& d = a.inputs[0].dims;
  REQUIRE(d.size() == 4);
  CHECK(d[0].ids[0].name == "_b2");
  CHECK(d[1].ids[0].reduce == Reduce::Frozen);
  CHECK(d[2].ids[0].numeric);
  CHECK(d[2].ids[0].name == "1");
  CHECK(d[2].ids[0].reduce == Reduce::Frozen);
  CHECK(d[3].ids[0].name == "16");
  CHECK(d[3].ids[0].numeric);
}

TEST_CASE("dimop: '?' as a whole operand is a non-tensor, as a dim is replicate-only", "[dimop]") {
  OpAnno a = parse_normalized("a ?, ? -> a");
  REQUIRE(a.inputs.size() == 2);
  CHECK_FALSE(a.inputs[0].non_tensor);
  REQUIRE(a.inputs[0].dims.size() == 2);
  CHECK(a.inputs[0].dims[1].unknown);
  CHECK(a.inputs[0].dims[1].ids.empty());
  CHECK(a.inputs[1].non_tensor);
  CHECK(a.inputs[1].dims.empty());
}

TEST_CASE("dimop: parses '*' and brackets", "[dimop]") {
  OpAnno a = parse_normalized("* (h t) d -> * h t d");
  const auto& d = a.inputs[0].dims;
  REQUIRE(d.size() == 3);
  CHECK(d[0].star);
  CHECK(d[0].ids.empty());
  CHECK(d[1].bracketed);
  REQUIRE(d[1].ids.size() == 2);
  CHECK(d[1].ids[0].name == "h");
  CHECK(d[1].ids[1].name == "t");
  CHECK(a.outputs[0].dims[0].star);
}

TEST_CASE("dimop: inputs may be empty", "[dimop]") {
  OpAnno a = parse_normalized("-> a b^");
  CHECK(a.inputs.empty());
  REQUIRE(a.outputs.size() == 1);
  CHECK(a.outputs[0].dims.size() == 2);
  CHECK(a.to_string() == "-> a b^");
}

TEST_CASE("dimop: whitespace is free-form", "[dimop]") {
  OpAnno a = parse_normalized("  m\tk+ ,k+   n->m n ");
  CHECK(same_anno(a, parse_normalized("m k+, k+ n -> m n")));
  CHECK(a.to_string() == "m k+, k+ n -> m n");
}

// ---- syntax errors --------------------------------------------------------------

TEST_CASE("dimop: missing or repeated '->'", "[dimop]") {
  DimopError e = parse_error("a b");
  CHECK(e.message == "missing '->' between inputs and outputs");
  CHECK(e.column == 3);
  e = parse_error("a -> b -> c");
  CHECK(e.message == "more than one '->' in annotation");
  CHECK(e.column == 7);
  e = parse_error("a -> ");
  CHECK(e.message == "missing outputs after '->'");
  CHECK(e.column == 5);
}

TEST_CASE("dimop: unbalanced, empty and nested brackets", "[dimop]") {
  DimopError e = parse_error("a (b c -> a");
  CHECK(e.message == "unclosed '('");
  CHECK(e.column == 2);
  e = parse_error("a b) -> a");
  CHECK(e.message == "unbalanced ')'");
  CHECK(e.column == 3);
  e = parse_error("a () -> a");
  CHECK(e.message == "empty bracket '()'");
  CHECK(e.column == 2);
  e = parse_error("((a b)) -> a");
  CHECK(e.message == "nested brackets are not allowed");
  CHECK(e.column == 1);
  e = parse_error("(a *) -> a");
  CHECK(e.message == "'*' cannot appear inside a bracket");
  CHECK(e.column == 3);
  e = parse_error("(a, b) -> a");
  CHECK(e.message == "unclosed '('");
  CHECK(e.column == 0);
}

TEST_CASE("dimop: bad characters and misplaced suffixes", "[dimop]") {
  DimopError e = parse_error("a % -> a");
  CHECK(e.message == "unexpected character '%' in annotation");
  CHECK(e.column == 2);
  e = parse_error("a - b -> a");
  CHECK(e.message == "unexpected character '-' in annotation");
  CHECK(e.column == 2);
  // A number may carry a suffix (nnScaler writes "8^"); it is frozen whatever it says.
  CHECK(parse_normalized("a 3+ -> a 3").inputs[0].dims[1].ids[0].reduce == Reduce::Frozen);
  e = parse_error("a ^ -> a");
  CHECK(e.message == "reduce suffix '^' must directly follow an identifier");
  CHECK(e.column == 2);
  e = parse_error("* a+ -> *+ a");
  CHECK(e.message == "reduce suffix '+' must directly follow an identifier");
  CHECK(e.column == 9);
  e = parse_error("1a -> a");
  CHECK(e.message == "identifier '1a' must start with a letter or underscore");
  CHECK(e.column == 0);
}

TEST_CASE("dimop: empty operands are errors", "[dimop]") {
  DimopError e = parse_error("a, , b -> a");
  CHECK(e.message == "empty operand (write '?' for a non-tensor value)");
  CHECK(e.column == 3);
  e = parse_error("a, -> a");
  CHECK(e.message == "empty operand (write '?' for a non-tensor value)");
  CHECK(e.column == 3);
  e = parse_error(", a -> a");
  CHECK(e.column == 0);
}

// ---- normalisation ----------------------------------------------------------------

TEST_CASE("dimop: one identifier has one reduce kind", "[dimop]") {
  DimopError e = parse_error("m k+, k n -> m n");
  CHECK(e.message == "identifier 'k' is written 'k' here but 'k+' at column 2; an identifier has one reduce kind everywhere");
  CHECK(e.column == 6);
  e = parse_error("a^ b -> a b");
  CHECK(e.message.find("identifier 'a'") != std::string::npos);
  CHECK(e.column == 8);
}

TEST_CASE("dimop: identifiers after the first in a bracket become frozen everywhere", "[dimop]") {
  OpAnno a = parse_normalized("(h t) d, t -> h t d");
  CHECK(a.inputs[0].dims[0].ids[0].reduce == Reduce::Spatial);
  CHECK(a.inputs[0].dims[0].ids[1].reduce == Reduce::Frozen);
  CHECK(a.inputs[1].dims[0].ids[0].reduce == Reduce::Frozen);
  CHECK(a.outputs[0].dims[1].ids[0].reduce == Reduce::Frozen);
  CHECK(a.outputs[0].dims[0].ids[0].reduce == Reduce::Spatial);
  // An explicit suffix on a bracket tail still counts as written.
  DimopError e = parse_error("(h t^) d -> h t d");
  CHECK(e.message.find("identifier 't'") != std::string::npos);
  CHECK(e.column == 14);
  // Written kinds must agree everywhere, tails included (nnScaler's check
  // runs before the tails are frozen).
  e = parse_error("(h t), t+ -> h");
  CHECK(e.message.find("identifier 't'") != std::string::npos);
}

TEST_CASE("dimop: normalize() on a built annotation freezes numerics", "[dimop]") {
  OpAnno a;
  OperandAnno in;
  in.dims.push_back(DimAnno{{DimId{"a", Reduce::Spatial, false}}});
  in.dims.push_back(DimAnno{{DimId{"4", Reduce::Spatial, true}}});
  a.inputs.push_back(in);
  a.outputs.push_back(in);
  OpAnno n = normalize(a);
  CHECK(n.inputs[0].dims[1].ids[0].reduce == Reduce::Frozen);
  CHECK(n.to_string() == "a 4^ -> a 4^");
}

TEST_CASE("dimop: normalize() errors point into the canonical text", "[dimop]") {
  OpAnno a = parse_annotation("m   k+ ,  k n  ->  m n");  // raw: no normalisation yet
  DimopError e = error_of([&] { normalize(a); });
  CHECK(e.message.find("identifier 'k'") != std::string::npos);
  CHECK(e.column == 6);  // in "m k+, k n -> m n"
}

TEST_CASE("dimop: '*' at most once per operand; output '*' needs an input '*'", "[dimop]") {
  DimopError e = parse_error("* a * -> a");
  CHECK(e.message == "'*' appears twice in input 0");
  CHECK(e.column == 4);
  e = parse_error("a -> * a");
  CHECK(e.message == "'*' in output 0 but no input has '*' (its dims come from the inputs)");
  CHECK(e.column == 5);
  e = parse_error("* a -> a");
  CHECK(e.message == "'*' appears in input 0 but in no output");
  CHECK(e.column == 0);
}

TEST_CASE("dimop: a spatial identifier that no output has splits into partial sums", "[dimop]") {
  // nnScaler accepts it unmarked; splitting it leaves each part a partial
  // result, which nns treats as '+' (nnScaler as replicated).
  OpAnno a = parse_normalized("a b -> a");
  CHECK(a.to_string() == "a b -> a");
  std::vector<TransformChoice> space = transform_space(bind(a, {tensor({4, 6})}));
  REQUIRE(space.size() == 2);
  CHECK(space[1].id == "b");
  CHECK(space[1].outputs[0].kind == PartitionEffect::PartialSum);
  CHECK_NOTHROW(parse_normalized("a b+ -> a"));
  CHECK_NOTHROW(parse_normalized("a b^ -> a"));
  CHECK_NOTHROW(parse_normalized("a b -> ?"));
}

TEST_CASE("dimop: '?' dims cannot be outputs", "[dimop]") {
  DimopError e = parse_error("a ? -> a ?");
  CHECK(e.message == "'?' dim in output 0: its size cannot be determined");
  CHECK(e.column == 9);
}

TEST_CASE("dimop: an identifier in two dims of one operand is accepted but not splittable", "[dimop]") {
  // nnScaler splits both dims and keeps the diagonal blocks (warning of
  // data loss); nns cannot describe that split and leaves it out.
  OpAnno a = parse_normalized("i i -> i");
  CHECK(transform_space(bind(a, {tensor({4, 4})})).empty());
  CHECK_NOTHROW(parse_normalized("i^ i^ -> i^"));
}

TEST_CASE("dimop: output-only identifiers are allowed at parse time", "[dimop]") {
  CHECK_NOTHROW(parse_normalized("a -> a b"));
  CHECK_NOTHROW(parse_normalized("a -> a c+"));
}

// ---- binding ------------------------------------------------------------------------

TEST_CASE("dimop: bind matmul solves sizes and the output shape", "[dimop]") {
  BoundAnno b = bind(parse_normalized("m k+, k+ n -> m n"), {tensor({4, 64}), tensor({64, 8})});
  CHECK(b.sizes == std::map<std::string, int64_t>{{"m", 4}, {"k", 64}, {"n", 8}});
  REQUIRE(b.output_shapes.size() == 1);
  CHECK(b.output_shapes[0] == Shape{4, 8});
  CHECK(b.anno.to_string() == "m k+, k+ n -> m n");
}

TEST_CASE("dimop: bind checks operand count and tensor-ness", "[dimop]") {
  OpAnno a = parse_normalized("m k+, k+ n -> m n");
  DimopError e = error_of([&] { bind(a, {tensor({4, 64})}); });
  CHECK(e.message == "annotation 'm k+, k+ n -> m n' expects 2 inputs but the call has 1");
  e = error_of([&] { bind(a, {tensor({4, 64}), scalar_arg()}); });
  CHECK(e.message == "input 1 is not a tensor but annotation 'k+ n' expects one");
  CHECK(e.column == 6);
  OpAnno s = parse_normalized("a, ? -> a");
  e = error_of([&] { bind(s, {tensor({4}), tensor({3})}); });
  CHECK(e.message == "input 1 is a tensor but the annotation has '?' (a non-tensor value) there");
  BoundAnno b = bind(s, {tensor({4}), scalar_arg()});
  CHECK(b.output_shapes[0] == Shape{4});
}

TEST_CASE("dimop: bind checks ranks", "[dimop]") {
  OpAnno a = parse_normalized("m k+, k+ n -> m n");
  DimopError e = error_of([&] { bind(a, {tensor({4, 64}), tensor({64, 8, 2})}); });
  CHECK(e.message == "input 1 has rank 3 but annotation 'k+ n' expects 2 dims");
  CHECK(e.column == 6);
  e = error_of([&] { bind(parse_normalized("a -> a"), {tensor({})}); });
  CHECK(e.message == "input 0 has rank 0 but annotation 'a' expects 1 dim");
}

TEST_CASE("dimop: same identifier means same size", "[dimop]") {
  OpAnno a = parse_normalized("m k+, k+ n -> m n");
  DimopError e = error_of([&] { bind(a, {tensor({4, 64}), tensor({32, 8})}); });
  CHECK(e.message == "identifier 'k' is 64 in input 0 dim 1 but 32 in input 1 dim 0");
  CHECK(e.column == 6);
}

TEST_CASE("dimop: numeric dims must equal their literal", "[dimop]") {
  OpAnno a = parse_normalized("a 1 -> a");
  CHECK(bind(a, {tensor({3, 1})}).output_shapes[0] == Shape{3});
  DimopError e = error_of([&] { bind(a, {tensor({3, 5})}); });
  CHECK(e.message == "input 0 dim 1 is 5 but annotation requires 1");
  CHECK(e.column == 2);
  BoundAnno mse = bind(parse_normalized("a+ b+, a+ b+ -> 1"), {tensor({2, 3}), tensor({2, 3})});
  CHECK(mse.output_shapes[0] == Shape{1});
  CHECK(mse.sizes.count("1") == 0);
}

TEST_CASE("dimop: given sizes must agree with the tensors", "[dimop]") {
  OpAnno a = parse_normalized("a -> a");
  DimopError e = error_of([&] { bind(a, {tensor({4})}, {{"a", 5}}); });
  CHECK(e.message == "identifier 'a' is given as 5 but 4 in input 0 dim 0");
  // Arguments the annotation does not mention are ignored.
  BoundAnno b = bind(a, {tensor({4})}, {{"window", 7}});
  CHECK(b.sizes == std::map<std::string, int64_t>{{"a", 4}});
}

TEST_CASE("dimop: '?' dims accept any size and get no identifier", "[dimop]") {
  BoundAnno b = bind(parse_normalized("a ? -> a"), {tensor({3, 7})});
  CHECK(b.sizes == std::map<std::string, int64_t>{{"a", 3}});
  CHECK(b.output_shapes[0] == Shape{3});
  CHECK_FALSE(choice_for(b, 0, 1).has_value());
}

TEST_CASE("dimop: output-only identifiers need a given size", "[dimop]") {
  OpAnno a = parse_normalized("a -> a b^");
  DimopError e = error_of([&] { bind(a, {tensor({3})}); });
  CHECK(e.message == "identifier 'b' in output 0 appears in no input and has no given size");
  CHECK(e.column == 7);
  BoundAnno b = bind(a, {tensor({3})}, {{"b", 5}});
  CHECK(b.output_shapes[0] == Shape{3, 5});
  BoundAnno c = bind(parse_normalized("-> n^"), {}, {{"n", 16}});
  CHECK(c.output_shapes[0] == Shape{16});
  CHECK(transform_space(c).empty());
}

TEST_CASE("dimop: non-tensor outputs have an empty shape", "[dimop]") {
  BoundAnno b = bind(parse_normalized("a b -> ?"), {tensor({2, 3})});
  REQUIRE(b.output_shapes.size() == 1);
  CHECK(b.output_shapes[0].empty());
}

// ---- '*' expansion --------------------------------------------------------------------

TEST_CASE("dimop: '*' expands into spatial identifiers *0, *1, ...", "[dimop]") {
  OpAnno a = parse_normalized("* k+, n k+ -> * n");
  BoundAnno b = bind(a, {tensor({2, 5, 64}), tensor({8, 64})});
  REQUIRE(b.anno.inputs[0].dims.size() == 3);
  CHECK(b.anno.inputs[0].dims[0].ids[0].name == "*0");
  CHECK(b.anno.inputs[0].dims[1].ids[0].name == "*1");
  CHECK(b.anno.inputs[0].dims[0].ids[0].reduce == Reduce::Spatial);
  CHECK_FALSE(b.anno.inputs[0].dims[0].star);
  CHECK(b.anno.outputs[0].dims[1].ids[0].name == "*1");
  CHECK(b.sizes == std::map<std::string, int64_t>{{"*0", 2}, {"*1", 5}, {"k", 64}, {"n", 8}});
  CHECK(b.output_shapes[0] == Shape{2, 5, 8});
}

TEST_CASE("dimop: '*' may stand for zero dims", "[dimop]") {
  OpAnno a = parse_normalized("* k+, n k+ -> * n");
  BoundAnno b = bind(a, {tensor({64}), tensor({8, 64})});
  CHECK(b.anno.inputs[0].dims.size() == 1);
  CHECK(b.output_shapes[0] == Shape{8});
  CHECK(b.sizes == std::map<std::string, int64_t>{{"k", 64}, {"n", 8}});
  BoundAnno s = bind(parse_normalized("* -> *"), {tensor({})});
  CHECK(s.output_shapes[0].empty());
  CHECK(transform_space(s).empty());
}

TEST_CASE("dimop: trailing '*' and '*' in the middle", "[dimop]") {
  BoundAnno b = bind(parse_normalized("b * d -> b * d"), {tensor({2, 3, 4, 5})});
  CHECK(b.anno.to_string() == "b *0 *1 d -> b *0 *1 d");
  CHECK(b.output_shapes[0] == Shape{2, 3, 4, 5});
}

TEST_CASE("dimop: every '*' covers the same dims", "[dimop]") {
  OpAnno a = parse_normalized("* a, * a -> * a");
  DimopError e = error_of([&] { bind(a, {tensor({2, 3, 4}), tensor({3, 4})}); });
  CHECK(e.message == "input 1 has rank 2 but annotation '* a' expects 3 dims ('*' covers 2 dims, fixed by input 0)");
  CHECK(e.column == 5);
  e = error_of([&] { bind(parse_normalized("* a b -> * a b"), {tensor({4})}); });
  CHECK(e.message == "input 0 has rank 1 but annotation '* a b' expects at least 2 dims");
}

TEST_CASE("dimop: bind error columns skip over the expanded '*'", "[dimop]") {
  DimopError e = error_of([&] { bind(parse_normalized("* 1 -> *"), {tensor({2, 5, 3})}); });
  CHECK(e.message == "input 0 dim 2 is 3 but annotation requires 1");
  CHECK(e.column == 2);
  e = error_of([&] { bind(parse_normalized("* a, a -> * a"), {tensor({2, 3, 4}), tensor({5})}); });
  CHECK(e.message == "identifier 'a' is 4 in input 0 dim 2 but 5 in input 1 dim 0");
  CHECK(e.column == 5);
}

// ---- brackets -------------------------------------------------------------------------------

TEST_CASE("dimop: bracket identifier from a given size", "[dimop]") {
  OpAnno a = parse_normalized("(h t) d -> h t d");
  BoundAnno b = bind(a, {tensor({12, 5})}, {{"h", 3}});
  CHECK(b.sizes == std::map<std::string, int64_t>{{"h", 3}, {"t", 4}, {"d", 5}});
  CHECK(b.output_shapes[0] == Shape{3, 4, 5});
}

TEST_CASE("dimop: bracket identifier inferred from another occurrence", "[dimop]") {
  OpAnno a = parse_normalized("(h t) d, h -> h t d");
  BoundAnno b = bind(a, {tensor({12, 5}), tensor({2})});
  CHECK(b.sizes.at("t") == 6);
  CHECK(b.output_shapes[0] == Shape{2, 6, 5});
}

TEST_CASE("dimop: brackets solve each other in any order", "[dimop]") {
  // (b c) has two unknowns until (a b) has been solved from the given a.
  OpAnno a = parse_normalized("(b c), (a b) -> a b c");
  BoundAnno b = bind(a, {tensor({12}), tensor({6})}, {{"a", 2}});
  CHECK(b.sizes == std::map<std::string, int64_t>{{"a", 2}, {"b", 3}, {"c", 4}});
  CHECK(b.output_shapes[0] == Shape{2, 3, 4});
}

TEST_CASE("dimop: a bracket with every factor known must match the dim", "[dimop]") {
  OpAnno a = parse_normalized("(h t) -> h t");
  CHECK(bind(a, {tensor({12})}, {{"h", 3}, {"t", 4}}).output_shapes[0] == Shape{3, 4});
  DimopError e = error_of([&] { bind(a, {tensor({10})}, {{"h", 3}, {"t", 4}}); });
  CHECK(e.message == "bracket (h t^) of input 0 dim 0: size 10 but h*t = 12");
  CHECK(e.column == 0);
}

TEST_CASE("dimop: two unknown identifiers in a bracket", "[dimop]") {
  OpAnno a = parse_normalized("a b (h t) -> a b h t");
  DimopError e = error_of([&] { bind(a, {tensor({2, 2, 12})}); });
  CHECK(e.message == "cannot determine size of 't' in bracket (h t^): two unknown identifiers (give one as an argument)");
  CHECK(e.column == 7);
}

TEST_CASE("dimop: an indivisible bracket", "[dimop]") {
  OpAnno a = parse_normalized("a b (h t) -> a b h t");
  DimopError e = error_of([&] { bind(a, {tensor({2, 2, 10})}, {{"h", 3}}); });
  CHECK(e.message == "bracket (h t^) of input 0 dim 2: size 10 is not divisible by h=3");
  CHECK(e.column == 4);
  OpAnno n = parse_normalized("(2 h) -> h");
  CHECK(bind(n, {tensor({8})}).sizes.at("h") == 4);
  e = error_of([&] { bind(n, {tensor({7})}); });
  CHECK(e.message == "bracket (2^ h^) of input 0 dim 0: size 7 is not divisible by 2");
}

TEST_CASE("dimop: brackets in outputs multiply their identifiers", "[dimop]") {
  BoundAnno b = bind(parse_normalized("a b c -> a (b c)"), {tensor({2, 3, 4})});
  CHECK(b.output_shapes[0] == Shape{2, 12});
}

// ---- bind_first -----------------------------------------------------------------------------

TEST_CASE("dimop: bind_first picks the first candidate that fits", "[dimop]") {
  std::vector<OpAnno> cands = {parse_normalized("a b -> a b"), parse_normalized("a -> a")};
  BoundAnno b = bind_first(cands, {tensor({7})});
  CHECK(b.anno.to_string() == "a -> a");
  CHECK(b.output_shapes[0] == Shape{7});
  BoundAnno c = bind_first(cands, {tensor({2, 3})});
  CHECK(c.anno.to_string() == "a b -> a b");
}

TEST_CASE("dimop: bind_first reports the candidate with the right operand count", "[dimop]") {
  std::vector<OpAnno> cands = {parse_normalized("a, b -> a b"), parse_normalized("a b -> a b")};
  DimopError e = error_of([&] { bind_first(cands, {tensor({1, 2, 3})}); });
  CHECK(e.message == "input 0 has rank 3 but annotation 'a b' expects 2 dims");
  e = error_of([&] { bind_first(cands, {}); });
  CHECK(e.message == "annotation 'a, b -> a b' expects 2 inputs but the call has 0");
  e = error_of([&] { bind_first({}, {}); });
  CHECK(e.message == "no annotation to bind");
}

TEST_CASE("dimop: bind_first keeps a fitting candidate's size error", "[dimop]") {
  std::vector<OpAnno> cands = {parse_normalized("a, a -> a"), parse_normalized("a, b -> a b")};
  DimopError e = error_of([&] { bind_first(cands, {tensor({2}), tensor({3})}); });
  CHECK(e.message == "identifier 'a' is 2 in input 0 dim 0 but 3 in input 1 dim 0");
}

// ---- transform space --------------------------------------------------------------------

TEST_CASE("dimop: transform space of matmul", "[dimop]") {
  BoundAnno b = bind(parse_normalized("m k+, k+ n -> m n"), {tensor({4, 64}), tensor({64, 8})});
  std::vector<TransformChoice> ts = transform_space(b);
  REQUIRE(ts.size() == 3);
  CHECK(ts[0].kind == TransformChoice::Dim);
  CHECK(ts[0].id == "m");
  CHECK(ts[0].reduce == Reduce::Spatial);
  CHECK(ts[0].size == 4);
  CHECK(effects(ts[0].inputs) == "S0 R");
  CHECK(effects(ts[0].outputs) == "S0");
  CHECK(ts[1].id == "k");
  CHECK(ts[1].reduce == Reduce::Sum);
  CHECK(ts[1].size == 64);
  CHECK(effects(ts[1].inputs) == "S1 S0");
  CHECK(effects(ts[1].outputs) == "P");
  CHECK(ts[2].id == "n");
  CHECK(ts[2].size == 8);
  CHECK(effects(ts[2].inputs) == "R S1");
  CHECK(effects(ts[2].outputs) == "S1");
}

TEST_CASE("dimop: transform space of linear with a rank-3 input", "[dimop]") {
  BoundAnno b = bind(parse_normalized("* k+, n k+ -> * n"), {tensor({2, 5, 64}), tensor({8, 64})});
  std::vector<TransformChoice> ts = transform_space(b);
  REQUIRE(ts.size() == 4);
  CHECK(ts[0].id == "*0");
  CHECK(ts[0].size == 2);
  CHECK(effects(ts[0].inputs) == "S0 R");
  CHECK(effects(ts[0].outputs) == "S0");
  CHECK(ts[1].id == "*1");
  CHECK(ts[1].size == 5);
  CHECK(effects(ts[1].inputs) == "S1 R");
  CHECK(effects(ts[1].outputs) == "S1");
  CHECK(ts[2].id == "k");
  CHECK(effects(ts[2].inputs) == "S2 S1");
  CHECK(effects(ts[2].outputs) == "P");
  CHECK(ts[3].id == "n");
  CHECK(ts[3].size == 8);
  CHECK(effects(ts[3].inputs) == "R S0");
  CHECK(effects(ts[3].outputs) == "S2");
}

TEST_CASE("dimop: transform space with hidden dims (attention-like)", "[dimop]") {
  OpAnno a = parse_normalized("b l^ d^, (h+ e) d^ -> b l^ d^");
  BoundAnno bound = bind(a, {tensor({2, 16, 32}), tensor({32, 32})}, {{"h", 4}});
  CHECK(bound.sizes.at("e") == 8);
  CHECK(bound.anno.inputs[1].dims[0].ids[1].reduce == Reduce::Frozen);
  std::vector<TransformChoice> ts = transform_space(bound);
  REQUIRE(ts.size() == 2);
  CHECK(ts[0].id == "b");
  CHECK(effects(ts[0].inputs) == "S0 R");
  CHECK(effects(ts[0].outputs) == "S0");
  CHECK(ts[1].id == "h");
  CHECK(ts[1].reduce == Reduce::Sum);
  CHECK(ts[1].size == 4);
  CHECK(effects(ts[1].inputs) == "R S0");
  CHECK(effects(ts[1].outputs) == "P");
}

TEST_CASE("dimop: spatial bracket heads split bracketed dims on both sides", "[dimop]") {
  BoundAnno b = bind(parse_normalized("(h t) d -> h t d"), {tensor({12, 5})}, {{"h", 3}});
  std::vector<TransformChoice> ts = transform_space(b);
  REQUIRE(ts.size() == 2);
  CHECK(ts[0].id == "h");
  CHECK(effects(ts[0].inputs) == "S0");
  CHECK(effects(ts[0].outputs) == "S0");
  CHECK(ts[1].id == "d");
  CHECK(effects(ts[1].inputs) == "S1");
  CHECK(effects(ts[1].outputs) == "S2");
}

TEST_CASE("dimop: non-tensor operands and outputs without the identifier", "[dimop]") {
  BoundAnno b = bind(parse_normalized("a b, ? -> a, b"), {tensor({2, 3}), scalar_arg()});
  std::vector<TransformChoice> ts = transform_space(b);
  REQUIRE(ts.size() == 2);
  CHECK(effects(ts[0].inputs) == "S0 N");
  CHECK(effects(ts[0].outputs) == "S0 R");
  CHECK(effects(ts[1].inputs) == "S1 N");
  CHECK(effects(ts[1].outputs) == "R S0");
}

TEST_CASE("dimop: ops without inputs split their outputs", "[dimop]") {
  BoundAnno b = bind(parse_normalized("-> a b"), {}, {{"a", 4}, {"b", 6}});
  std::vector<TransformChoice> ts = transform_space(b);
  REQUIRE(ts.size() == 2);
  CHECK(ts[0].describe() == "a (size 4): out0 split dim 0");
  CHECK(ts[1].describe() == "b (size 6): out0 split dim 1");
}

TEST_CASE("dimop: value split", "[dimop]") {
  BoundAnno b = bind(parse_normalized("m k+, k+ n -> m n"), {tensor({4, 64}), tensor({64, 8})});
  std::vector<TransformChoice> ts = transform_space(b, true);
  REQUIRE(ts.size() == 4);
  const TransformChoice& v = ts[3];
  CHECK(v.kind == TransformChoice::Value);
  CHECK(effects(v.inputs) == "P R");
  CHECK(effects(v.outputs) == "P");
  CHECK(v.describe() == "value: in0 partial-sum, in1 replicated, out0 partial-sum");
  BoundAnno s = bind(parse_normalized("?, a+ -> 1"), {scalar_arg(), tensor({5})});
  TransformChoice sv = transform_space(s, true).back();
  CHECK(effects(sv.inputs) == "N P");
  CHECK(effects(sv.outputs) == "P");
}

TEST_CASE("dimop: choice_for addresses an input dim", "[dimop]") {
  BoundAnno b = bind(parse_normalized("m k+, k+ n -> m n"), {tensor({4, 64}), tensor({64, 8})});
  auto k = choice_for(b, 0, 1);
  REQUIRE(k.has_value());
  CHECK(k->id == "k");
  CHECK(effects(k->inputs) == "S1 S0");
  CHECK(effects(k->outputs) == "P");
  auto n = choice_for(b, 1, 1);
  REQUIRE(n.has_value());
  CHECK(n->id == "n");
  CHECK(n->size == 8);
  CHECK_FALSE(choice_for(b, 0, 2).has_value());
  CHECK_FALSE(choice_for(b, 2, 0).has_value());
  CHECK_FALSE(choice_for(b, -1, 0).has_value());

  BoundAnno att = bind(parse_normalized("b l^ d^, (h+ e) d^ -> b l^ d^"), {tensor({2, 16, 32}), tensor({32, 32})},
                       {{"h", 4}});
  CHECK_FALSE(choice_for(att, 0, 1).has_value());  // frozen
  auto h = choice_for(att, 1, 0);
  REQUIRE(h.has_value());
  CHECK(h->id == "h");
  BoundAnno lit = bind(parse_normalized("a 1 -> a"), {tensor({3, 1})});
  CHECK_FALSE(choice_for(lit, 0, 1).has_value());  // numeric
}

TEST_CASE("dimop: describe strings", "[dimop]") {
  BoundAnno b = bind(parse_normalized("m k+, k+ n -> m n"), {tensor({4, 64}), tensor({64, 8})});
  std::vector<TransformChoice> ts = transform_space(b);
  CHECK(ts[0].describe() == "m (size 4): in0 split dim 0, in1 replicated, out0 split dim 0");
  CHECK(ts[1].describe() == "k+ (size 64): in0 split dim 1, in1 split dim 0, out0 partial-sum");
  CHECK(ts[2].describe() == "n (size 8): in0 replicated, in1 split dim 1, out0 split dim 1");
  BoundAnno s = bind(parse_normalized("a, ? -> a"), {tensor({4}), scalar_arg()});
  CHECK(transform_space(s)[0].describe() == "a (size 4): in0 split dim 0, in1 non-tensor, out0 split dim 0");
}

// ---- printing ----------------------------------------------------------------------------------

TEST_CASE("dimop: canonical text", "[dimop]") {
  CHECK(parse_normalized("m  k+,k+ n->m n").to_string() == "m k+, k+ n -> m n");
  CHECK(parse_normalized("(h t) d -> h t d").to_string() == "(h t^) d -> h t^ d");
  CHECK(parse_normalized("b l^ d^, (h+ e) d^ -> b l^ d^").to_string() == "b l^ d^, (h+ e^) d^ -> b l^ d^");
  CHECK(parse_normalized("* a ?, ? -> * a").to_string() == "* a ?, ? -> * a");
  CHECK(reduce_suffix(Reduce::Spatial) == std::string(""));
  CHECK(reduce_suffix(Reduce::Sum) == std::string("+"));
  CHECK(reduce_suffix(Reduce::Frozen) == std::string("^"));
}

TEST_CASE("dimop: to_string round-trips", "[dimop]") {
  const char* texts[] = {
      "m k+, k+ n -> m n",
      "* k+, n k+ -> * n",
      "b l^ d^, (h+ e) d^ -> b l^ d^",
      "(h t) d, t -> h t d",
      "(b c), (a b) -> a b c",
      "a ? 1, ? -> a 1, ?",
      "-> nw^ n^ m^",
      "n ic+ h^ w^, oc ic+ kh^ kw^ -> n oc oh^ ow^",
      "a b c -> a (b c)",
      "(2 h) -> h",
  };
  for (const char* t : texts) {
    INFO(t);
    OpAnno a = parse_normalized(t);
    std::string printed = a.to_string();
    OpAnno again = parse_normalized(printed);
    CHECK(same_anno(a, again));
    CHECK(again.to_string() == printed);
  }
  // Raw (unnormalised) annotations round-trip through parse_annotation too.
  OpAnno raw = parse_annotation("(h t+) -> h");
  CHECK(raw.to_string() == "(h t+) -> h");
  CHECK(same_anno(raw, parse_annotation(raw.to_string())));
}

TEST_CASE("dimop: registry-style annotations bind", "[dimop]") {
  // conv2d: output-only frozen dims with sizes given by the row.
  BoundAnno conv = bind(parse_normalized("n ic+ h^ w^, oc ic+ kh^ kw^ -> n oc oh^ ow^"),
                        {tensor({2, 3, 8, 8}), tensor({4, 3, 3, 3})}, {{"oh", 6}, {"ow", 6}});
  CHECK(conv.output_shapes[0] == Shape{2, 4, 6, 6});
  std::vector<TransformChoice> ts = transform_space(conv);
  REQUIRE(ts.size() == 3);
  CHECK(ts[0].id == "n");
  CHECK(ts[1].id == "ic");
  CHECK(effects(ts[1].outputs) == "P");
  CHECK(ts[2].id == "oc");
  CHECK(effects(ts[2].inputs) == "R S0");
  // reshape [6, 4] -> [2, 3, 4]: a bracket split into its factors.
  BoundAnno rs = bind(parse_normalized("(a b) c -> a b c"), {tensor({6, 4})}, {{"a", 2}, {"b", 3}});
  CHECK(rs.output_shapes[0] == Shape{2, 3, 4});
  CHECK(transform_space(rs).size() == 2);  // a and c; b is a bracket tail
}

// ---- nnScaler's tests/graph/function/test_dimops.py, ported ---------------------------
// Its expectations, case by case: the normalised text (test_parse_op), the
// transform space as (input, dim) of each splittable identifier's first
// occurrence (test_transform_space), and shape inference (the *_infer
// cases). Where nns differs it is said here and in docs/language.md.

namespace {
// (input index, dim) of the first input occurrence of each choice's identifier.
std::vector<std::pair<int, int>> space_positions(const OpAnno& a, const std::vector<InputShape>& shapes) {
  BoundAnno b = bind(a, shapes);
  std::vector<std::pair<int, int>> out;
  for (const TransformChoice& c : transform_space(b)) {
    bool found = false;
    for (size_t i = 0; i < b.anno.inputs.size() && !found; ++i)
      for (size_t d = 0; d < b.anno.inputs[i].dims.size() && !found; ++d)
        for (const DimId& id : b.anno.inputs[i].dims[d].ids)
          if (id.name == c.id) {
            out.push_back({static_cast<int>(i), static_cast<int>(d)});
            found = true;
            break;
          }
  }
  return out;
}
}  // namespace

TEST_CASE("dimop: nnScaler test_parse_op", "[dimop][nnscaler]") {
  CHECK(parse_normalized("a b, b c -> a c").to_string() == "a b, b c -> a c");
  CHECK(parse_normalized("a^ b, b c -> a^ c").to_string() == "a^ b, b c -> a^ c");
  CHECK(parse_normalized("a b, (b n) c -> a (n c)").to_string() == "a b, (b n^) c^ -> a (n^ c^)");
  CHECK(parse_normalized("a b, (b n) c -> a (n b c)").to_string() == "a b^, (b^ n^) c^ -> a (n^ b^ c^)");
  CHECK(parse_normalized("a b, (b n) c -> a (1 b c) n").to_string() == "a b, (b n^) c^ -> a (1^ b c^) n^");
  CHECK(parse_normalized("a b, (b n) c -> a (1 1 1 b c) n").to_string() == "a b, (b n^) c^ -> a (1^ 1^ 1^ b c^) n^");
  CHECK(parse_normalized("a b, (b n) c^ -> a (1 1 1 b) n c^").to_string() == "a b, (b n^) c^ -> a (1^ 1^ 1^ b) n^ c^");
  CHECK(parse_normalized("a b, (d^ n) c -> a (c n) d^").to_string() == "a b, (d^ n^) c -> a (c n^) d^");
  DimopError e = parse_error("a b^, b^ c -> a c^");  // nnScaler: ValueError
  CHECK(e.message.find("identifier 'c'") != std::string::npos);
}

TEST_CASE("dimop: nnScaler test_transform_space", "[dimop][nnscaler]") {
  using P = std::vector<std::pair<int, int>>;
  // Sizes that make every bracket solvable: b = 4, n = 2, c = 3, a = 5, d = 2.
  CHECK(space_positions(parse_normalized("a b, b c -> a c"), {tensor({5, 4}), tensor({4, 3})}) == P{{0, 0}, {0, 1}, {1, 1}});
  CHECK(space_positions(parse_normalized("a^ b, b c -> a^ c"), {tensor({5, 4}), tensor({4, 3})}) == P{{0, 1}, {1, 1}});
  CHECK(space_positions(parse_normalized("a b, (b n) c -> a (n c)"), {tensor({5, 4}), tensor({8, 3})}) == P{{0, 0}, {0, 1}});
  CHECK(space_positions(parse_normalized("a b, (b n) c -> a (n b c)"), {tensor({5, 4}), tensor({8, 3})}) == P{{0, 0}});
  CHECK(space_positions(parse_normalized("a b, (b n) c -> a (1 b c) n"), {tensor({5, 4}), tensor({8, 3})}) == P{{0, 0}, {0, 1}});
  CHECK(space_positions(parse_normalized("a b, (b n) c -> a (1 1 1 b c) n"), {tensor({5, 4}), tensor({8, 3})}) == P{{0, 0}, {0, 1}});
  CHECK(space_positions(parse_normalized("a b, (b n) c^ -> a (1 1 1 b) n c^"), {tensor({5, 4}), tensor({8, 3})}) == P{{0, 0}, {0, 1}});
  BoundAnno d = bind(parse_normalized("a b, (d^ n) c -> a (c n) d^"), {tensor({5, 4}), tensor({4, 3})}, {{"d", 2}});
  std::vector<TransformChoice> space = transform_space(d);
  REQUIRE(space.size() == 3);  // nnScaler: [(0, 0), (0, 1), (1, 1)]
  CHECK(space[0].id == "a");
  CHECK(space[1].id == "b");
  CHECK(space[2].id == "c");
}

TEST_CASE("dimop: nnScaler shape inference cases", "[dimop][nnscaler]") {
  // test_inner_dimensions_infer
  BoundAnno b = bind(parse_normalized("a b, (b c) -> a (b c)"), {tensor({1024, 512}), tensor({2048})});
  CHECK(b.sizes.at("c") == 4);
  CHECK(b.output_shapes[0] == Shape{1024, 2048});
  CHECK(transform_space(b).size() == 2);  // a, and b (idx 0 dim 1, as the test partitions)
  // test_anno_kwargs_infer: `number` given by the call
  BoundAnno k = bind(parse_normalized("(a number), (b number) -> (a b)"), {tensor({1024}), tensor({2048})}, {{"number", 128}});
  CHECK(k.sizes.at("a") == 8);
  CHECK(k.sizes.at("b") == 16);
  CHECK(k.output_shapes[0] == Shape{128});
  // test_constant_folding_infer
  BoundAnno f = bind(parse_normalized("(a number), (b number), (a b) -> 1"), {tensor({1024}), tensor({2048}), tensor({128})}, {{"number", 128}});
  CHECK(f.output_shapes[0] == Shape{1});
  // test_multi_dim_partition: numeric frozen dims with a suffix; L in two
  // dims of input 0, which nns leaves unsplittable (nnScaler: diagonal split).
  OpAnno m = parse_normalized("L 8^ (L 2), L E -> 8^ (L 2) E ");
  CHECK(m.to_string() == "L 8^ (L 2^), L E -> 8^ (L 2^) E");
  BoundAnno mb = bind(m, {tensor({2048, 8, 4096}), tensor({2048, 4096})});
  CHECK(mb.output_shapes[0] == Shape{8, 4096, 4096});
  std::vector<TransformChoice> ms = transform_space(mb);
  REQUIRE(ms.size() == 1);
  CHECK(ms[0].id == "E");
  // test_no_return_op
  OpAnno nr = parse_normalized("a b, b c -> ?");
  BoundAnno nb = bind(nr, {tensor({1024, 512}), tensor({512, 1024})});
  REQUIRE(nr.outputs.size() == 1);
  CHECK(nr.outputs[0].non_tensor);
  CHECK(transform_space(nb).size() == 3);
}

TEST_CASE("dimop: transform_choice gives transform_space's choice for one identifier", "[dimop]") {
  // Plan evaluation asks for one identifier per trans(); it must get
  // exactly what the whole space lists, and nothing the space leaves out
  // (frozen, numeric, not leading in its bracket, twice in an operand).
  std::vector<BoundAnno> annos{
      bind(parse_normalized("m k+, k+ n -> m n"), {tensor({4, 64}), tensor({64, 8})}),
      bind(parse_normalized("a b -> a"), {tensor({4, 6})}),
      bind(parse_normalized("i i -> i"), {tensor({4, 4})}),
      bind(parse_normalized("(h t) d^ -> h t d^"), {tensor({12, 5})}, {{"h", 3}}),
      bind(parse_normalized("* k+, n k+ -> * n"), {tensor({2, 5, 64}), tensor({8, 64})}),
      bind(parse_normalized("b 4 d -> b d 4"), {tensor({2, 4, 6})}),
  };
  int compared = 0;
  for (const BoundAnno& b : annos) {
    std::vector<TransformChoice> space = transform_space(b);
    std::vector<std::string> ids{"zz"};
    for (const OperandAnno& op : b.anno.inputs)
      for (const DimAnno& d : op.dims)
        for (const DimId& x : d.ids) ids.push_back(x.name);
    for (const std::string& id : ids) {
      const TransformChoice* listed = nullptr;
      for (const TransformChoice& c : space)
        if (c.kind == TransformChoice::Dim && c.id == id) listed = &c;
      std::optional<TransformChoice> one = transform_choice(b, id);
      INFO(b.anno.to_string() << " id " << id);
      REQUIRE(one.has_value() == (listed != nullptr));
      if (listed) CHECK(one->describe() == listed->describe());
      ++compared;
    }
  }
  CHECK(compared > 15);
  CHECK_FALSE(transform_choice(annos[3], "d").has_value());  // frozen
  CHECK_FALSE(transform_choice(annos[3], "t").has_value());  // not leading in its bracket
  CHECK_FALSE(transform_choice(annos[2], "i").has_value());  // twice in one operand
  CHECK(transform_choice(annos[0], "k")->inputs[1].dim == 0);
}
