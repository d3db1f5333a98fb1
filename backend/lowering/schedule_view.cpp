#include "backend/lowering/schedule_view.h"

#include <map>
#include <set>
#include <sstream>

#include "semantics/pipeline_schedule.h"

namespace nns::backend {

namespace {

// Dependencies between tasks from the data flow between segments: a
// segment's F needs the F of every segment that feeds it (same
// micro-batch), its B the B of every segment it feeds, its W its own B.
struct SegmentDeps : sema::PipeDeps {
  std::map<int, std::set<int>> feeds_into;  // segment -> segments it reads from
  std::map<int, std::set<int>> read_by;     // segment -> segments that read it
  std::set<int> has_w;
  std::vector<sema::PipeTask> of(const sema::PipeTask& t) const override {
    std::vector<sema::PipeTask> out;
    if (t.phase == sema::PipeTask::F) {
      if (auto it = feeds_into.find(t.stage); it != feeds_into.end())
        for (int s : it->second) out.push_back({s, sema::PipeTask::F, t.mb});
    } else if (t.phase == sema::PipeTask::B) {
      out.push_back({t.stage, sema::PipeTask::F, t.mb});
      if (auto it = read_by.find(t.stage); it != read_by.end())
        for (int s : it->second) out.push_back({s, sema::PipeTask::B, t.mb});
    } else {
      out.push_back({t.stage, sema::PipeTask::B, t.mb});
    }
    return out;
  }
};

}  // namespace

std::string schedule_text(const sema::Graph& g, const sema::Plan& plan, const LoweredPlan& lowered) {
  std::ostringstream o;
  if (plan.task_orders.empty()) {
    o << "schedule: plan " << plan.name << " has no task orders: each rank runs its micro-batches one after another in graph order\n";
    return o.str();
  }
  sema::PipeOrder order;
  std::vector<std::string> names;
  // Per task: the ranks it waits for a tensor from (<R) and sends to (>R).
  std::vector<std::vector<std::string>> notes;
  for (const RankProgram& p : lowered.programs) {
    std::vector<sema::PipeTask> seq;
    std::vector<std::string> marks;
    for (const RankProgram::TaskSpan& t : p.tasks) {
      seq.push_back({t.segment, static_cast<sema::PipeTask::Phase>(t.phase), t.mb});
      std::set<int> from, to;
      for (int i = t.first; i < t.last && i < static_cast<int>(p.instrs.size()); ++i) {
        const PInstr& in = p.instrs[static_cast<size_t>(i)];
        if (in.kind == PInstr::Wait) from.insert(in.peer);
        if (in.kind == PInstr::Send) to.insert(in.peer);
      }
      std::string m;
      for (int r : from) m += "<" + std::to_string(r);
      for (int r : to) m += ">" + std::to_string(r);
      marks.push_back(m);
    }
    order.push_back(std::move(seq));
    notes.push_back(std::move(marks));
    names.push_back("rank " + std::to_string(p.rank));
  }
  SegmentDeps deps;
  for (size_t n = 0; n < plan.root_of_node.size() && n < plan.segment_of_node.size(); ++n) {
    int s = plan.segment_of_node[n];
    if (plan.root_of_node[n] < 0 || s < 0) continue;
    for (int t : g.node(static_cast<int>(n)).inputs) {
      int prod = g.tensor(t).producer;
      if (prod < 0 || prod >= static_cast<int>(plan.segment_of_node.size())) continue;
      int ps = plan.segment_of_node[static_cast<size_t>(prod)];
      if (ps >= 0 && ps != s) {
        deps.feeds_into[s].insert(ps);
        deps.read_by[ps].insert(s);
      }
    }
  }
  o << "schedule of plan " << plan.name;
  if (!plan.schedules.empty()) {
    const sema::PlanSchedule& s = plan.schedules[0];
    o << ": " << s.kind << " over " << s.ranks << " pipeline rank(s)" << (s.v > 1 ? ", v " + std::to_string(s.v) : "")
      << (s.recycles > 0 ? ", " + std::to_string(s.recycles) + " recycle(s)" : "");
  }
  o << ", " << lowered.micro_batches << " micro-batch(es), " << lowered.ranks() << " rank(s)\n";
  o << "segments:";
  for (size_t i = 0; i < plan.segments.size(); ++i) o << (i ? "," : "") << " " << i << " = " << plan.segments[i].name;
  o << "\n";
  o << "tasks are F/B/W<segment>.<micro-batch>; one slot per F, B of a B/W split and W, two per whole B; tasks on several ranks start together;\n"
       "under each task: <R it waits for a tensor from rank R, >R it sends one to rank R\n";
  sema::PipeTimes times;
  std::string why;
  // Tasks that appear on several ranks (a segment over several devices)
  // are collectives to the simulation: equal on every rank that runs them.
  if (!sema::simulate(order, deps, times, why)) {
    o << "simulation: " << why << "\n";
  } else {
    o << sema::timeline(order, times, names, &notes);
    o << "makespan " << times.makespan << " slots, bubble " << static_cast<int>(sema::bubble_fraction(order, times) * 1000 + 0.5) / 10.0 << "%";
    std::vector<int> peak = sema::peak_stashed(order);
    o << ", peak stashed micro-batches per rank:";
    for (int x : peak) o << " " << x;
    o << "\n";
  }
  for (size_t r = 0; r < order.size(); ++r) {
    o << names[r] << ":";
    for (const sema::PipeTask& t : order[r]) o << " " << t.to_string();
    o << "\n";
  }
  return o.str();
}

}  // namespace nns::backend
