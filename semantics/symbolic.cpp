#include "semantics/symbolic.h"

#include <cctype>
#include <stdexcept>

namespace nns::sema {

namespace {

SymPtr make(SymExpr::Op op, int64_t value, std::string name, SymPtr a, SymPtr b) {
  auto e = std::make_shared<SymExpr>();
  e->op = op;
  e->value = value;
  e->name = std::move(name);
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}

int64_t floor_div(int64_t x, int64_t y) {
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return q;
}

int64_t apply(SymExpr::Op op, int64_t x, int64_t y) {
  switch (op) {
    case SymExpr::Add: return x + y;
    case SymExpr::Sub: return x - y;
    case SymExpr::Mul: return x * y;
    case SymExpr::FloorDiv:
      if (y == 0) throw std::runtime_error("division by zero");
      return floor_div(x, y);
    case SymExpr::Mod:
      if (y == 0) throw std::runtime_error("modulo by zero");
      return x - floor_div(x, y) * y;
    case SymExpr::Eq: return x == y;
    case SymExpr::Ne: return x != y;
    case SymExpr::Lt: return x < y;
    case SymExpr::Le: return x <= y;
    case SymExpr::Gt: return x > y;
    case SymExpr::Ge: return x >= y;
    case SymExpr::And: return x && y;
    case SymExpr::Or: return x || y;
    case SymExpr::Not: return !x;
    default: break;
  }
  throw std::runtime_error("bad symbolic operator");
}

const char* op_text(SymExpr::Op op) {
  switch (op) {
    case SymExpr::Add: return " + ";
    case SymExpr::Sub: return " - ";
    case SymExpr::Mul: return " * ";
    case SymExpr::FloorDiv: return " // ";
    case SymExpr::Mod: return " % ";
    case SymExpr::Eq: return " == ";
    case SymExpr::Ne: return " != ";
    case SymExpr::Lt: return " < ";
    case SymExpr::Le: return " <= ";
    case SymExpr::Gt: return " > ";
    case SymExpr::Ge: return " >= ";
    case SymExpr::And: return " and ";
    case SymExpr::Or: return " or ";
    default: return " ? ";
  }
}

int precedence(SymExpr::Op op) {
  switch (op) {
    case SymExpr::Or: return 1;
    case SymExpr::And: return 2;
    case SymExpr::Not: return 3;
    case SymExpr::Eq: case SymExpr::Ne: case SymExpr::Lt: case SymExpr::Le: case SymExpr::Gt: case SymExpr::Ge: return 4;
    case SymExpr::Add: case SymExpr::Sub: return 5;
    case SymExpr::Mul: case SymExpr::FloorDiv: case SymExpr::Mod: return 6;
    default: return 7;
  }
}

// Recursive descent over the grammar of the header comment.
class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}
  SymPtr parse() {
    SymPtr e = or_expr();
    skip();
    if (i_ != t_.size()) fail("unexpected '" + t_.substr(i_, 1) + "'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("in \"" + t_ + "\" at offset " + std::to_string(i_) + ": " + why);
  }
  void skip() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  bool word(const char* w) {
    skip();
    size_t n = std::char_traits<char>::length(w);
    if (t_.compare(i_, n, w) != 0) return false;
    if (i_ + n < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_ + n])) || t_[i_ + n] == '_')) return false;
    i_ += n;
    return true;
  }
  bool sym(const char* s) {
    skip();
    size_t n = std::char_traits<char>::length(s);
    if (t_.compare(i_, n, s) != 0) return false;
    i_ += n;
    return true;
  }
  SymPtr or_expr() {
    SymPtr e = and_expr();
    while (word("or")) e = sym_binary(SymExpr::Or, e, and_expr());
    return e;
  }
  SymPtr and_expr() {
    SymPtr e = not_expr();
    while (word("and")) e = sym_binary(SymExpr::And, e, not_expr());
    return e;
  }
  SymPtr not_expr() {
    if (word("not")) return sym_binary(SymExpr::Not, not_expr(), nullptr);
    return compare();
  }
  SymPtr compare() {
    SymPtr e = sum();
    static const std::pair<const char*, SymExpr::Op> ops[] = {{"==", SymExpr::Eq}, {"!=", SymExpr::Ne}, {"<=", SymExpr::Le},
                                                              {">=", SymExpr::Ge}, {"<", SymExpr::Lt},  {">", SymExpr::Gt}};
    for (const auto& [s, op] : ops)
      if (sym(s)) return sym_binary(op, e, sum());
    return e;
  }
  SymPtr sum() {
    SymPtr e = product();
    while (true) {
      if (sym("+")) e = sym_binary(SymExpr::Add, e, product());
      else if (sym("-")) e = sym_binary(SymExpr::Sub, e, product());
      else return e;
    }
  }
  SymPtr product() {
    SymPtr e = unary();
    while (true) {
      if (sym("//")) e = sym_binary(SymExpr::FloorDiv, e, unary());
      else if (sym("*")) e = sym_binary(SymExpr::Mul, e, unary());
      else if (sym("%")) e = sym_binary(SymExpr::Mod, e, unary());
      else if (sym("/")) fail("use // for integer division");
      else return e;
    }
  }
  SymPtr unary() {
    if (sym("-")) return sym_binary(SymExpr::Sub, sym_const(0), unary());
    return atom();
  }
  SymPtr atom() {
    skip();
    if (sym("(")) {
      SymPtr e = or_expr();
      if (!sym(")")) fail("expected ')'");
      return e;
    }
    if (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) {
      int64_t v = 0;
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) v = v * 10 + (t_[i_++] - '0');
      return sym_const(v);
    }
    if (i_ < t_.size() && (std::isalpha(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_')) {
      size_t start = i_;
      while (i_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_')) ++i_;
      return sym_var(t_.substr(start, i_ - start));
    }
    fail(i_ < t_.size() ? "unexpected '" + t_.substr(i_, 1) + "'" : "unexpected end");
  }
  const std::string& t_;
  size_t i_ = 0;
};

}  // namespace

SymPtr sym_const(int64_t v) { return make(SymExpr::Const, v, "", nullptr, nullptr); }
SymPtr sym_var(const std::string& name) { return make(SymExpr::Var, 0, name, nullptr, nullptr); }
SymPtr sym_opaque(int64_t witness, const std::string& what) { return make(SymExpr::Opaque, witness, what, nullptr, nullptr); }

SymPtr sym_binary(SymExpr::Op op, const SymPtr& a, const SymPtr& b) {
  if (op == SymExpr::Not) {
    if (sym_is_const(a)) return sym_const(!a->value);
    return make(op, 0, "", a, nullptr);
  }
  if (sym_is_const(a) && sym_is_const(b)) {
    // Division by a constant zero stays symbolic: evaluating reports it.
    if (!((op == SymExpr::FloorDiv || op == SymExpr::Mod) && b->value == 0)) return sym_const(apply(op, a->value, b->value));
  }
  // Identities that keep the expressions the checker prints readable.
  if (op == SymExpr::Mul && sym_is_const(a) && a->value == 1) return b;
  if ((op == SymExpr::Mul || op == SymExpr::FloorDiv) && sym_is_const(b) && b->value == 1) return a;
  if ((op == SymExpr::Add || op == SymExpr::Sub) && sym_is_const(b) && b->value == 0) return a;
  if (op == SymExpr::Add && sym_is_const(a) && a->value == 0) return b;
  return make(op, 0, "", a, b);
}

bool sym_is_const(const SymPtr& e) { return e && e->op == SymExpr::Const; }

bool sym_has_opaque(const SymPtr& e) {
  if (!e) return false;
  if (e->op == SymExpr::Opaque) return true;
  return sym_has_opaque(e->a) || sym_has_opaque(e->b);
}

bool sym_same(const SymPtr& a, const SymPtr& b) {
  if (a == b) return true;
  if (!a || !b || a->op != b->op) return false;
  if (a->op == SymExpr::Const) return a->value == b->value;
  if (a->op == SymExpr::Var) return a->name == b->name;
  if (a->op == SymExpr::Opaque) return a->name == b->name && a->value == b->value;
  return sym_same(a->a, b->a) && sym_same(a->b, b->b);
}

static std::string text(const SymPtr& e, int outer) {
  if (!e) return "?";
  switch (e->op) {
    case SymExpr::Const: return std::to_string(e->value);
    case SymExpr::Var: return e->name;
    case SymExpr::Opaque: return "<" + e->name + ">";
    case SymExpr::Not: return "not " + text(e->a, precedence(SymExpr::Not));
    default: break;
  }
  int p = precedence(e->op);
  // Left-associative: the right operand of - // % needs brackets at equal precedence.
  std::string s = text(e->a, p) + op_text(e->op) + text(e->b, p + 1);
  return p < outer ? "(" + s + ")" : s;
}

std::string sym_text(const SymPtr& e) { return text(e, 0); }

void sym_symbols(const SymPtr& e, std::vector<std::string>& out) {
  if (!e) return;
  if (e->op == SymExpr::Var) {
    for (const std::string& n : out)
      if (n == e->name) return;
    out.push_back(e->name);
    return;
  }
  sym_symbols(e->a, out);
  sym_symbols(e->b, out);
}

int64_t sym_eval(const SymPtr& e, const std::map<std::string, int64_t>& values) {
  switch (e->op) {
    case SymExpr::Const:
    case SymExpr::Opaque: return e->value;
    case SymExpr::Var: {
      auto it = values.find(e->name);
      if (it == values.end()) throw std::runtime_error("unknown symbol '" + e->name + "'");
      return it->second;
    }
    case SymExpr::Not: return !sym_eval(e->a, values);
    default: return apply(e->op, sym_eval(e->a, values), sym_eval(e->b, values));
  }
}

SymPtr sym_parse(const std::string& t) { return Parser(t).parse(); }

}  // namespace nns::sema
