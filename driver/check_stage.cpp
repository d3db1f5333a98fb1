#include "driver/check_stage.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_check.h"
#include "backend/lowering/program_check.h"
#include "backend/lowering/rank_classes.h"
#include "semantics/check_deadline.h"

namespace nns::driver {

namespace {

// The derived communication of a legal plan (false, said as an internal
// error, when an edge has no chain: a bug of nns, never a plan printed as if it ran).
bool derive_stage(Pipeline& p) {
  sema::CheckDeadline::stage("deriving the communication");
  p.comm = backend::derive_communication(p.graph(), p.plan);
  p.analysis_cache = backend::make_analysis_cache();
  bool derived = true;
  for (const backend::CommEdge& e : p.comm.edges)
    if (!e.note.empty()) {
      std::cerr << "nns: error: internal: plan " << p.plan.name << " is legal but the communication of tensor %"
                << e.tensor << " (" << p.graph().tensor(e.tensor).name << ") cannot be derived: " << e.note << "\n";
      derived = false;
    }
  // A regather() that gathers nothing again is most likely aimed at the
  // wrong ops: say so where it was made.
  for (size_t c : backend::idle_regathers(p.graph(), p.plan, p.comm)) {
    front::Diagnostic d;
    d.severity = front::Severity::Warning;
    d.loc = p.plan.regather_calls[c].loc;
    d.message =
        "regather(): no input of these ops reaches them through all-gathers only (and is read by their backward); "
        "nothing is gathered again";
    p.diags.report(std::move(d));
  }
  print_diagnostics(p);
  return derived;
}

// The capacity check's work once the rank classes are known: the class
// representatives to lower with their kernel bodies, and every rank of
// plan replica 0 with the program that stands for it. Made from the
// structure lowering, it no longer needs it (check_stage hands that to
// program verification meanwhile).
struct CapacityWork {
  backend::LowerOptions lo;
  std::vector<backend::ClassMember> members;
  double classes_ms = 0;
};

// The lowering options of the capacity check's bodies (its ranks not set).
backend::LowerOptions capacity_lowering(Pipeline& p, const Topology& topo) {
  backend::LowerOptions lo = lower_options(*p.interp, p.comm, topo);
  lo.analysis_cache = p.analysis_cache;  // the structure lowering's analysis
  lo.share_comm = true;                  // p.comm outlives the capacity check
  lo.shared_kernel_bodies = true;        // replayed only: no copy of each repeated body
  return lo;
}

CapacityWork capacity_work(Pipeline& p, const Topology& topo, const backend::LoweredPlan& structure) {
  // The ranks in classes of equal programs (up to renaming): one
  // representative of each is lowered with its kernel bodies and replayed.
  // (Programs are in rank order: replica 0's come first.)
  const std::vector<backend::RankProgram>& progs = structure.programs;
  CapacityWork w;
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> rep = backend::memory_classes(p.plan, structure, static_cast<int>(topo.devices));
  w.classes_ms = ms_since(t0);
  w.lo = capacity_lowering(p, topo);
  std::vector<int> program_of(rep.size(), -1);
  for (size_t i = 0; i < rep.size(); ++i)
    if (rep[i] == static_cast<int>(i)) {
      program_of[i] = static_cast<int>(w.lo.ranks.size());
      w.lo.ranks.push_back(progs[i].rank);
    }
  for (size_t i = 0; i < rep.size(); ++i)
    w.members.push_back({progs[i].rank, progs[i].device, program_of[static_cast<size_t>(rep[i])]});
  return w;
}

// Rank 0 represents its class under every plan (a class's representative
// is its first rank in rank order, rank_classes.h): the capacity check can
// lower its bodies before the classes are known.
constexpr int kFirstRepresentative = 0;

// The representatives' bodies lowered and replayed. `first`, when given,
// holds rank 0's program with its bodies, lowered beforehand (the capacity
// thread lowers it beside the structure lowering): only the other
// representatives are lowered here, and their programs appended. (Their
// group ids are their own lowering's; the replay reads no group.) `spent`
// (not null) takes the lowered bodies afterwards, for the caller to free.
backend::MemoryCheck run_capacity(Pipeline& p, const CapacityWork& w, const backend::MemoryCheckOptions& mo,
                                  std::optional<backend::LoweredPlan> first = {}, double first_ms = 0,
                                  backend::LoweredPlan* spent = nullptr) {
  const sema::TrainSpec spec = p.interp->train() ? *p.interp->train() : sema::TrainSpec{};
  auto t0 = std::chrono::steady_clock::now();
  backend::LoweredPlan bodies;
  if (first) {
    if (w.lo.ranks.empty() || w.lo.ranks.front() != kFirstRepresentative || first->programs.size() != 1)
      throw std::logic_error("the capacity check's first representative is not rank 0");
    bodies = std::move(*first);
    if (w.lo.ranks.size() > 1) {
      backend::LowerOptions rest = w.lo;
      rest.ranks.erase(rest.ranks.begin());
      backend::LoweredPlan others = backend::lower_plan(p.graph(), p.plan, spec, rest);
      for (backend::RankProgram& prog : others.programs) bodies.programs.push_back(std::move(prog));
    }
  } else {
    bodies = backend::lower_plan(p.graph(), p.plan, spec, w.lo);
  }
  const double bodies_ms = first_ms + ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  backend::MemoryCheck mc = backend::check_memory_classes(p.graph(), p.plan, bodies, w.members, mo);
  mc.classes_ms = w.classes_ms;
  mc.bodies_ms = bodies_ms;
  mc.replay_ms = ms_since(t0);
  if (spent) *spent = std::move(bodies);
  return mc;
}

// The capacity check on a thread of its own, started before the structure
// lowering: it lowers rank 0's bodies beside it, waits for the rank classes
// (give(): the structure lowering made them, or none when it failed), then
// lowers the other representatives and replays, while program verification
// runs on the caller's thread. The threads read the plan, the graph and the
// derived communication and write nothing they share: the capacity check
// alone elaborates kernels through the interpreter; the structure lowering
// and verification use none; the analysis both lowerings start from is
// made once, under its cache's lock (lower_plan.cpp). What each reports is
// printed afterwards, in the order of a serial check; an overflow still
// ends the check with 65 and nothing of the verification is printed.
struct CapacityThread {
  std::optional<backend::MemoryCheck> mem;
  std::exception_ptr failure;  // a check time-out, or any other exception, rethrown by join()
  double ms = 0;
  std::thread thread;
  std::promise<std::optional<CapacityWork>> work;
  bool work_given = false;
  backend::LoweredPlan spent;  // the replayed bodies, once join() returned (Pipeline::spent)

  void start(Pipeline& p, const Topology& topo, const backend::MemoryCheckOptions& mo) {
    backend::LowerOptions first = capacity_lowering(p, topo);
    first.ranks = {kFirstRepresentative};
    thread = std::thread([this, &p, first = std::move(first), mo, classes = work.get_future()]() mutable {
      // Its working time: rank 0's bodies, then what follows the classes
      // (not the wait for them).
      auto t0 = std::chrono::steady_clock::now();
      double first_ms = 0;
      try {
        const sema::TrainSpec spec = p.interp->train() ? *p.interp->train() : sema::TrainSpec{};
        std::optional<backend::LoweredPlan> lowered;
        try {
          lowered = backend::lower_plan(p.graph(), p.plan, spec, first);
        } catch (const backend::LoweringError&) {
          // Program verification reports it; the classes are still awaited.
        }
        first_ms = ms_since(t0);
        std::optional<CapacityWork> w = classes.get();
        t0 = std::chrono::steady_clock::now();
        if (w && lowered) mem = run_capacity(p, *w, mo, std::move(lowered), first_ms, &spent);
      } catch (const backend::LoweringError&) {
        // Program verification reports it.
      } catch (...) {
        failure = std::current_exception();
      }
      ms = first_ms + ms_since(t0);
    });
  }
  // The rank classes (none: no capacity check after all).
  void give(std::optional<CapacityWork> w) {
    if (work_given) return;
    work_given = true;
    work.set_value(std::move(w));
  }
  void join() {
    give(std::nullopt);
    if (thread.joinable()) thread.join();
    if (failure) std::rethrow_exception(failure);
  }
  ~CapacityThread() {
    if (!thread.joinable()) return;
    give(std::nullopt);
    thread.join();
  }
};

void print_memory_line(std::ostream& report, const backend::MemoryCheck& mem, const backend::MemoryCheckOptions& mo,
                       bool symbolic, double ms) {
  char took[240];
  std::snprintf(took, sizeof took,
                " (%.1f ms: %d program(s) replayed for %zu rank(s); rank classes %.1f ms, kernel bodies %.1f ms, "
                "replay %.1f ms)",
                ms, mem.programs, mem.ranks.size(), mem.classes_ms, mem.bodies_ms, mem.replay_ms);
  report << "  " << backend::memory_line(mem, mo) << (symbolic ? " at the witness sizes" : "") << took << "\n";
}

void print_times_line(std::ostream& report, const Topology& topo, double derive_ms,
                      const backend::LoweredPlan* structure, double lower_ms) {
  char times[200];
  std::snprintf(times, sizeof times, "  times: communication derived in %.1f ms", derive_ms);
  report << times;
  if (structure) {
    std::snprintf(times, sizeof times, ", %s lowered (structure only) in %.1f ms",
                  topo.replicas > 1 ? "plan replica 0's programs" : "every rank's program", lower_ms);
    report << times;
    // Rank symmetry (backend/lowering/rank_symmetry.h): how many were moved.
    if (structure->moved > 0) {
      std::snprintf(times, sizeof times,
                    " (%zu lowered, %d moved along the plan's period of %d device(s)%s in %.1f ms, found in %.1f ms)",
                    structure->programs.size() - static_cast<size_t>(structure->moved), structure->moved,
                    structure->symmetry_period, structure->skeletons > 0 ? " as skeletons" : "", structure->moved_ms,
                    structure->symmetry_ms);
      report << times;
    }
  }
  report << "\n";
}

}  // namespace

int check_stage(const PipelineOptions& o, Pipeline& p, std::ostream& report) {
  sema::check::CheckOptions opts = o.check;
  if (const auto& t = p.interp->train()) opts.micro_batches = t->micro_batches;
  opts.sources = &p.sources;
  sema::CheckDeadline::stage("the Z3 check");
  sema::check::CheckResult r = sema::check::check_plan(p.graph(), p.plan, opts);
  for (const front::Diagnostic& d : r.diagnostics) p.diags.report(d);
  if (r.verdict != sema::check::Verdict::Legal) {
    report << sema::check::verdict_line(p.plan, r) << "\n" << std::flush;
    print_diagnostics(p);
    return sema::check::exit_code(r.verdict);
  }
  auto t_derive = std::chrono::steady_clock::now();
  if (!derive_stage(p)) return kExitRuntime;
  const double derive_ms = ms_since(t_derive);
  if (!o.verify_programs) {
    report << sema::check::verdict_line(p.plan, r, false) << "\n"
           << "  programs: not verified here (nns check --plan verifies them)\n";
    return kExitOk;
  }
  const sema::TrainSpec* spec = p.interp->train() ? &*p.interp->train() : nullptr;
  // Replica 0's programs lowered once, structure only: program
  // verification reads them (and lowers the other plan replicas one at a
  // time to compare with them, program_check.h), and the capacity check
  // groups the ranks into classes by them (backend/lowering/rank_classes.h).
  sema::CheckDeadline::stage("lowering the programs");
  backend::MemoryCheckOptions mo = memory_options(o.check, spec);
  mo.bf16_storage =
      o.bf16_storage || (o.last >= Stage::Run && o.run.device != "cpu" && spec && spec->precision == "bf16");
  CapacityThread capacity;
  if (o.memory_report || mo.capacity >= 0) capacity.start(p, o.topo, mo);
  std::optional<backend::LoweredPlan> structure;
  auto t_lower = std::chrono::steady_clock::now();
  try {
    backend::LowerOptions so = backend::verification_lowering(static_cast<int>(o.topo.replicas), &p.comm);
    so.analysis_cache = p.analysis_cache;
    so.share_comm = true;  // p.comm outlives the structure and its verification
    // A moved device's skeleton: what verification reads of it (program_check.h).
    so.moved_skeletons = true;
    if (o.topo.replicas > 1) so.first_ranks = static_cast<int>(o.topo.devices);
    structure = backend::lower_plan(p.graph(), p.plan, spec ? *spec : sema::TrainSpec{}, so);
  } catch (const backend::LoweringError&) {
    // Program verification lowers the plan again and reports the error.
  }
  const double lower_ms = ms_since(t_lower);
  sema::CheckDeadline::stage("the memory check and program verification");
  if (structure && capacity.thread.joinable()) {
    try {
      capacity.give(capacity_work(p, o.topo, *structure));
    } catch (const backend::LoweringError&) {
      // Program verification reports it (join() ends the thread).
    }
  }
  // Printed after the memory line (below): its times line first.
  std::ostringstream verified, verify_errors;
  print_times_line(verified, o.topo, derive_ms, structure ? &*structure : nullptr, lower_ms);
  int rc = kExitOk;
  std::exception_ptr verify_failure;
  try {
    rc = verify_lowered(p.graph(), p.plan, p.comm, o.topo, o.seed_bug, spec, verified,
                        structure ? &*structure : nullptr, lower_ms, verify_errors);
  } catch (...) {
    verify_failure = std::current_exception();
  }
  capacity.join();
  // Freed with the pipeline (Pipeline::spent), not on the check's path;
  // a run frees them here, before its ranks start.
  if (o.last < Stage::Run) {
    if (structure) p.spent.push_back(std::move(*structure));
    p.spent.push_back(std::move(capacity.spent));
  }
  if (verify_failure) std::rethrow_exception(verify_failure);
  const bool overflow = capacity.mem && !capacity.mem->fits;
  report << sema::check::verdict_line(p.plan, r, overflow) << "\n";
  // (Its time: the rank classes, taken on this thread, and the thread's working time.)
  if (capacity.mem) print_memory_line(report, *capacity.mem, mo, r.symbolic, capacity.mem->classes_ms + capacity.ms);
  if (overflow) {
    report << std::flush;
    p.diags.report(*capacity.mem->overflow);
    print_diagnostics(p);
    return sema::check::exit_code(sema::check::Verdict::Illegal);
  }
  report << verified.str() << std::flush;
  std::cerr << verify_errors.str();
  return rc;
}

int implicit_plan_stage(const PipelineOptions& o, Pipeline& p, std::ostream& report) {
  p.plan = sema::implicit_plan(p.graph());
  p.planned = p.implicit = true;
  p.comm = backend::derive_communication(p.graph(), p.plan);
  p.analysis_cache = backend::make_analysis_cache();
  report << "plan: none given; " << o.topo.ranks << " ranks run the implicit plan " << p.plan.name
         << " (every op on one device, " << o.topo.replicas << " data-parallel replicas)\n";
  const sema::TrainSpec* spec = p.interp->train() ? &*p.interp->train() : nullptr;
  return verify_lowered(p.graph(), p.plan, p.comm, o.topo, o.seed_bug, spec, report);
}

backend::MemoryCheckOptions memory_options(const sema::check::CheckOptions& c, const sema::TrainSpec* spec) {
  backend::MemoryCheckOptions mo;
  mo.capacity = c.device_memory;
  mo.capacity_label = c.memory_label;
  mo.bytes_per_element = c.bytes_per_element > 0 ? static_cast<int>(c.bytes_per_element) : 4;
  mo.optimizer_slots = static_cast<int>(sema::optimizer_slots(spec ? spec->optimizer : sema::OptimizerSpec{}));
  return mo;
}

backend::MemoryCheck check_plan_memory(Pipeline& p, const Topology& topo, const backend::MemoryCheckOptions& mo,
                                       const backend::LoweredPlan* structure) {
  // One plan replica's ranks: the other replicas run the same programs.
  std::optional<backend::LoweredPlan> own;
  if (!structure) {
    const sema::TrainSpec spec = p.interp->train() ? *p.interp->train() : sema::TrainSpec{};
    backend::LowerOptions so = backend::verification_lowering(static_cast<int>(topo.replicas), &p.comm);
    so.first_ranks = static_cast<int>(topo.devices);
    own = backend::lower_plan(p.graph(), p.plan, spec, so);
    structure = &*own;
  }
  return run_capacity(p, capacity_work(p, topo, *structure), mo);
}

int verify_lowered(const sema::Graph& g, const sema::Plan& plan, const backend::CommPlan& comm, const Topology& topo,
                   const std::string& seed_bug, const sema::TrainSpec* spec, std::ostream& report,
                   backend::LoweredPlan* structure, double lower_ms, std::ostream& errors) {
  backend::SeededBug bug = backend::SeededBug::None;
  if (!seed_bug.empty() && !backend::seeded_bug_from_name(seed_bug, bug)) {
    errors << "nns: error: --seed-bug must be one of " << backend::seeded_bug_names() << "\n";
    return kExitRuntime;
  }
  backend::ProgramCheck pc = structure
                                 ? backend::verify_programs(g, plan, std::move(*structure), bug, spec, lower_ms)
                                 : backend::verify_programs(g, plan, static_cast<int>(topo.replicas), bug, spec, &comm);
  if (pc.seed_not_applicable) {
    report << std::flush;
    errors << "nns: " << (pc.errors.empty() ? std::string("seeded bug does not apply") : pc.errors.front())
           << " (--seed-bug " << seed_bug << "; exit " << kExitSeedNotApplicable << ")\n";
    return kExitSeedNotApplicable;
  }
  if (!pc.applied.empty()) report << "program: seeded bug (test hook): " << pc.applied << "\n";
  char line[512];
  std::snprintf(
      line, sizeof line,
      "program: %d rank(s), %d edge(s), %d adapter step(s), %d buffer(s) of %d whole program(s) interpreted, %d collective(s) matched across ranks: %s (%.1f ms, of which buffers %.1f ms)\n",
      pc.ranks, pc.edges, pc.steps, pc.buffers, pc.buffer_programs, pc.collectives, pc.ok ? "verified" : "WRONG", pc.ms,
      pc.buffer_ms);
  report << line;
  std::snprintf(
      line, sizeof line,
      "  program times: lowering %.1f ms, values %.1f ms, order and gradient counts %.1f ms, buffers %.1f ms\n",
      pc.lower_ms, pc.value_ms, pc.order_ms, pc.buffer_ms);
  report << line;
  if (topo.replicas > 1 && !topo.distributed_optimizer) {
    // lower_plan gives those ranks replica 0's programs renamed (replica_rename.cpp).
    std::snprintf(line, sizeof line,
                  "  replicas: %d program(s) of replicas 1..%lld are replica 0's renamed (what lowering gives every "
                  "rank), their collectives matched as renamed\n",
                  pc.replica_programs, static_cast<long long>(topo.replicas - 1));
    report << line;
  } else if (topo.replicas > 1) {
    std::snprintf(
        line, sizeof line,
        "  replicas: %d program(s) of replicas 1..%lld lowered one replica at a time and found equal to replica 0's up to "
        "the renaming of ranks (%.1f ms)\n",
        pc.replica_programs, static_cast<long long>(topo.replicas - 1), pc.replica_ms);
    report << line;
  }
  for (const std::string& n : pc.notes) report << "  note: " << n << "\n";
  report << std::flush;
  for (const std::string& e : pc.errors) errors << "nns: error: program: " << e << "\n";
  return pc.ok ? kExitOk : kExitRuntime;
}

}  // namespace nns::driver
