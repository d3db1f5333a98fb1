// The mechanisms of Megatron-LM's H100 runs (issue 31, item 1): the
// distributed optimizer over plan replicas (lowering: shards, the
// reduce-scattered average, the gathers; memory: optimizer state / replicas;
// cost: a reduce-scatter), the parameter gather overlapped with the next
// forward (simulator), and tensor-parallel communication overlap (a chunked
// collective pipelined with a chunked GEMM).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_replay.h"
#include "backend/planner/comm_cost.h"
#include "backend/planner/profiles.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/simulator.h"
#include "backend/planner/topology_comm.h"
#include "backend/planner/tp_overlap.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;
using backend::BufferDecl;
using backend::PInstr;

TEST_CASE("tp overlap: a chunked collective pipelined with a chunked GEMM", "[h100]") {
  // k chunks: the first GEMM chunk alone, then k-1 ring steps each beside
  // the next GEMM chunk (the slower of the two).
  CHECK(planner::pipelined_time(1.0, 2.0, 4) == Approx(1 + 3 * 2));  // communication-bound: 7
  CHECK(planner::pipelined_time(2.0, 1.0, 4) == Approx(2 + 3 * 2));  // GEMM-bound: 8, the whole GEMM
  CHECK(planner::pipelined_time(0.5, 0.25, 8) == Approx(0.5 + 7 * 0.5));
  CHECK(planner::pipelined_time(3.0, 1.0, 1) == Approx(3.0));  // one member: no transfer
}

namespace {

// One rank of two plan replicas (the other taken as on time): kernel 0's
// forward (2 s), then kernel 1 reads the parameter (buffer 0) and runs its
// forward (1 s); the step ends with the gather of the updated shard
// (buffer 1) into the parameter (3 s).
backend::LoweredPlan gather_at_end() {
  backend::LoweredPlan lp;
  lp.devices = 1;
  lp.replicas = 2;
  lp.groups = {{0, 1}};
  backend::RankProgram prog;
  prog.buffers.resize(2);
  prog.buffers[0].role = BufferDecl::Param;
  prog.buffers[1].role = BufferDecl::Shard;
  auto in = [](PInstr::Kind k, int kernel, int a, int b) {
    PInstr i;
    i.kind = k;
    i.kernel = kernel;
    i.a = a;
    i.b = b;
    return i;
  };
  PInstr gather = in(PInstr::AllGather, -1, 1, 0);
  gather.group = 0;
  prog.instrs = {in(PInstr::Forward, 0, -1, -1), in(PInstr::SliceIn, 1, 0, -1), in(PInstr::Forward, 1, -1, -1), gather};
  lp.programs.push_back(prog);
  return lp;
}

double gather_cost(const backend::RankProgram&, const PInstr& in) {
  if (in.kind == PInstr::Forward) return in.kernel == 0 ? 2.0 : 1.0;
  return in.kind == PInstr::AllGather ? 3.0 : 0.0;
}

}  // namespace

TEST_CASE("simulator: --overlap-param-gather gathers at the step's start, the parameter's first reader waiting",
          "[h100]") {
  backend::LoweredPlan lp = gather_at_end();
  planner::SimResult blocking, overlapped;
  std::string err;
  REQUIRE(planner::simulate(lp, gather_cost, blocking, err));
  CHECK(blocking.step_time == Approx(2 + 1 + 3));
  planner::SimOptions so;
  so.overlap_param_gather = true;
  REQUIRE(planner::simulate(lp, gather_cost, overlapped, err, so));
  // The gather runs [0, 3); the reader reaches it at 2 and waits 1; kernel 1 ends at 4.
  CHECK(overlapped.step_time == Approx(4.0));
  CHECK(overlapped.ranks[0].exposed_comm == Approx(1.0));
  CHECK(overlapped.ranks[0].overlapped_comm == Approx(2.0));
  CHECK(overlapped.ranks[0].busy == Approx(3.0));
}

namespace {

struct TinyMegatron : test::PlannedElaboration {
  TinyMegatron() : PlannedElaboration(NNS_SOURCE_DIR, "examples/gpt.nns", "tiny_sc21_tp2", "megatron_h100", 2) {}
  backend::LoweredPlan lower(int replicas, bool distributed, bool bodies, bool all_ranks = false) {
    backend::LowerOptions o;
    o.replicas = replicas;
    if (!all_ranks) o.first_ranks = 2;  // replica 0, as nns simulate and the memory check lower it
    o.distributed_optimizer = distributed;
    if (bodies) o.elaborate = elaborator();
    return backend::lower_plan(interp->graph(), plan, *interp->train(), o);
  }
};

}  // namespace

TEST_CASE("distributed optimizer: each replica updates 1/replicas of every parameter and gathers the rest", "[h100]") {
  TinyMegatron m;
  const int replicas = 4;
  backend::LoweredPlan plain = m.lower(replicas, false, false), sharded = m.lower(replicas, true, false);
  REQUIRE(sharded.programs.size() == 2);
  planner::DeviceProfile prof;
  std::string err;
  REQUIRE(planner::load_device("h100", prof, err));
  for (size_t r = 0; r < sharded.programs.size(); ++r) {
    const backend::RankProgram& p = sharded.programs[r];
    INFO("rank " << p.rank);
    int sharded_slots = 0, scattered = 0, gathered = 0;
    double param_elems = 0;
    for (const backend::ParamSlot& s : p.params) {
      if (!s.trainable || s.accum < 0) continue;
      const double whole = static_cast<double>(p.buffers[static_cast<size_t>(s.param)].piece.numel());
      param_elems += whole;
      REQUIRE(s.shard >= 0);  // every tiny dimension divides by 4
      CHECK(static_cast<double>(p.buffers[static_cast<size_t>(s.shard)].piece.numel()) * replicas == whole);
      ++sharded_slots;
    }
    for (const PInstr& in : p.instrs) {
      const bool over_replicas =
          in.group >= 0 && sharded.groups[static_cast<size_t>(in.group)].size() == static_cast<size_t>(replicas);
      if (in.kind == PInstr::ReplicaAverage) {
        CHECK(in.count == replicas);
        ++scattered;
        // Costed as a reduce-scatter of the whole gradient over the replicas.
        const double bytes = planner::comm_bytes(p, in, 2);
        CHECK(planner::comm_time(prof, sharded, p, in, 2) <=
              Approx(planner::topology_collective_time(prof, planner::Collective::ReduceScatter, bytes,
                                                       sharded.groups[static_cast<size_t>(in.group)])));
      }
      if (in.kind == PInstr::AllGather && in.edge < 0 && over_replicas) ++gathered;
      if (in.kind == PInstr::Update) CHECK(p.buffers[static_cast<size_t>(in.a)].role == BufferDecl::Shard);
    }
    CHECK(scattered == sharded_slots);
    CHECK(gathered == sharded_slots);
    // Buckets: the gathers of one bucket (step) together cost one all-gather
    // of their parameters over the replicas, the reduce-scatters likewise.
    std::map<int, double> gather_bytes, gather_paid, scatter_bytes, scatter_paid;
    int group = -1;
    for (const PInstr& in : p.instrs) {
      if (in.kind == PInstr::AllGather && in.count > 1) {
        gather_bytes[in.step] += planner::comm_bytes(p, in, 2);
        gather_paid[in.step] += planner::comm_time(prof, sharded, p, in, 2);
        group = in.group;
      }
      if (in.kind == PInstr::ReplicaAverage) {
        scatter_bytes[in.step] += planner::comm_bytes(p, in, 2);
        scatter_paid[in.step] += planner::comm_time(prof, sharded, p, in, 2);
      }
    }
    REQUIRE(group >= 0);
    CHECK(gather_bytes.size() == scatter_bytes.size());
    const std::vector<int>& members = sharded.groups[static_cast<size_t>(group)];
    for (const auto& [bucket, bytes] : gather_bytes) {
      INFO("bucket " << bucket);
      CHECK(gather_paid[bucket] ==
            Approx(planner::topology_collective_time(prof, planner::Collective::AllGather, bytes, members)));
      CHECK(scatter_paid[bucket] == Approx(planner::topology_collective_time(prof, planner::Collective::ReduceScatter,
                                                                             scatter_bytes[bucket], members)));
    }
    // Memory, hand-counted: at 2 bytes an element the optimizer state is
    // Adam's two fp32 moments and an fp32 master copy, 12 bytes an element,
    // of the shard only; weights and gradients stay whole (2 + 2 bytes).
    backend::MemoryPeak a = backend::peak_memory(plain.programs[r], 2, 2), b = backend::peak_memory(p, 2, 2);
    CHECK(a.optimizer == Approx(param_elems * 12));
    CHECK(b.optimizer == Approx(param_elems * 12 / replicas));
    CHECK(b.gradients == Approx(a.gradients));
    CHECK(b.weights == Approx(a.weights + param_elems * 2 / replicas));  // the shard buffer beside the whole piece
  }
}

TEST_CASE("simulator: an overlapped reduce-scatter of the distributed optimizer is waited for at its reader",
          "[h100]") {
  // One rank of two replicas: kernel 0's backward (1 s) finishes gradient
  // 0, whose reduce-scatter (3 s) is posted; kernel 1's backward (4 s)
  // runs meanwhile; the update reads the gradient.
  backend::LoweredPlan lp;
  lp.devices = 1;
  lp.replicas = 2;
  lp.groups = {{0, 1}};
  backend::RankProgram prog;
  prog.buffers.resize(2);
  prog.buffers[0].role = BufferDecl::Accum;
  prog.buffers[1].role = BufferDecl::Shard;
  for (auto& b : prog.buffers) {
    b.piece.start = {0};
    b.piece.length = {2};
  }
  auto in = [](PInstr::Kind k, int kernel, int a, int b) {
    PInstr i;
    i.kind = k;
    i.kernel = kernel;
    i.a = a;
    i.b = b;
    return i;
  };
  PInstr rs = in(PInstr::ReplicaAverage, -1, 0, -1);
  rs.group = 0;
  rs.count = 2;
  prog.instrs = {in(PInstr::Backward, 0, -1, -1), in(PInstr::CollectGrad, 0, -1, 0), rs,
                 in(PInstr::Backward, 1, -1, -1), in(PInstr::Update, -1, 1, 0)};
  lp.programs.push_back(prog);
  auto cost = [](const backend::RankProgram&, const PInstr& i) {
    if (i.kind == PInstr::Backward) return i.kernel == 0 ? 1.0 : 4.0;
    return i.kind == PInstr::ReplicaAverage ? 3.0 : 0.0;
  };
  planner::SimResult blocking, overlapped;
  std::string err;
  REQUIRE(planner::simulate(lp, cost, blocking, err));
  CHECK(blocking.step_time == Approx(1 + 3 + 4));
  planner::SimOptions so;
  so.overlap_grad_reduce = true;
  REQUIRE(planner::simulate(lp, cost, overlapped, err, so));
  // The reduce-scatter runs [1, 4) under kernel 1's backward [1, 5).
  CHECK(overlapped.step_time == Approx(5.0));
  CHECK(overlapped.ranks[0].exposed_comm == Approx(0.0));
  CHECK(overlapped.ranks[0].overlapped_comm == Approx(3.0));
  // With a 5 s reduce-scatter the update waits 1 s for it.
  auto slow = [&cost](const backend::RankProgram& p, const PInstr& i) {
    return i.kind == PInstr::ReplicaAverage ? 5.0 : cost(p, i);
  };
  REQUIRE(planner::simulate(lp, slow, overlapped, err, so));
  CHECK(overlapped.step_time == Approx(6.0));
  CHECK(overlapped.ranks[0].exposed_comm == Approx(1.0));
}

TEST_CASE(
    "distributed optimizer: over a replica count that divides no dimension, the shards still cover each parameter",
    "[h100]") {
  TinyMegatron m;
  const int replicas = 3;  // tiny's dimensions are powers of two
  backend::LoweredPlan lp = m.lower(replicas, true, false, /*all_ranks=*/true);
  REQUIRE(lp.programs.size() == 6);
  // Per device and parameter: the replicas' shards add up to the piece, none more than a row apart.
  std::map<std::pair<int, int>, std::vector<int64_t>> shards;  // (device, tensor) -> shard sizes
  std::map<std::pair<int, int>, int64_t> whole;
  for (const backend::RankProgram& p : lp.programs)
    for (const backend::ParamSlot& s : p.params) {
      if (!s.trainable || s.accum < 0) continue;
      REQUIRE(s.shard >= 0);
      shards[{p.device, s.tensor}].push_back(p.buffers[static_cast<size_t>(s.shard)].piece.numel());
      whole[{p.device, s.tensor}] = p.buffers[static_cast<size_t>(s.param)].piece.numel();
    }
  REQUIRE(!shards.empty());
  for (const auto& [key, sizes] : shards) {
    INFO("device " << key.first << " tensor " << key.second);
    REQUIRE(sizes.size() == static_cast<size_t>(replicas));
    int64_t sum = 0;
    for (int64_t n : sizes) sum += n;
    CHECK(sum == whole[key]);
    CHECK(*std::max_element(sizes.begin(), sizes.end()) - *std::min_element(sizes.begin(), sizes.end()) <=
          whole[key] / 3);
    CHECK(sizes.front() ==
          *std::max_element(sizes.begin(), sizes.end()));  // replica 0's the largest (programs by rank)
  }
}

TEST_CASE("tp overlap: a sequence-parallel reduce-scatter is charged what pipelining it with its producer's GEMM adds",
          "[h100]") {
  test::PlannedElaboration e(NNS_SOURCE_DIR, "examples/gpt.nns", "tiny_sc21_tp2", "megatron_h100_sp", 2);
  const sema::Plan& plan = e.plan;
  backend::LowerOptions o;
  o.elaborate = e.elaborator();
  backend::LoweredPlan lp = backend::lower_plan(e.interp->graph(), plan, *e.interp->train(), o);
  planner::DeviceProfile prof;
  std::string err;
  REQUIRE(planner::load_device("h100", prof, err));
  const planner::InstrCost base = planner::profile_cost(prof, lp, 2, "bf16");
  const planner::InstrCost overlapped = planner::tp_overlap_cost(prof, lp, 2, "bf16", base);
  const backend::RankProgram& p = lp.programs[0];
  // The first forward reduce-scatter: the attention's partial sums (its
  // output projection the producer's last GEMM) into token slices.
  int at = -1, made_by = -1;
  for (size_t i = 0; i < p.instrs.size() && at < 0; ++i)
    if (p.instrs[i].kind == PInstr::ReduceScatter && p.instrs[i].edge >= 0) at = static_cast<int>(i);
  REQUIRE(at >= 0);
  const PInstr& rs = p.instrs[static_cast<size_t>(at)];
  for (int j = at - 1; j >= 0 && made_by < 0; --j)
    if (p.instrs[static_cast<size_t>(j)].kind == PInstr::CollectOut && p.instrs[static_cast<size_t>(j)].b == rs.a)
      for (int q = j - 1; q >= 0 && made_by < 0; --q)
        if (p.instrs[static_cast<size_t>(q)].kind == PInstr::Forward &&
            p.instrs[static_cast<size_t>(q)].kernel == p.instrs[static_cast<size_t>(j)].kernel)
          made_by = q;
  REQUIRE(made_by >= 0);
  // By hand: the producer's last linear node (G as charged, g at half its
  // FLOPs and bytes), one ring step c of the reduce-scatter over 2 ranks.
  const auto nodes = planner::kernel_node_times(prof, p, p.instrs[static_cast<size_t>(made_by)], 2, "bf16");
  double G = -1, g = -1;
  for (auto it = nodes.rbegin(); it != nodes.rend() && G < 0; ++it)
    if (planner::op_class(p.local.node(it->first).kind) == "matmul") {
      G = it->second;
      planner::NodeWork w = planner::node_work(p.local, p.local.node(it->first));
      w.dtype = "bf16";
      w.bytes = w.bytes * 2 / 4.0 / 2;
      w.flops /= 2;
      g = planner::node_time(prof, w);
    }
  REQUIRE(G > 0);
  const std::vector<int>& group = lp.groups[static_cast<size_t>(rs.group)];
  REQUIRE(group.size() == 2);
  const double c =
      planner::topology_collective_time(prof, planner::Collective::ReduceScatter, planner::comm_bytes(p, rs, 2), group);
  CHECK(overlapped(p, rs) == Approx(std::max(0.0, g + std::max(g, c) - G)));
  CHECK(base(p, rs) == Approx(c));  // one ring step is the whole reduce-scatter over 2
}
