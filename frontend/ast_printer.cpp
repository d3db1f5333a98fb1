#include "frontend/ast_printer.h"

#include <cstdlib>
#include <sstream>

namespace nns::front {
namespace {

std::string at(const SourceLoc& l) { return "@" + std::to_string(l.line) + ":" + std::to_string(l.col); }

// The shortest text that reads back as the same double ("0.05", not
// "0.050000000000000003"): exact, and what the user wrote in most cases.
std::string fmt_double(double v) {
  std::string r;
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream s;
    s.precision(precision);
    s << v;
    r = s.str();
    if (std::strtod(r.c_str(), nullptr) == v) break;
  }
  if (r.find_first_of(".eEn") == std::string::npos) r += ".0";
  return r;
}

struct ExprText {
  std::string operator()(const IntLit& n) const { return std::to_string(n.value); }
  std::string operator()(const FloatLit& n) const { return fmt_double(n.value); }
  std::string operator()(const StringLit& n) const { return "\"" + n.value + "\""; }
  std::string operator()(const BoolLit& n) const { return n.value ? "true" : "false"; }
  std::string operator()(const NoneLit&) const { return "none"; }
  std::string operator()(const Name& n) const { return n.id; }
  std::string operator()(const ListLit& n) const {
    std::string s = "[";
    for (size_t i = 0; i < n.items.size(); ++i) s += (i ? ", " : "") + expr_to_string(*n.items[i]);
    return s + "]";
  }
  std::string operator()(const ListComp& n) const {
    std::string s = "[" + expr_to_string(*n.item) + " for " + n.var + " in " + expr_to_string(*n.iter);
    if (n.filter) s += " if " + expr_to_string(*n.filter);
    return s + "]";
  }
  std::string operator()(const DictLit& n) const {
    std::string s = "{";
    for (size_t i = 0; i < n.entries.size(); ++i)
      s += (i ? ", " : "") + n.entries[i].first + ": " + expr_to_string(*n.entries[i].second);
    return s + "}";
  }
  std::string operator()(const Unary& n) const {
    return "(" + n.op + (n.op == "not" ? " " : "") + expr_to_string(*n.operand) + ")";
  }
  std::string operator()(const Binary& n) const {
    return "(" + expr_to_string(*n.lhs) + " " + n.op + " " + expr_to_string(*n.rhs) + ")";
  }
  std::string operator()(const RangeExpr& n) const {
    return "(" + expr_to_string(*n.lo) + ".." + expr_to_string(*n.hi) + ")";
  }
  std::string operator()(const CondExpr& n) const {
    return "(" + expr_to_string(*n.then_value) + " if " + expr_to_string(*n.test) + " else " +
           expr_to_string(*n.else_value) + ")";
  }
  std::string operator()(const Call& n) const {
    std::string s = expr_to_string(*n.callee) + "(";
    for (size_t i = 0; i < n.args.size(); ++i) {
      s += i ? ", " : "";
      if (!n.args[i].name.empty()) s += n.args[i].name + "=";
      s += expr_to_string(*n.args[i].value);
    }
    return s + ")";
  }
  std::string operator()(const Index& n) const {
    return expr_to_string(*n.object) + "[" + expr_to_string(*n.index) + "]";
  }
  std::string operator()(const Member& n) const { return expr_to_string(*n.object) + "." + n.member; }
  std::string operator()(const Lambda& n) const {
    std::string s = "fn(";
    for (size_t i = 0; i < n.fn->params.size(); ++i) s += (i ? ", " : "") + n.fn->params[i].name;
    return s + ") {...}";
  }
};

class Dumper {
 public:
  std::ostringstream out;

  void line(int depth, const std::string& text) {
    for (int i = 0; i < depth; ++i) out << "  ";
    out << text << "\n";
  }

  std::string params(const std::vector<Param>& ps) {
    std::string s = "(";
    for (size_t i = 0; i < ps.size(); ++i) {
      s += i ? ", " : "";
      s += ps[i].name;
      if (!ps[i].type.empty()) s += ": " + ps[i].type;
      if (ps[i].default_value) s += " = " + expr_to_string(*ps[i].default_value);
    }
    return s + ")";
  }

  void block(int depth, const Block& b) {
    for (const StmtPtr& s : b) stmt(depth, *s);
  }

  void stmt(int d, const Stmt& s) {
    std::visit(
        [&](const auto& n) {
          using T = std::decay_t<decltype(n)>;
          if constexpr (std::is_same_v<T, LetStmt>) {
            line(d, "let " + n.name + " = " + expr_to_string(*n.value) + " " + at(s.loc));
          } else if constexpr (std::is_same_v<T, AssignStmt>) {
            line(d, "assign " + expr_to_string(*n.target) + " " + n.op + " " + expr_to_string(*n.value) + " " + at(s.loc));
          } else if constexpr (std::is_same_v<T, ReturnStmt>) {
            line(d, "return" + (n.value ? " " + expr_to_string(*n.value) : "") + " " + at(s.loc));
          } else if constexpr (std::is_same_v<T, IfStmt>) {
            line(d, "if " + expr_to_string(*n.test) + " " + at(s.loc));
            block(d + 1, n.then_block);
            if (!n.else_block.empty()) {
              line(d, "else");
              block(d + 1, n.else_block);
            }
          } else if constexpr (std::is_same_v<T, ForStmt>) {
            line(d, "for " + n.var + " in " + expr_to_string(*n.iter) + " " + at(s.loc));
            block(d + 1, n.body);
          } else if constexpr (std::is_same_v<T, BreakStmt>) {
            line(d, "break " + at(s.loc));
          } else if constexpr (std::is_same_v<T, ContinueStmt>) {
            line(d, "continue " + at(s.loc));
          } else if constexpr (std::is_same_v<T, BlockStmt>) {
            line(d, "block " + at(s.loc));
            block(d + 1, n.body);
          } else if constexpr (std::is_same_v<T, ExprStmt>) {
            line(d, "expr " + expr_to_string(*n.expr) + " " + at(s.loc));
          } else if constexpr (std::is_same_v<T, FnStmt>) {
            fn(d, "fn", *n.fn);
          } else if constexpr (std::is_same_v<T, TensorDecl>) {
            std::string t = std::string(n.is_buffer ? "buffer " : n.is_param ? "param " : "input ") + n.name + ": " + expr_to_string(*n.shape);
            if (!n.dtype.empty()) t += " " + n.dtype;
            if (n.init) t += " = " + expr_to_string(*n.init);
            line(d, t + " " + at(s.loc));
          }
        },
        s.node);
  }

  void fn(int d, const std::string& kind, const FnDef& f) {
    line(d, kind + " " + f.name + params(f.params) + " " + at(f.loc));
    block(d + 1, f.body);
  }

  void item(const Item& it) {
    std::visit(
        [&](const auto& n) {
          using T = std::decay_t<decltype(n)>;
          if constexpr (std::is_same_v<T, ImportDecl>) {
            line(0, "import \"" + n.path + "\"" + (n.alias.empty() ? "" : " as " + n.alias) + " " + at(it.loc));
          } else if constexpr (std::is_same_v<T, ConfigDecl>) {
            line(0, "config " + n.name + (n.base.empty() ? "" : " extends " + n.base) + " " + at(it.loc));
            for (const ConfigEntry& e : n.entries)
              line(1, e.name + " = " + expr_to_string(*e.value) + " " + at(e.loc));
          } else if constexpr (std::is_same_v<T, OpDecl>) {
            std::string anns;
            for (const Annotation& a : n.annotations) anns += (anns.empty() ? " : \"" : " | \"") + a.text + "\"";
            line(0, std::string(n.has_body ? "composite op " : "primitive op ") + n.fn->name + params(n.fn->params) + anns + " " + at(n.fn->loc));
            block(1, n.fn->body);
          } else if constexpr (std::is_same_v<T, FnStmt>) {
            fn(0, "fn", *n.fn);
          } else if constexpr (std::is_same_v<T, ModelDecl>) {
            line(0, "model " + n.name + params(n.params) + " " + at(it.loc));
            block(1, n.body);
          } else if constexpr (std::is_same_v<T, PlanDecl>) {
            fn(0, "plan", *n.fn);
          } else if constexpr (std::is_same_v<T, WeightsDecl>) {
            fn(0, "weights", *n.fn);
          } else if constexpr (std::is_same_v<T, TrainDecl>) {
            line(0, "train" + (n.name.empty() ? "" : " " + n.name) + " " + at(it.loc));
            block(1, n.body);
          } else if constexpr (std::is_same_v<T, StmtPtr>) {
            stmt(0, *n);
          }
        },
        it.node);
  }
};

}  // namespace

std::string expr_to_string(const Expr& e) { return std::visit(ExprText{}, e.node); }

std::string dump_ast(const Program& program) {
  Dumper d;
  for (const Item& it : program.items) d.item(it);
  return d.out.str();
}

}  // namespace nns::front
