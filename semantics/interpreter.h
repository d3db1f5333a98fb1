// The interpreter: evaluates a .nns program with a config preset into an
// operator Graph (forward), a TrainSpec and the list of plans. It is a
// tree-walking evaluator over the AST; shapes are concrete when it runs.
// The REPL and file mode share this one implementation.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "frontend/ast.h"
#include "frontend/diagnostics.h"
#include "semantics/eval_budget.h"
#include "semantics/graph.h"
#include "semantics/plan.h"
#include "semantics/train_spec.h"
#include "semantics/value.h"
#include "semantics/weight_map.h"

namespace nns::sema {

struct PlanInfo {
  std::string name;
  std::shared_ptr<front::FnDef> fn;
  std::shared_ptr<Env> env;  // the scope it was declared in (the file's, or the REPL session's)
};

// Arguments of a call as builtins see them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  front::SourceLoc loc;
  std::vector<front::SourceLoc> arg_locs;    // per positional argument (empty for internal calls)
  std::vector<front::SourceLoc> named_locs;  // per keyword argument, "name = value" (idem)
  const Value* get(const std::string& name) const;
  // Where to point at positional argument i / keyword argument i (the call when unknown).
  front::SourceLoc positional_loc(size_t i) const { return i < arg_locs.size() ? arg_locs[i] : loc; }
  front::SourceLoc named_loc(size_t i) const { return i < named_locs.size() ? named_locs[i] : loc; }
};

struct EvalOptions {
  std::string config;                   // "" = the first preset in the file
  std::vector<std::string> stdlib_dirs;  // searched for `import "name"`
  EvalBudget budget = EvalBudget{};
  std::vector<std::string> overrides = {};  // --set KEY=VALUE (config_overrides.h)
};

// The most elements a list may hold: checked before it is built, so that
// [x for x in 0..10**12] or a list doubled in a loop is a located error,
// not an allocation failure. A list of 10^7 values takes about 0.5 GB;
// 10^8 let one doubled in a loop take 4 GB before the error (fuzz_interpreter).
constexpr int64_t kMaxListElements = 10'000'000;
// The longest string a program may make (bytes), for the same reason: a
// string doubled in a loop used to grow until the kernel killed nns (23 GB
// after 100 s); with this limit it stops after 23 doublings, at once.
constexpr int64_t kMaxStringBytes = 16'000'000;

class Interpreter {
 public:
  Interpreter(front::SourceManager& sources, front::DiagnosticEngine& diags, EvalOptions opts);
  ~Interpreter();
  // graph_ points into the object itself.
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Why the last phase call (parse, parse_text, evaluate, evaluate_plan,
  // run_session_input) returned false, so callers need not read the
  // diagnostics' text: the config named by EvalOptions::config does not
  // exist (the driver answers with a usage error), the plan named in
  // evaluate_plan does not exist (idem), or anything else (bad input, all
  // reported as diagnostics). None after a call that succeeded.
  enum class Failure { None, UnknownConfig, UnknownPlan, Other };
  Failure failure() const { return failure_; }

  // Phase 1: parse the file and everything it imports. False on syntax errors.
  bool parse(const std::string& path);
  // Phase 2: evaluate with the chosen config. False on errors (reported).
  bool evaluate();

  const front::Program* main_program() const { return main_program_; }
  // The model's graph (never instantiate_op's local one: other threads may
  // read it while a sub-op is elaborated, see graph_).
  Graph& graph() { return model_graph_; }
  const std::optional<TrainSpec>& train() const { return train_; }
  const std::vector<PlanInfo>& plans() const { return plans_; }
  const std::string& config_name() const { return config_name_; }
  std::vector<std::string> config_names() const;

  // Phase 3 (after evaluate; plan_eval.cpp): evaluates plan `name` with
  // `ngpus` devices against the forward graph; the plan parameter named
  // `ngpus` is bound to it (from the command line). False on errors
  // (reported, with the directive's location); an unknown plan name is
  // reported too.
  bool evaluate_plan(const std::string& name, int64_t ngpus, Plan& out);
  Plan* active_plan() { return plan_; }
  // Phase 3 for a checkpoint layout (weights_eval.cpp): runs `weights NAME`
  // block `name` and fills `out` with its entries. False on errors
  // (reported, located); an unknown name is reported with the known ones.
  bool evaluate_weights(const std::string& name, WeightMapSpec& out);
  std::vector<std::string> weight_map_names() const;
  WeightMapSpec* active_weight_map() { return weight_map_; }
  // The plan before any directive: every top-level forward op whole and
  // unplaced (what a plan block starts from).
  Plan new_plan(const std::string& name, int64_t ngpus) const;

  // ---- the REPL session (nns repl; repl/) ----
  // Phase 1 without a file: `text` is the main program (imports resolve
  // from the working directory).
  bool parse_text(const std::string& name, std::string text);
  // After evaluate(): parses `text` (one REPL input: statements and
  // op/fn/model/plan declarations, imports) as source `name` and runs it in
  // the session scope, a child of the main file's scope, so the file's names
  // are visible and definitions persist across inputs. Plan primitives act
  // on `plan` (null: refused, as outside a plan block). When the input ends
  // with an expression statement its value goes to *result. False on errors
  // (reported); what ran before the error stays done — the caller snapshots
  // the plan to undo a refused directive. Ops called at the prompt are added
  // to the graph after the model's: plans made before do not see them.
  bool run_session_input(const std::string& name, std::string text, Plan* plan, std::optional<Value>* result);
  const std::shared_ptr<Env>& session_env();

  // ---- per-rank lowering (backend/lowering/lower_plan.cpp, through an elaborator callback) ----
  // The ops one sub-op runs: top-level op `node` of graph() elaborated again,
  // into `local`, on its slice — inputs of `input_shapes`, int arguments
  // named by a split identifier divided by `divisors[id]` (an attention
  // split on `h` gets h / num heads), shape arguments of reshape/view taken
  // from `output_shapes`. Composite ops run their body again, so every op
  // inside sees the sliced shapes. Throws std::runtime_error (naming the op)
  // when the op cannot be elaborated on that slice.
  OpInstance instantiate_op(int node, const std::vector<Shape>& input_shapes, const std::vector<Shape>& output_shapes,
                            const std::map<std::string, int64_t>& divisors, Graph& local);
  // What instantiate_op(node, input_shapes, output_shapes, divisors) reads,
  // as a key: the definition called, how many tensors each of its
  // parameters took, its arguments after the divisors and reshape's target,
  // the input dtypes and the slice shapes. Two calls with equal keys
  // elaborate to the same local nodes and tensors (ids shifted; every name
  // is relative, see instantiate.cpp), whatever the op's name and place;
  // only its location (the nodes' loc) differs. Throws what instantiate_op
  // would throw before running the body (no record, a wrong count, an
  // argument that does not divide).
  std::string instantiation_key(int node, const std::vector<Shape>& input_shapes,
                                const std::vector<Shape>& output_shapes,
                                const std::map<std::string, int64_t>& divisors) const;

  // ---- used by builtins and op calls ----
  [[noreturn]] void fail(front::SourceLoc loc, const std::string& msg);
  // Fails at `loc` when putting `v` into `list` would make the list contain
  // itself (printing or comparing it would never end).
  void check_no_cycle(const List& list, const Value& v, front::SourceLoc loc);
  // Fails at `loc` unless a list of `n` elements is within kMaxListElements.
  void check_list_size(int64_t n, front::SourceLoc loc);
  // Fails at `loc` unless a string of `n` bytes is within kMaxStringBytes.
  void check_string_size(int64_t n, front::SourceLoc loc);
  // Counts one step of work (a loop iteration, a call); past the budget's
  // steps it fails at `loc` (an endless loop ends, located). Now and then it
  // also looks at the clock, for --eval-timeout and --check-timeout.
  void tick(front::SourceLoc loc) {
    if (++ticks_ > step_limit_ || (ticks_ & 0x3FFF) == 0) check_budget(loc);
  }
  // A new top-level evaluation (file, plan, REPL line) starts its budget.
  void start_budget();
  front::SourceManager& sources() { return sources_; }
  int64_t to_int(const Value& v, front::SourceLoc loc, const char* what);
  double to_float(const Value& v, front::SourceLoc loc, const char* what);
  // With `sym`, symbolic dims are allowed (symbolic.h): the witness goes in
  // the shape, the expressions in *sym (left empty when all are numbers).
  std::vector<int64_t> to_shape(const Value& v, front::SourceLoc loc, std::vector<SymPtr>* sym = nullptr);
  Value call(const Value& callee, CallArgs& args);

 private:
  void check_budget(front::SourceLoc loc);
  // Every scope is made here and remembered (weakly), so that the
  // destructor can break the cycles between scopes and closures.
  std::shared_ptr<Env> new_env(std::shared_ptr<Env> parent);
  std::vector<std::weak_ptr<Env>> envs_;
  // A loop iteration's scope: `scope` emptied when nothing but the loop
  // holds it (no closure captured it), else a new child of `parent`.
  void reuse_scope(std::shared_ptr<Env>& scope, const std::shared_ptr<Env>& parent);
  // Whether running block `b` may define a name in its own scope (let, fn,
  // a tensor declaration, `x = v`); an if-branch that does not runs
  // without a scope of its own.
  static bool defines_names(const front::Block& b);
  size_t envs_prune_at_ = 1024;
  int64_t ticks_ = 0;        // steps since the evaluation began
  int64_t step_limit_ = EvalBudget::kDefaultSteps;  // opts_.budget.steps, or no limit
  double budget_start_ = 0;  // seconds on the steady clock
  struct Loaded;
  enum class Flow { Normal, Return, Break, Continue };
  static const char* flow_keyword(Flow f) {
    return f == Flow::Return ? "'return'" : f == Flow::Break ? "'break'" : "'continue'";
  }

  // Ends a phase call: records Failure::Other when it failed for no more
  // specific reason (failure_ is reset to None when a phase starts).
  bool finish_phase(bool ok);
  int load_and_parse(const std::string& path, front::SourceLoc from);
  bool parse_main(int file, const std::string& main_path);
  std::string resolve_import(const std::string& spec, const std::string& from_file);
  std::shared_ptr<Env> run_module(int index);
  void declare_items(const front::Program& prog, const std::shared_ptr<Env>& env);
  void eval_config(const front::Program& prog, const std::shared_ptr<Env>& env);
  void run_train(const front::TrainDecl& t, const std::shared_ptr<Env>& env, front::SourceLoc loc);

  Flow exec_block(const front::Block& b, const std::shared_ptr<Env>& env);
  Flow exec(const front::Stmt& s, const std::shared_ptr<Env>& env);
  void assign(const front::Expr& target, Value v, const std::shared_ptr<Env>& env, front::SourceLoc loc);
  void declare_tensor(const front::TensorDecl& t, const std::shared_ptr<Env>& env, front::SourceLoc loc);
  Value eval(const front::Expr& e, const std::shared_ptr<Env>& env);
  Value eval_binary(std::string_view op, Value a, Value b, front::SourceLoc loc);
  // eval_binary's cases (interpreter_binary.cpp): a tensor operand, lists and strings, plain numbers.
  Value eval_tensor_binary(std::string_view op, const Value& a, const Value& b, front::SourceLoc loc);
  std::optional<Value> eval_container_binary(std::string_view op, const Value& a, const Value& b, front::SourceLoc loc);
  Value eval_int_binary(std::string_view op, int64_t x, int64_t y, front::SourceLoc loc);
  Value eval_float_binary(std::string_view op, double x, double y, front::SourceLoc loc);
  Value eval_call(const front::Call& c, const std::shared_ptr<Env>& env, front::SourceLoc loc);
  Value member(const Value& obj, const std::string& name, front::SourceLoc loc);
  Value index(const Value& obj, const Value& idx, front::SourceLoc loc);
  bool truthy(const Value& v, front::SourceLoc loc);

  Value call_function(const Function& f, CallArgs& args);
  Value instantiate(const ModelClass& cls, CallArgs& args);
  Value call_op(const OpDef& op, CallArgs& args);
  // call_op's steps (calls.cpp): operand split, annotation binding, node emission.
  struct OpOperands;
  void split_operands(const OpDef& op, CallArgs& args, const std::shared_ptr<Env>& env, const std::string& what, OpOperands& out);
  void check_float_operand(const OpDef& op, int tensor, front::SourceLoc at, const std::string& what, const std::string& param);
  std::shared_ptr<const BoundAnno> bind_annotation(const OpDef& op, CallArgs& args, const std::string& what,
                                                   const OpOperands& ops);
  std::vector<int> emit_node(const OpDef& op, CallArgs& args, const std::shared_ptr<Env>& env, OpOperands& ops, const BoundAnno& bound);
  std::vector<int> run_composite_body(const OpDef& op, CallArgs& args, const std::shared_ptr<Env>& env, int id,
                                      const std::vector<int>& inputs, const BoundAnno& bound);
  Value call_op_by_name(const std::string& name, std::vector<Value> positional,
                        std::vector<std::pair<std::string, Value>> named, front::SourceLoc loc);
  std::shared_ptr<Env> bind_params(const std::vector<front::Param>& params, CallArgs& args,
                                   const std::shared_ptr<Env>& closure, const std::string& what);
  void finalize_names();
  std::string op_prefix() const;

  front::SourceManager& sources_;
  front::DiagnosticEngine& diags_;
  EvalOptions opts_;
  std::vector<std::unique_ptr<Loaded>> modules_;  // every parsed file, main first
  std::unordered_map<std::string, int> module_index_;
  const front::Program* main_program_ = nullptr;
  std::shared_ptr<Env> builtins_;
  std::shared_ptr<Env> prelude_;

  Graph model_graph_;
  // The graph evaluation adds nodes to: the model's, or the local graph of
  // the sub-op instantiate_op elaborates. Switched as a pointer, not by
  // swapping the graphs, so that the model's graph stays whole meanwhile:
  // `nns check` verifies the programs, reading it, while its capacity check
  // elaborates kernels (driver/check_stage.cpp).
  Graph* graph_ = &model_graph_;
  // How each op node was called, so a sub-op can be elaborated again on its
  // slice (instantiate_op): its definition and, per parameter, how many
  // tensor inputs it took (-1: an attribute).
  struct CallRecord {
    const OpDef* def = nullptr;
    std::vector<int> tensors_per_param;
  };
  std::unordered_map<int, CallRecord> call_records_;  // by node of model_graph_ (not of instantiate_op's local graphs)
  // node's record, checked for an elaboration on `input_shapes` slices (instantiate.cpp).
  const CallRecord& record_for_instantiation(int node, size_t input_shapes) const;
  bool instantiating_ = false;
  std::optional<TrainSpec> train_;
  std::vector<PlanInfo> plans_;
  std::vector<PlanInfo> weight_maps_;  // `weights NAME` blocks of the main file
  std::string config_name_;
  std::vector<const front::ConfigDecl*> configs_;

  // Naming: op names are "<scope>.<kind>#<n>"; scopes are instance paths or
  // composite-op names. Counters per scope keep names stable.
  std::vector<std::shared_ptr<Instance>> scope_stack_;
  std::vector<int> composite_stack_;  // enclosing composite node ids
  std::unordered_map<std::string, std::unordered_map<std::string, int>> op_counts_;
  std::vector<std::pair<int, std::shared_ptr<Instance>>> param_owners_;
  std::vector<std::pair<std::string, front::SourceLoc>> call_stack_;
  Value return_value_;
  std::shared_ptr<Env> main_env_;
  std::shared_ptr<Env> session_env_;                                // REPL inputs run here
  std::vector<std::unique_ptr<front::Program>> session_programs_;  // kept: closures point into them
  const front::Program* session_program_ = nullptr;                // the one being declared
  Plan* plan_ = nullptr;
  WeightMapSpec* weight_map_ = nullptr;  // the weights block being run
  Failure failure_ = Failure::None;
  front::SourceLoc flow_loc_;  // the last return/break/continue run (misplaced ones are reported there)
  int in_method_depth_ = 0;  // > 0 while a function body runs (params are refused there)

  friend struct Builtins;
};

}  // namespace nns::sema
