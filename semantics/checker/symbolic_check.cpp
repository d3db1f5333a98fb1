// Symbolic sizes: what must hold for every admissible size.
//
// The directive check (checker.cpp) ran on the graph elaborated with the
// witness values; the plan's structure — which op is split along which
// identifier into how many parts, placed where, ordered how — does not
// depend on the sizes, and every split cuts its identifier into equal
// pieces. So the plan is legal for a size assignment exactly when, for each
// split, the identifier's size is a multiple of the product of the counts
// of every split along it from the whole op down (then each piece has an
// integer size and the pieces tile the op as at the witness), and the model
// itself is well-formed (its size facts, Graph::sym_obligations). Each
// such obligation phi(s) is proved for all admissible s by asking Z3 for
// an s with admissible(s) and not phi(s): unsat is a proof, a model is a
// counter-example printed with the directive it breaks. Identical
// obligations (the same size expression and divisor, from many ops) are
// proved once. Memory is checked at the witness sizes only.
#include "semantics/checker/symbolic_check.h"
#include "semantics/check_deadline.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace nns::sema::check {

namespace {

// Z3 resource units for one shortcut lemma: far above what a linear size
// fact needs (a few thousand), far below what makes a lemma slow.
constexpr unsigned kLemmaResourceLimit = 2000000;

class Prover {
 public:
  Prover(Encoder& e, CheckResult& r) : e_(e), r_(r), c_(e.ctx), s_(e.ctx) {
    z3::params p(c_);
    p.set("timeout", e.opts.timeout_ms);
    s_.set(p);
  }

  void run() {
    const Graph& g = e_.g;
    for (const SymbolDecl& d : g.symbols) {
      z3::expr v = c_.int_const(d.name.c_str());
      ++e_.stats.variables;
      vars_.emplace(d.name, v);
      s_.add(v >= 1);  // a size
    }
    for (const SymbolDecl& d : g.symbols)
      for (const SymPtr& k : d.constraints) s_.add(as_bool(k));
    // The model's own size facts first: a plan cannot be judged on an ill-formed model.
    for (const SymObligation& o : g.sym_obligations) {
      if (!seen_.insert("m:" + sym_text(o.holds)).second) continue;
      if (!prove(o.holds, [&](const std::string& values) {
            front::Diagnostic d{front::Severity::Error, o.loc, o.message + ", which fails for " + values, {}};
            add_symbol_notes(d, o.holds);
            return d;
          }))
        return;
    }
    for (const Encoder::SplitFact& f : e_.splits) {
      const OpNode& n = g.node(f.node);
      auto it = n.sym_sizes.find(f.id);
      if (it == n.sym_sizes.end()) continue;  // a plain number: decided at the witness already
      SymPtr size = it->second;
      SymPtr holds = sym_binary(SymExpr::Eq, sym_binary(SymExpr::Mod, size, sym_const(f.divisor)), sym_const(0));
      if (!seen_.insert("s:" + sym_text(holds)).second) continue;
      if (!prove(holds, [&](const std::string& values) {
            const Directive& dir = e_.info(f.directive);
            std::string pieces =
                f.divisor == f.num ? std::to_string(f.num) + " parts"
                                   : std::to_string(f.num) + " parts (" + std::to_string(f.divisor) + " pieces in all)";
            front::Diagnostic d{front::Severity::Error,
                                dir.loc,
                                "cannot split '" + f.id + "' of " + e_.part_label(f.sub) + " into " + pieces +
                                    " for every admissible size: for " + values + " its size " + sym_text(size) +
                                    " = " + std::to_string(value_of(size)) + " is not divisible by " +
                                    std::to_string(f.divisor),
                                {}};
            add_symbol_notes(d, size);
            return d;
          }))
        return;
    }
  }

 private:
  // The largest divisor of `d` that every admissible value of `f` is a
  // multiple of, for a factor that is a constant or a symbol: each
  // candidate "f % k == 0" is linear in f and proved by Z3.
  int64_t guaranteed_divisor(const SymPtr& f, int64_t d) {
    if (f->op == SymExpr::Const) return f->value == 0 ? d : std::gcd(f->value < 0 ? -f->value : f->value, d);
    if (f->op != SymExpr::Var || !vars_.count(f->name)) return 1;
    auto key = std::make_pair(f->name, d);
    auto it = divisor_cache_.find(key);
    if (it != divisor_cache_.end()) return it->second;
    int64_t best = 1;
    for (int64_t k = d; k > 1; --k) {
      if (d % k != 0) continue;
      if (lemma(z3::mod(vars_.at(f->name), c_.int_val(k)) == 0)) {
        best = k;
        break;
      }
    }
    divisor_cache_[key] = best;
    return best;
  }

  // A sound shortcut Z3's nonlinear arithmetic often misses: a product is a
  // multiple of D when the factors' guaranteed divisors multiply to one
  // (batch % 4 == 0 proves batch * seq % 4 == 0).
  bool divisible_by_factors(const SymPtr& holds) {
    if (holds->op != SymExpr::Eq || !sym_is_const(holds->b) || holds->b->value != 0) return false;
    const SymPtr& mod = holds->a;
    if (mod->op != SymExpr::Mod || !sym_is_const(mod->b) || mod->b->value <= 0) return false;
    int64_t remaining = mod->b->value;
    for (const SymPtr& f : product_factors(mod->a)) {
      if (remaining == 1) break;
      remaining /= std::gcd(remaining, guaranteed_divisor(f, remaining));
    }
    return remaining == 1;
  }

  // A shortcut's claim, proved or not within a resource budget. The budget
  // counts Z3's own work (rlimit), not time, so a slow or loaded machine
  // reaches the same verdict as a fast one; the time limit stays only as
  // the user's overall bound (--check-timeout). A claim the budget cannot
  // settle is simply not used: the obligation then goes to Z3 whole.
  bool lemma(const z3::expr& claim) {
    s_.push();
    s_.add(!claim);
    s_.set("rlimit", kLemmaResourceLimit);
    s_.set("timeout", CheckDeadline::remaining_ms(e_.opts.timeout_ms));
    const bool proved = s_.check() == z3::unsat;
    s_.set("rlimit", 0u);
    s_.pop();
    return proved;
  }

  static std::vector<SymPtr> product_factors(const SymPtr& e) {
    std::vector<SymPtr> factors, stack{e};
    while (!stack.empty()) {
      SymPtr x = stack.back();
      stack.pop_back();
      if (x->op == SymExpr::Mul) {
        stack.push_back(x->a);
        stack.push_back(x->b);
      } else {
        factors.push_back(x);
      }
    }
    return factors;
  }

  // A sound shortcut for an equality of two products: it holds when the
  // constant factors multiply to the same number and the other factors pair
  // up into equal ones. Each pairing is linear (sizes with floor divisions
  // by constants), which Z3 settles at once, where the product as a whole
  // is nonlinear arithmetic that can take seconds or come back "unknown"
  // (4 * (((image - 1) // 2) // 2 + 1)^2 == 4 * (image // 4)^2).
  bool equal_products(const SymPtr& holds) {
    if (holds->op != SymExpr::Eq) return false;
    std::vector<SymPtr> left = product_factors(holds->a), right = product_factors(holds->b);
    int64_t left_const = 1, right_const = 1;
    auto split = [](std::vector<SymPtr>& factors, int64_t& constant) {
      std::vector<SymPtr> rest;
      for (const SymPtr& f : factors) {
        if (sym_is_const(f))
          constant *= f->value;  // sizes: small constants, no overflow in practice
        else
          rest.push_back(f);
      }
      factors = rest;
    };
    split(left, left_const);
    split(right, right_const);
    if (left.size() < 2 || left.size() != right.size() || left_const != right_const) return false;
    std::vector<bool> used(right.size(), false);
    for (const SymPtr& l : left) {
      bool matched = false;
      for (size_t j = 0; j < right.size() && !matched; ++j) {
        if (used[j] || !lemma(as_int(l) == as_int(right[j]))) continue;
        used[j] = matched = true;
      }
      if (!matched) return false;
    }
    return true;
  }

  // True when proved; otherwise fills the result (Illegal or Unknown).
  template <class Report>
  bool prove(const SymPtr& holds, Report report) {
    ++e_.stats.obligations;
    if (divisible_by_factors(holds) || equal_products(holds)) return true;
    opaque_.clear();
    opaque_names_.clear();
    z3::expr phi = as_bool(holds);
    s_.push();
    s_.add(!phi);
    s_.set("timeout", CheckDeadline::remaining_ms(e_.opts.timeout_ms));
    z3::check_result res = s_.check();
    if (res == z3::unsat) {
      s_.pop();
      return true;
    }
    if (res == z3::unknown) {
      r_.verdict = Verdict::Unknown;
      std::string why = s_.reason_unknown();
      r_.reason = (why == "timeout" || why == "canceled"
                       ? "the Z3 time limit (" + std::to_string(e_.opts.timeout_ms) + " ms, --check-timeout) ran out"
                       : "Z3 could not decide (" + why + ")") +
                  " while proving \"" + sym_text(holds) + "\" for every admissible size";
      s_.pop();
      return false;
    }
    model_ = s_.get_model();
    if (!opaque_.empty()) {
      // The counter-example may only be an artefact of a size the checker does not track.
      r_.verdict = Verdict::Unknown;
      r_.reason = "cannot prove \"" + sym_text(holds) + "\" for every admissible size: it depends on " + opaque_names_ +
                  ", which the checker does not track symbolically";
      s_.pop();
      return false;
    }
    std::string values;
    for (const SymbolDecl& d : e_.g.symbols)
      values += (values.empty() ? "" : ", ") + d.name + " = " + std::to_string(value_of(sym_var(d.name)));
    r_.verdict = Verdict::Illegal;
    r_.diagnostics.push_back(report(values));
    s_.pop();
    return false;
  }

  int64_t value_of(const SymPtr& e) {
    std::map<std::string, int64_t> values;
    for (const auto& [name, v] : vars_) {
      z3::expr x = model_.eval(v, true);
      int64_t iv = 0;
      if (x.is_numeral_i64(iv)) values[name] = iv;
    }
    try {
      return sym_eval(e, values);
    } catch (const std::exception&) {
      return 0;
    }
  }

  void add_symbol_notes(front::Diagnostic& d, const SymPtr& e) {
    std::vector<std::string> names;
    sym_symbols(e, names);
    for (const SymbolDecl& s : e_.g.symbols) {
      if (std::find(names.begin(), names.end(), s.name) == names.end()) continue;
      std::string admits;
      for (const std::string& t : s.constraint_text) admits += (admits.empty() ? "" : " and ") + t;
      d.notes.push_back({front::Severity::Note,
                         s.loc,
                         "'" + s.name + "' is symbolic (witness " + std::to_string(s.witness) +
                             (admits.empty() ? ", any size" : ", admitting " + admits) + ")",
                         {}});
    }
  }

  z3::expr as_int(const SymPtr& e) {
    switch (e->op) {
      case SymExpr::Const: return c_.int_val(e->value);
      case SymExpr::Var: {
        auto it = vars_.find(e->name);
        if (it != vars_.end()) return it->second;
        return opaque(e->name);
      }
      case SymExpr::Opaque: return opaque(e->name);
      case SymExpr::Add: return as_int(e->a) + as_int(e->b);
      case SymExpr::Sub: return as_int(e->a) - as_int(e->b);
      case SymExpr::Mul: return as_int(e->a) * as_int(e->b);
      case SymExpr::FloorDiv: return as_int(e->a) / as_int(e->b);  // Z3: floor for a positive divisor
      case SymExpr::Mod: return z3::mod(as_int(e->a), as_int(e->b));
      default: return z3::ite(as_bool(e), c_.int_val(1), c_.int_val(0));
    }
  }

  z3::expr as_bool(const SymPtr& e) {
    switch (e->op) {
      case SymExpr::Eq: return as_int(e->a) == as_int(e->b);
      case SymExpr::Ne: return as_int(e->a) != as_int(e->b);
      case SymExpr::Lt: return as_int(e->a) < as_int(e->b);
      case SymExpr::Le: return as_int(e->a) <= as_int(e->b);
      case SymExpr::Gt: return as_int(e->a) > as_int(e->b);
      case SymExpr::Ge: return as_int(e->a) >= as_int(e->b);
      case SymExpr::And: return as_bool(e->a) && as_bool(e->b);
      case SymExpr::Or: return as_bool(e->a) || as_bool(e->b);
      case SymExpr::Not: return !as_bool(e->a);
      default: return as_int(e) != 0;
    }
  }

  z3::expr opaque(const std::string& what) {
    auto it = opaque_vars_.find(what);
    if (it == opaque_vars_.end()) {
      it = opaque_vars_.emplace(what, c_.int_const(("opaque" + std::to_string(opaque_vars_.size())).c_str())).first;
      ++e_.stats.variables;
    }
    if (opaque_.insert(what).second) opaque_names_ += (opaque_names_.empty() ? "" : ", ") + what;
    return it->second;
  }

  Encoder& e_;
  CheckResult& r_;
  z3::context& c_;
  z3::solver s_;
  z3::model model_{c_};
  std::map<std::string, z3::expr> vars_, opaque_vars_;
  std::map<std::pair<std::string, int64_t>, int64_t> divisor_cache_;
  std::set<std::string> seen_, opaque_;
  std::string opaque_names_;
};

}  // namespace

void prove_symbolic(Encoder& e, CheckResult& result) {
  if (e.g.symbols.empty()) return;
  result.symbolic = true;
  Prover(e, result).run();
}

}  // namespace nns::sema::check
