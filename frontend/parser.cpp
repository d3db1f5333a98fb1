// Builds the AST from the ANTLR parse tree. Each build_* function is headed
// by the grammar rule it handles.
#include "frontend/parser.h"

#include <cstdlib>

#include <cmath>

#include <cerrno>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <cstdio>
#include <set>

#include "NnsLexer.h"
#include "NnsParser.h"
#include "antlr4-runtime.h"

namespace nns::front {
namespace {

using P = nns_grammar::NnsParser;

// Turns ANTLR's syntax errors into our diagnostics, with a friendlier text.
class ErrorCollector : public antlr4::BaseErrorListener {
 public:
  ErrorCollector(int file, DiagnosticEngine& diags) : file_(file), diags_(diags) {}
  int count() const { return count_; }

  void syntaxError(antlr4::Recognizer* recognizer, antlr4::Token* bad, size_t line,
                   size_t col, const std::string& antlr_msg, std::exception_ptr) override {
    if (count_ >= kMaxErrors) return;
    SourceLoc loc{file_, static_cast<int>(line), static_cast<int>(col) + 1, 1};
    std::string msg;
    if (!bad) {  // lexer error: the lexer has a catch-all token, so rare
      msg = antlr_msg;
    } else if (bad->getType() == nns_grammar::NnsLexer::BAD_CHAR) {
      std::string text = bad->getText();
      if (text == "\"")
        msg = "unterminated string literal";
      else
        msg = "unexpected character '" + text + "'";
      // One report per bad character, however many rules trip over it.
      if (line == last_line_ && col == last_col_) return;
    } else if (bad->getType() == antlr4::Token::EOF) {
      // Recovery at the end of the file can trip once per open rule; one
      // report is enough.
      if (eof_reported_) return;
      eof_reported_ = true;
      msg = "unexpected end of file";
      auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
      if (parser) {
        msg += expected_suffix(parser);
        // Point just past the last real token (where the missing text
        // belongs), not at the line after trailing comments and blanks.
        antlr4::TokenStream* stream = parser->getTokenStream();
        for (size_t i = bad->getTokenIndex(); i-- > 0;) {
          antlr4::Token* t = stream->get(i);
          if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL) continue;
          loc.line = static_cast<int>(t->getLine());
          loc.col = static_cast<int>(t->getCharPositionInLine() + t->getText().size()) + 1;
          break;
        }
      }
      // Like any error, one per line: an earlier error there explains it.
      if (static_cast<size_t>(loc.line) == last_line_) return;
    } else {
      // Recovery often trips again further along the same line; the first
      // error of a line is the useful one.
      if (line == last_line_) return;
      msg = "unexpected '" + bad->getText() + "'";
      auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
      if (parser) msg += expected_suffix(parser);
      loc.length = std::max<int>(1, static_cast<int>(bad->getText().size()));
    }
    last_line_ = static_cast<size_t>(loc.line);  // where it was reported (EOF errors move)
    last_col_ = static_cast<size_t>(loc.col - 1);
    ++count_;
    diags_.error(loc, msg);
  }

 private:
  static constexpr int kMaxErrors = 20;

  std::string expected_suffix(antlr4::Parser* parser) {
    antlr4::misc::IntervalSet expected;
    try {
      expected = parser->getExpectedTokens();
    } catch (...) {
      return "";
    }
    std::vector<std::string> names;
    for (size_t t : expected.toList()) {
      if (t == antlr4::Token::EOF) { names.push_back("end of file"); continue; }
      std::string n = parser->getVocabulary().getDisplayName(t);
      if (n == "BAD_CHAR") continue;
      if (n == "ID") n = "a name";
      else if (n == "INT") n = "an integer";
      else if (n == "FLOAT") n = "a number";
      else if (n == "STRING") n = "a string";
      names.push_back(n);
    }
    if (names.empty() || names.size() > 6) return "";
    std::string s = "; expected ";
    for (size_t i = 0; i < names.size(); ++i) {
      if (i) s += i + 1 == names.size() ? " or " : ", ";
      s += names[i];
    }
    return s;
  }

  int file_;
  DiagnosticEngine& diags_;
  int count_ = 0;
  bool eof_reported_ = false;
  size_t last_line_ = 0, last_col_ = static_cast<size_t>(-1);
};

class AstBuilder {
 public:
  explicit AstBuilder(int file) : file_(file) {}

  SourceLoc loc(antlr4::Token* t) const {
    SourceLoc l{file_, static_cast<int>(t->getLine()),
                static_cast<int>(t->getCharPositionInLine()) + 1, 1};
    l.length = std::max<int>(1, static_cast<int>(t->getStopIndex() - t->getStartIndex() + 1));
    return l;
  }
  SourceLoc loc(antlr4::tree::TerminalNode* n) const { return loc(n->getSymbol()); }
  // A rule's span: from its first token to its last when on one line.
  SourceLoc loc(antlr4::ParserRuleContext* ctx) const {
    SourceLoc l = loc(ctx->getStart());
    antlr4::Token* stop = ctx->getStop();
    if (stop && stop->getLine() == ctx->getStart()->getLine() &&
        stop->getStopIndex() >= ctx->getStart()->getStartIndex())
      l.length = static_cast<int>(stop->getStopIndex() - ctx->getStart()->getStartIndex() + 1);
    return l;
  }

  template <class T>
  ExprPtr make(antlr4::ParserRuleContext* ctx, T node) {
    auto e = std::make_unique<Expr>();
    e->loc = loc(ctx);
    e->node = std::move(node);
    return e;
  }

  static std::string unquote(const std::string& s) {
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      char c = s[i];
      if (c == '\\' && i + 2 < s.size()) {
        char n = s[++i];
        switch (n) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          default: out += n; break;
        }
      } else {
        out += c;
      }
    }
    return out;
  }

  // program : item* EOF
  std::unique_ptr<Program> build_program(P::ProgramContext* ctx) {
    auto prog = std::make_unique<Program>();
    prog->file = file_;
    for (auto* item : ctx->item()) build_item(item, prog->items);
    return prog;
  }

  // item : importDecl | configDecl | opDecl | modelDecl | planDecl | trainDecl | statement
  void build_item(P::ItemContext* ctx, std::vector<Item>& out) {
    Item item;
    item.loc = loc(ctx);
    if (auto* c = ctx->importDecl()) {
      item.node = ImportDecl{unquote(c->STRING()->getText()), c->ID() ? c->ID()->getText() : ""};
    } else if (auto* c = ctx->configDecl()) {
      item.node = build_config(c);
      item.loc = loc(c->name);  // "config 'x' is defined twice" points at the name
    } else if (auto* c = ctx->opDecl()) {
      item.node = build_op(c);
    } else if (auto* c = ctx->modelDecl()) {
      ModelDecl m;
      m.name = c->name->getText();
      if (c->paramList()) m.params = build_params(c->paramList());
      m.body = build_block(c->block());
      item.node = std::move(m);
      item.loc = loc(c->name);
    } else if (auto* c = ctx->planDecl()) {
      auto fn = std::make_shared<FnDef>();
      fn->name = c->name->getText();
      fn->loc = loc(c->name);
      if (c->paramList()) fn->params = build_params(c->paramList());
      fn->body = build_block(c->block());
      item.node = PlanDecl{fn};
      item.loc = fn->loc;
    } else if (auto* c = ctx->trainDecl()) {
      TrainDecl t;
      t.name = c->name ? c->name->getText() : "";
      t.body = build_block(c->block());
      item.node = std::move(t);
    } else if (auto* c = ctx->statement()) {
      StmtPtr s = build_stmt(c);
      if (!s) return;
      if (auto* f = std::get_if<FnStmt>(&s->node)) {
        item.node = FnStmt{f->fn};
      } else {
        item.node = std::move(s);
      }
    } else {
      return;  // error recovery left an empty item
    }
    out.push_back(std::move(item));
  }

  // configDecl : 'config' name=ID ('extends' base=ID)? '{' configEntry* '}'
  ConfigDecl build_config(P::ConfigDeclContext* ctx) {
    ConfigDecl c;
    c.name = ctx->name->getText();
    if (ctx->base) {
      c.base = ctx->base->getText();
      c.base_loc = loc(ctx->base);
    }
    for (auto* e : ctx->configEntry())
      c.entries.push_back(ConfigEntry{e->ID()->getText(), build_expr(e->expr()), loc(e->ID())});
    return c;
  }

  // opDecl : 'op' name=ID '(' paramList? ')' (':' annotations)? (block | ';')?
  OpDecl build_op(P::OpDeclContext* ctx) {
    OpDecl op;
    op.fn = std::make_shared<FnDef>();
    op.fn->name = ctx->name->getText();
    op.fn->loc = loc(ctx->name);
    if (ctx->paramList()) op.fn->params = build_params(ctx->paramList());
    if (ctx->annotations())
      for (auto* s : ctx->annotations()->STRING())
        op.annotations.push_back(Annotation{unquote(s->getText()), loc(s)});
    if (ctx->block()) {
      op.has_body = true;
      op.fn->body = build_block(ctx->block());
    }
    return op;
  }

  // paramList : param (',' param)*      param : ID (':' typeName=ID)? ('=' expr)?
  std::vector<Param> build_params(P::ParamListContext* ctx) {
    std::vector<Param> params;
    for (auto* p : ctx->param()) {
      Param param;
      param.name = p->ident()->getText();
      param.loc = loc(p->ident());
      if (p->typeName) param.type = p->typeName->getText();
      if (p->expr()) param.default_value = build_expr(p->expr());
      params.push_back(std::move(param));
    }
    return params;
  }

  // fnDecl : 'fn' name=ID '(' paramList? ')' block
  std::shared_ptr<FnDef> build_fn(P::FnDeclContext* ctx) {
    auto fn = std::make_shared<FnDef>();
    fn->name = ctx->name->getText();
    fn->loc = loc(ctx->name);
    if (ctx->paramList()) fn->params = build_params(ctx->paramList());
    fn->body = build_block(ctx->block());
    return fn;
  }

  // tensorDecl : kind=('param'|'input'|'buffer') name=ID ':' shape=expr dtype=ID? ('=' init=expr)? ';'?
  TensorDecl build_tensor_decl(P::TensorDeclContext* ctx) {
    TensorDecl t;
    t.is_buffer = ctx->kind->getText() == "buffer";
    t.is_param = ctx->kind->getText() == "param" || t.is_buffer;
    t.name = ctx->name->getText();
    t.shape = build_expr(ctx->shape);
    if (ctx->dtype) {
      t.dtype = ctx->dtype->getText();
      t.dtype_loc = loc(ctx->dtype);
    }
    if (ctx->init) t.init = build_expr(ctx->init);
    return t;
  }

  // block : '{' statement* '}'
  Block build_block(P::BlockContext* ctx) {
    Block b;
    if (!ctx) return b;
    for (auto* s : ctx->statement())
      if (StmtPtr st = build_stmt(s)) b.push_back(std::move(st));
    return b;
  }

  template <class T>
  StmtPtr make_stmt(antlr4::ParserRuleContext* ctx, T node) {
    auto s = std::make_unique<Stmt>();
    s->loc = loc(ctx);
    s->node = std::move(node);
    return s;
  }

  // statement : letStmt | assignStmt | returnStmt | ifStmt | forStmt | ... (labelled alternatives)
  StmtPtr build_stmt(P::StatementContext* ctx) {
    if (auto* c = dynamic_cast<P::LetStmtContext*>(ctx)) {
      auto s = make_stmt(ctx, LetStmt{c->ident()->getText(), build_expr(c->expr())});
      s->loc = loc(c->ident());
      return s;
    }
    if (auto* c = dynamic_cast<P::AssignStmtContext*>(ctx)) {
      if (!c->expr()) return nullptr;
      return make_stmt(ctx, AssignStmt{build_postfix(c->target), c->assignOp()->getText(),
                                       build_expr(c->expr())});
    }
    if (auto* c = dynamic_cast<P::ReturnStmtContext*>(ctx))
      return make_stmt(ctx, ReturnStmt{c->expr() ? build_expr(c->expr()) : nullptr});
    if (auto* c = dynamic_cast<P::IfStmtContext*>(ctx)) {
      IfStmt s;
      s.test = build_expr(c->expr());
      s.then_block = build_block(c->block(0));
      if (c->elseBlock) {
        s.else_block = build_block(c->elseBlock);
      } else if (c->ifTail) {
        if (StmtPtr tail = build_stmt(c->ifTail)) s.else_block.push_back(std::move(tail));
      }
      auto st = make_stmt(ctx, std::move(s));
      st->loc.length = 2;
      return st;
    }
    if (auto* c = dynamic_cast<P::ForStmtContext*>(ctx)) {
      auto st = make_stmt(ctx, ForStmt{c->ident()->getText(), build_expr(c->expr()), build_block(c->block())});
      st->loc.length = 3;
      return st;
    }
    if (dynamic_cast<P::BreakStmtContext*>(ctx)) return make_stmt(ctx, BreakStmt{});
    if (dynamic_cast<P::ContinueStmtContext*>(ctx)) return make_stmt(ctx, ContinueStmt{});
    if (auto* c = dynamic_cast<P::BlockStmtContext*>(ctx))
      return make_stmt(ctx, BlockStmt{build_block(c->block())});
    if (auto* c = dynamic_cast<P::TensorStmtContext*>(ctx)) {
      auto st = make_stmt(ctx, build_tensor_decl(c->tensorDecl()));
      st->loc = loc(c->tensorDecl()->name);
      return st;
    }
    if (auto* c = dynamic_cast<P::FnStmtContext*>(ctx)) {
      auto fn = build_fn(c->fnDecl());
      auto st = make_stmt(ctx, FnStmt{fn});
      st->loc = fn->loc;
      return st;
    }
    if (auto* c = dynamic_cast<P::ExprStmtContext*>(ctx)) {
      if (!c->expr()) return nullptr;
      return make_stmt(ctx, ExprStmt{build_expr(c->expr())});
    }
    return nullptr;
  }

  // expr : lambda | cond=orExpr ('if' test=orExpr 'else' other=expr)?
  ExprPtr build_expr(P::ExprContext* ctx) {
    if (!ctx) return make_missing();
    if (auto* c = dynamic_cast<P::LambdaExprContext*>(ctx)) return build_lambda(c->lambda());
    auto* c = dynamic_cast<P::CondExprContext*>(ctx);
    if (!c || !c->cond) return make_missing();
    ExprPtr value = build_or(c->cond);
    if (!c->test) return value;
    return make(ctx, CondExpr{std::move(value), build_or(c->test), build_expr(c->other)});
  }

  // Error recovery can leave holes; a NoneLit keeps the tree well-formed
  // (the program is never evaluated when a syntax error was reported).
  ExprPtr make_missing() {
    auto e = std::make_unique<Expr>();
    e->node = NoneLit{};
    return e;
  }

  // lambda : 'fn' '(' paramList? ')' (block | '=>' expr)
  ExprPtr build_lambda(P::LambdaContext* ctx) {
    auto fn = std::make_shared<FnDef>();
    fn->name = "<lambda>";
    fn->loc = loc(ctx->getStart());
    if (ctx->paramList()) fn->params = build_params(ctx->paramList());
    if (ctx->block()) {
      fn->body = build_block(ctx->block());
    } else {
      auto ret = std::make_unique<Stmt>();
      ret->loc = fn->loc;
      ret->node = ReturnStmt{build_expr(ctx->expr())};
      fn->body.push_back(std::move(ret));
    }
    return make(ctx, Lambda{fn});
  }

  ExprPtr binary(antlr4::ParserRuleContext* ctx, antlr4::Token* op_tok, std::string op, ExprPtr lhs, ExprPtr rhs) {
    auto e = make(ctx, Binary{std::move(op), std::move(lhs), std::move(rhs)});
    e->loc = loc(op_tok);  // errors about an operator point at the operator
    return e;
  }

  // orExpr : andExpr ('or' andExpr)*
  ExprPtr build_or(P::OrExprContext* ctx) {
    auto parts = ctx->andExpr();
    ExprPtr e = build_and(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i)
      e = binary(ctx, parts[i]->getStart(), "or", std::move(e), build_and(parts[i]));
    return e;
  }
  // andExpr : notExpr ('and' notExpr)*
  ExprPtr build_and(P::AndExprContext* ctx) {
    auto parts = ctx->notExpr();
    ExprPtr e = build_not(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i)
      e = binary(ctx, parts[i]->getStart(), "and", std::move(e), build_not(parts[i]));
    return e;
  }
  // notExpr : 'not' notExpr | comparison
  ExprPtr build_not(P::NotExprContext* ctx) {
    if (ctx->notExpr()) return make(ctx, Unary{"not", build_not(ctx->notExpr())});
    return build_comparison(ctx->comparison());
  }
  // comparison : rangeExpr (compOp rangeExpr)?
  ExprPtr build_comparison(P::ComparisonContext* ctx) {
    auto parts = ctx->rangeExpr();
    ExprPtr e = build_range(parts[0]);
    if (ctx->compOp() && parts.size() > 1)
      e = binary(ctx, ctx->compOp()->getStart(), ctx->compOp()->getText(), std::move(e), build_range(parts[1]));
    return e;
  }
  // rangeExpr : additive ('..' additive)?
  ExprPtr build_range(P::RangeExprContext* ctx) {
    auto parts = ctx->additive();
    if (parts.size() == 1) return build_additive(parts[0]);
    return make(ctx, RangeExpr{build_additive(parts[0]), build_additive(parts[1])});
  }
  // additive : multiplicative (addOp multiplicative)*
  ExprPtr build_additive(P::AdditiveContext* ctx) {
    auto parts = ctx->multiplicative();
    auto ops = ctx->addOp();
    ExprPtr e = build_mul(parts[0]);
    for (size_t i = 1; i < parts.size() && i - 1 < ops.size(); ++i)
      e = binary(ctx, ops[i - 1]->getStart(), ops[i - 1]->getText(), std::move(e), build_mul(parts[i]));
    return e;
  }
  // multiplicative : unary (mulOp unary)*
  ExprPtr build_mul(P::MultiplicativeContext* ctx) {
    auto parts = ctx->unary();
    auto ops = ctx->mulOp();
    ExprPtr e = build_unary(parts[0]);
    for (size_t i = 1; i < parts.size() && i - 1 < ops.size(); ++i)
      e = binary(ctx, ops[i - 1]->getStart(), ops[i - 1]->getText(), std::move(e), build_unary(parts[i]));
    return e;
  }
  // unary : ('-' | '+') unary | power
  ExprPtr build_unary(P::UnaryContext* ctx) {
    if (ctx->unary()) return make(ctx, Unary{ctx->getStart()->getText(), build_unary(ctx->unary())});
    if (!ctx->power()) return make_missing();
    return build_power(ctx->power());
  }
  // power : postfix ('**' unary)?
  ExprPtr build_power(P::PowerContext* ctx) {
    ExprPtr base = build_postfix(ctx->postfix());
    if (!ctx->unary()) return base;
    return make(ctx, Binary{"**", std::move(base), build_unary(ctx->unary())});
  }
  // postfix : primary postfixOp*
  ExprPtr build_postfix(P::PostfixContext* ctx) {
    if (!ctx || !ctx->primary()) return make_missing();
    ExprPtr e = build_primary(ctx->primary());
    for (auto* op : ctx->postfixOp()) {
      SourceLoc l = e->loc;
      if (auto* c = dynamic_cast<P::CallOpContext*>(op)) {
        Call call{std::move(e), {}};
        if (c->argList())
          for (auto* a : c->argList()->arg())
            call.args.push_back(Arg{a->ident() ? a->ident()->getText() : "", build_expr(a->expr()), loc(a)});
        e = std::make_unique<Expr>();
        e->node = std::move(call);
      } else if (auto* c = dynamic_cast<P::IndexOpContext*>(op)) {
        ExprPtr obj = std::move(e);
        e = std::make_unique<Expr>();
        e->node = Index{std::move(obj), build_expr(c->expr())};
      } else if (auto* c = dynamic_cast<P::MemberOpContext*>(op)) {
        ExprPtr obj = std::move(e);
        e = std::make_unique<Expr>();
        e->node = Member{std::move(obj), c->ID() ? c->ID()->getText() : ""};
      }
      // Span of "callee(args)": from the start of the callee to the end of the op.
      e->loc = l;
      antlr4::Token* stop = op->getStop();
      if (stop && static_cast<int>(stop->getLine()) == l.line)
        e->loc.length = static_cast<int>(stop->getCharPositionInLine()) + static_cast<int>(stop->getText().size()) - (l.col - 1);
    }
    return e;
  }

  // primary : INT | FLOAT | STRING | bool | 'none' | ID | '(' expr ')' | listComp | listLit | dictLit
  ExprPtr build_primary(P::PrimaryContext* ctx) {
    if (auto* c = dynamic_cast<P::IntLitContext*>(ctx)) {
      long long v = 0;
      try { v = std::stoll(c->INT()->getText()); } catch (...) { v = -1; overflow_.push_back(loc(ctx)); }
      return make(ctx, IntLit{v});
    }
    if (auto* c = dynamic_cast<P::FloatLitContext*>(ctx)) {
      // strtod, not stod: a literal beyond the double range (1e309) or below
      // its smallest denormal (1e-400) is a located error, not an exception.
      const std::string text = c->FLOAT()->getText();
      errno = 0;
      double v = std::strtod(text.c_str(), nullptr);
      if (errno == ERANGE || !std::isfinite(v)) {
        bool huge = std::fabs(v) > 1.0;
        float_range_.push_back({loc(ctx), "float literal " + text + (huge ? " is too large (beyond 1.8e308)" : " is too small (below 4.9e-324): write 0.0")});
        v = 0;
      }
      return make(ctx, FloatLit{v});
    }
    if (auto* c = dynamic_cast<P::StringLitContext*>(ctx)) return make(ctx, StringLit{unquote(c->STRING()->getText())});
    if (dynamic_cast<P::BoolLitContext*>(ctx)) return make(ctx, BoolLit{ctx->getText() == "true"});
    if (dynamic_cast<P::NoneLitContext*>(ctx)) return make(ctx, NoneLit{});
    if (auto* c = dynamic_cast<P::NameRefContext*>(ctx)) return make(ctx, Name{c->ident()->getText()});
    if (auto* c = dynamic_cast<P::ParenExprContext*>(ctx)) {
      ExprPtr inner = build_expr(c->expr());
      return inner;
    }
    if (auto* c = dynamic_cast<P::ListCompContext*>(ctx)) {
      ListComp lc;
      lc.item = build_expr(c->expr(0));
      lc.var = c->ident()->getText();
      lc.iter = build_expr(c->expr(1));
      if (c->orExpr()) lc.filter = build_or(c->orExpr());
      return make(ctx, std::move(lc));
    }
    if (auto* c = dynamic_cast<P::ListLitContext*>(ctx)) {
      ListLit l;
      for (auto* e : c->expr()) l.items.push_back(build_expr(e));
      return make(ctx, std::move(l));
    }
    if (auto* c = dynamic_cast<P::DictLitContext*>(ctx)) {
      DictLit d;
      for (auto* e : c->dictEntry())
        d.entries.emplace_back(e->ID() ? e->ID()->getText() : unquote(e->STRING()->getText()), build_expr(e->expr()));
      return make(ctx, std::move(d));
    }
    return make_missing();
  }

  std::vector<SourceLoc> overflow_;
  std::vector<std::pair<SourceLoc, std::string>> float_range_;

 private:
  int file_;
};

// The byte offset of the first byte that is not part of valid UTF-8, or -1.
int64_t invalid_utf8(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = b[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k)
      if ((b[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    // Overlong forms, surrogates and code points past U+10FFFF.
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (b[i + k] & 0x3Fu);
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

// Limits that keep parsing fast and its recursion shallow, checked on the
// tokens before the parser runs (the parser would recurse once per level,
// and, since ';' is optional and a statement may start with a sign, it
// looks ahead to the end of a chain at every binary operator: quadratic).
constexpr int kMaxNesting = 256;       // brackets, prefix operators, '**', 'else if', '=>' in a row
constexpr int kMaxChain = 1000;        // binary operators and postfix links in one chain

bool within_limits(antlr4::CommonTokenStream& tokens, int file, DiagnosticEngine& diags) {
  tokens.fill();
  static const std::set<std::string> open{"(", "[", "{"}, close{")", "]", "}"}, prefix{"-", "+", "not"};
  static const std::set<std::string> binary{"+", "-", "*", "/", "//", "%", "@", "**", "and", "or", "==", "!=", "<", "<=", ">", ">=", "in", ".."};
  int depth = 0, prefix_run = 0, chain = 0, arrows = 0, closed_at = -1;
  std::vector<int> else_if{0};
  std::vector<int> pow_at_depth{0};
  std::string prev;
  bool prev_operand = false;  // the previous token ends an operand (a name, a literal, a closing bracket)
  for (antlr4::Token* t : tokens.getTokens()) {
    if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL || t->getType() == antlr4::Token::EOF) continue;
    const std::string text = t->getText();
    SourceLoc at{file, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1,
                 static_cast<int>(t->getStopIndex() - t->getStartIndex()) + 1};
    auto refuse = [&](const std::string& msg) {
      diags.error(at, msg);
      return false;
    };
    if (open.count(text)) {
      if (++depth > kMaxNesting) return refuse("nesting deeper than " + std::to_string(kMaxNesting) + " brackets");
      pow_at_depth.push_back(0);
    } else if (close.count(text)) {
      depth = std::max(0, depth - 1);
      if (pow_at_depth.size() > 1) pow_at_depth.pop_back();
    }
    // A sign after an operand is a binary operator; otherwise a prefix.
    bool is_prefix = prefix.count(text) && !prev_operand;
    prefix_run = is_prefix ? prefix_run + 1 : 0;
    if (prefix_run > kMaxNesting) return refuse("more than " + std::to_string(kMaxNesting) + " prefix operators in a row");
    if (text == "**" && ++pow_at_depth.back() > kMaxNesting)
      return refuse("more than " + std::to_string(kMaxNesting) + " '**' in one expression (each nests the next)");
    const bool literal_or_name = t->getType() == nns_grammar::NnsLexer::ID || t->getType() == nns_grammar::NnsLexer::INT ||
                                 t->getType() == nns_grammar::NnsLexer::FLOAT || t->getType() == nns_grammar::NnsLexer::STRING ||
                                 text == "true" || text == "false" || text == "none";
    // Postfix links (a.b, x[i], f(x)) nest like binary operators do.
    const bool postfix_link = text == "." || (prev_operand && (text == "[" || text == "("));
    if ((binary.count(text) && !is_prefix) || postfix_link) {
      if (++chain > kMaxChain) return refuse("more than " + std::to_string(kMaxChain) + " operators in one chain (binary operators, '.', indexing, calls); split the expression");
    } else if ((prev_operand && literal_or_name) || text == ";" || text == "{" || text == "}" || text == "let" || text == "return" ||
               text == "for") {
      chain = 0;  // a new statement begins
    }
    // 'else if' chains nest (each if is the else of the one before), per
    // bracket depth; a '}' not followed by 'else' ends the chain there.
    if (else_if.size() < static_cast<size_t>(depth) + 1) else_if.resize(static_cast<size_t>(depth) + 1, 0);
    if (closed_at >= 0 && text != "else" && static_cast<size_t>(closed_at) < else_if.size()) else_if[static_cast<size_t>(closed_at)] = 0;
    closed_at = text == "}" ? depth : -1;
    if (text == "if" && prev == "else" && ++else_if[static_cast<size_t>(depth)] > kMaxNesting)
      return refuse("more than " + std::to_string(kMaxNesting) + " 'else if' in one chain");
    arrows = text == "=>" ? arrows + 1 : (text == ";" || text == "}" ? 0 : arrows);
    if (arrows > kMaxNesting) return refuse("more than " + std::to_string(kMaxNesting) + " lambdas nested in one expression");
    prev_operand = text == ")" || text == "]" || text == "}" || literal_or_name;
    prev = text;
  }
  tokens.seek(0);
  return true;
}

// The full-LL retry after SLL fails looks ahead to the end of every chain
// at every operator of it (an SLL conflict the outer context cannot settle:
// `a + b` may be `a` then `+b`), without caching: a 600-term sum before a
// syntax error took 40 s, 100 terms 1 s (found by fuzz_interpreter). Its
// work is the tokens it consumes, lookahead included: files that are not
// pathological consume under 10 per token. Past kLookaheadPerToken per token
// (plus kLookaheadSlack) the retry stops, and the errors come from SLL
// with recovery: the same errors, except in files whose only parse needs
// the outer context past a long chain.
constexpr size_t kLookaheadPerToken = 4, kLookaheadSlack = 1000;

// A token stream that, once its budget of consumes is spent, shows end of
// file: the parse in progress then ends at once (an exception thrown
// through ANTLR's prediction would leak its configuration sets).
class BoundedTokenStream : public antlr4::CommonTokenStream {
 public:
  using CommonTokenStream::CommonTokenStream;
  void set_budget(size_t consumes) {
    left_ = consumes;
    exhausted_ = false;
  }
  bool exhausted() const { return exhausted_; }
  void consume() override {
    if (!exhausted_ && left_ == 0) exhausted_ = true;
    if (exhausted_) return;
    --left_;
    CommonTokenStream::consume();
  }
  antlr4::Token* LT(ssize_t k) override { return exhausted_ && k > 0 ? get(size() - 1) : CommonTokenStream::LT(k); }
  size_t LA(ssize_t i) override { return exhausted_ && i > 0 ? antlr4::Token::EOF : CommonTokenStream::LA(i); }

 private:
  size_t left_ = SIZE_MAX;
  bool exhausted_ = false;
};

}  // namespace

bool check_utf8(const SourceManager& sources, int file, DiagnosticEngine& diags) {
  const SourceFile& f = sources.file(file);
  const int64_t bad = invalid_utf8(f.text);
  if (bad < 0) return true;
  int line = 1, col = 1;
  for (int64_t i = 0; i < bad; ++i) {
    if (f.text[static_cast<size_t>(i)] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(f.text[static_cast<size_t>(i)]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(f.text[static_cast<size_t>(bad)]));
  diags.error(SourceLoc{file, line, col, 1}, std::string("invalid UTF-8: byte ") + byte + " at offset " + std::to_string(bad));
  return false;
}

std::unique_ptr<Program> parse_program(const SourceManager& sources, int file, DiagnosticEngine& diags) {
  const SourceFile& f = sources.file(file);
  if (!check_utf8(sources, file, diags)) {
    auto empty = std::make_unique<Program>();
    empty->file = file;
    return empty;
  }
  antlr4::ANTLRInputStream input(f.text);
  nns_grammar::NnsLexer lexer(&input);
  BoundedTokenStream tokens(&lexer);
  nns_grammar::NnsParser parser(&tokens);
  ErrorCollector errors(file, diags);
  lexer.removeErrorListeners();
  lexer.addErrorListener(&errors);
  if (!within_limits(tokens, file, diags)) {
    auto empty = std::make_unique<Program>();
    empty->file = file;
    return empty;
  }
  // SLL first (fast), silent; fall back to full LL only if SLL fails, as
  // the ANTLR documentation recommends for speed. Errors come from the retry.
  parser.removeErrorListeners();
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
  P::ProgramContext* tree = nullptr;
  int ll_error_count = 0;
  try {
    tree = parser.program();
  } catch (antlr4::ParseCancellationException&) {
    // Full LL with recovery; its errors wait until it finishes in budget.
    DiagnosticEngine ll_diags(sources);
    ErrorCollector ll_errors(file, ll_diags);
    parser.addErrorListener(&ll_errors);
    parser.setErrorHandler(std::make_shared<antlr4::DefaultErrorStrategy>());
    auto retry = [&](antlr4::atn::PredictionMode mode) {
      tokens.seek(0);
      parser.reset();
      parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(mode);
      return parser.program();
    };
    // A stray character is an error whatever the parse: the LL retry would
    // only spend its budget (a 7 KB chain cut by control characters took
    // 0.5 s, found by fuzz_interpreter); SLL with recovery reports it.
    bool stray = false;
    for (antlr4::Token* t : tokens.getTokens()) stray = stray || t->getType() == nns_grammar::NnsLexer::BAD_CHAR;
    tokens.set_budget(stray ? 0 : kLookaheadPerToken * tokens.size() + kLookaheadSlack);
    if (!stray) tree = retry(antlr4::atn::PredictionMode::LL);
    const bool exhausted = stray || tokens.exhausted();
    tokens.set_budget(SIZE_MAX);
    if (!exhausted) {
      for (const Diagnostic& d : ll_diags.all()) diags.report(d);
      ll_error_count = ll_errors.count();
    } else {
      parser.removeErrorListeners();
      parser.addErrorListener(&errors);
      tree = retry(antlr4::atn::PredictionMode::SLL);
    }
  }
  if (errors.count() + ll_error_count > 0) {
    // The tree has holes where recovery happened; the caller stops after
    // reporting, so an empty program is enough.
    auto empty = std::make_unique<Program>();
    empty->file = file;
    return empty;
  }
  AstBuilder builder(file);
  auto prog = builder.build_program(tree);
  for (const SourceLoc& l : builder.overflow_) diags.error(l, "integer literal is too large");
  for (const auto& [l, msg] : builder.float_range_) diags.error(l, msg);
  return prog;
}

std::string dump_tokens(const SourceManager& sources, int file) {
  const SourceFile& f = sources.file(file);
  antlr4::ANTLRInputStream input(f.text);
  nns_grammar::NnsLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  std::ostringstream out;
  for (antlr4::Token* t : tokens.getTokens()) {
    if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL) continue;
    std::string kind = t->getType() == antlr4::Token::EOF
                           ? "EOF"
                           : std::string(lexer.getVocabulary().getSymbolicName(t->getType()));
    // Literal tokens of the grammar have no symbolic name: keywords and punctuation.
    if (kind.empty()) kind = std::isalpha(static_cast<unsigned char>(t->getText()[0])) ? "KEYWORD" : "PUNCT";
    out << t->getLine() << ":" << t->getCharPositionInLine() + 1 << " " << kind;
    if (t->getType() != antlr4::Token::EOF) out << " " << t->getText();
    out << "\n";
  }
  return out.str();
}

}  // namespace nns::front
