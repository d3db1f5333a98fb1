#include "backend/lowering/program_check.h"
#include "backend/lowering/parallel.h"

#include <cstdio>
#include "semantics/check_deadline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>

#include "backend/lowering/buffer_check.h"
#include "backend/lowering/comm_plan.h"
#include "backend/lowering/geometry.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/program_order.h"
#include "backend/lowering/rank_classes.h"

namespace nns::backend {

namespace {

const std::vector<std::pair<const char*, SeededBug>> kBugs = {
    {"missing-allreduce", SeededBug::MissingAllreduce},
    {"allgather-for-allreduce", SeededBug::AllgatherForAllreduce},
    {"wrong-group", SeededBug::WrongGroup},
    {"wrong-stage-device", SeededBug::WrongStageDevice},
    {"replica-scale", SeededBug::ReplicaScale},
    {"early-update", SeededBug::EarlyUpdate},
    {"double-count", SeededBug::DoubleCount},
    {"collective-order", SeededBug::CollectiveOrder},
    {"gradient-copies", SeededBug::GradientCopies},
    {"gradient-scale-1pct", SeededBug::GradientScale1Pct},
    {"double-inplace-allreduce", SeededBug::DoubleInplaceAllreduce},
    {"kernel-read-after-free", SeededBug::KernelReadAfterFree},
    {"early-send-release", SeededBug::EarlySendRelease}};

// Per value label of the producer's partial sums, how many times a piece
// counts it; sorted by label. Immutable and shared: after a reduction every
// member of the group holds the same counts, and copying them per device
// would make a 1024-device allreduce cost 1024 x 1024.
using WeightList = std::vector<std::pair<int64_t, double>>;
using Weights = std::shared_ptr<const WeightList>;

Weights single_weight(int64_t label) { return std::make_shared<const WeightList>(WeightList{{label, 1.0}}); }

Weights scaled(const Weights& w, double factor) {
  WeightList out = *w;
  for (auto& lw : out) lw.second /= factor;
  return std::make_shared<const WeightList>(std::move(out));
}

bool same_weights(const Weights& a, const Weights& b) { return a == b || *a == *b; }

double weight_of(const WeightList& w, int64_t label) {
  auto it = std::lower_bound(w.begin(), w.end(), std::make_pair(label, -1e300));
  return it != w.end() && it->first == label ? it->second : 0.0;
}

// What one device holds of a tensor: a region and its partial-sum counts.
struct Abs {
  std::vector<int64_t> start, length;
  Weights w;
};

bool same_region(const Abs& a, const Abs& b) { return a.start == b.start && a.length == b.length; }

bool inside(const std::vector<int64_t>& s, const std::vector<int64_t>& l, const Abs& outer) {
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] < outer.start[d] || s[d] + l[d] > outer.start[d] + outer.length[d]) return false;
  return true;
}

}  // namespace

namespace detail {

std::string edge_text(const sema::Graph& g, const CommEdge& e) {
  const sema::TensorInfo& t = g.tensor(e.tensor);
  std::string name = t.kind == sema::TensorKind::Activation ? "%" + std::to_string(e.tensor) : t.name;
  std::string from =
      e.producer >= 0 ? g.node(e.producer).name : (t.kind == sema::TensorKind::Param ? "param" : "input");
  std::string to = e.consumer >= 0 ? g.node(e.consumer).name : "update of " + t.name;
  return (e.backward ? "gradient of " : "") + name + " (" + from + " -> " + to + ")";
}

// Runs edge `e`'s adapter abstractly on every device; appends diagnoses.
// What each device holds, indexed by device (a std::map per edge step made
// a 1024-device check allocate millions of nodes).
class DeviceStates {
 public:
  bool count(int d) const { return d >= 0 && static_cast<size_t>(d) < has_.size() && has_[static_cast<size_t>(d)]; }
  Abs& operator[](int d) {
    if (static_cast<size_t>(d) >= has_.size()) {
      has_.resize(static_cast<size_t>(d) + 1, 0);
      vals_.resize(static_cast<size_t>(d) + 1);
    }
    has_[static_cast<size_t>(d)] = 1;
    return vals_[static_cast<size_t>(d)];
  }
  const Abs* find(int d) const { return count(d) ? &vals_[static_cast<size_t>(d)] : nullptr; }
  // Nothing held; the pieces' storage is kept for the next step to reuse
  // (a fresh table per step allocated every device's piece again).
  void clear() { std::fill(has_.begin(), has_.end(), 0); }
  int limit() const { return static_cast<int>(has_.size()); }  // devices below this may be held

 private:
  std::vector<char> has_;
  std::vector<Abs> vals_;
};

// Runs edge `e`'s adapter abstractly on every device; appends diagnoses.
class EdgeSimulation {
 public:
  EdgeSimulation(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors)
      : e_(e), shape(g.tensor(e.tensor).shape), what(edge_text(g, e)), errors_(errors) {
    // Devices holding one partial sum share its (immutable) counts: one
    // allocation per label instead of per device, and equal counts are then
    // told equal by address.
    std::vector<Weights> of_label;
    for (int d : e.from.devices) {
      Piece p = piece_of(e.from, d, shape);
      Weights w;
      if (p.value_index >= 0 && p.value_index < p.value_parts) {
        if (of_label.size() < static_cast<size_t>(p.value_parts)) of_label.resize(static_cast<size_t>(p.value_parts));
        Weights& shared = of_label[static_cast<size_t>(p.value_index)];
        if (!shared) shared = single_weight(p.value_index);
        w = shared;
      } else {
        w = single_weight(p.value_index);
      }
      st[d] = Abs{std::move(p.start), std::move(p.length), std::move(w)};
      labels = p.value_parts;
    }
  }

  void run() {
    Layout cur = e_.from;
    for (size_t si = 0; si < e_.adapter.steps.size(); ++si) {
      const AdapterStep& s = e_.adapter.steps[si];
      at = what + ", step " + std::to_string(si + 1) + " (" + prim_name(s.prim) + ")";
      bool ok = s.prim == AdapterStep::SendRecv                                     ? send_recv(s, cur)
                : s.prim == AdapterStep::Chunk || s.prim == AdapterStep::ValueSplit ? cut(s, cur)
                                                                                    : collective(s);
      if (!ok) return;
      cur = s.after;
    }
    at_consumer();
  }

 private:
  const CommEdge& e_;
  const sema::Shape& shape;
  std::string what, at;
  std::vector<std::string>& errors_;
  DeviceStates st, next_;  // what each device holds; the next step's table (reused)
  int64_t labels = 1;

  // Pieces move between device lists: each device of the next layout
  // assembles its piece from the parts its pairs deliver (transfer_parts).
  bool send_recv(const AdapterStep& s, const Layout& cur) {
    DeviceStates& next = next_;
    next.clear();
    for (const auto& pr : s.groups)
      if (!st.count(pr[0])) {
        errors_.push_back(at + ": device " + std::to_string(pr[0]) + " sends a piece it does not hold");
        return false;
      }
    for (int d : s.after.devices) {
      Piece want = piece_of(s.after, d, shape);
      std::vector<TransferPart> parts = transfer_parts(s, cur, d, shape);
      if (parts.empty()) {
        errors_.push_back(at + ": device " + std::to_string(d) + " of the next stage receives nothing");
        return false;
      }
      const Weights& w = st.find(parts[0].from)->w;
      for (const TransferPart& p : parts) {
        const Abs& src = *st.find(p.from);
        if (!inside(p.box.start, p.box.length, src)) {
          errors_.push_back(at + ": device " + std::to_string(p.from) + " sends " +
                            region_text(p.box.start, p.box.length) + " but holds " +
                            region_text(src.start, src.length));
          return false;
        }
        if (!same_weights(src.w, w)) {
          errors_.push_back(at + ": device " + std::to_string(d) + " assembles parts holding different partial sums");
          return false;
        }
      }
      if (!tiles(want, parts)) {
        std::string got;
        for (const TransferPart& p : parts) got += (got.empty() ? "" : ", ") + region_text(p.box.start, p.box.length);
        errors_.push_back(at + ": device " + std::to_string(d) + " needs " + region_text(want.start, want.length) +
                          " but receives " + got);
        return false;
      }
      Abs& a = next[d];
      a.start = std::move(want.start);
      a.length = std::move(want.length);
      a.w = w;
    }
    std::swap(st, next_);
    return true;
  }

  // A local chunk or value split: each device keeps a part of its piece.
  bool cut(const AdapterStep& s, const Layout& cur) {
    DeviceStates& next = next_;
    next.clear();
    Weights cut_from, cut_to;  // the last counts scaled, and what they became
    double cut_factor = 0;
    for (int d : s.after.devices) {
      Piece want = piece_of(s.after, d, shape), had = piece_of(cur, d, shape);
      if (!st.count(d)) {
        errors_.push_back(at + ": device " + std::to_string(d) + " cuts a piece it does not hold");
        return false;
      }
      const Abs& held = *st.find(d);
      if (!inside(want.start, want.length, held)) {
        errors_.push_back(at + ": device " + std::to_string(d) + " cuts " + region_text(want.start, want.length) +
                          " out of " + region_text(held.start, held.length));
        return false;
      }
      Abs& a = next[d];
      a.start = std::move(want.start);
      a.length = std::move(want.length);
      a.w = held.w;
      if (want.value_parts > had.value_parts) {
        // Devices holding the same counts cut them alike: scaled once.
        const double factor = static_cast<double>(want.value_parts / had.value_parts);
        if (held.w != cut_from || factor != cut_factor) {
          cut_from = held.w;
          cut_factor = factor;
          cut_to = scaled(held.w, factor);
        }
        a.w = cut_to;
      }
    }
    std::swap(st, next_);
    return true;
  }

  // One collective per group; devices in no group keep their piece.
  bool collective(const AdapterStep& s) {
    DeviceStates& next = next_;
    next.clear();
    std::vector<char> covered(static_cast<size_t>(st.limit()), 0);  // devices in a group of this step
    for (const auto& grp : s.groups) {
      for (int d : grp) {
        if (!st.count(d)) {
          errors_.push_back(at + ": device " + std::to_string(d) + " of group " + group_text(grp) +
                            " holds no piece of the tensor");
          return false;
        }
        covered[static_cast<size_t>(d)] = 1;
      }
      std::vector<const Abs*> mem;
      for (int d : grp) mem.push_back(&st[d]);
      bool ok = s.prim == AdapterStep::AllReduce || s.prim == AdapterStep::ReduceScatter ? reduce(s, grp, mem, next)
                                                                                         : gather(s, grp, mem, next);
      if (!ok) return false;
    }
    for (int d = 0; d < st.limit(); ++d)
      if (st.count(d) && !covered[static_cast<size_t>(d)]) next[d] = *st.find(d);
    std::swap(st, next_);
    return true;
  }

  // AllReduce, ReduceScatter: partial sums add up.
  bool reduce(const AdapterStep& s, const std::vector<int>& grp, const std::vector<const Abs*>& mem,
              DeviceStates& next) {
    WeightList all;
    for (const Abs* m : mem) {
      if (!same_region(*m, *mem[0])) {
        errors_.push_back(at + ": group " + group_text(grp) + " sums pieces of different regions (" +
                          region_text(mem[0]->start, mem[0]->length) + " and " + region_text(m->start, m->length) +
                          ")");
        return false;
      }
      all.insert(all.end(), m->w->begin(), m->w->end());
    }
    std::sort(all.begin(), all.end());
    WeightList merged;
    for (const auto& lw : all) {
      if (!merged.empty() && merged.back().first == lw.first)
        merged.back().second += lw.second;
      else
        merged.push_back(lw);
    }
    Abs sum{mem[0]->start, mem[0]->length, std::make_shared<const WeightList>(std::move(merged))};
    // The members' partial sums must be distinct and together make the
    // part the result layout says each device holds.
    bool integral = true;
    int64_t have = 0;
    for (auto& [l, w] : *sum.w) {
      integral = integral && std::fabs(w - std::round(w)) < 1e-9;
      if (w > 1.0 + 1e-9 && integral) {
        errors_.push_back(at + ": group " + group_text(grp) + " counts partial sum " + std::to_string(l) + " " +
                          std::to_string(static_cast<int>(std::lround(w))) + " times");
        return false;
      }
      ++have;
    }
    int64_t want_parts = labels / std::max<int64_t>(1, piece_of(s.after, grp[0], shape).value_parts);
    if (integral && have < want_parts) {
      std::vector<int> holders;
      for (int d = 0; d < st.limit(); ++d)
        if (st.count(d) && same_region(*st.find(d), *mem[0]) && std::find(grp.begin(), grp.end(), d) == grp.end())
          holders.push_back(d);
      errors_.push_back(at + ": group " + group_text(grp) + " sums " + std::to_string(have) + " of the " +
                        std::to_string(want_parts) + " partial sums it must combine (a wrong device group: devices " +
                        group_text(holders) + " hold the others)");
      return false;
    }
    for (int d : grp) {
      Abs& a = next[d];  // assigned field by field: the storage the table kept is reused
      a.w = sum.w;
      if (s.prim == AdapterStep::ReduceScatter) {
        Piece want = piece_of(s.after, d, shape);
        a.start = want.start;
        a.length = want.length;
      } else {
        a.start = sum.start;
        a.length = sum.length;
      }
    }
    return true;
  }

  // AllGather, AllToAll: regions move, values must agree.
  bool gather(const AdapterStep& s, const std::vector<int>& grp, const std::vector<const Abs*>& mem,
              DeviceStates& next) {
    std::vector<int64_t> lo = mem[0]->start, hi = mem[0]->start;
    int64_t volume = 0;
    for (const Abs* mp : mem) {
      const Abs& m = *mp;
      if (!same_weights(m.w, mem[0]->w)) {
        errors_.push_back(at + ": group " + group_text(grp) +
                          " gathers pieces holding different partial sums (an allreduce is needed first)");
        return false;
      }
      int64_t v = 1;
      for (size_t d = 0; d < m.start.size(); ++d) {
        lo[d] = std::min(lo[d], m.start[d]);
        hi[d] = std::max(hi[d], m.start[d] + m.length[d]);
        v *= m.length[d];
      }
      volume += v;
    }
    Abs box{lo, std::vector<int64_t>(lo.size()), mem[0]->w};
    int64_t bv = 1;
    for (size_t d = 0; d < lo.size(); ++d) {
      box.length[d] = hi[d] - lo[d];
      bv *= box.length[d];
    }
    if (bv != volume) {
      errors_.push_back(at + ": group " + group_text(grp) +
                        " does not hold the blocks of one region (its pieces overlap or leave gaps)");
      return false;
    }
    for (int d : grp) {
      Piece want = piece_of(s.after, d, shape);
      if (!inside(want.start, want.length, box)) {
        errors_.push_back(at + ": device " + std::to_string(d) + " needs " + region_text(want.start, want.length) +
                          " but group " + group_text(grp) + " holds only " + region_text(box.start, box.length));
        return false;
      }
      Abs& a = next[d];
      a.start = want.start;
      a.length = want.length;
      a.w = box.w;
    }
    return true;
  }

  // At the consumer: each device holds its slice; per region (and replica),
  // the value parts it is read in add up to every partial sum exactly once.
  bool at_consumer() {
    const CommEdge& e = e_;
    std::set<const WeightList*> whole;  // counts already found to hold every partial sum once
    for (int d : e.to.devices) {
      Piece want = piece_of(e.to, d, shape);
      const Abs* held = st.find(d);
      if (!held) {
        errors_.push_back(what + ": device " + std::to_string(d) + " never receives its piece " +
                          region_text(want.start, want.length));
        return false;
      }
      if ((*held).start != want.start || (*held).length != want.length) {
        errors_.push_back(what + ": device " + std::to_string(d) + " ends with " +
                          region_text((*held).start, (*held).length) + " but reads " +
                          region_text(want.start, want.length) +
                          (want.length == (*held).length ? " (a wrong device group?)" : ""));
        return false;
      }
      const WeightList& wl = *(*held).w;
      if (want.value_parts == 1 && !whole.count(&wl)) {
        whole.insert(&wl);
        for (int64_t l = 0; l < labels; ++l) {
          double w = weight_of(wl, l);
          if (std::fabs(w - 1.0) > 1e-9) {
            errors_.push_back(what + ": device " + std::to_string(d) + " reads " +
                              region_text(want.start, want.length) +
                              (w < 1.0 ? " without partial sum " + std::to_string(l) + " of " + std::to_string(labels) +
                                             " (a missing allreduce?)"
                                       : " with partial sum " + std::to_string(l) + " counted " +
                                             std::to_string(static_cast<int>(std::lround(w))) + " times"));
            return false;
          }
        }
      }
    }
    return true;
  }
};

void simulate_edge(const sema::Graph& g, const CommEdge& e, std::vector<std::string>& errors) {
  EdgeSimulation(g, e, errors).run();
}

}  // namespace detail

bool seeded_bug_from_name(const std::string& name, SeededBug& out) {
  for (const auto& [n, b] : kBugs)
    if (name == n) {
      out = b;
      return true;
    }
  return false;
}

std::string seeded_bug_names() {
  std::string s;
  for (const auto& [n, b] : kBugs) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

using detail::check_order;
using detail::seed_comm_bug;
using detail::simulate_edge;

namespace {

// Each parameter's gradient counted once over the world: the gradient norm
// (LossAllReduce) and the assembled gradients take every accumulated
// gradient piece of replica 0's ranks divided by its copies (the piece's
// replica count), so those shares must add up to the parameter's size.
// A piece whose copies are not labelled as copies (zero1 shards of a weight
// also replicated inside a tensor-parallel group once were) counts twice.
void check_gradient_counts(const sema::Graph& g, const LoweredPlan& lp, ProgramCheck& out) {
  // By tensor id (the order the diagnoses come in), each sum taken in
  // program order.
  std::vector<double> counted(g.tensors().size(), 0.0);
  std::vector<char> seen(g.tensors().size(), 0);
  for (const RankProgram& prog : lp.programs) {
    if (prog.replica != 0) continue;
    for (const ParamSlot& s : prog.params) {
      if (s.accum < 0) continue;
      const Piece& pc = prog.buffers[static_cast<size_t>(s.accum)].piece;
      counted.at(static_cast<size_t>(s.tensor)) += static_cast<double>(pc.numel()) / std::max<int64_t>(1, pc.replicas);
      seen[static_cast<size_t>(s.tensor)] = 1;
    }
  }
  for (size_t t = 0; t < counted.size(); ++t) {
    if (!seen[t]) continue;
    const double n = counted[t];
    const sema::TensorInfo& info = g.tensor(static_cast<int>(t));
    const double want = static_cast<double>(sema::numel(info.shape));
    if (std::fabs(n - want) > 1e-6 * want) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", n / want);
      out.errors.push_back(
          "the gradient of " + info.name + " is counted " + buf +
          " times over the ranks (its accumulated pieces divided by their copies); the gradient norm and the "
          "assembled gradients would be wrong");
    }
  }
}

}  // namespace

LowerOptions verification_lowering(int replicas, const CommPlan* comm) {
  // The programs every rank runs (structure only: the sub-op bodies do not
  // change what is communicated), with the kernels' buffer instructions.
  LowerOptions opts;
  opts.replicas = replicas;
  opts.communication_only = true;
  opts.kernel_buffers = true;  // the buffer check reads the kernels' reads and writes
  opts.comm = comm;
  return opts;
}

ProgramCheck verify_programs(const sema::Graph& g, const sema::Plan& plan, int replicas, SeededBug bug,
                             const sema::TrainSpec* spec, const CommPlan* comm) {
  auto l0 = std::chrono::steady_clock::now();
  sema::TrainSpec defaults;
  LoweredPlan lp;
  LowerOptions opts = verification_lowering(replicas, comm);
  if (replicas > 1) opts.first_ranks = static_cast<int>(plan.ngpus);  // replica 0; the others compared with it
  try {
    lp = lower_plan(g, plan, spec ? *spec : defaults, opts);
  } catch (const LoweringError& e) {
    ProgramCheck out;
    out.ranks = static_cast<int>(plan.ngpus) * replicas;
    out.errors.push_back(std::string("lowering: ") + e.what());
    out.ok = false;
    return out;
  }
  return verify_programs(g, plan, std::move(lp), bug, spec,
                         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - l0).count());
}

ProgramCheck verify_programs(const sema::Graph& g, const sema::Plan& plan, LoweredPlan lp, SeededBug bug,
                             const sema::TrainSpec* spec, double lower_ms) {
  auto t0 = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  ProgramCheck out;
  sema::TrainSpec defaults;
  const sema::TrainSpec& sp = spec ? *spec : defaults;
  int devices = static_cast<int>(plan.ngpus);
  const int replicas = lp.replicas;
  out.ranks = devices * replicas;
  out.lower_ms = lower_ms;
  auto finish = [&] {
    out.ok = out.errors.empty();
    out.ms = since(t0) + lower_ms;
    return out;
  };
  LowerOptions opts = verification_lowering(replicas, nullptr);
  // Replica 0's programs only (the driver's and the overload's lowering):
  // the other replicas are lowered one at a time and compared with them.
  const bool held_apart = replicas > 1 && lp.programs.size() == static_cast<size_t>(devices);
  if (held_apart) opts.first_ranks = devices;
  out.notes = lp.notes;
  // The derivation the programs were lowered from, or a corrupted copy of
  // it (seeded bugs in the communication); copying it unconditionally cost
  // every check a copy of every edge's layouts and groups.
  const bool comm_bug = bug == SeededBug::MissingAllreduce || bug == SeededBug::AllgatherForAllreduce ||
                        bug == SeededBug::DoubleCount || bug == SeededBug::WrongGroup ||
                        bug == SeededBug::WrongStageDevice;
  CommPlan corrupted;
  if (comm_bug) {
    corrupted = lp.comm;
    if (!seed_comm_bug(g, corrupted, lp.edges, devices, bug, out)) return finish();
  }
  const CommPlan& cp = comm_bug ? corrupted : lp.comm;
  // Values: every edge the programs run, on every device, by the
  // verifier's own abstract semantics.
  auto v0 = std::chrono::steady_clock::now();
  // On all cores, each edge's diagnoses into its own slot, read in edge
  // order. (On the C library's malloc this was slower than one thread,
  // 9.9 s instead of 2.3 s for Swin coshard at 1024 devices: the workers
  // allocated in the arenas holding the lowered programs. nns now runs on
  // jemalloc, driver/CMakeLists.txt.)
  std::vector<std::vector<std::string>> edge_errors(lp.edges.size());
  parallel_for(lp.edges.size(), [&](size_t k) {
    sema::CheckDeadline::poll();
    simulate_edge(g, cp.edges[static_cast<size_t>(lp.edges[k])], edge_errors[k]);
  });
  for (size_t k = 0; k < lp.edges.size(); ++k) {
    ++out.edges;
    out.steps += static_cast<int>(cp.edges[static_cast<size_t>(lp.edges[k])].adapter.steps.size());
    out.errors.insert(out.errors.end(), edge_errors[k].begin(), edge_errors[k].end());
  }
  out.value_ms = since(v0);
  if (comm_bug && !out.applied.empty()) {
    // A corrupted derivation: lower again from it, as the runtime would.
    opts.comm = &corrupted;
    try {
      lp = lower_plan(g, plan, sp, opts);
    } catch (const LoweringError& e) {
      out.errors.push_back(std::string("lowering: ") + e.what());
      return finish();
    } catch (const std::logic_error& e) {
      // A corrupted send/recv can name a device the layouts do not hold;
      // lowering's own invariant checks refuse it (a bug caught, not a crash).
      out.errors.push_back(std::string("lowering: the corrupted communication does not lower: ") + e.what());
      return finish();
    }
  }
  if (bug == SeededBug::DoubleInplaceAllreduce) {
    // Traffic once gives a partial sum's consumers one shared allreduce;
    // the bug lives in the derivation before it, one allreduce per consumer
    // (each on its own copy), which the seed then runs in place. Lower that
    // derivation again with the forward transfers unshared.
    CommPlan unshared = lp.comm;
    bool any = false;
    for (CommEdge& e : unshared.edges)
      if (!e.backward && e.shared_with >= 0) {
        e.shared_with = -1;
        any = true;
      }
    if (any) {
      opts.comm = &unshared;
      try {
        lp = lower_plan(g, plan, sp, opts);
      } catch (const LoweringError& e) {
        out.errors.push_back(std::string("lowering: ") + e.what());
        return finish();
      }
    }
  }
  // Before replica 0 is seeded: the other replicas run what lowering made.
  std::vector<std::unique_ptr<LoweredPlan>> kept;
  auto r0 = std::chrono::steady_clock::now();
  if (held_apart && !detail::compare_replicas(g, plan, sp, opts, lp, bug, kept, out)) return finish();
  out.replica_ms = since(r0);
  if (bug == SeededBug::DoubleInplaceAllreduce && !seed_double_inplace_allreduce(g, lp, out.applied)) {
    out.errors.push_back("seeded bug does not apply: no partial sum read by two ops is allreduced for both");
    out.seed_not_applicable = true;
    return finish();
  }
  if (bug == SeededBug::KernelReadAfterFree && !seed_kernel_read_after_free(g, lp, out.applied)) {
    out.errors.push_back("seeded bug does not apply: no kernel reads a buffer that is freed");
    out.seed_not_applicable = true;
    return finish();
  }
  if (bug == SeededBug::EarlySendRelease && !detail::seed_early_release(g, lp, out.applied)) {
    out.errors.push_back("seeded bug does not apply: no send of rank 0 can be released before its peer receives it");
    out.seed_not_applicable = true;
    return finish();
  }
  // Order and grouping: the ranks' instruction lists; early send releases.
  auto o0 = std::chrono::steady_clock::now();
  if (held_apart) {
    std::vector<detail::HeldProgram> held;
    for (const auto& kp : kept)
      for (const RankProgram& p : kp->programs) held.push_back({&p, &kp->groups});
    detail::check_order_replicas(g, lp, held, bug, out);
  } else {
    check_order(g, lp, bug, out);
  }
  check_gradient_counts(g, lp, out);
  detail::check_send_releases(g, lp, out.errors);
  for (const auto& kp : kept) detail::check_send_releases(g, *kp, out.errors);
  out.order_ms = since(o0);
  // Buffers: each rank's instructions over its buffers (buffer_check.h).
  const size_t before = out.errors.size();
  auto b0 = std::chrono::steady_clock::now();
  out.buffers = check_buffers(g, lp, out.errors).buffers;
  for (const auto& kp : kept) out.buffers += check_buffers(g, *kp, out.errors).buffers;
  out.buffer_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
  out.buffer_errors = static_cast<int>(out.errors.size() - before);
  return finish();
}

}  // namespace nns::backend
