#include "semantics/value.h"

namespace nns::sema {

const Value* Record::get(const std::string& key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

Value make_list(List items) { return Value(std::make_shared<List>(std::move(items))); }

std::string type_name(const Value& v) {
  struct Namer {
    std::string operator()(const NoneV&) const { return "none"; }
    std::string operator()(bool) const { return "bool"; }
    std::string operator()(int64_t) const { return "int"; }
    std::string operator()(double) const { return "float"; }
    std::string operator()(const std::string&) const { return "str"; }
    std::string operator()(const TensorV&) const { return "tensor"; }
    std::string operator()(const OpHandle&) const { return "op"; }
    std::string operator()(const RangeV&) const { return "range"; }
    std::string operator()(const std::shared_ptr<List>&) const { return "list"; }
    std::string operator()(const std::shared_ptr<Function>&) const { return "function"; }
    std::string operator()(const std::shared_ptr<OpDef>&) const { return "op"; }
    std::string operator()(const std::shared_ptr<ModelClass>&) const { return "model"; }
    std::string operator()(const std::shared_ptr<Instance>& i) const { return "instance of " + i->class_name; }
    std::string operator()(const std::shared_ptr<Builtin>&) const { return "builtin function"; }
    std::string operator()(const std::shared_ptr<Record>& r) const { return r->kind == "dict" ? "dict" : r->kind; }
    std::string operator()(const std::shared_ptr<Module>&) const { return "module"; }
    std::string operator()(const std::shared_ptr<SymInt>&) const { return "symbolic int"; }
  };
  return std::visit(Namer{}, v.v);
}

std::string a_type_name(const Value& v) {
  std::string n = type_name(v);
  bool vowel = !n.empty() && std::string("aeiou").find(n[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + n;
}

Value* Env::find(const std::string& name) {
  for (Env* e = this; e; e = e->parent.get()) {
    auto it = e->vars.find(name);
    if (it != e->vars.end()) return &it->second;
  }
  return nullptr;
}

Value* Env::find_local(const std::string& name) {
  auto it = vars.find(name);
  return it == vars.end() ? nullptr : &it->second;
}

void Env::define(const std::string& name, Value v) {
  auto [it, inserted] = vars.insert_or_assign(name, std::move(v));
  if (inserted) order.push_back(name);
}

std::string Instance::path() const {
  if (!parent) return "";
  std::string p = parent->path();
  return p.empty() ? local_name : p + "." + local_name;
}

}  // namespace nns::sema
