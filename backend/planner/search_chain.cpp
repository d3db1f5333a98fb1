// The interleaved 1F1B step along its dependency chain (search_internal.h,
// interleaved_makespan). The closed form m x tmax + (tsum - tmax) / v sums
// each rank's chunks, sends included; where the transfers between chunks
// outweigh the chunks' work (BERT tiny_pipe at v 2: 5 us sends, 7 and 22
// us busy per rank) the step is the chain of forwards, sends and
// backwards through the ranks, which that sum over-counts (1.19x the
// simulator). Here every task waits for its rank and for its input, as
// the simulator's replay of the lowered programs does: a Send does not
// hold its sender, a Recv waits for what has not arrived.
#include <algorithm>
#include <map>
#include <tuple>

#include "backend/planner/search_internal.h"
#include "semantics/pipeline_schedule.h"

namespace nns::planner::search_detail {

namespace {

// Megatron's order per (p, v, m), made once: many candidates share it.
const sema::PipeOrder& order_of(int p, int v, int64_t m) {
  thread_local std::map<std::tuple<int, int, int64_t>, sema::PipeOrder> orders;
  auto it = orders.find({p, v, m});
  if (it == orders.end())
    it = orders.emplace(std::make_tuple(p, v, m), sema::interleaved_order(p, v, static_cast<int>(m))).first;
  return it->second;
}

}  // namespace

double interleaved_makespan(int p, int v, int64_t m, const std::vector<double>& fwd, const std::vector<double>& bwd,
                            const std::vector<double>& link) {
  const sema::PipeOrder& order = order_of(p, v, m);
  const int n = p * v;
  const size_t mm = static_cast<size_t>(m);
  // End of each (chunk, micro-batch) forward and backward; < 0: not run yet.
  std::vector<double> end_f(static_cast<size_t>(n) * mm, -1), end_b(static_cast<size_t>(n) * mm, -1);
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0);
  size_t left = 0;
  for (const auto& tasks : order) left += tasks.size();
  // Each pass runs every task whose input is there; the schedule has no
  // cycle, so each pass runs at least one (a pass without one would be a
  // deadlock in Megatron's order, which the checker rules out).
  while (left > 0) {
    size_t ran = 0;
    for (int r = 0; r < p; ++r) {
      const auto& tasks = order[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      for (; i < tasks.size(); ++i) {
        const sema::PipeTask& t = tasks[i];
        const size_t c = static_cast<size_t>(t.stage), at = c * mm + static_cast<size_t>(t.mb);
        double ready = 0;
        if (t.phase == sema::PipeTask::F) {
          if (c > 0) {
            const double before = end_f[at - mm];
            if (before < 0) break;
            ready = before + link[c - 1];
          }
        } else {
          if (end_f[at] < 0) break;
          ready = end_f[at];
          if (c + 1 < static_cast<size_t>(n)) {
            const double after = end_b[at + mm];
            if (after < 0) break;
            ready = std::max(ready, after + link[c]);
          }
        }
        const double start = std::max(free_at[static_cast<size_t>(r)], ready);
        const double end = start + (t.phase == sema::PipeTask::F ? fwd[c] : bwd[c]);
        (t.phase == sema::PipeTask::F ? end_f : end_b)[at] = end;
        free_at[static_cast<size_t>(r)] = end;
        ++ran;
      }
    }
    if (ran == 0) return kInf;
    left -= ran;
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

}  // namespace nns::planner::search_detail
