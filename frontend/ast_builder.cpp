// The parse tree to AST walk. Each build_* function is headed by the grammar
// rule it handles.
#include "frontend/ast_builder.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "antlr4-runtime.h"

namespace nns::front {
namespace {

using P = nns_grammar::NnsParser;

class AstBuilder {
 public:
  explicit AstBuilder(int file) : file_(file) {}

  SourceLoc loc(antlr4::Token* t) const {
    SourceLoc l{file_, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1, 1};
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
    const std::vector<P::ItemContext*> items = ctx->item();
    for (size_t i = 0; i < items.size(); ++i) {
      // An op head without ';' takes the block statement after it as its
      // body (see opDecl in grammar/Nns.g4).
      P::BlockContext* body = nullptr;
      if (P::OpDeclContext* op = items[i]->opDecl(); op && !op->semi && i + 1 < items.size())
        if (auto* b = dynamic_cast<P::BlockStmtContext*>(items[i + 1]->statement())) body = b->block();
      build_item(items[i], prog->items, body);
      if (body) ++i;
    }
    return prog;
  }

  // item : importDecl | configDecl | opDecl | modelDecl | planDecl | trainDecl | weightsDecl | statement
  // `op_body`: the block after an op head, its body.
  void build_item(P::ItemContext* ctx, std::vector<Item>& out, P::BlockContext* op_body) {
    Item item;
    item.loc = loc(ctx);
    // An op's span runs to the end of its body (when on one line).
    if (op_body) {
      item.loc = loc(ctx->getStart());
      if (op_body->getStop()->getLine() == ctx->getStart()->getLine())
        item.loc.length = static_cast<int>(op_body->getStop()->getStopIndex() - ctx->getStart()->getStartIndex() + 1);
    }
    if (auto* c = ctx->importDecl()) {
      item.node = ImportDecl{unquote(c->STRING()->getText()), c->ID() ? c->ID()->getText() : ""};
    } else if (auto* c = ctx->configDecl()) {
      item.node = build_config(c);
      item.loc = loc(c->name);  // "config 'x' is defined twice" points at the name
    } else if (auto* c = ctx->opDecl()) {
      item.node = build_op(c, op_body);
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
    } else if (auto* c = ctx->weightsDecl()) {
      auto fn = std::make_shared<FnDef>();
      fn->name = c->name->getText();
      fn->loc = loc(c->name);
      if (c->paramList()) fn->params = build_params(c->paramList());
      fn->body = build_block(c->block());
      item.node = WeightsDecl{fn};
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

  // opDecl : 'op' name=ID '(' paramList? ')' (':' annotations)? semi=';'?   (then its body, if any)
  OpDecl build_op(P::OpDeclContext* ctx, P::BlockContext* body) {
    OpDecl op;
    op.fn = std::make_shared<FnDef>();
    op.fn->name = ctx->name->getText();
    op.fn->loc = loc(ctx->name);
    if (ctx->paramList()) op.fn->params = build_params(ctx->paramList());
    if (ctx->annotations())
      for (auto* s : ctx->annotations()->STRING()) op.annotations.push_back(Annotation{unquote(s->getText()), loc(s)});
    if (body) {
      op.has_body = true;
      op.fn->body = build_block(body);
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

  // tensorDecl : kind=('param'|'input'|'buffer') name=ident ':' shape=expr dtype=ID? ('=' init=expr)? ';'?
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
      return make_stmt(ctx, AssignStmt{build_postfix(c->target), c->assignOp()->getText(), build_expr(c->expr())});
    }
    if (auto* c = dynamic_cast<P::ReturnStmtContext*>(ctx))
      return make_stmt(ctx, ReturnStmt{c->expr() ? build_expr(c->expr()) : nullptr});
    if (auto* c = dynamic_cast<P::IfStmtContext*>(ctx)) {
      IfStmt s;
      s.test = build_expr(c->expr());
      s.then_block = build_block(c->block());
      if (c->ifTail)
        if (StmtPtr tail = build_stmt(c->ifTail)) s.else_block.push_back(std::move(tail));
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
    if (auto* c = dynamic_cast<P::BlockStmtContext*>(ctx)) return make_stmt(ctx, BlockStmt{build_block(c->block())});
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
        e->node = Member{std::move(obj), c->ident() ? c->ident()->getText() : ""};
      }
      // Span of "callee(args)": from the start of the callee to the end of the op.
      e->loc = l;
      antlr4::Token* stop = op->getStop();
      if (stop && static_cast<int>(stop->getLine()) == l.line)
        e->loc.length =
            static_cast<int>(stop->getCharPositionInLine()) + static_cast<int>(stop->getText().size()) - (l.col - 1);
    }
    return e;
  }

  // primary : INT | FLOAT | STRING | bool | 'none' | ID | '(' expr ')' | listComp | listLit | dictLit
  ExprPtr build_primary(P::PrimaryContext* ctx) {
    if (auto* c = dynamic_cast<P::IntLitContext*>(ctx)) {
      long long v = 0;
      try {
        v = std::stoll(c->INT()->getText());
      } catch (...) {
        v = -1;
        overflow_.push_back(loc(ctx));
      }
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
        float_range_.push_back(
            {loc(ctx), "float literal " + text +
                           (huge ? " is too large (beyond 1.8e308)" : " is too small (below 4.9e-324): write 0.0")});
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

}  // namespace

BuiltAst build_ast(P::ProgramContext* tree, int file) {
  AstBuilder builder(file);
  BuiltAst out;
  out.program = builder.build_program(tree);
  out.overflow = std::move(builder.overflow_);
  out.float_range = std::move(builder.float_range_);
  return out;
}

}  // namespace nns::front
