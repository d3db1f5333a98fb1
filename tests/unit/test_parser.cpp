// Unit tests for frontend/: parsing .nns text into the AST (node kinds,
// operator precedence, locations), syntax-error recovery and reporting, the
// token and AST dumps, and diagnostic formatting.
#include <catch2/catch.hpp>

#include "frontend/ast_printer.h"
#include "frontend/diagnostics.h"
#include "frontend/parser.h"

using namespace nns::front;

namespace {

// One parse of `text` as file "t.nns": the program, the diagnostics and
// their formatted text.
struct Parsed {
  SourceManager sources;
  DiagnosticEngine diags{sources};
  std::unique_ptr<Program> program;
  int file = -1;

  explicit Parsed(const std::string& text) {
    file = sources.add("t.nns", text);
    program = parse_program(sources, file, diags);
  }
  std::string errors() const {
    std::string s;
    for (const Diagnostic& d : diags.all()) s += diags.format(d, false);
    return s;
  }
  const Item& item(size_t i) const {
    REQUIRE(i < program->items.size());
    return program->items[i];
  }
  // The i-th item as a statement.
  const Stmt& stmt(size_t i) const {
    auto* s = std::get_if<StmtPtr>(&item(i).node);
    REQUIRE(s != nullptr);
    return **s;
  }
  // The value of `let x = <expr>` at item i.
  const Expr& let_value(size_t i) const {
    auto* let = std::get_if<LetStmt>(&stmt(i).node);
    REQUIRE(let != nullptr);
    return *let->value;
  }
};

template <class T>
const T& as(const Expr& e) {
  auto* n = std::get_if<T>(&e.node);
  REQUIRE(n != nullptr);
  return *n;
}

std::string text_of(const Expr& e) { return expr_to_string(e); }

}  // namespace

// ---- declarations -----------------------------------------------------------------

TEST_CASE("parser: every kind of top-level item", "[parser]") {
  Parsed p(R"(import "nn"
import "./layers.nns" as L
config small { batch = 4  dim = batch * 2 }
config big extends small { dim = 64; }
op mm(a, b) : "m k+, k+ n -> m n"
op two(x, h: int = 2) : "a -> a" | "a b -> a b" { return x }
fn helper(a, b = 3) { return a + b }
model M(d) { param w: [d, d] = normal(0.02) }
plan dp(n) { }
train run { steps = 3 }
let z = 1
)");
  REQUIRE(p.diags.error_count() == 0);
  REQUIRE(p.program->items.size() == 11);

  auto& imp = std::get<ImportDecl>(p.item(0).node);
  CHECK(imp.path == "nn");
  CHECK(imp.alias.empty());
  auto& imp2 = std::get<ImportDecl>(p.item(1).node);
  CHECK(imp2.path == "./layers.nns");
  CHECK(imp2.alias == "L");

  auto& small = std::get<ConfigDecl>(p.item(2).node);
  CHECK(small.name == "small");
  CHECK(small.base.empty());
  REQUIRE(small.entries.size() == 2);
  CHECK(small.entries[1].name == "dim");
  CHECK(text_of(*small.entries[1].value) == "(batch * 2)");
  auto& big = std::get<ConfigDecl>(p.item(3).node);
  CHECK(big.base == "small");
  CHECK(big.base_loc.line == 4);
  CHECK(big.base_loc.col == 20);

  auto& mm = std::get<OpDecl>(p.item(4).node);
  CHECK(mm.fn->name == "mm");
  CHECK_FALSE(mm.has_body);
  REQUIRE(mm.annotations.size() == 1);
  CHECK(mm.annotations[0].text == "m k+, k+ n -> m n");
  CHECK(mm.annotations[0].loc.col == 15);  // the string literal's opening quote

  auto& two = std::get<OpDecl>(p.item(5).node);
  CHECK(two.has_body);
  CHECK(two.annotations.size() == 2);
  REQUIRE(two.fn->params.size() == 2);
  CHECK(two.fn->params[1].name == "h");
  CHECK(two.fn->params[1].type == "int");
  REQUIRE(two.fn->params[1].default_value);
  CHECK(text_of(*two.fn->params[1].default_value) == "2");
  CHECK(two.fn->body.size() == 1);

  auto& helper = std::get<FnStmt>(p.item(6).node);
  CHECK(helper.fn->name == "helper");
  CHECK(helper.fn->params.size() == 2);

  auto& model = std::get<ModelDecl>(p.item(7).node);
  CHECK(model.name == "M");
  REQUIRE(model.body.size() == 1);
  auto& w = std::get<TensorDecl>(model.body[0]->node);
  CHECK(w.is_param);
  CHECK(w.name == "w");
  CHECK(text_of(*w.shape) == "[d, d]");
  CHECK(text_of(*w.init) == "normal(0.02)");
  CHECK(w.dtype.empty());

  auto& plan = std::get<PlanDecl>(p.item(8).node);
  CHECK(plan.fn->name == "dp");
  auto& train = std::get<TrainDecl>(p.item(9).node);
  CHECK(train.name == "run");
  CHECK(train.body.size() == 1);
  CHECK(std::holds_alternative<LetStmt>(p.stmt(10).node));
}

TEST_CASE("parser: tensor declarations with dtype and without initializer", "[parser]") {
  Parsed p("train {\n  input ids: [4, 8] i32 = tokens(100)\n  input x: [2]\n}\n");
  REQUIRE(p.diags.error_count() == 0);
  auto& train = std::get<TrainDecl>(p.item(0).node);
  REQUIRE(train.body.size() == 2);
  auto& ids = std::get<TensorDecl>(train.body[0]->node);
  CHECK_FALSE(ids.is_param);
  CHECK(ids.dtype == "i32");
  CHECK(ids.dtype_loc.line == 2);
  CHECK(ids.dtype_loc.col == 21);
  CHECK(train.body[0]->loc.col == 9);  // a tensor declaration points at its name
  auto& x = std::get<TensorDecl>(train.body[1]->node);
  CHECK(x.init == nullptr);
}

TEST_CASE("parser: keywords stay usable as names", "[parser]") {
  Parsed p("for op in select(\"*\") { let model = op }\nlet input = 1\nlet train = input + 1\n");
  REQUIRE(p.diags.error_count() == 0);
  auto& f = std::get<ForStmt>(p.stmt(0).node);
  CHECK(f.var == "op");
  CHECK(std::get<LetStmt>(f.body[0]->node).name == "model");
  CHECK(text_of(p.let_value(2)) == "(input + 1)");
}

TEST_CASE("parser: a declaration keyword before a name declares; elsewhere it is a name", "[parser]") {
  Parsed p(R"(let op = 1
let x = op
model M(d) { model = d }
op = op + 1
op f(a) : "n -> n"
plan P(n) { for op in select("*") { let plan = op } }
let train = true
if train { let weights = 2 } else { let config = 3 }
train { model = M(2) }
model
)");
  REQUIRE(p.diags.error_count() == 0);
  REQUIRE(p.program->items.size() == 10);
  CHECK(text_of(p.let_value(1)) == "op");
  auto& m = std::get<ModelDecl>(p.item(2).node);
  CHECK(m.name == "M");
  CHECK(std::holds_alternative<AssignStmt>(m.body[0]->node));
  CHECK(std::holds_alternative<AssignStmt>(p.stmt(3).node));
  CHECK_FALSE(std::get<OpDecl>(p.item(4).node).has_body);
  CHECK(std::holds_alternative<PlanDecl>(p.item(5).node));
  CHECK(std::holds_alternative<IfStmt>(p.stmt(7).node));
  CHECK(std::get<TrainDecl>(p.item(8).node).body.size() == 1);
  CHECK(text_of(*std::get<ExprStmt>(p.stmt(9).node).expr) == "model");  // a bare name at the end (the REPL's input)

  // Where the old grammar's tie went to the declaration, a name after the
  // keyword is always one now: "model" then "x = 1" is an error.
  Parsed bad("model\nx = 1\n");
  CHECK(bad.errors().find("2:3: error: unexpected '='; expected '('") != std::string::npos);
}

TEST_CASE("parser: an op's body is the block right after its head", "[parser]") {
  Parsed p("op f(x) : \"n -> n\" { return x }\nop g(x) : \"n -> n\"; { let a = 1 }\nop h(x)\n{}\n");
  REQUIRE(p.diags.error_count() == 0);
  REQUIRE(p.program->items.size() == 4);
  auto& f = std::get<OpDecl>(p.item(0).node);
  CHECK(f.has_body);
  CHECK(f.fn->body.size() == 1);
  CHECK(p.item(0).loc.length == 31);                       // the span runs to the body's '}'
  CHECK_FALSE(std::get<OpDecl>(p.item(1).node).has_body);  // ';' ends a primitive: then a block statement
  CHECK(std::holds_alternative<BlockStmt>(p.stmt(2).node));
  CHECK(std::get<OpDecl>(p.item(3).node).has_body);
}

TEST_CASE("parser: no decision looks ahead through a declaration's or an else's body", "[parser]") {
  // Long bodies: a model, a composite op, a train block, an else block.
  std::string body;
  for (int i = 0; i < 200; ++i) body += "  x = f(x, " + std::to_string(i) + ")\n";
  const std::string text = "model M(d) {\n" + body + "}\nop o(x) : \"n -> n\" {\n" + body + "}\ntrain {\n" + body +
                           "}\nif c {\n" + body + "} else {\n" + body + "}\n";
  SourceManager sources;
  const int file = sources.add("t.nns", text);
  const std::vector<DecisionLookahead> profile = lookahead_profile(sources, file);
  CHECK(profile.size() >= 3);  // the profiler saw the statements' decisions
  for (const DecisionLookahead& d : profile) {
    INFO("decision " << d.decision << " in " << d.rule << ": " << d.sll_max_look);
    CHECK(d.ll_max_look == 0);  // SLL parsed it
    // What is left is within a statement ("x = f(x, 0)": 5 tokens). Before,
    // the item, op-body and else decisions read a whole body: 800 tokens.
    CHECK(d.sll_max_look <= 5);
  }
}

// ---- statements -------------------------------------------------------------------

TEST_CASE("parser: else-if chains nest an if in the else block", "[parser]") {
  Parsed p("if a { x = 1 } else if b { x = 2 } else { x = 3 }\n");
  REQUIRE(p.diags.error_count() == 0);
  auto& top = std::get<IfStmt>(p.stmt(0).node);
  CHECK(text_of(*top.test) == "a");
  CHECK(top.then_block.size() == 1);
  REQUIRE(top.else_block.size() == 1);
  auto& inner = std::get<IfStmt>(top.else_block[0]->node);
  CHECK(text_of(*inner.test) == "b");
  REQUIRE(inner.else_block.size() == 1);
  // The final `else { }` parses as a block statement (its own scope).
  auto* last = std::get_if<BlockStmt>(&inner.else_block[0]->node);
  REQUIRE(last != nullptr);
  REQUIRE(last->body.size() == 1);
  CHECK(std::holds_alternative<AssignStmt>(last->body[0]->node));
}

TEST_CASE("parser: assignments, compound assignments and flow statements", "[parser]") {
  Parsed p("x = 1\nxs[0] += 2\nm.w -= 3\nfor i in 0..3 { if i > 1 { break } continue }\nfn f() { return }\n{ let a = 1 }\n");
  REQUIRE(p.diags.error_count() == 0);
  auto& a0 = std::get<AssignStmt>(p.stmt(0).node);
  CHECK(a0.op == "=");
  auto& a1 = std::get<AssignStmt>(p.stmt(1).node);
  CHECK(a1.op == "+=");
  CHECK(std::holds_alternative<Index>(a1.target->node));
  auto& a2 = std::get<AssignStmt>(p.stmt(2).node);
  CHECK(a2.op == "-=");
  CHECK(std::holds_alternative<Member>(a2.target->node));
  auto& loop = std::get<ForStmt>(p.stmt(3).node);
  CHECK(text_of(*loop.iter) == "(0..3)");
  REQUIRE(loop.body.size() == 2);
  CHECK(std::holds_alternative<ContinueStmt>(loop.body[1]->node));
  auto& fn = std::get<FnStmt>(p.item(4).node);
  auto& ret = std::get<ReturnStmt>(fn.fn->body[0]->node);
  CHECK(ret.value == nullptr);
  CHECK(std::holds_alternative<BlockStmt>(p.stmt(5).node));
}

TEST_CASE("parser: semicolons separate statements on one line", "[parser]") {
  Parsed p("let a = 1; let b = 2; print(a + b)\n");
  REQUIRE(p.diags.error_count() == 0);
  CHECK(p.program->items.size() == 3);
}

// ---- expressions ------------------------------------------------------------------

TEST_CASE("parser: arithmetic precedence and associativity", "[parser]") {
  Parsed p(R"(let a = 1 + 2 * 3
let b = (1 + 2) * 3
let c = 10 - 3 - 2
let d = 2 ** 3 ** 2
let e = -2 ** 2
let f = a // 2 % 3 @ m
let g = not a == b and c or d
let h = 1..n + 1
let i = x if c else y if d else z
)");
  REQUIRE(p.diags.error_count() == 0);
  CHECK(text_of(p.let_value(0)) == "(1 + (2 * 3))");
  CHECK(text_of(p.let_value(1)) == "((1 + 2) * 3)");
  CHECK(text_of(p.let_value(2)) == "((10 - 3) - 2)");
  CHECK(text_of(p.let_value(3)) == "(2 ** (3 ** 2))");
  CHECK(text_of(p.let_value(4)) == "(-(2 ** 2))");
  CHECK(text_of(p.let_value(5)) == "(((a // 2) % 3) @ m)");
  CHECK(text_of(p.let_value(6)) == "(((not (a == b)) and c) or d)");
  CHECK(text_of(p.let_value(7)) == "(1..(n + 1))");
  CHECK(text_of(p.let_value(8)) == "(x if c else (y if d else z))");
}

TEST_CASE("parser: literals", "[parser]") {
  Parsed p(R"(let a = [42, 1.5, 1e-5, 2E3, "t\"x\\y\n", true, false, none]
)");
  REQUIRE(p.diags.error_count() == 0);
  auto& l = as<ListLit>(p.let_value(0));
  REQUIRE(l.items.size() == 8);
  CHECK(as<IntLit>(*l.items[0]).value == 42);
  CHECK(as<FloatLit>(*l.items[1]).value == 1.5);
  CHECK(as<FloatLit>(*l.items[2]).value == 1e-5);
  CHECK(as<FloatLit>(*l.items[3]).value == 2000.0);
  CHECK(as<StringLit>(*l.items[4]).value == "t\"x\\y\n");
  CHECK(as<BoolLit>(*l.items[5]).value);
  CHECK_FALSE(as<BoolLit>(*l.items[6]).value);
  CHECK(std::holds_alternative<NoneLit>(l.items[7]->node));
}

TEST_CASE("parser: calls, keyword arguments, indexing and members chain", "[parser]") {
  Parsed p("let a = f(x, 2)(y)[0].shape[-1]\nlet b = g(1, k = 2, )\n");
  REQUIRE(p.diags.error_count() == 0);
  CHECK(text_of(p.let_value(0)) == "f(x, 2)(y)[0].shape[(-1)]");
  auto& call = as<Call>(p.let_value(1));
  REQUIRE(call.args.size() == 2);
  CHECK(call.args[0].name.empty());
  CHECK(call.args[1].name == "k");
  CHECK(call.args[1].loc.col == 14);  // "k = 2"
}

TEST_CASE("parser: comprehensions, dicts and lambdas", "[parser]") {
  Parsed p(R"(let a = [i * i for i in 0..8 if i % 2 == 0]
let b = {lr: 0.1, "warm up": 3}
let c = fn(x, y = 1) => x * y
let d = fn() { return 1 }
)");
  REQUIRE(p.diags.error_count() == 0);
  auto& lc = as<ListComp>(p.let_value(0));
  CHECK(lc.var == "i");
  CHECK(text_of(*lc.item) == "(i * i)");
  REQUIRE(lc.filter);
  CHECK(text_of(*lc.filter) == "((i % 2) == 0)");
  auto& dict = as<DictLit>(p.let_value(1));
  REQUIRE(dict.entries.size() == 2);
  CHECK(dict.entries[0].first == "lr");
  CHECK(dict.entries[1].first == "warm up");
  auto& lam = as<Lambda>(p.let_value(2));
  CHECK(lam.fn->name == "<lambda>");
  REQUIRE(lam.fn->params.size() == 2);
  REQUIRE(lam.fn->body.size() == 1);
  CHECK(text_of(*std::get<ReturnStmt>(lam.fn->body[0]->node).value) == "(x * y)");
  CHECK(as<Lambda>(p.let_value(3)).fn->body.size() == 1);
}

// ---- locations ---------------------------------------------------------------------

TEST_CASE("parser: locations point where diagnostics need them", "[parser]") {
  Parsed p("let total = alpha + beta(1, 2)\n  model Net(d) { }\n");
  REQUIRE(p.diags.error_count() == 0);
  // A let statement points at its name.
  CHECK(p.stmt(0).loc.line == 1);
  CHECK(p.stmt(0).loc.col == 5);
  // A binary expression points at its operator.
  const Expr& sum = p.let_value(0);
  CHECK(sum.loc.col == 19);
  CHECK(sum.loc.length == 1);
  // A call spans from the callee to the closing parenthesis.
  const Expr& call = *as<Binary>(sum).rhs;
  CHECK(call.loc.col == 21);
  CHECK(call.loc.length == static_cast<int>(std::string("beta(1, 2)").size()));
  // A model points at its name.
  CHECK(p.item(1).loc.line == 2);
  CHECK(p.item(1).loc.col == 9);
  CHECK(p.item(1).loc.file == p.file);
}

// ---- syntax errors -------------------------------------------------------------------

TEST_CASE("parser: a syntax error gives a located diagnostic and an empty program", "[parser]") {
  Parsed p("let x = (1 + 2\nlet y = 3\n");
  REQUIRE(p.diags.error_count() == 1);
  const Diagnostic& d = p.diags.all()[0];
  CHECK(d.severity == Severity::Error);
  CHECK(d.loc.line == 2);
  CHECK(d.loc.col == 1);
  CHECK(d.loc.length == 3);
  CHECK(d.message == "unexpected 'let'; expected ')'");
  CHECK(p.program->items.empty());
}

TEST_CASE("parser: recovery reports the first error of each line", "[parser]") {
  Parsed p("let a = ) + )\nlet b = 1 +* 2\nlet ok = 1\nlet c = [1, 2\n");
  REQUIRE(p.diags.error_count() == 3);
  CHECK(p.diags.all()[0].loc.line == 1);
  CHECK(p.diags.all()[1].loc.line == 2);
  CHECK(p.diags.all()[1].message == "unexpected '*'");
  // The end-of-file error points just past the last token, once.
  CHECK(p.diags.all()[2].loc.line == 4);
  CHECK(p.diags.all()[2].loc.col == 14);
  CHECK(p.diags.all()[2].message == "unexpected end of file; expected ',' or ']'");
}

TEST_CASE("parser: an unclosed block is one error at its opener, a note at the end of file", "[parser]") {
  Parsed p("fn f(x) {\n  return x\n\n# a comment\n");
  REQUIRE(p.diags.error_count() == 1);
  CHECK(p.diags.all()[0].message == "this '{' is never closed (a '}' is missing)");
  CHECK(p.diags.all()[0].loc.line == 1);
  CHECK(p.diags.all()[0].loc.col == 9);
  REQUIRE(p.diags.all()[0].notes.size() == 1);
  CHECK(p.diags.all()[0].notes[0].message == "the file ends here with it still open");
}

TEST_CASE("parser: lexical errors", "[parser]") {
  Parsed bad_char("let a = 1 $ 2\n");
  REQUIRE(bad_char.diags.error_count() == 1);
  CHECK(bad_char.diags.all()[0].message == "unexpected character '$'");
  CHECK(bad_char.diags.all()[0].loc.col == 11);

  Parsed unterminated("let s = \"abc\n");
  REQUIRE(unterminated.diags.error_count() == 1);
  CHECK(unterminated.diags.all()[0].message == "unterminated string literal");
  CHECK(unterminated.diags.all()[0].loc.col == 9);

  Parsed big("let n = 99999999999999999999\n");
  REQUIRE(big.diags.error_count() == 1);
  CHECK(big.diags.all()[0].message == "integer literal is too large");
  CHECK(big.diags.all()[0].loc.length == 20);
}

TEST_CASE("parser: at most 20 syntax errors are reported", "[parser]") {
  std::string text;
  for (int i = 0; i < 30; ++i) text += "let = \n";
  Parsed p(text);
  CHECK(p.diags.error_count() == 20);
}

// ---- dumps and diagnostics ----------------------------------------------------------

TEST_CASE("parser: the token dump names kinds and positions", "[parser]") {
  SourceManager sources;
  int f = sources.add("t.nns", "let x = 2.5 # c\nop \"s\"");
  std::string dump = dump_tokens(sources, f);
  CHECK(dump == "1:1 KEYWORD let\n1:5 ID x\n1:7 PUNCT =\n1:9 FLOAT 2.5\n2:1 KEYWORD op\n2:4 STRING \"s\"\n2:7 EOF\n");
  CHECK(dump_tokens(sources, f) == dump);  // deterministic
}

TEST_CASE("parser: the AST dump prints every node with its location", "[parser]") {
  Parsed p("model M(d, h = 2) {\n  param w: [h, d] f16 = normal(0.05)\n  fn forward(x) { return linear(x, w) }\n}\n");
  REQUIRE(p.diags.error_count() == 0);
  CHECK(dump_ast(*p.program) ==
        "model M(d, h = 2) @1:7\n"
        "  param w: [h, d] f16 = normal(0.05) @2:9\n"
        "  fn forward(x) @3:6\n"
        "    return linear(x, w) @3:19\n");
}

TEST_CASE("diagnostics: file:line:col, the source line and a caret under the span", "[parser]") {
  SourceManager sources;
  int f = sources.add("m.nns", "let a = 1\n\tlet bb = oops\n");
  DiagnosticEngine diags(sources);
  Diagnostic& d = diags.error(SourceLoc{f, 2, 11, 4}, "undefined name 'oops'");
  d.notes.push_back({Severity::Note, SourceLoc{f, 1, 5, 1}, "see here", {}});
  diags.warning(SourceLoc{}, "no location");
  CHECK(diags.has_errors());
  CHECK(diags.error_count() == 1);
  std::string text = diags.format(diags.all()[0], false);
  // The tab before the statement is kept so the caret lines up.
  CHECK(text ==
        "m.nns:2:11: error: undefined name 'oops'\n"
        "  \tlet bb = oops\n"
        "  \t         ^~~~\n"
        "m.nns:1:5: note: see here\n"
        "  let a = 1\n"
        "      ^\n");
  CHECK(diags.format(diags.all()[1], false) == "nns: warning: no location\n");
  // Coloured output wraps the same text in escapes.
  CHECK(diags.format(diags.all()[0], true).find("\033[") != std::string::npos);
}
