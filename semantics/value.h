// Runtime values of the .nns interpreter. Everything is evaluated at plan
// time: numbers and lists compute shapes, tensors are graph references.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "frontend/ast.h"
#include "semantics/builtin_signature.h"
#include "semantics/dimop.h"
#include "semantics/op_registry.h"
#include "semantics/symbolic.h"

namespace nns::sema {

struct Value;
struct Env;
struct Instance;
class Interpreter;

struct NoneV {};
struct TensorV { int id = -1; };   // a tensor of the Graph
struct OpHandle { int subop = -1; };  // a (sub-)op during plan evaluation (plan.h)
struct RangeV { int64_t lo = 0, hi = 0; };
using List = std::vector<Value>;

// A declared op: primitive (bound to a registry row) or composite (.nns body).
struct OpDef {
  std::string name;
  const front::OpDecl* decl = nullptr;
  std::vector<OpAnno> annotations;  // parsed + normalised declared candidates
  const OpRow* row = nullptr;       // primitive ops only
  std::shared_ptr<Env> closure;     // composite bodies see their module's names
  // The bindings of its annotation made so far, by what a binding depends
  // on (the input shapes, the sizes the call gives, a generated annotation's
  // text: calls.cpp, binding_key). A model calls an op with the same shapes
  // in every layer and pass, and binding is a function of these alone.
  mutable std::unordered_map<std::string, std::shared_ptr<const BoundAnno>> bindings;
};

struct Function {
  std::shared_ptr<front::FnDef> fn;
  std::shared_ptr<Env> closure;
  std::shared_ptr<Instance> self;   // set for model methods
};

struct ModelClass {
  const front::ModelDecl* decl = nullptr;
  std::shared_ptr<Env> closure;
};

struct Builtin {
  std::string name;
  BuiltinFn fn = nullptr;
  BuiltinSignature signature;  // checked at every call (builtin_signature.h)
};

// A structured value: optimizer/schedule/data/init specs and dicts.
struct Record {
  std::string kind;  // "dict", "adamw", "normal", ...
  std::vector<std::pair<std::string, Value>> fields;
  const Value* get(const std::string& key) const;
};

struct Module {
  std::string path;  // as written in the import (diagnostics quote it)
  std::shared_ptr<Env> env;
};

struct Value {
  std::variant<NoneV, bool, int64_t, double, std::string, TensorV, RangeV, std::shared_ptr<List>,
               std::shared_ptr<Function>, std::shared_ptr<OpDef>, std::shared_ptr<ModelClass>,
               std::shared_ptr<Instance>, std::shared_ptr<Builtin>, std::shared_ptr<Record>,
               std::shared_ptr<Module>, OpHandle, std::shared_ptr<SymInt>>
      v;

  Value() = default;
  template <class T>
  Value(T x) : v(std::move(x)) {}
  template <class T>
  bool is() const { return std::holds_alternative<T>(v); }
  template <class T>
  const T& as() const { return std::get<T>(v); }
  template <class T>
  T& as() { return std::get<T>(v); }
};

Value make_list(List items);
std::string type_name(const Value& v);
// With its article, for messages: "an int", "a list", "an instance of Mlp".
std::string a_type_name(const Value& v);

// A lexical scope. `order` remembers first-definition order, which names
// submodules and parameters deterministically.
struct Env {
  std::shared_ptr<Env> parent;
  std::unordered_map<std::string, Value> vars;
  std::vector<std::string> order;

  explicit Env(std::shared_ptr<Env> p = nullptr) : parent(std::move(p)) {}
  Value* find(const std::string& name);
  Value* find_local(const std::string& name);
  void define(const std::string& name, Value v);
};

// A model instance: its scope holds params (as tensors), submodules and methods.
struct Instance {
  std::string class_name;
  Instance* parent = nullptr;
  std::string local_name;   // "attn", "blocks.3"
  std::shared_ptr<Env> env;
  std::vector<std::pair<std::string, int>> params;  // local name → tensor id
  std::vector<std::shared_ptr<Instance>> children;
  std::string path() const;  // "blocks.3.attn" ("" for a root)
};

}  // namespace nns::sema
