// Pipeline schedules: generators of per-rank task orders, the data-flow
// dependencies between their tasks, a unit-time simulator and the metrics
// drawn from it. See pipeline_schedule.h for the exact definitions.
#include "semantics/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace nns::sema {

namespace {

PipeTask task(int stage, PipeTask::Phase phase, int mb) {
  PipeTask t;
  t.stage = stage;
  t.phase = phase;
  t.mb = mb;
  return t;
}
PipeTask fwd(int stage, int mb) { return task(stage, PipeTask::F, mb); }
PipeTask bwd(int stage, int mb) { return task(stage, PipeTask::B, mb); }
PipeTask wgt(int stage, int mb) { return task(stage, PipeTask::W, mb); }

// Generators are also called directly (tests, the plan builtin after its
// own checks), so they reject sizes they cannot honour instead of
// producing a silently wrong order.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}
void check_sizes(int p, int m) {
  require(p >= 1, "pipeline schedule: p must be >= 1, got " + std::to_string(p));
  require(m >= 1, "pipeline schedule: m must be >= 1, got " + std::to_string(m));
}

// 1F1B's rank order over an arbitrary forward and backward sequence: w
// warm-up forwards, then pairs (next F, next B), then the remaining Bs.
// Both 1F1B (one stage per rank) and the interleaved table are this shape.
std::vector<PipeTask> one_f_one_b_shape(const std::vector<PipeTask>& fw, const std::vector<PipeTask>& bw, size_t w) {
  std::vector<PipeTask> out;
  out.reserve(fw.size() + bw.size());
  w = std::min(w, fw.size());
  for (size_t i = 0; i < w; ++i) out.push_back(fw[i]);
  size_t steady = fw.size() - w;
  for (size_t i = 0; i < steady; ++i) {
    out.push_back(fw[w + i]);
    out.push_back(bw[i]);
  }
  for (size_t i = steady; i < bw.size(); ++i) out.push_back(bw[i]);
  return out;
}

}  // namespace

// ---- PipeTask ---------------------------------------------------------------

bool PipeTask::operator<(const PipeTask& o) const {
  return std::tie(stage, phase, mb) < std::tie(o.stage, o.phase, o.mb);
}

std::string PipeTask::to_string() const {
  static const char kPhase[] = {'F', 'B', 'W'};
  return kPhase[phase] + std::to_string(stage) + "." + std::to_string(mb);
}

std::string to_string(const std::vector<PipeTask>& tasks) {
  std::string s;
  for (const PipeTask& t : tasks) {
    if (!s.empty()) s += ' ';
    s += t.to_string();
  }
  return s;
}

// ---- generators -------------------------------------------------------------

PipeOrder gpipe_order(int p, int m) {
  check_sizes(p, m);
  PipeOrder order(p);
  for (int s = 0; s < p; ++s) {
    for (int j = 0; j < m; ++j) order[s].push_back(fwd(s, j));
    for (int j = 0; j < m; ++j) order[s].push_back(bwd(s, j));
  }
  return order;
}

PipeOrder one_f_one_b_order(int p, int m) {
  check_sizes(p, m);
  PipeOrder order(p);
  for (int s = 0; s < p; ++s) {
    std::vector<PipeTask> fw, bw;
    for (int j = 0; j < m; ++j) {
      fw.push_back(fwd(s, j));
      bw.push_back(bwd(s, j));
    }
    order[s] = one_f_one_b_shape(fw, bw, std::min(p - 1 - s, m));
  }
  return order;
}

PipeOrder interleaved_order(int p, int v, int m) {
  check_sizes(p, m);
  require(v >= 1, "interleaved: v must be >= 1, got " + std::to_string(v));
  // Megatron only uses the interleaved table with several chunks; with one
  // chunk its warm-up 2(p-1-r) would just hold more activations than 1F1B.
  if (v == 1) return one_f_one_b_order(p, m);
  require(m % p == 0, "interleaved: m (" + std::to_string(m) + ") must be a multiple of p (" + std::to_string(p) +
                          ") when v > 1 (micro-batches go through the chunks in groups of p)");
  PipeOrder order(p);
  for (int r = 0; r < p; ++r) {
    // The (chunk, mb) sequences are the same on every rank; only the stage
    // (chunk*p + r) and the warm-up length differ.
    std::vector<PipeTask> fw, bw;
    for (int g = 0; g < m / p; ++g)
      for (int c = 0; c < v; ++c)
        for (int j = 0; j < p; ++j) {
          fw.push_back(fwd(c * p + r, g * p + j));
          bw.push_back(bwd((v - 1 - c) * p + r, g * p + j));
        }
    size_t warm = std::min<size_t>(2 * (p - 1 - r) + (v - 1) * p, size_t(m) * v);
    order[r] = one_f_one_b_shape(fw, bw, warm);
  }
  return order;
}

PipeOrder zb_h1_order(int p, int m) {
  check_sizes(p, m);
  PipeOrder order(p);
  for (int s = 0; s < p; ++s) {
    std::vector<PipeTask>& out = order[s];
    const bool split = s > 0;  // rank 0 keeps the whole backward (no W)
    std::deque<int> pending;   // micro-batches whose W is still to run, FIFO
    auto backward = [&](int k) {
      out.push_back(bwd(s, k));
      if (!split) return;
      pending.push_back(k);
      // Delaying W by s slots lets rank s send its B's gradient on at once
      // while the cool-down of rank s-1.. is still in flight; the W then
      // fills the slot in which 1F1B would wait.
      if (k >= s) {
        out.push_back(wgt(s, pending.front()));
        pending.pop_front();
      }
    };
    const int w = std::min(p - 1 - s, m);
    for (int i = 0; i < w; ++i) out.push_back(fwd(s, i));
    for (int i = 0; i < m - w; ++i) {
      out.push_back(fwd(s, w + i));
      backward(i);
    }
    for (int k = m - w; k < m; ++k) backward(k);
    for (int k : pending) out.push_back(wgt(s, k));
  }
  return order;
}

PipeOrder interlaced_order(int p, int m) {
  check_sizes(p, m);
  const int head = p, tail = p + 1;
  // Key of a task in the global step table: (step, position in the step).
  // Position 0: head F before stage 0's F; 1: the pipeline stage's own
  // task; 2, 3: what follows it in that step (tail F then tail B after
  // stage p-1's F, head B after stage 0's B).
  struct Keyed {
    int step, pos;
    PipeTask t;
  };
  std::vector<Keyed> pipeline, shared;  // per-rank tasks; tasks every rank runs
  const int steps = 2 * m + 2 * (p - 1);
  for (int t = 0; t < steps; ++t)
    for (int s = 0; s < p && s <= t; ++s) {
      const int k = t - s;
      if (k % 2 == 0) {
        const int mb = k / 2;
        if (mb >= m) continue;
        pipeline.push_back({t, 1, fwd(s, mb)});
        if (s == 0) shared.push_back({t, 0, fwd(head, mb)});
        if (s == p - 1) {
          shared.push_back({t, 2, fwd(tail, mb)});
          shared.push_back({t, 3, bwd(tail, mb)});
        }
      } else {
        const int mb = k / 2 - (p - 1 - s);
        if (mb < 0 || mb >= m) continue;
        pipeline.push_back({t, 1, bwd(s, mb)});
        if (s == 0) shared.push_back({t, 2, bwd(head, mb)});
      }
    }
  // With p == 1 stage 0 is also stage p-1: its step then holds head F,
  // F0, tail F, tail B at positions 0..3, still one order for everyone.
  PipeOrder order(p);
  for (int r = 0; r < p; ++r) {
    std::vector<Keyed> mine = shared;
    for (const Keyed& k : pipeline)
      if (k.t.stage == r) mine.push_back(k);
    // (step, pos) is unique per rank except among shared tasks of one
    // step, which the stable sort keeps in their (identical) insertion
    // order on every rank.
    std::stable_sort(mine.begin(), mine.end(),
                     [](const Keyed& a, const Keyed& b) { return std::tie(a.step, a.pos) < std::tie(b.step, b.pos); });
    for (const Keyed& k : mine) order[r].push_back(k.t);
  }
  return order;
}

PipeOrder nf1b_order(int p, int m, int recycles) {
  check_sizes(p, m);
  require(recycles >= 0, "nf1b: recycles must be >= 0, got " + std::to_string(recycles));
  const int R = recycles;
  PipeOrder order(p);
  for (int s = 0; s < p; ++s) {
    std::vector<PipeTask>& out = order[s];
    auto pass_f = [&](int pass, int mb) {
      if (mb < m) out.push_back(fwd(pass * p + s, mb));
    };
    // Warm-up: anti-diagonals d < R, which hold no-grad forwards only.
    for (int d = 0; d < R; ++d)
      for (int j = 0; j <= d; ++j) pass_f(d - j, j);
    // Steady: iteration f finishes diagonal f+R (its no-grad forwards, then
    // the grad forward of mb f) and runs 1F1B's backward for rank s.
    for (int f = 0; f <= m + p - 2 - s; ++f) {
      for (int j = 0; j < R; ++j) pass_f(R - 1 - j, f + 1 + j);
      pass_f(R, f);
      const int b = f - (p - 1 - s);
      if (b >= 0 && b < m) out.push_back(bwd(R * p + s, b));
    }
  }
  return order;
}

// ---- dependencies -----------------------------------------------------------

std::vector<PipeTask> ChainDeps::of(const PipeTask& t) const {
  // The chain of stages in data-flow order: its length n and, for the
  // interlaced one, the map between stages and chain positions.
  int n = 0;
  bool interlaced = false;
  if (kind == "gpipe" || kind == "1f1b" || kind == "zb-h1") {
    n = p;
  } else if (kind == "interleaved") {
    n = p * v;
  } else if (kind == "nf1b" || kind == "3f1b") {
    n = ((kind == "3f1b" ? 2 : recycles) + 1) * p;
  } else if (kind == "interlaced") {
    n = p + 2;
    interlaced = true;
  } else {
    throw std::invalid_argument("ChainDeps: unknown schedule kind '" + kind + "'");
  }
  // Interlaced chain: head (stage p), stages 0..p-1, tail (stage p+1).
  auto chain_pos = [&](int stage) { return !interlaced ? stage : stage == p ? 0 : stage == p + 1 ? p + 1 : stage + 1; };
  auto chain_at = [&](int i) { return !interlaced ? i : i == 0 ? p : i == p + 1 ? p + 1 : i - 1; };
  if (t.stage < 0 || t.stage >= n)
    throw std::invalid_argument("ChainDeps(" + kind + "): stage " + std::to_string(t.stage) + " of " + t.to_string() +
                                " is outside the chain of " + std::to_string(n) + " stages");
  const int i = chain_pos(t.stage);
  std::vector<PipeTask> deps;
  switch (t.phase) {
    case PipeTask::F:
      if (i > 0) deps.push_back(fwd(chain_at(i - 1), t.mb));
      break;
    case PipeTask::B:
      deps.push_back(fwd(t.stage, t.mb));
      if (i + 1 < n) deps.push_back(bwd(chain_at(i + 1), t.mb));
      break;
    case PipeTask::W:
      deps.push_back(bwd(t.stage, t.mb));
      break;
  }
  return deps;
}

// ---- simulation -------------------------------------------------------------

std::vector<std::vector<int>> task_slots(const PipeOrder& order) {
  // A B is split when its W exists anywhere: then it is the input
  // gradient only (1 slot); otherwise it is both gradients (2 slots).
  std::set<std::pair<int, int>> has_w;
  for (const auto& rank : order)
    for (const PipeTask& t : rank)
      if (t.phase == PipeTask::W) has_w.insert({t.stage, t.mb});
  std::vector<std::vector<int>> slots(order.size());
  for (size_t r = 0; r < order.size(); ++r)
    for (const PipeTask& t : order[r])
      slots[r].push_back(t.phase == PipeTask::B && !has_w.count({t.stage, t.mb}) ? 2 : 1);
  return slots;
}

bool simulate(const PipeOrder& order, const PipeDeps& deps, PipeTimes& out, std::string& why) {
  const size_t ranks = order.size();
  out = PipeTimes{};
  out.start.resize(ranks);
  for (size_t r = 0; r < ranks; ++r) out.start[r].assign(order[r].size(), -1);
  const auto slots = task_slots(order);

  // Where each task runs; more than one rank makes it a collective.
  std::map<PipeTask, std::vector<size_t>> where;
  for (size_t r = 0; r < ranks; ++r) {
    std::set<PipeTask> seen;
    for (const PipeTask& t : order[r]) {
      if (!seen.insert(t).second) {
        why = "rank " + std::to_string(r) + " runs " + t.to_string() + " twice";
        return false;
      }
      where[t].push_back(r);
    }
  }
  std::map<PipeTask, std::vector<PipeTask>> pred;
  for (const auto& [t, rs] : where) {
    pred[t] = deps.of(t);
    for (const PipeTask& d : pred[t])
      if (!where.count(d)) {
        why = t.to_string() + " depends on " + d.to_string() + ", which no rank runs";
        return false;
      }
  }

  // Event-driven list scheduling: a rank's next task starts once the rank
  // is free and its dependencies have ended; since times only depend on
  // those two, processing ready tasks in any order gives the same result.
  // Ranks blocked on a task are woken when it is scheduled.
  std::vector<size_t> next(ranks, 0);
  std::vector<int64_t> free_at(ranks, 0);
  std::map<PipeTask, int64_t> end;                  // tasks scheduled so far
  std::map<PipeTask, std::vector<size_t>> waiters;  // ranks to wake on a task
  std::deque<size_t> work;
  auto at_front = [&](size_t q, const PipeTask& x) { return next[q] < order[q].size() && order[q][next[q]] == x; };
  for (size_t r = 0; r < ranks; ++r) work.push_back(r);
  size_t done = 0, total = 0;
  for (const auto& rank : order) total += rank.size();

  while (!work.empty()) {
    const size_t r = work.front();
    work.pop_front();
    if (next[r] >= order[r].size()) continue;
    const PipeTask& t = order[r][next[r]];
    if (end.count(t)) continue;  // a collective another rank just scheduled
    // Every dependency must have ended, and for a collective every
    // participant must have reached it.
    const PipeTask* blocker = nullptr;
    for (const PipeTask& d : pred[t])
      if (!end.count(d)) {
        blocker = &d;
        break;
      }
    if (blocker) {
      waiters[*blocker].push_back(r);
      continue;
    }
    int64_t start = 0;
    bool all_here = true;
    for (size_t q : where[t]) {
      if (at_front(q, t)) {
        start = std::max(start, free_at[q]);
      } else {
        all_here = false;  // q wakes this rank when it reaches t
      }
    }
    if (!all_here) continue;
    for (const PipeTask& d : pred[t]) start = std::max(start, end[d]);
    int64_t finish = 0;
    for (size_t q : where[t]) {
      const size_t idx = next[q];
      out.start[q][idx] = start;
      free_at[q] = start + slots[q][idx];
      finish = std::max(finish, free_at[q]);
      ++next[q];
      ++done;
      work.push_back(q);
    }
    end[t] = finish;
    out.makespan = std::max(out.makespan, finish);
    if (auto it = waiters.find(t); it != waiters.end()) {
      for (size_t q : it->second) work.push_back(q);
      waiters.erase(it);
    }
    // A rank that reached a collective earlier waits for the others; now
    // that this rank moved, re-check the collective at its new front.
    if (next[r] < order[r].size() && where[order[r][next[r]]].size() > 1)
      for (size_t q : where[order[r][next[r]]]) work.push_back(q);
  }
  if (done == total) return true;

  // Deadlock: name what every unfinished rank is stuck on.
  std::ostringstream msg;
  msg << "pipeline schedule deadlocks (" << (total - done) << " of " << total << " tasks never run):";
  for (size_t r = 0; r < ranks; ++r) {
    if (next[r] >= order[r].size()) continue;
    const PipeTask& t = order[r][next[r]];
    msg << "\n  rank " << r << ": " << t.to_string() << " waits for";
    std::vector<std::string> missing;
    for (const PipeTask& d : pred[t])
      if (!end.count(d)) missing.push_back(d.to_string());
    for (size_t q : where[t])
      if (!at_front(q, t)) missing.push_back("rank " + std::to_string(q) + " to reach it (collective)");
    for (size_t k = 0; k < missing.size(); ++k) msg << (k ? ", " : " ") << missing[k];
  }
  why = msg.str();
  return false;
}

// ---- metrics ----------------------------------------------------------------

double bubble_fraction(const PipeOrder& order, const PipeTimes& t) {
  if (order.empty() || t.makespan <= 0) return 0.0;
  const auto slots = task_slots(order);
  int64_t busy = 0;
  for (const auto& rank : slots)
    for (int s : rank) busy += s;
  const double capacity = double(order.size()) * double(t.makespan);
  return (capacity - double(busy)) / capacity;
}

std::vector<int> peak_stashed(const PipeOrder& order) {
  // Stages with a backward hold activations from F until their last
  // backward task; the others run without grad and free them at once.
  std::set<int> grad_stages;
  for (const auto& rank : order)
    for (const PipeTask& t : rank)
      if (t.phase == PipeTask::B) grad_stages.insert(t.stage);
  std::vector<int> peak(order.size(), 0);
  for (size_t r = 0; r < order.size(); ++r) {
    std::set<std::pair<int, int>> has_w;
    for (const PipeTask& t : order[r])
      if (t.phase == PipeTask::W) has_w.insert({t.stage, t.mb});
    int live = 0;
    for (const PipeTask& t : order[r]) {
      if (!grad_stages.count(t.stage)) continue;
      const bool split = has_w.count({t.stage, t.mb}) > 0;
      if (t.phase == PipeTask::F) {
        peak[r] = std::max(peak[r], ++live);
      } else if ((t.phase == PipeTask::W) || (t.phase == PipeTask::B && !split)) {
        --live;
      }
    }
  }
  return peak;
}

std::string timeline(const PipeOrder& order, const PipeTimes& t, const std::vector<std::string>& rank_names,
                     const std::vector<std::vector<std::string>>* notes) {
  const auto slots = task_slots(order);
  size_t width = 1;
  for (const auto& rank : order)
    for (const PipeTask& x : rank) width = std::max(width, x.to_string().size());
  if (notes)
    for (const auto& rank : *notes)
      for (const std::string& n : rank) width = std::max(width, n.size());
  std::vector<std::string> labels;
  for (size_t r = 0; r < order.size(); ++r)
    labels.push_back(rank_names.size() == order.size() ? rank_names[r] : "rank " + std::to_string(r));
  size_t label_w = 0;
  for (const auto& l : labels) label_w = std::max(label_w, l.size());

  std::string text;
  for (size_t r = 0; r < order.size(); ++r) {
    std::vector<std::string> cells(size_t(std::max<int64_t>(t.makespan, 0)), ".");
    for (size_t i = 0; i < order[r].size() && r < t.start.size() && i < t.start[r].size(); ++i) {
      const int64_t s = t.start[r][i];
      if (s < 0) continue;  // not simulated (deadlocked run)
      for (int k = 0; k < slots[r][i] && size_t(s + k) < cells.size(); ++k)
        cells[size_t(s + k)] = k == 0 ? order[r][i].to_string() : "-";
    }
    std::string row = labels[r] + std::string(label_w - labels[r].size(), ' ') + " |";
    for (const auto& c : cells) row += " " + c + std::string(width - c.size(), ' ');
    while (!row.empty() && row.back() == ' ') row.pop_back();
    text += row + "\n";
    if (!notes || r >= notes->size()) continue;
    // The annotation row: each task's note under its first slot.
    std::vector<std::string> marks(cells.size());
    for (size_t i = 0; i < order[r].size() && i < (*notes)[r].size() && r < t.start.size() && i < t.start[r].size(); ++i)
      if (t.start[r][i] >= 0 && size_t(t.start[r][i]) < marks.size()) marks[size_t(t.start[r][i])] = (*notes)[r][i];
    std::string mrow = std::string(label_w, ' ') + " |";
    for (const auto& c : marks) mrow += " " + c + std::string(width - c.size(), ' ');
    while (!mrow.empty() && mrow.back() == ' ') mrow.pop_back();
    text += mrow + "\n";
  }
  return text;
}

// ---- by name ----------------------------------------------------------------

bool make_schedule(const std::string& kind, int p, int v, int m, int recycles, PipeOrder& out, std::string& why) {
  static const char* kKinds = "gpipe, 1f1b, interleaved, zb-h1, interlaced, nf1b, 3f1b";
  const bool known = kind == "gpipe" || kind == "1f1b" || kind == "interleaved" || kind == "zb-h1" ||
                     kind == "interlaced" || kind == "nf1b" || kind == "3f1b";
  if (!known) {
    why = "unknown pipeline schedule '" + kind + "' (known: " + kKinds + ")";
    return false;
  }
  if (p < 1) {
    why = kind + ": the number of pipeline stages p must be >= 1, got " + std::to_string(p);
    return false;
  }
  if (m < 1) {
    why = kind + ": the number of micro-batches m must be >= 1, got " + std::to_string(m);
    return false;
  }
  if (v < 1) {
    why = kind + ": the number of chunks per rank v must be >= 1, got " + std::to_string(v);
    return false;
  }
  if (kind != "interleaved" && v != 1) {
    why = kind + ": v (chunks per rank, " + std::to_string(v) + ") only applies to 'interleaved'; pass v = 1";
    return false;
  }
  if (kind == "interleaved" && v > 1 && m % p != 0) {
    why = "interleaved: m (" + std::to_string(m) + ") must be a multiple of p (" + std::to_string(p) +
          ") when v > 1 (micro-batches go through the chunks in groups of p)";
    return false;
  }
  if (kind == "nf1b" && recycles < 0) {
    why = "nf1b: recycles must be >= 0, got " + std::to_string(recycles);
    return false;
  }
  if (kind == "3f1b" && recycles != 0 && recycles != 2) {
    why = "3f1b: is nf1b with 2 recycles; got recycles = " + std::to_string(recycles) + " (use nf1b)";
    return false;
  }
  if (kind != "nf1b" && kind != "3f1b" && recycles != 0) {
    why = kind + ": recycles (" + std::to_string(recycles) + ") only applies to 'nf1b'; pass 0";
    return false;
  }
  if (kind == "gpipe") out = gpipe_order(p, m);
  else if (kind == "1f1b") out = one_f_one_b_order(p, m);
  else if (kind == "interleaved") out = interleaved_order(p, v, m);
  else if (kind == "zb-h1") out = zb_h1_order(p, m);
  else if (kind == "interlaced") out = interlaced_order(p, m);
  else if (kind == "nf1b") out = nf1b_order(p, m, recycles);
  else out = nf1b_order(p, m, 2);
  return true;
}

}  // namespace nns::sema
