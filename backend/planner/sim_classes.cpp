#include "backend/planner/sim_classes.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "backend/lowering/rank_classes.h"
#include "semantics/check_deadline.h"

namespace nns::planner {

using backend::PInstr;
using backend::RankProgram;

namespace {

bool talks_to_peer(const PInstr& in) { return in.kind == PInstr::Send || in.kind == PInstr::Recv; }

bool communicates(const PInstr& in) { return talks_to_peer(in) || in.is_collective(); }

int64_t double_bits(double d) {
  int64_t u = 0;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// Classes by equal keys into `out`, numbered 0.. in order of first
// appearance (so that a class's first program is its lowest rank); returns
// how many.
size_t classes_by_key(const std::vector<std::vector<int64_t>>& keys, std::vector<int>& out) {
  std::map<std::vector<int64_t>, int> id;
  out.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = id.emplace(keys[i], static_cast<int>(id.size())).first->second;
  return id.size();
}

}  // namespace

sema::Plan first_micro_batches(const sema::Plan& plan, int micro_batches) {
  sema::Plan out = plan;
  if (plan.task_orders.empty()) return out;
  std::map<sema::TaskRef, int> id;
  std::vector<sema::TaskRef> task;
  auto task_id = [&](const sema::TaskRef& t) {
    auto [it, fresh] = id.emplace(t, static_cast<int>(task.size()));
    if (fresh) task.push_back(t);
    return it->second;
  };
  std::vector<std::pair<int, int>> edges;
  for (const sema::TaskOrder& o : plan.task_orders) edges.emplace_back(task_id(o.before), task_id(o.after));
  std::vector<std::vector<int>> succ(task.size());
  for (const auto& [x, y] : edges) succ[static_cast<size_t>(x)].push_back(y);
  out.task_orders.clear();
  std::vector<int> seen(task.size(), -1), stack;
  for (size_t x = 0; x < task.size(); ++x) {
    if (task[x].mb >= micro_batches) continue;
    stack.assign(1, static_cast<int>(x));
    seen[x] = static_cast<int>(x);
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      for (int v : succ[static_cast<size_t>(u)]) {
        if (seen[static_cast<size_t>(v)] == static_cast<int>(x)) continue;
        seen[static_cast<size_t>(v)] = static_cast<int>(x);
        stack.push_back(v);
        if (task[static_cast<size_t>(v)].mb < micro_batches)
          out.task_orders.push_back({task[x], task[static_cast<size_t>(v)], plan.task_orders.front().loc});
      }
    }
  }
  return out;
}

SimClasses simulation_classes(const sema::Plan& plan, const backend::LoweredPlan& structure,
                              const InstrCost& comm_cost) {
  const size_t n = structure.programs.size();
  std::unordered_map<int, size_t> index_of;  // global rank -> program
  for (size_t i = 0; i < n; ++i) index_of[structure.programs[i].rank] = i;
  // The program and its communication's cost on the profile.
  std::vector<std::vector<int64_t>> keys(n);
  for (size_t i = 0; i < n; ++i) {
    sema::CheckDeadline::poll();
    const RankProgram& p = structure.programs[i];
    keys[i] = backend::memory_signature(plan, p);
    for (const PInstr& in : p.instrs)
      if (communicates(in)) keys[i].push_back(double_bits(comm_cost(p, in)));
  }
  std::vector<int> cls;
  size_t count = classes_by_key(keys, cls);
  // Refinement: a rank's class also says, per send or receive, its peer's
  // class, and per collective its members' classes (members outside this
  // lowering, in other plan replicas, as -1), until no class splits.
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<int64_t>& k = keys[i];
      k.assign(1, cls[i]);
      for (const PInstr& in : structure.programs[i].instrs) {
        if (talks_to_peer(in)) {
          auto it = index_of.find(in.peer);
          k.push_back(it == index_of.end() ? -1 : cls[it->second]);
        } else if (in.is_collective() && in.group >= 0) {
          std::vector<int64_t> members;
          for (int m : structure.groups.at(static_cast<size_t>(in.group))) {
            auto it = index_of.find(m);
            members.push_back(it == index_of.end() ? -1 : cls[it->second]);
          }
          std::sort(members.begin(), members.end());
          k.push_back(static_cast<int64_t>(members.size()));
          k.insert(k.end(), members.begin(), members.end());
        }
      }
    }
    std::vector<int> next;
    const size_t refined = classes_by_key(keys, next);
    cls = std::move(next);
    if (refined == count) break;
    count = refined;
  }
  SimClasses out;
  out.class_of = cls;
  out.class_size.assign(count, 0);
  for (int c : cls) ++out.class_size[static_cast<size_t>(c)];
  // The first rank of each class, then the peers the replayed ranks talk to
  // (a Wait needs its sender replayed; a send to a rank not replayed is
  // harmless, but its receiver is taken for symmetry too), until closed.
  std::set<size_t> replayed;
  std::vector<size_t> todo;
  std::vector<char> seen_class(out.class_size.size(), 0);
  for (size_t i = 0; i < n; ++i)
    if (!seen_class[static_cast<size_t>(cls[i])]) {
      seen_class[static_cast<size_t>(cls[i])] = 1;
      if (replayed.insert(i).second) todo.push_back(i);
    }
  while (!todo.empty()) {
    size_t i = todo.back();
    todo.pop_back();
    for (const PInstr& in : structure.programs[i].instrs) {
      if (!talks_to_peer(in)) continue;
      auto it = index_of.find(in.peer);
      if (it != index_of.end() && replayed.insert(it->second).second) todo.push_back(it->second);
    }
  }
  for (size_t i : replayed) out.replayed.push_back(structure.programs[i].rank);
  std::sort(out.replayed.begin(), out.replayed.end());
  return out;
}

}  // namespace nns::planner
