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

}  // namespace

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
struct GradientShares {
  std::vector<double> counted;  // by tensor id
  std::vector<char> seen;
  explicit GradientShares(const sema::Graph& g) : counted(g.tensors().size(), 0.0), seen(g.tensors().size(), 0) {}
  // The shares of replica 0's whole programs, or of its skeletons: a
  // skeleton's accumulated pieces are its representative's moved, with the
  // same sizes and copy counts, so they are read there. They are taken
  // before any seeded bug corrupts a representative, as its moved programs
  // were made before.
  void add(const LoweredPlan& lp, bool skeletons) {
    for (const RankProgram& prog : lp.programs) {
      if (prog.replica != 0 || (prog.moved_from >= 0) != skeletons) continue;
      const RankProgram& body = lp.body(prog);
      for (const ParamSlot& s : body.params) {
        if (s.accum < 0) continue;
        const Piece& pc = body.buffers[static_cast<size_t>(s.accum)].piece;
        counted.at(static_cast<size_t>(s.tensor)) +=
            static_cast<double>(pc.numel()) / std::max<int64_t>(1, pc.replicas);
        seen[static_cast<size_t>(s.tensor)] = 1;
      }
    }
  }
};

// `shares`: the skeletons' (GradientShares::add), to which the whole
// programs' are added here.
void check_gradient_counts(const sema::Graph& g, const LoweredPlan& lp, GradientShares shares, ProgramCheck& out) {
  // By tensor id (the order the diagnoses come in).
  shares.add(lp, false);
  const std::vector<double>& counted = shares.counted;
  const std::vector<char>& seen = shares.seen;
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
  opts.moved_skeletons = true;                                        // what `nns check` verifies (program_check.h)
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

ProgramCheck verify_programs(const sema::Graph& g, const sema::Plan& plan, LoweredPlan&& lp, SeededBug bug,
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
  // Lowered again (a seeded bug) as the caller lowered: with skeletons if it did.
  opts.moved_skeletons = lp.skeletons > 0;
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
    corrupted = *lp.comm;
    if (!seed_comm_bug(g, corrupted, lp.edges, devices, bug, out)) return finish();
  }
  const CommPlan& cp = comm_bug ? corrupted : *lp.comm;
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
    CommPlan unshared = *lp.comm;
    // The seed corrupts every rank's copies, skeletons hold none: whole programs.
    bool any = lp.skeletons > 0;
    opts.moved_skeletons = false;
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
  GradientShares skeleton_shares(g);
  skeleton_shares.add(lp, true);
  if (held_apart) {
    std::vector<detail::HeldProgram> held;
    for (const auto& kp : kept)
      for (const RankProgram& p : kp->programs) held.push_back({&p, &kp->groups});
    detail::check_order_replicas(g, lp, held, bug, out);
  } else {
    check_order(g, lp, bug, out);
  }
  check_gradient_counts(g, lp, std::move(skeleton_shares), out);
  detail::check_send_releases(g, lp, out.errors);
  for (const auto& kp : kept) detail::check_send_releases(g, *kp, out.errors);
  out.order_ms = since(o0);
  // Buffers: each rank's instructions over its buffers (buffer_check.h).
  const size_t before = out.errors.size();
  auto b0 = std::chrono::steady_clock::now();
  const BufferCheckStats stats = check_buffers(g, lp, out.errors);
  out.buffers = stats.buffers;
  out.buffer_programs = stats.programs;
  for (const auto& kp : kept) {
    const BufferCheckStats more = check_buffers(g, *kp, out.errors);
    out.buffers += more.buffers;
    out.buffer_programs += more.programs;
  }
  out.buffer_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
  out.buffer_errors = static_cast<int>(out.errors.size() - before);
  return finish();
}

}  // namespace nns::backend
