// Pipeline schedules in .nns: tasks and the schedule library as plan
// builtins.
//
//   fwd(OPS, mb)   wgrad(OPS, mb)   bwd(OPS, mb)
//       a task: the forward, weight-gradient backward or (input-gradient,
//       or whole when no wgrad of the group is ever named) backward of the
//       group of ops OPS for micro-batch mb. The first task naming a group
//       makes it a segment; a later one must name the same ops or ops of
//       no segment.
//   order(TASK, TASK)
//       the first task runs before the second on every device that runs
//       parts of both (the op-level order(a, b) is unchanged).
//   schedule(KIND, STAGES, v = 1, head = OPS, tail = OPS)
//       a schedule of the library (pipeline_schedule.h): the per-pipeline-
//       rank task order of KIND as order(TASK, TASK) directives between
//       consecutive tasks of each rank, all located at this call.
//       KIND: "gpipe", "1f1b", "interleaved" (STAGES has p*v entries: stage
//       c*p + r is chunk c of rank r), "zb-h1", "interlaced" (head and tail
//       run on every device), "nf1b" / "3f1b" (STAGES is a list of R+1
//       passes, each a list of p stage op lists; passes 0..R-1 no-grad).
//       The micro-batch count is the train block's micro_batches.
//
// Why built in rather than written in .nns over order(): the generators
// are integer bookkeeping over thousands of tasks (48 layers x 3 passes x
// m micro-batches) that the golden tests pin down exactly; one C++ copy is
// shared by the builtin, `--emit=schedule`, the REPL and the benchmark,
// and plan evaluation stays fast. What it produces is nothing but
// order(task, task) directives, so a hand-written schedule built from
// fwd/bwd/wgrad and order() is lowered and checked the same way.
#include <algorithm>
#include <set>

#include "semantics/builtin_args.h"
#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::sema {

using front::SourceLoc;

namespace {

using builtin_args::arg;

// The most tasks one schedule() may generate (a 96-stage, 4096-micro-batch
// pipeline has 1.2 M): past it the generators' lists are gigabytes.
constexpr int64_t kMaxScheduleTasks = 4'000'000;

Plan& active(Interpreter& in, CallArgs& a, const char* fn) { return builtin_args::active_plan(in, a, fn, "is a plan primitive"); }

// The top-level nodes an op value designates (a sub-op stands for its op).
void collect_nodes(Interpreter& in, const Plan& p, const Value& v, SourceLoc loc, const char* fn, std::vector<int>& out) {
  std::vector<int> subs;
  builtin_args::collect_subops(in, v, loc, fn, subs);
  for (int sub : subs) out.push_back(p.subops[static_cast<size_t>(sub)].node);
}

int64_t micro_batches(Interpreter& in, SourceLoc loc, const char* fn) {
  if (!in.train()) in.fail(loc, std::string(fn) + "(): tasks name micro-batches, which the train block defines; this program has no train block");
  return in.train()->micro_batches;
}

// The segment of exactly `nodes`, created if none of them is in one yet.
int segment_of(Interpreter& in, Plan& p, std::vector<int> nodes, SourceLoc loc, const char* fn, const std::string& name = "") {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (nodes.empty()) in.fail(loc, std::string(fn) + "(): the group of ops is empty");
  if (p.segment_of_node.size() != p.root_of_node.size()) p.segment_of_node.assign(p.root_of_node.size(), -1);
  int seg = p.segment_of_node[static_cast<size_t>(nodes[0])];
  if (seg >= 0 && p.segments[static_cast<size_t>(seg)].nodes == nodes) return seg;
  for (int n : nodes) {
    int other = p.segment_of_node[static_cast<size_t>(n)];
    if (other >= 0)
      in.fail(loc, std::string(fn) + "(): op '" + in.graph().node(n).name + "' is already in the group " + p.segments[static_cast<size_t>(other)].name +
                       " (named at line " + std::to_string(p.segments[static_cast<size_t>(other)].loc.line) +
                       "); a task names exactly one group's ops, and an op belongs to one group");
  }
  Segment s;
  s.nodes = nodes;
  s.name = name.empty() ? "'" + in.graph().node(nodes[0]).name + "'" + (nodes.size() > 1 ? " and " + std::to_string(nodes.size() - 1) + " more" : "") : name;
  s.loc = loc;
  int id = static_cast<int>(p.segments.size());
  for (int n : nodes) p.segment_of_node[static_cast<size_t>(n)] = id;
  p.segments.push_back(std::move(s));
  return id;
}

Value task_value(const TaskRef& t) {
  auto r = std::make_shared<Record>();
  r->kind = "task";
  r->fields.push_back({"segment", Value(static_cast<int64_t>(t.segment))});
  r->fields.push_back({"phase", Value(std::string(1, "FBW"[t.phase]))});
  r->fields.push_back({"mb", Value(static_cast<int64_t>(t.mb))});
  return Value(r);
}

Value make_task(Interpreter& in, CallArgs& a, const char* fn, PipeTask::Phase phase) {
  Plan& p = active(in, a, fn);
  const Value* ops = arg(a, 0, "ops");
  const Value* mbv = arg(a, 1, "mb");
  if (!ops || !mbv) in.fail(a.loc, std::string(fn) + "(OPS, mb): takes a group of ops and a micro-batch index");
  std::vector<int> nodes;
  collect_nodes(in, p, *ops, a.loc, fn, nodes);
  int64_t m = micro_batches(in, a.loc, fn);
  int64_t mb = in.to_int(*mbv, a.loc, "micro-batch");
  if (mb < 0 || mb >= m)
    in.fail(a.loc, std::string(fn) + "(): micro-batch " + std::to_string(mb) + " is out of range: the train block runs " + std::to_string(m) +
                       " micro-batch(es), numbered 0.." + std::to_string(m - 1));
  TaskRef t{segment_of(in, p, nodes, a.loc, fn), phase, static_cast<int>(mb)};
  if (phase == PipeTask::W) p.segments[static_cast<size_t>(t.segment)].split_w = true;
  return task_value(t);
}

Value b_fwd(Interpreter& in, CallArgs& a) { return make_task(in, a, "fwd", PipeTask::F); }
Value b_bwd(Interpreter& in, CallArgs& a) { return make_task(in, a, "bwd", PipeTask::B); }
Value b_wgrad(Interpreter& in, CallArgs& a) { return make_task(in, a, "wgrad", PipeTask::W); }

std::vector<int> nodes_of(Interpreter& in, const Plan& p, const Value& v, SourceLoc loc, const char* fn) {
  std::vector<int> out;
  collect_nodes(in, p, v, loc, fn, out);
  return out;
}

const List& list_arg(Interpreter& in, const Value& v, SourceLoc loc, const std::string& what) {
  if (!v.is<std::shared_ptr<List>>()) in.fail(loc, "schedule(): " + what + " must be a list, got " + type_name(v));
  return *v.as<std::shared_ptr<List>>();
}

// schedule(KIND, STAGES, v = 1, head = OPS, tail = OPS)
Value b_schedule(Interpreter& in, CallArgs& a) {
  Plan& p = active(in, a, "schedule");
  if (!p.schedules.empty()) in.fail(a.loc, "schedule(): the plan already has a schedule (line " + std::to_string(p.schedules[0].loc.line) + ")");
  const Value* kv = arg(a, 0, "kind");
  const Value* sv = arg(a, 1, "stages");
  if (!kv || !kv->is<std::string>() || !sv) in.fail(a.loc, "schedule(KIND, STAGES, ...): KIND is a string and STAGES a list of op lists");
  std::string kind = kv->as<std::string>();
  int64_t v = 1;
  if (const Value* vv = a.get("v")) v = in.to_int(*vv, a.loc, "v");
  int64_t m = micro_batches(in, a.loc, "schedule");
  const List& stages = list_arg(in, *sv, a.loc, "STAGES");
  // Stage op groups in schedule-stage order.
  std::vector<std::vector<int>> groups;
  std::vector<std::string> names;
  int ranks = 0, recycles = 0;
  if (kind == "nf1b" || kind == "3f1b") {
    if (stages.size() < 2) in.fail(a.loc, "schedule(\"" + kind + "\"): STAGES is a list of passes (R no-grad passes, then the pass with gradients), each a list of stage op lists");
    recycles = static_cast<int>(stages.size()) - 1;
    if (kind == "3f1b" && recycles != 2) in.fail(a.loc, "schedule(\"3f1b\"): 3F1B has 3 passes (2 no-grad, 1 with gradients), got " + std::to_string(stages.size()) + "; use \"nf1b\" for another count");
    for (size_t k = 0; k < stages.size(); ++k) {
      const List& pass = list_arg(in, stages[k], a.loc, "pass " + std::to_string(k));
      if (k == 0) ranks = static_cast<int>(pass.size());
      if (static_cast<int>(pass.size()) != ranks) in.fail(a.loc, "schedule(): every pass must have the same number of stages (" + std::to_string(ranks) + ")");
      for (size_t s = 0; s < pass.size(); ++s) {
        groups.push_back(nodes_of(in, p, pass[s], a.loc, "schedule"));
        names.push_back("pass " + std::to_string(k) + " stage " + std::to_string(s));
      }
    }
  } else {
    for (size_t s = 0; s < stages.size(); ++s) {
      groups.push_back(nodes_of(in, p, stages[s], a.loc, "schedule"));
      names.push_back("stage " + std::to_string(s));
    }
    if (kind == "interleaved") {
      if (v < 1 || stages.size() % static_cast<size_t>(v) != 0)
        in.fail(a.loc, "schedule(\"interleaved\"): STAGES has " + std::to_string(stages.size()) + " entries, not a multiple of v = " + std::to_string(v));
      ranks = static_cast<int>(stages.size() / static_cast<size_t>(v));
      for (size_t s = 0; s < stages.size(); ++s) names[s] = "stage " + std::to_string(s) + " (chunk " + std::to_string(s / static_cast<size_t>(ranks)) + " of rank " + std::to_string(s % static_cast<size_t>(ranks)) + ")";
    } else {
      if (v != 1) in.fail(a.loc, "schedule(): v applies to \"interleaved\" only");
      ranks = static_cast<int>(stages.size());
    }
    if (kind == "interlaced") {
      const Value* head = a.get("head");
      const Value* tail = a.get("tail");
      if (!head || !tail) in.fail(a.loc, "schedule(\"interlaced\"): needs head = OPS (the all-device segment before stage 0) and tail = OPS (after the last stage)");
      groups.push_back(nodes_of(in, p, *head, a.loc, "schedule"));
      names.push_back("head");
      groups.push_back(nodes_of(in, p, *tail, a.loc, "schedule"));
      names.push_back("tail");
    } else if (a.get("head") || a.get("tail")) {
      in.fail(a.loc, "schedule(): head and tail apply to \"interlaced\" only");
    }
  }
  if (ranks < 1) in.fail(a.loc, "schedule(): STAGES is empty");
  // An empty stage is what a plan split for fewer devices gives at a larger
  // count: say which stage at how many ranks, so the count can be fixed.
  for (size_t s = 0; s < groups.size(); ++s)
    if (groups[s].empty())
      in.fail(a.loc,
              "schedule(\"" + kind + "\"): " + names[s] + " has no ops, with " + std::to_string(ranks) +
                  " pipeline ranks: the plan's stage split leaves it empty at this count (run it on fewer devices, or "
                  "give every stage ops)");
  // Sized before anything is generated: every stage runs up to three tasks
  // per micro-batch, and each becomes an order directive of the plan.
  const int64_t tasks = static_cast<int64_t>(groups.size()) * m * 3;
  if (tasks > kMaxScheduleTasks)
    in.fail(a.loc, "schedule(): " + std::to_string(groups.size()) + " stage(s) x " + std::to_string(m) +
                       " micro-batches would make " + std::to_string(tasks) + " tasks, more than the " +
                       std::to_string(kMaxScheduleTasks) + " a schedule may have");
  PlanSchedule sched;
  sched.kind = kind;
  sched.ranks = ranks;
  sched.v = static_cast<int>(v);
  sched.recycles = recycles;
  sched.micro_batches = static_cast<int>(m);
  sched.loc = a.loc;
  std::string why;
  if (!make_schedule(kind, ranks, static_cast<int>(v), static_cast<int>(m), recycles, sched.order, why)) in.fail(a.loc, "schedule(): " + why);
  for (size_t s = 0; s < groups.size(); ++s) sched.stage_segment.push_back(segment_of(in, p, groups[s], a.loc, "schedule", names[s]));
  for (const std::vector<PipeTask>& seq : sched.order)
    for (const PipeTask& t : seq)
      if (t.phase == PipeTask::W) p.segments[static_cast<size_t>(sched.stage_segment[static_cast<size_t>(t.stage)])].split_w = true;
  auto ref = [&](const PipeTask& t) { return TaskRef{sched.stage_segment[static_cast<size_t>(t.stage)], t.phase, t.mb}; };
  for (const std::vector<PipeTask>& seq : sched.order)
    for (size_t i = 1; i < seq.size(); ++i) p.task_orders.push_back({ref(seq[i - 1]), ref(seq[i]), a.loc});
  p.schedules.push_back(std::move(sched));
  return Value();
}

}  // namespace

// order(TASK, TASK): called by order() when its arguments are tasks.
bool is_task_value(const Value& v) { return v.is<std::shared_ptr<Record>>() && v.as<std::shared_ptr<Record>>()->kind == "task"; }

TaskRef task_of_value(const Value& v) {
  const Record& r = *v.as<std::shared_ptr<Record>>();
  TaskRef t;
  t.segment = static_cast<int>(r.get("segment")->as<int64_t>());
  const std::string& ph = r.get("phase")->as<std::string>();
  t.phase = ph == "F" ? PipeTask::F : ph == "B" ? PipeTask::B : PipeTask::W;
  t.mb = static_cast<int>(r.get("mb")->as<int64_t>());
  return t;
}

void install_schedule_builtins(Env& env) {
  define_builtins(env, {
                           {"fwd", b_fwd, "ops, mb"},
                           {"bwd", b_bwd, "ops, mb"},
                           {"wgrad", b_wgrad, "ops, mb"},
                           {"schedule", b_schedule, "kind, stages, *, v, head, tail"},
                       });
}

}  // namespace nns::sema
