// Internal to the checker: the Z3 encoding under construction.
//
// Directives are the plan's statements (a trans, assign/replicate, order or
// constraint-table call), identified by kind and source location: a trans
// inside a loop is ONE directive however many ops it splits. Each gets a
// Boolean tracking literal; every constraint a directive implies is
// asserted as (its literals) -> formula, and the solver is asked to satisfy
// everything assuming all literals. An unsat core is then a set of
// directives that cannot all hold. Constraints without unknowns are decided
// while encoding (a true one costs nothing; a false one is asserted as
// not(literals)), so Z3 sees only the constraints that need it: schedules,
// split-count equalities of constraint tables and, with
// symbolic sizes, the size obligations.
#pragma once

#include <z3++.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "semantics/checker/checker.h"

namespace nns::sema::check {

enum class DirectiveKind { Trans, Place, Order, Constraint };

struct Directive {
  DirectiveKind kind = DirectiveKind::Trans;
  front::SourceLoc loc;
  std::string label;  // the call as written ("trans(op, dim = \"h\", num = ngpus)") or a description
};

// Why a set of directives cannot hold together, in words.
struct Conflict {
  std::vector<int> directives;         // the directives involved (tracking literals)
  std::string message;                 // the error text
  std::map<int, std::string> notes;    // per directive: what it contributes (default: its label)
  bool cite_first = false;             // append the error directive's own note to the message
};

// Given the unsat core, returns the conflict it proves if this explainer's
// constraints are the ones in the core.
using Explainer = std::function<std::optional<Conflict>(const std::set<int>& core)>;

class Encoder {
 public:
  Encoder(const Graph& g, const Plan& plan, const CheckOptions& opts);

  const Graph& g;
  const Plan& plan;
  const CheckOptions& opts;
  z3::context ctx;
  z3::solver solver;
  CheckStats stats;

  int directive(DirectiveKind kind, front::SourceLoc loc, const std::string& fallback_label);
  // The trans that made sub-op `sub` (its parent's split), the placement of a leaf.
  int trans_of(int sub);
  int place_of(int leaf);
  const Directive& info(int d) const { return directives_[d]; }
  int directive_count() const { return static_cast<int>(directives_.size()); }
  z3::expr literal(int d) const { return literals_[d]; }

  // A rule decided while encoding: true costs nothing, false is a conflict.
  void ground(bool holds, const std::function<Conflict()>& conflict);
  void conflict(Conflict c);  // a rule found false while encoding
  // (literals of dirs) -> f
  void tracked(const std::vector<int>& dirs, const z3::expr& f);
  void explain_with(Explainer e) { explainers_.push_back(std::move(e)); }

  z3::expr int_var(const std::string& name);

  // Every split, as the symbolic pass needs it: identifier `id` of op
  // `node` is cut into `divisor` equal pieces at this depth (the product of
  // the counts of every split along `id` from the whole op down), so its
  // size must be a multiple of `divisor`. `num` is this split's own count.
  struct SplitFact {
    int node = -1, sub = -1;  // sub: the split sub-op (the parent)
    std::string id;
    int64_t divisor = 1, num = 1;
    int directive = -1;
  };
  std::vector<SplitFact> splits;
  void keep_alive(std::shared_ptr<void> p) { alive_.push_back(std::move(p)); }
  z3::expr int_val(int64_t v) { return ctx.int_val(v); }

  // Solves assuming every directive; fills `result` (verdict, diagnostics).
  void solve(CheckResult& result);

  // Names for messages.
  std::string op_name(int node) const;
  std::string part_label(int sub) const;  // "part 1 of 4 (split on 'h')" / "the whole op"

 private:
  std::vector<Directive> directives_;
  std::vector<z3::expr> literals_;
  std::map<std::tuple<int, int, int, int, int>, int> index_;
  std::vector<Conflict> ground_conflicts_;
  std::vector<Explainer> explainers_;
  std::vector<std::shared_ptr<void>> alive_;
  std::vector<int> trans_cache_, place_cache_;  // per sub-op: its directive (-1: not looked up yet)
};

// The passes, in the order check_plan runs them (each in its own file).
void encode_splits(Encoder& e);       // encode_splits.cpp: split legality, coverage, devices
void encode_order(Encoder& e);        // encode_order.cpp
void encode_schedule(Encoder& e);     // encode_schedule.cpp: task orders (pipeline schedules)
void encode_tables(Encoder& e);       // encode_tables.cpp

// Helpers shared by the passes.
std::string interval_text(int64_t lo, int64_t hi);  // "[0:8)"
bool loc_before(const front::SourceLoc& a, const front::SourceLoc& b);  // source order; invalid last

}  // namespace nns::sema::check
