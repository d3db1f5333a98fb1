// Builtin signatures: parsing the one-line declarations and checking calls
// against them (builtin_signature.h).
#include "semantics/builtin_signature.h"

#include <cctype>
#include <cstdint>
#include <stdexcept>

#include "frontend/suggest.h"
#include "semantics/interpreter.h"

namespace nns::sema {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string plural(size_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

BuiltinSignature BuiltinSignature::parse(const std::string& spec) {
  BuiltinSignature sig;
  sig.declared = true;
  bool keyword_only = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item = trim(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) {
      if (comma != std::string::npos || !sig.params.empty())
        throw std::logic_error("builtin spec '" + spec + "': empty parameter");
      continue;
    }
    if (sig.variadic) throw std::logic_error("builtin spec '" + spec + "': nothing may follow a repeated parameter");
    if (item == "*") {
      keyword_only = true;
      continue;
    }
    if (item == "/") {
      for (BuiltinParam& p : sig.params) p.keyword = false;
      continue;
    }
    BuiltinParam p;
    if (item.size() > 3 && item.compare(item.size() - 3, 3, "...") == 0) {
      if (keyword_only) throw std::logic_error("builtin spec '" + spec + "': a repeated parameter is positional");
      item.resize(item.size() - 3);
      p.keyword = false;
      sig.variadic = true;
    }
    for (char c : item)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
        throw std::logic_error("builtin spec '" + spec + "': bad name '" + item + "'");
    p.name = item;
    p.positional = !keyword_only;
    for (const BuiltinParam& q : sig.params)
      if (q.name == p.name) throw std::logic_error("builtin spec '" + spec + "': '" + item + "' twice");
    sig.params.push_back(p);
  }
  return sig;
}

size_t BuiltinSignature::max_positional() const {
  if (variadic) return SIZE_MAX;
  size_t n = 0;
  for (const BuiltinParam& p : params) n += p.positional ? 1 : 0;
  return n;
}

std::vector<std::string> BuiltinSignature::keyword_names() const {
  std::vector<std::string> out;
  for (const BuiltinParam& p : params)
    if (p.keyword) out.push_back(p.name);
  return out;
}

void check_builtin_call(Interpreter& in, const std::string& fn, const BuiltinSignature& sig, const CallArgs& args) {
  if (!sig.declared) return;
  // Every builtin call comes here (hundreds of thousands in a large plan):
  // the common case allocates nothing; messages are built only on failure.
  const size_t max_pos = sig.max_positional();
  if (args.positional.size() > max_pos) {
    std::string msg = fn + "() takes at most " + std::to_string(max_pos) + " argument(s), " +
                      std::to_string(args.positional.size()) + " given";
    std::string kw_only;
    for (const BuiltinParam& p : sig.params)
      if (!p.positional) kw_only += (kw_only.empty() ? "" : ", ") + p.name + " = ...";
    if (!kw_only.empty()) msg += " (by keyword only: " + kw_only + ")";
    in.fail(args.positional_loc(max_pos), msg);
  }
  for (size_t i = 0; i < args.named.size(); ++i) {
    const std::string& name = args.named[i].first;
    size_t at = 0;
    while (at < sig.params.size() && !(sig.params[at].keyword && sig.params[at].name == name)) ++at;
    if (at == sig.params.size()) {
      std::string msg = fn + "() has no parameter '" + name + "'";
      const std::vector<std::string> keywords = sig.keyword_names();
      if (keywords.empty()) {
        msg += " (it takes no keyword arguments)";
      } else {
        std::string list;
        for (const std::string& k : keywords) list += (list.empty() ? "" : ", ") + k;
        msg += front::did_you_mean(name, keywords) + " (parameters: " + list + ")";
      }
      in.fail(args.named_loc(i), msg);
    }
    // Positional parameters come first, so index `at` was filled by position
    // when fewer than `at` positionals precede it.
    bool by_position = sig.params[at].positional && at < args.positional.size();
    bool repeated = false;
    for (size_t j = 0; j < i; ++j) repeated = repeated || args.named[j].first == name;
    if (by_position || repeated) in.fail(args.named_loc(i), fn + "(): argument '" + name + "' given twice");
  }
}

void define_builtins(Env& env, std::initializer_list<BuiltinDecl> decls) {
  for (const BuiltinDecl& d : decls) {
    auto b = std::make_shared<Builtin>();
    b->name = d.name;
    b->fn = d.fn;
    b->signature = BuiltinSignature::parse(d.params);
    env.define(d.name, Value(std::move(b)));
  }
}

}  // namespace nns::sema
