// The executor's distributed optimizer (plan_executor_sharded.cpp) on one
// rank, its collectives a fake that records what they are given and
// answers with values stamped by position: the flat buffers a bucket's
// reduce-scatter and all-gather move hold replica j's shards of every
// parameter in block j, in program order, padded to the longest block; the
// averaged shard lands in this replica's part of the gradient, the update
// reads it, and the gather unpacks every block into its strided or uneven
// box of the parameter. tests/plan/distributed_optimizer.sh checks the
// numbers of real multi-rank runs against one device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/lower_plan.h"
#include "backend/runtime/collectives.h"
#include "backend/runtime/plan_executor.h"
#include "semantics/interpreter.h"
#include "tests/test_util.h"

using namespace nns;
using namespace nns::backend;

namespace {

// Rank `me` of `n`: a reduce-scatter returns this rank's block as it was
// given (the other replicas' contributions zero), an all-gather returns
// this rank's block in its place and stamp(j, k) at element k of block j.
class StampCollectives : public Collectives {
 public:
  StampCollectives(int me, int n) : me_(me), n_(n) {}
  static float stamp(int64_t j, int64_t k) { return static_cast<float>(1000 * (j + 1) + k); }
  std::string name() const override { return "stamp"; }
  int rank() const override { return me_; }
  int size() const override { return n_; }
  void connect_peer(int) override {}
  void allreduce(void*, int64_t, const Group&, bool) override {}
  void allgather(const void* in, void* out, int64_t chunk, const Group& g) override {
    gather_chunks.push_back(chunk);
    float* o = static_cast<float*>(out);
    for (int64_t j = 0; j < static_cast<int64_t>(g.size()); ++j)
      for (int64_t k = 0; k < chunk; ++k) o[j * chunk + k] = stamp(j, k);
    std::memcpy(o + member(g) * chunk, in, static_cast<size_t>(chunk) * 4);
  }
  void reduce_scatter(void* in, void* out, int64_t chunk, const Group& g, bool) override {
    const float* f = static_cast<const float*>(in);
    scatter_chunks.push_back(chunk);
    scattered.emplace_back(f, f + chunk * static_cast<int64_t>(g.size()));
    std::memcpy(out, f + member(g) * chunk, static_cast<size_t>(chunk) * 4);
  }
  void all_to_all(const void*, void*, int64_t, const Group&) override { throw RuntimeError("stamp: no all-to-all"); }
  struct Done : PendingCollective {
    void wait() override {}
  };
  std::unique_ptr<PendingCollective> post_allreduce(void*, int64_t, const Group&, bool) override {
    return std::make_unique<Done>();
  }
  std::unique_ptr<PendingCollective> post_send(const void*, int64_t, int, uint32_t) override {
    throw RuntimeError("stamp: no transfers");
  }
  std::unique_ptr<PendingCollective> post_recv(void*, int64_t, int, uint32_t) override {
    throw RuntimeError("stamp: no transfers");
  }
  void allreduce_host(float*, size_t, const Group&) override {}
  std::vector<int64_t> gather_chunks, scatter_chunks;
  std::vector<std::vector<float>> scattered;

 private:
  int64_t member(const Group& g) const {
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] == me_) return static_cast<int64_t>(i);
    throw RuntimeError("stamp: rank not in its group");
  }
  int me_, n_;
};

// The part of `host` (laid out as piece `have`) in box `want`, row-major.
std::vector<float> region(const std::vector<float>& host, const Piece& have, const Piece& want) {
  std::vector<float> out(static_cast<size_t>(want.numel()));
  copy_region(host.data(), have, out.data(), want, want.start, want.length, false, 1.f);
  return out;
}

}  // namespace

TEST_CASE("distributed optimizer: a bucket's shards travel in padded per-replica blocks and land in their boxes",
          "[collectives]") {
  test::PlannedElaboration e(NNS_SOURCE_DIR, "tests/plan/plans/distributed_optimizer.nns", "small", "dp", 1);
  const sema::Plan& plan = e.plan;
  const int replicas = 4, me = 1;
  LowerOptions o;
  o.replicas = replicas;
  o.distributed_optimizer = true;
  o.only_rank = me;
  o.elaborate = e.elaborator();
  LoweredPlan lp = lower_plan(e.interp->graph(), plan, *e.interp->train(), o);
  auto be = make_cpu_backend(true);
  StampCollectives* fake = nullptr;
  PlanExecutor x(e.interp->graph(), std::move(lp), *e.interp->train(), *be, nullptr, 7, "", [&](const LoweredPlan&) {
    auto c = std::make_unique<StampCollectives>(me, replicas);
    fake = c.get();
    return c;
  });
  const RankProgram& P = x.P;
  REQUIRE(P.replica == me);
  x.spec.clip = 0;  // the gradients stay as the reduce-scatter left them
  be->set_step(1);
  x.lr = 0.01;
  x.run_step(1);

  // The sharded slots, in the order of their gathers (one bucket: the model is small).
  std::vector<size_t> slots;
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::AllGather && in.count > 1) slots.push_back(static_cast<size_t>(in.index));
  REQUIRE(slots.size() == 4);  // w1, b1, w2, w3; b3 (3 elements) is averaged whole
  for (size_t s : slots) REQUIRE(x.replica_sharded(s));
  // Block sizes from the gather geometry (every replica's shard boxes).
  std::vector<int64_t> block(replicas, 0);
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::AllGather && in.count > 1)
      for (int j = 0; j < replicas; ++j)
        block[static_cast<size_t>(j)] += P.geoms[static_cast<size_t>(in.geom)].recv[static_cast<size_t>(j)].numel();
  const int64_t chunk = *std::max_element(block.begin(), block.end());
  CHECK(block != std::vector<int64_t>(replicas, chunk));  // b1's shards differ: the blocks are padded
  REQUIRE(fake->gather_chunks == std::vector<int64_t>{chunk});
  REQUIRE(fake->scatter_chunks == std::vector<int64_t>{chunk});
  const std::vector<float>& flat = fake->scattered.at(0);

  // The reduce-scatter packs the bucket in the order of its averages (the
  // order the gradients became final), the gather in the order of its
  // gathers: where each slot's shard of block j starts in each.
  std::map<int, std::vector<int64_t>> scatter_at;
  std::vector<int64_t> at(replicas, 0);
  for (const PInstr& in : P.instrs)
    if (in.kind == PInstr::ReplicaAverage && in.count > 1) {
      int slot = -1;
      for (size_t i = 0; i < P.params.size(); ++i)
        if (P.params[i].accum == in.a) slot = static_cast<int>(i);
      REQUIRE(slot >= 0);
      scatter_at[slot] = at;
      const PInstr* gather = nullptr;
      for (const PInstr& g : P.instrs)
        if (g.kind == PInstr::AllGather && g.count > 1 && g.index == slot) gather = &g;
      REQUIRE(gather);
      for (int j = 0; j < replicas; ++j)
        at[static_cast<size_t>(j)] += P.geoms[static_cast<size_t>(gather->geom)].recv[static_cast<size_t>(j)].numel();
    }
  REQUIRE(scatter_at.size() == slots.size());
  std::fill(at.begin(), at.end(), 0);
  for (const PInstr& in : P.instrs) {
    if (in.kind != PInstr::AllGather || in.count <= 1) continue;
    const ParamSlot& slot = P.params[static_cast<size_t>(in.index)];
    const std::vector<Piece>& shards = P.geoms[static_cast<size_t>(in.geom)].recv;
    const std::vector<float> param = x.download(x.bufs[static_cast<size_t>(slot.param)]);
    const std::vector<float> grad = x.download(x.bufs[static_cast<size_t>(slot.accum)]);
    const std::vector<float> shard = x.download(x.bufs[static_cast<size_t>(slot.shard)]);
    CHECK(x.opt[static_cast<size_t>(in.index)].at(0).numel() == shards[me].numel());  // AdamW's state: the shard's
    for (int j = 0; j < replicas; ++j) {
      const Piece& sh = shards[static_cast<size_t>(j)];
      const std::vector<float> p = region(param, x.piece(slot.param), sh), gr = region(grad, x.piece(slot.accum), sh);
      for (int64_t i = 0; i < sh.numel(); ++i) {
        const float packed = flat[static_cast<size_t>(j * chunk + scatter_at.at(in.index)[static_cast<size_t>(j)] + i)];
        // Packed: replica j's part of this replica's gradient; back, in its
        // own part only, times 1/replicas (the other replicas gave zeros).
        CHECK(gr[static_cast<size_t>(i)] == (j == me ? packed / replicas : packed));
        // Gathered: this replica's updated shard, the others' stamps.
        CHECK(p[static_cast<size_t>(i)] ==
              (j == me ? shard[static_cast<size_t>(i)] : StampCollectives::stamp(j, at[static_cast<size_t>(j)] + i)));
      }
      at[static_cast<size_t>(j)] += sh.numel();
    }
  }
  // The padding of the shorter blocks is zeros.
  for (int j = 0; j < replicas; ++j)
    for (int64_t k = block[static_cast<size_t>(j)]; k < chunk; ++k)
      CHECK(flat[static_cast<size_t>(j * chunk + k)] == 0.f);
}
