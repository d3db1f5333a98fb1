// Binary operators: on tensors they become graph ops; on lists, strings and
// none they compare, test membership, concatenate and repeat; symbolic sizes
// keep their expression; plain numbers compute (ints never wrap).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "semantics/interpreter.h"
#include "semantics/interpreter_internal.h"
#include "semantics/symbolic_values.h"

namespace nns::sema {

using front::SourceLoc;

Value Interpreter::eval_binary(std::string_view op, Value a, Value b, SourceLoc loc) {
  // Comparing with none (an optional tensor argument) is a plain test.
  if ((op == "==" || op == "!=") && (a.is<NoneV>() || b.is<NoneV>())) {
    bool eq = a.is<NoneV>() && b.is<NoneV>();
    return Value(op == "==" ? eq : !eq);
  }
  if (a.is<TensorV>() || b.is<TensorV>()) return eval_tensor_binary(op, a, b, loc);
  if (std::optional<Value> r = eval_container_binary(op, a, b, loc)) return *r;
  if (is_sym(a) || is_sym(b)) {
    // Symbolic sizes keep their expression through integer arithmetic;
    // anything else would make the program depend on the witness value.
    if (auto r = sym_arith(std::string(op), a, b)) return *r;
    fail(loc, sym_misuse(is_sym(a) ? a : b, "operator '" + std::string(op) + "'"));
  }
  if (!is_number(a) || !is_number(b))
    fail(loc, "operator '" + std::string(op) + "' is not defined between " + a_type_name(a) + " and " + a_type_name(b));
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    double x = to_float(a, loc, ""), y = to_float(b, loc, "");
    bool r = op == "<" ? x < y : op == "<=" ? x <= y : op == ">" ? x > y : x >= y;
    return Value(r);
  }
  if (!a.is<double>() && !b.is<double>()) return eval_int_binary(op, to_int(a, loc, ""), to_int(b, loc, ""), loc);
  return eval_float_binary(op, to_float(a, loc, ""), to_float(b, loc, ""), loc);
}

// Tensors: arithmetic becomes graph ops (elementwise with broadcasting).
Value Interpreter::eval_tensor_binary(std::string_view op, const Value& a, const Value& b, SourceLoc loc) {
  if (op == "@") return call_op_by_name("matmul", {a, b}, {}, loc);
  // Comparisons give a float 0/1 mask (no gradient flows through it).
  static const std::pair<const char*, const char*> comparisons[] = {{"==", "eq"}, {"!=", "ne"}, {"<", "lt"},
                                                                    {"<=", "le"}, {">", "gt"},  {">=", "ge"}};
  const char* comparison = nullptr;
  for (const auto& [sym, name] : comparisons)
    if (op == sym) comparison = name;
  if (a.is<TensorV>() && b.is<TensorV>()) {
    static const std::pair<const char*, const char*> ops[] = {{"+", "add"}, {"-", "sub"}, {"*", "mul"}, {"/", "div"}};
    for (const auto& [sym, name] : ops)
      if (op == sym) return call_op_by_name(name, {a, b}, {}, loc);
    if (comparison) return call_op_by_name(comparison, {a, b}, {}, loc);
    fail(loc, "operator '" + std::string(op) + "' is not defined on tensors");
  }
  bool tensor_left = a.is<TensorV>();
  Value t = tensor_left ? a : b;
  Value s = tensor_left ? b : a;
  if (!is_number(s)) fail(loc, "operator '" + std::string(op) + "' between a tensor and " + a_type_name(s));
  double x = to_float(s, loc, "scalar operand");
  if (comparison) {
    // The number becomes a one-element constant, broadcast against the tensor.
    Value c = call_op_by_name("full", {make_list({Value(int64_t{1})}), Value(x)}, {}, loc);
    return call_op_by_name(comparison, {tensor_left ? t : c, tensor_left ? c : t}, {}, loc);
  }
  if (op == "**" && tensor_left) return call_op_by_name("pow_scalar", {t, Value(x)}, {}, loc);
  if (op == "+") return call_op_by_name("add_scalar", {t, Value(x)}, {}, loc);
  if (op == "*") return call_op_by_name("mul_scalar", {t, Value(x)}, {}, loc);
  if (op == "-" && tensor_left) return call_op_by_name("add_scalar", {t, Value(-x)}, {}, loc);
  if (op == "-")
    return call_op_by_name("add_scalar", {call_op_by_name("mul_scalar", {t, Value(-1.0)}, {}, loc), Value(x)}, {}, loc);
  if (op == "/" && tensor_left) {
    if (x == 0) fail(loc, "division of a tensor by zero");
    return call_op_by_name("mul_scalar", {t, Value(1.0 / x)}, {}, loc);
  }
  fail(loc,
       "operator '" + std::string(op) + "' between " + a_type_name(a) + " and " + a_type_name(b) + " is not supported");
}

// Equality, membership, string and list concatenation, list repetition;
// nothing when the operator applies to numbers instead.
std::optional<Value> Interpreter::eval_container_binary(std::string_view op, const Value& a, const Value& b,
                                                        SourceLoc loc) {
  using ListPtr = std::shared_ptr<List>;
  if (op == "==" || op == "!=") {
    if (is_sym(a) || is_sym(b)) fail(loc, sym_misuse(is_sym(a) ? a : b, "operator '" + std::string(op) + "'"));
    bool eq;
    if (is_number(a) && is_number(b))
      eq = to_float(a, loc, "") == to_float(b, loc, "");
    else if (a.is<std::string>() && b.is<std::string>())
      eq = a.as<std::string>() == b.as<std::string>();
    else if (a.is<NoneV>() || b.is<NoneV>())
      eq = a.is<NoneV>() && b.is<NoneV>();
    else
      fail(loc, "cannot compare " + a_type_name(a) + " with " + a_type_name(b));
    return Value(op == "==" ? eq : !eq);
  }
  if (op == "in") {
    if (b.is<RangeV>()) {
      int64_t x = to_int(a, loc, "left operand of 'in'");
      return Value(x >= b.as<RangeV>().lo && x < b.as<RangeV>().hi);
    }
    if (b.is<ListPtr>()) {
      for (const Value& item : *b.as<ListPtr>()) {
        // == on tensors builds a mask op; membership needs a yes or no.
        bool tensor = a.is<TensorV>() || item.is<TensorV>(), none = a.is<NoneV>() || item.is<NoneV>();
        if (tensor && !none) fail(loc, "'in' cannot test tensors for membership (== on tensors is elementwise)");
        if (eval_binary("==", a, item, loc).as<bool>()) return Value(true);
      }
      return Value(false);
    }
    fail(loc, "'in' needs a list or range on the right, got " + type_name(b));
  }
  if (op == "+" && a.is<std::string>() && b.is<std::string>()) {
    check_string_size(static_cast<int64_t>(a.as<std::string>().size() + b.as<std::string>().size()), loc);
    return Value(a.as<std::string>() + b.as<std::string>());
  }
  if (op == "+" && a.is<ListPtr>() && b.is<ListPtr>()) {
    check_list_size(static_cast<int64_t>(a.as<ListPtr>()->size() + b.as<ListPtr>()->size()), loc);
    List r = *a.as<ListPtr>();
    for (const Value& v : *b.as<ListPtr>()) r.push_back(v);
    return make_list(std::move(r));
  }
  if (op == "*" && a.is<ListPtr>() && b.is<int64_t>()) {
    int64_t times = std::max<int64_t>(0, b.as<int64_t>()), size = static_cast<int64_t>(a.as<ListPtr>()->size()),
            total = 0;
    if (__builtin_mul_overflow(times, size, &total)) total = std::numeric_limits<int64_t>::max();
    check_list_size(total, loc);
    List r;
    for (int64_t i = 0; i < b.as<int64_t>(); ++i)
      for (const Value& v : *a.as<ListPtr>()) r.push_back(v);
    return make_list(std::move(r));
  }
  return std::nullopt;
}

// Ints are 64-bit and never wrap: an overflow is an error at the operator.
Value Interpreter::eval_int_binary(std::string_view op, int64_t x, int64_t y, SourceLoc loc) {
  auto overflow = [&]() -> Value {
    fail(loc, "integer overflow: " + std::to_string(x) + " " + std::string(op) + " " + std::to_string(y) +
                  " does not fit in 64 bits");
  };
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? overflow() : Value(r);
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? overflow() : Value(r);
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? overflow() : Value(r);
  if (op == "/") {
    if (y == 0) fail(loc, "division by zero");
    return Value(static_cast<double>(x) / static_cast<double>(y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail(loc, op == "%" ? "modulo by zero" : "division by zero");
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      if (op == "%") return Value(int64_t{0});
      overflow();
    }
    int64_t q = x / y;
    r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }  // floor semantics
    return Value(op == "//" ? q : r);
  }
  if (op == "**") {
    if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    // Square and multiply: at most 2 x 63 steps whatever the exponent.
    int64_t result = 1, base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
      // A square is taken only while higher bits remain, and the highest
      // bit is always set: a square that overflows makes the result overflow.
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
    }
    return Value(result);
  }
  fail(loc, "operator '" + std::string(op) + "' is not defined on numbers");
}

Value Interpreter::eval_float_binary(std::string_view op, double x, double y, SourceLoc loc) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "/") {
    if (y == 0) fail(loc, "division by zero");
    return Value(x / y);
  }
  if (op == "//") {
    if (y == 0) fail(loc, "division by zero");
    return Value(std::floor(x / y));
  }
  if (op == "%") {
    if (y == 0) fail(loc, "modulo by zero");
    return Value(x - std::floor(x / y) * y);
  }
  if (op == "**") return Value(std::pow(x, y));
  fail(loc, "operator '" + std::string(op) + "' is not defined on numbers");
}

}  // namespace nns::sema
