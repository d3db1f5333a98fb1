// Lowering of one rank: its kernels (sub-ops elaborated on their slices),
// its buffers and its instruction list for one step (lower_plan.h says
// what the sequence is and why every rank derives it the same way), made by
// a list of passes over one RankBuild (lower_internal.h), in this order:
//   kernels   the rank's kernels: sub-ops elaborated, backward, B/W split (lower_kernels.cpp)
//   params    the parameter pieces it holds (lower_kernels.cpp)
//   emit      every micro-batch's forward and backward in graph order, as
//             blocks: adapters, send/recv, recompute (lower_emit.cpp, lower_edges.cpp)
//   schedule  the blocks in the plan's task order, receives posted ahead (lower_schedule.cpp)
//   step_end  buckets, zero1, replica average, loss, clipping, updates (lower_step_end.cpp)
//   frees     buffers freed after their last use (lower_frees.cpp)
// NNS_LOG_LOWERING=PASS[,PASS...] (or `all`) prints each rank's program to
// stderr after those passes; LowerOptions::stop_after (--emit=program:PASS)
// stops after one.
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>

#include "backend/lowering/lower_internal.h"
#include "semantics/check_deadline.h"

namespace nns::backend::detail {

PInstr& RankBuild::emit(PInstr::Kind kind, int mb) {
  sema::CheckDeadline::poll();
  P.instrs.emplace_back();
  P.instrs.back().kind = kind;
  P.instrs.back().mb = mb;
  return P.instrs.back();
}

namespace {

uint64_t mix(uint64_t h, int64_t v) { return (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull; }

uint64_t pieces_hash(uint64_t h, const std::vector<Piece>& ps) {
  h = mix(h, static_cast<int64_t>(ps.size()));
  for (const Piece& p : ps) {
    for (int64_t v : p.start) h = mix(h, v);
    for (int64_t v : p.length) h = mix(h, v);
    h = mix(mix(mix(mix(h, p.value_index), p.value_parts), p.replica_index), p.replicas);
  }
  return h;
}

}  // namespace

int RankBuild::add_geom(CollectiveGeom&& geom) {
  std::vector<int>& ids = geom_ids[pieces_hash(pieces_hash(0xcbf29ce484222325ull, geom.send), geom.recv)];
  for (int id : ids) {
    const CollectiveGeom& have = P.geoms[static_cast<size_t>(id)];
    if (same_pieces(have.send, geom.send) && same_pieces(have.recv, geom.recv)) return id;
  }
  ids.push_back(static_cast<int>(P.geoms.size()));
  P.geoms.push_back(std::move(geom));
  return ids.back();
}

int RankBuild::group_of(const std::vector<int>& devs) {
  std::lock_guard<std::mutex> lock(groups.mu);
  auto [it, fresh] = groups.by_devices.emplace(std::make_pair(&devs, P.replica), -1);
  if (!fresh) return it->second;
  std::vector<int> ranks;
  for (int d : devs) ranks.push_back(grank(d));
  it->second = groups.intern_locked(ranks);
  return it->second;
}

front::SourceLoc directive_of(const sema::Plan& plan, int leaf, const std::string& split_id) {
  for (int c = leaf; c >= 0; c = plan.subops[static_cast<size_t>(c)].parent) {
    const sema::SubOp& s = plan.subops[static_cast<size_t>(c)];
    if (s.parent >= 0 && s.split_loc.valid() && (split_id.empty() || s.split_id == split_id)) return s.split_loc;
  }
  return leaf >= 0 ? plan.subops[static_cast<size_t>(leaf)].assign_loc : front::SourceLoc{};
}

const std::vector<LoweringPass>& lowering_passes() {
  static const std::vector<LoweringPass> passes = {
      {"kernels", make_kernels}, {"params", make_params}, {"emit", emit_micro_batches},
      {"schedule", order_blocks}, {"step_end", step_end},  {"frees", inject_frees},
  };
  return passes;
}

namespace {

std::string pass_names() {
  std::string s;
  for (const LoweringPass& p : lowering_passes()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

bool is_pass(const std::string& name) {
  for (const LoweringPass& p : lowering_passes())
    if (name == p.name) return true;
  return false;
}

// The passes NNS_LOG_LOWERING names (comma-separated; `all`: every pass),
// read once.
const std::vector<std::string>& logged_passes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    const char* env = std::getenv("NNS_LOG_LOWERING");
    std::stringstream in(env ? env : "");
    for (std::string name; std::getline(in, name, ',');) {
      if (name == "all") {
        for (const LoweringPass& p : lowering_passes()) out.push_back(p.name);
      } else if (is_pass(name)) {
        out.push_back(name);
      } else if (!name.empty()) {
        std::cerr << "nns: warning: NNS_LOG_LOWERING: no lowering pass " << name << " (passes: " << pass_names() << ", or all)\n";
      }
    }
    return out;
  }();
  return names;
}

// Prints R's program as it stands to stderr (the program printer, over a
// LoweredPlan that holds this rank only). Ranks lowered on several threads
// print one at a time.
void dump_rank_program(RankBuild& R, const char* pass) {
  static std::mutex print_mu;
  LoweredPlan shell;
  shell.plan = R.plan.name;
  shell.devices = R.devices;
  shell.replicas = R.opts.replicas;
  shell.micro_batches = static_cast<int>(R.spec.micro_batches);
  shell.comm =
      std::shared_ptr<const CommPlan>(std::shared_ptr<const CommPlan>(), &R.A.cp);  // not owned: printed at once
  {
    std::lock_guard<std::mutex> lock(R.groups.mu);
    shell.groups = R.groups.groups;
  }
  R.P.tags = R.tag;
  std::string text = shell.dump_rank(R.g, R.P);
  std::lock_guard<std::mutex> lock(print_mu);
  std::cerr << "lowering: rank " << R.P.rank << " after pass " << pass << ":\n" << text;
}

}  // namespace

bool run_lowering_passes(RankBuild& R, size_t from, size_t to) {
  const std::string& stop = R.opts.stop_after;
  if (!stop.empty() && !is_pass(stop)) fail("no lowering pass " + stop + " (passes: " + pass_names() + ")");
  const std::vector<std::string>& logged = logged_passes();
  const std::vector<LoweringPass>& passes = lowering_passes();
  for (size_t i = from; i < to && i < passes.size(); ++i) {
    passes[i].run(R);
    if (std::find(logged.begin(), logged.end(), passes[i].name) != logged.end()) dump_rank_program(R, passes[i].name);
    if (stop == passes[i].name) {
      R.P.tags = R.tag;
      return false;
    }
  }
  R.P.tags = R.tag;
  // The lists grew by doubling: a 280-micro-batch program's instructions
  // and buffers would keep up to half again their size as spare capacity
  // for as long as the program lives (nns simulate holds dozens at once).
  R.P.instrs.shrink_to_fit();
  R.P.buffers.shrink_to_fit();
  return true;
}

void run_lowering_passes(RankBuild& R) { run_lowering_passes(R, 0, lowering_passes().size()); }

RankProgram lower_rank(const PlanAnalysis& analysis, const sema::TrainSpec& spec, const LowerOptions& opts,
                       GroupTable& groups, int devices, int rank, const WalkPlan* walk, KernelCache* kernel_cache) {
  RankBuild R(analysis, spec, opts, groups, devices, rank);
  R.walk = walk;
  R.kernel_cache = kernel_cache;
  run_lowering_passes(R);
  return std::move(R.P);
}

}  // namespace nns::backend::detail
