// The .nns abstract syntax tree: plain structs in std::variants, each node
// with a SourceLoc. Built by parse_program (parser.h) from the ANTLR parse
// tree; nothing ANTLR-specific appears here.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "frontend/source.h"

namespace nns::front {

struct Expr;
struct Stmt;
struct FnDef;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Block = std::vector<StmtPtr>;

// ---- expressions -----------------------------------------------------------
struct IntLit { long long value = 0; };
struct FloatLit { double value = 0; };
struct StringLit { std::string value; };
struct BoolLit { bool value = false; };
struct NoneLit {};
struct Name { std::string id; };
struct ListLit { std::vector<ExprPtr> items; };
struct ListComp { ExprPtr item; std::string var; ExprPtr iter; ExprPtr filter; };
struct DictLit { std::vector<std::pair<std::string, ExprPtr>> entries; };
struct Unary { std::string op; ExprPtr operand; };       // "-", "+", "not"
struct Binary { std::string op; ExprPtr lhs, rhs; };     // arithmetic, and/or, comparisons, "@"
struct RangeExpr { ExprPtr lo, hi; };                     // lo..hi (hi exclusive)
struct CondExpr { ExprPtr then_value, test, else_value; };
struct Arg { std::string name; ExprPtr value; SourceLoc loc; };  // name empty = positional
struct Call { ExprPtr callee; std::vector<Arg> args; };
struct Index { ExprPtr object, index; };
struct Member { ExprPtr object; std::string member; };
struct Lambda { std::shared_ptr<FnDef> fn; };

struct Expr {
  SourceLoc loc;
  std::variant<IntLit, FloatLit, StringLit, BoolLit, NoneLit, Name, ListLit, ListComp, DictLit,
               Unary, Binary, RangeExpr, CondExpr, Call, Index, Member, Lambda>
      node;
};

// ---- statements ------------------------------------------------------------
struct Param {
  std::string name;
  std::string type;  // "" (any / tensor), "int", "float", "bool", "str", "list", "tensor"
  ExprPtr default_value;
  SourceLoc loc;
};

// A function (named, a lambda, a model method or an op body).
struct FnDef {
  std::string name;
  std::vector<Param> params;
  Block body;
  SourceLoc loc;
};

// param w: [h, d] f32 = normal(0.02)   /   input x: [b, s] i32 = tokens(vocab)
struct TensorDecl {
  bool is_param = true;   // param or buffer: declared in a model
  bool is_buffer = false;  // buffer: model state that gets no gradient and no update
  std::string name;
  ExprPtr shape;
  std::string dtype;  // "" = f32
  SourceLoc dtype_loc;
  ExprPtr init;       // may be null
};

struct LetStmt { std::string name; ExprPtr value; };
struct AssignStmt { ExprPtr target; std::string op; ExprPtr value; };  // op: "=", "+=", ...
struct ReturnStmt { ExprPtr value; };
struct IfStmt { ExprPtr test; Block then_block; Block else_block; };  // "else if" nests an IfStmt
struct ForStmt { std::string var; ExprPtr iter; Block body; };
struct BreakStmt {};
struct ContinueStmt {};
struct BlockStmt { Block body; };
struct ExprStmt { ExprPtr expr; };
struct FnStmt { std::shared_ptr<FnDef> fn; };

struct Stmt {
  SourceLoc loc;
  std::variant<LetStmt, AssignStmt, ReturnStmt, IfStmt, ForStmt, BreakStmt, ContinueStmt,
               BlockStmt, ExprStmt, FnStmt, TensorDecl>
      node;
};

// ---- top-level declarations ------------------------------------------------
struct ImportDecl { std::string path; std::string alias; };
struct ConfigEntry { std::string name; ExprPtr value; SourceLoc loc; };
struct ConfigDecl { std::string name; std::string base; SourceLoc base_loc; std::vector<ConfigEntry> entries; };
struct Annotation { std::string text; SourceLoc loc; };  // loc of the string literal
// Primitive when fn->body is empty and has_body is false; composite otherwise.
struct OpDecl { std::shared_ptr<FnDef> fn; std::vector<Annotation> annotations; bool has_body = false; };
struct ModelDecl { std::string name; std::vector<Param> params; Block body; };
struct PlanDecl { std::shared_ptr<FnDef> fn; };
struct TrainDecl { std::string name; Block body; };
// weights NAME(params) { take(...) ... }: a checkpoint layout map, run like a
// plan body (docs/language.md "Pretrained weights").
struct WeightsDecl {
  std::shared_ptr<FnDef> fn;
};

struct Item {
  SourceLoc loc;
  std::variant<ImportDecl, ConfigDecl, OpDecl, FnStmt, ModelDecl, PlanDecl, TrainDecl, WeightsDecl, StmtPtr> node;
};

struct Program {
  int file = -1;
  std::vector<Item> items;
};

}  // namespace nns::front
