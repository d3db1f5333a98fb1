// Where a plan's collectives run (backend/runtime/collectives.h): the
// choice between Gloo and NCCL, the pending-collective bookkeeping ("post
// now, wait at first use") on its own, and the plan executor under a fake
// Collectives whose posted allreduce really completes only at its wait():
// a consumer that ran before its wait would read the unreduced gradients,
// and the run would differ from one where every collective completes at
// once. The same fake with the seeded bug NNS_TEST_FAULT=consume-before-wait
// shows that the comparison catches it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
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

// ---- the choice -------------------------------------------------------------------------------

struct Choice {
  bool ok;
  std::string out, why, err;
  bool usage;
};

Choice choose(const std::string& requested, CommFacts f) {
  Choice c;
  c.usage = false;
  c.ok = choose_collectives(requested, f, c.out, c.why, c.err, c.usage);
  return c;
}

CommFacts gpus(int ranks, int local, int visible) {
  CommFacts f;
  f.device = "cuda";
  f.nccl_built = true;
  f.ranks = ranks;
  f.local_ranks = local;
  f.visible_gpus = visible;
  return f;
}

}  // namespace

TEST_CASE("auto takes NCCL only for the CUDA backend built with NCCL with a GPU per local rank", "[collectives]") {
  CHECK(choose("auto", gpus(8, 8, 8)).out == "nccl");
  CHECK(choose("auto", gpus(16, 8, 8)).out == "nccl");  // two hosts of 8: a GPU per rank on each
  // The lent machines: several ranks share one GPU, NCCL refuses that.
  Choice shared = choose("auto", gpus(2, 2, 1));
  CHECK(shared.ok);
  CHECK(shared.out == "gloo");
  CHECK(shared.why.find("share 1 GPU") != std::string::npos);
  CommFacts no_nccl = gpus(2, 2, 2);
  no_nccl.nccl_built = false;
  CHECK(choose("auto", no_nccl).out == "gloo");
  for (const char* device : {"cpu", "cuda-emulation"}) {
    CommFacts f = gpus(2, 2, 2);
    f.device = device;
    CHECK(choose("auto", f).out == "gloo");
  }
  CommFacts bf16 = gpus(2, 2, 2);
  bf16.bf16_reduce = true;
  CHECK(choose("auto", bf16).out == "gloo");
  CHECK(choose("auto", gpus(1, 1, 1)).out == "gloo");  // one rank: nothing to communicate
}

TEST_CASE("--comm forces either side; nccl is refused with the reason where it cannot run", "[collectives]") {
  CHECK(choose("gloo", gpus(8, 8, 8)).out == "gloo");
  CHECK(choose("nccl", gpus(2, 2, 2)).out == "nccl");
  CHECK(choose("nccl", gpus(1, 1, 1)).out == "nccl");  // a world of one GPU: the setup path runs
  Choice shared = choose("nccl", gpus(2, 2, 1));
  CHECK_FALSE(shared.ok);
  CHECK_FALSE(shared.usage);
  CHECK(shared.err.find("--comm nccl: 2 rank(s) on this host share 1 GPU(s)") == 0);
  CommFacts cpu = gpus(2, 2, 0);
  cpu.device = "cpu";
  Choice on_cpu = choose("nccl", cpu);
  CHECK_FALSE(on_cpu.ok);
  CHECK(on_cpu.err.find("--device cuda") != std::string::npos);
  Choice bad = choose("mpi", gpus(2, 2, 2));
  CHECK_FALSE(bad.ok);
  CHECK(bad.usage);
  CHECK(bad.err == "--comm is auto, gloo or nccl (got 'mpi')");
}

// ---- the bookkeeping --------------------------------------------------------------------------

namespace {

// A posted operation that logs its wait; `done` must come after it.
struct LoggedOp : PendingCollective {
  std::vector<std::string>* log;
  std::string name;
  bool waited = false;
  LoggedOp(std::vector<std::string>* l, std::string n) : log(l), name(std::move(n)) {}
  void wait() override {
    if (waited) return;
    waited = true;
    log->push_back("wait " + name);
  }
};

PInstr instr(PInstr::Kind k, int a, int b) {
  PInstr in;
  in.kind = k;
  in.a = a;
  in.b = b;
  return in;
}

void post(PendingTable& t, std::vector<std::string>& log, const std::string& name, std::vector<int> buffers) {
  PendingTable::Entry e;
  e.buffers = std::move(buffers);
  e.op = std::make_unique<LoggedOp>(&log, name);
  e.done = [&log, name] { log.push_back("done " + name); };
  t.post(std::move(e));
}

}  // namespace

TEST_CASE("a posted operation completes at the first instruction touching its buffers, once, wait before done",
          "[collectives]") {
  RankProgram prog;
  prog.buckets = {{3, 4}, {5}};
  PendingTable t;
  std::vector<std::string> log;
  post(t, log, "bucket0", prog.buckets[0]);
  post(t, log, "bucket1", prog.buckets[1]);
  // Instructions that touch neither bucket leave both in flight.
  CHECK(t.settle(prog, instr(PInstr::Alloc, -1, 7)) == 0);
  CHECK(t.settle(prog, instr(PInstr::Forward, -1, -1)) == 0);
  CHECK(t.settle(prog, instr(PInstr::AddTo, 1, 2)) == 0);
  CHECK(log.empty());
  CHECK(t.pending(4));
  // The Update of a parameter whose gradient is buffer 4 is bucket0's first consumer.
  CHECK(t.settle(prog, instr(PInstr::Update, 0, 4)) == 1);
  CHECK(log == std::vector<std::string>{"wait bucket0", "done bucket0"});
  CHECK_FALSE(t.pending(3));  // the whole bucket completed
  CHECK(t.settle(prog, instr(PInstr::Update, 9, 3)) == 0);
  CHECK(t.pending(5));
  // The gradient norm reads every gradient: everything completes.
  CHECK(t.settle(prog, instr(PInstr::LossAllReduce, -1, -1)) == 1);
  CHECK(log.back() == "done bucket1");
  CHECK(t.empty());
}

TEST_CASE("two posts over one buffer complete oldest first; finish completes the rest", "[collectives]") {
  RankProgram prog;
  PendingTable t;
  std::vector<std::string> log;
  post(t, log, "first", {2});
  post(t, log, "second", {2, 6});
  post(t, log, "other", {8});
  CHECK(t.complete(2) == 2);
  CHECK(log == std::vector<std::string>{"wait first", "done first", "wait second", "done second"});
  CHECK(t.pending(8));
  CHECK(t.finish() == 1);
  CHECK(t.empty());
  CHECK(log.back() == "done other");
}

TEST_CASE("instr_buffers: a and b, a bucket's members, every buffer for the norm and clipping", "[collectives]") {
  RankProgram prog;
  prog.buckets = {{1, 2, 3}};
  std::vector<int> out;
  bool all = false;
  instr_buffers(prog, instr(PInstr::CollectGrad, -1, 5), out, all);
  CHECK(out == std::vector<int>{5});
  CHECK_FALSE(all);
  PInstr bucket = instr(PInstr::BucketAllReduce, -1, -1);
  bucket.index = 0;
  instr_buffers(prog, bucket, out, all);
  CHECK(out == std::vector<int>{1, 2, 3});
  instr_buffers(prog, instr(PInstr::Clip, -1, -1), out, all);
  CHECK(all);
}

TEST_CASE("add_to_sources_freed_next: an add-to's source dies there only when its Free is the next touch",
          "[collectives]") {
  RankProgram prog;
  prog.buffers.resize(6);
  prog.instrs = {
      instr(PInstr::AddTo, 0, 1),            // 0: b0 freed next -> hand over
      instr(PInstr::Free, -1, -1),           // 1: (touches nothing)
      instr(PInstr::Free, 0, -1),            // 2
      instr(PInstr::AddTo, 2, 3),            // 3: b2 read again by the next add-to -> copy
      instr(PInstr::AddTo, 2, 4),            // 4: then freed -> hand over
      instr(PInstr::Free, 2, -1),            // 5
      instr(PInstr::AddTo, 5, 1),            // 6: the norm reads every buffer before b5's Free -> copy
      instr(PInstr::LossAllReduce, -1, -1),  // 7
      instr(PInstr::Free, 5, -1),            // 8
      instr(PInstr::AddTo, 1, 3),            // 9: b1 is never freed (an accumulator) -> copy
  };
  const std::vector<char> dies = add_to_sources_freed_next(prog);
  REQUIRE(dies.size() == prog.instrs.size());
  CHECK(dies == std::vector<char>{1, 0, 0, 0, 1, 0, 0, 0, 0, 0});
}

// ---- the executor under a fake ----------------------------------------------------------------

namespace {

// Rank 0 of a world of `n` whose other members hold what rank 0 holds: a
// sum over a group is n_group times the value, a gather repeats it. Enough
// to run rank 0's program alone and deterministically; the same in every
// mode, so runs compare exactly. `defer`: a posted allreduce leaves the
// buffer unreduced and poisoned (NaN) and reduces it only in wait(), as an
// NCCL allreduce on another stream is unfinished until waited for.
class MirrorCollectives : public Collectives {
 public:
  MirrorCollectives(int n, bool defer) : n_(n), defer_(defer) {}
  std::string name() const override { return "mirror"; }
  int rank() const override { return 0; }
  int size() const override { return n_; }
  void connect_peer(int) override {}
  void allreduce(void* buf, int64_t count, const Group& g, bool) override {
    scale(static_cast<float*>(buf), count, g.size());
  }
  void allgather(const void* in, void* out, int64_t chunk, const Group& g) override {
    for (size_t i = 0; i < g.size(); ++i)
      std::memcpy(static_cast<float*>(out) + i * chunk, in, static_cast<size_t>(chunk) * 4);
  }
  void reduce_scatter(void* in, void* out, int64_t chunk, const Group& g, bool) override {
    std::memcpy(out, static_cast<float*>(in) + member(g) * chunk, static_cast<size_t>(chunk) * 4);
    scale(static_cast<float*>(out), chunk, g.size());
  }
  void all_to_all(const void* in, void* out, int64_t chunk, const Group& g) override {
    for (size_t i = 0; i < g.size(); ++i)
      std::memcpy(static_cast<float*>(out) + i * chunk, static_cast<const float*>(in) + member(g) * chunk,
                  static_cast<size_t>(chunk) * 4);
  }
  struct Done : PendingCollective {
    void wait() override {}
  };
  struct Deferred : PendingCollective {
    float* buf;
    std::vector<float> saved;
    size_t members;
    int* waits;
    bool waited = false;
    void wait() override {
      if (waited) return;
      waited = true;
      ++*waits;
      for (size_t i = 0; i < saved.size(); ++i) buf[i] = saved[i] * static_cast<float>(members);
    }
  };
  std::unique_ptr<PendingCollective> post_allreduce(void* buf, int64_t count, const Group& g, bool round) override {
    ++posts;
    if (!defer_) {
      allreduce(buf, count, g, round);
      return std::make_unique<Done>();
    }
    auto d = std::make_unique<Deferred>();
    d->buf = static_cast<float*>(buf);
    d->saved.assign(d->buf, d->buf + count);
    d->members = g.size();
    d->waits = &waits;
    std::fill(d->buf, d->buf + count, std::nanf(""));
    return d;
  }
  std::unique_ptr<PendingCollective> post_send(const void*, int64_t, int, uint32_t) override {
    throw RuntimeError("mirror: no transfers");
  }
  std::unique_ptr<PendingCollective> post_recv(void*, int64_t, int, uint32_t) override {
    throw RuntimeError("mirror: no transfers");
  }
  void allreduce_host(float* v, size_t count, const Group& g) override {
    scale(v, static_cast<int64_t>(count), g.size());
  }
  int posts = 0, waits = 0;

 private:
  static void scale(float* p, int64_t count, size_t by) {
    for (int64_t i = 0; i < count; ++i) p[i] *= static_cast<float>(by);
  }
  static int64_t member(const Group& g) {
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] == 0) return static_cast<int64_t>(i);
    return 0;
  }
  int n_;
  bool defer_;
};

struct Run {
  std::vector<std::vector<float>> params;
  int posts = 0, waits = 0;
};

// Rank 0 of plan `plan_name` on 2 devices, 3 steps, its collectives on the mirror.
Run run_rank0(const std::string& file, const std::string& config, const std::string& plan_name, bool defer,
              bool consume_before_wait) {
  test::Elaboration e(config);
  REQUIRE(e.load(std::string(NNS_SOURCE_DIR) + "/" + file));
  sema::Interpreter& interp = *e.interp;
  sema::Plan plan;
  REQUIRE(e.evaluate_plan(plan_name, 2, plan));
  LowerOptions o;
  o.only_rank = 0;
  o.elaborate = [&](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                    const std::map<std::string, int64_t>& div,
                    sema::Graph& local) { return interp.instantiate_op(node, ins, outs, div, local); };
  LoweredPlan lp = lower_plan(interp.graph(), plan, *interp.train(), o);
  bool has_bucket = false;
  for (const PInstr& in : lp.programs.at(0).instrs) has_bucket |= in.kind == PInstr::BucketAllReduce;
  REQUIRE(has_bucket);
  if (consume_before_wait) setenv("NNS_TEST_FAULT", "consume-before-wait", 1);
  MirrorCollectives* mirror = nullptr;
  auto be = make_cpu_backend(true);
  Run r;
  {
    PlanExecutor x(interp.graph(), std::move(lp), *interp.train(), *be, nullptr, 7, "", [&](const LoweredPlan&) {
      auto m = std::make_unique<MirrorCollectives>(2, defer);
      mirror = m.get();
      return m;
    });
    unsetenv("NNS_TEST_FAULT");
    for (int64_t s = 1; s <= 3; ++s) {
      be->set_step(s);
      x.lr = 0.01;
      x.run_step(s);
    }
    for (const ParamSlot& slot : x.P.params) r.params.push_back(x.download(x.bufs[static_cast<size_t>(slot.param)]));
    r.posts = mirror->posts;
    r.waits = mirror->waits;
  }
  return r;
}

bool finite(const Run& r) {
  for (const auto& p : r.params)
    for (float v : p)
      if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("the executor waits for a posted bucket allreduce before its first consumer", "[collectives]") {
  Run eager = run_rank0("tests/plan/plans/tensor_math.nns", "small", "dp", false, false);
  Run deferred = run_rank0("tests/plan/plans/tensor_math.nns", "small", "dp", true, false);
  REQUIRE(deferred.posts > 0);
  CHECK(deferred.waits == deferred.posts);  // every posted allreduce was waited for
  CHECK(finite(deferred));
  CHECK(deferred.params == eager.params);
}

TEST_CASE("seeded bug: consumers that do not wait read unreduced, poisoned gradients, and the comparison sees it",
          "[collectives]") {
  Run eager = run_rank0("tests/plan/plans/tensor_math.nns", "small", "dp", false, false);
  Run early = run_rank0("tests/plan/plans/tensor_math.nns", "small", "dp", true, true);
  REQUIRE(early.posts > 0);
  CHECK(early.waits == early.posts);  // completed at the step end, too late
  CHECK(early.params != eager.params);
}

// ---- NCCL's in-order matching -----------------------------------------------------------------

// Which shipped pipelined plans NCCL can carry (each channel's transfers
// posted in tag order on every rank). The interleaved schedules cannot:
// their chunks' transfers cross (auto then keeps them on Gloo; --comm nccl
// refuses them), and the check names the channel.
TEST_CASE("1F1B and zero-bubble schedules post every channel's transfers in tag order; interleaved ones do not",
          "[collectives]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t devices;
    bool in_order;
  };
  for (Case c : {Case{"tests/plan/plans/pipeline.nns", "small", "onef1b", 2, true},
                 Case{"tests/plan/plans/pipeline.nns", "small", "zbh1", 2, true},
                 Case{"examples/01_mlp.nns", "small", "pipeline", 2, true},
                 Case{"tests/plan/plans/collectives.nns", "small", "stages", 4, true},
                 Case{"tests/plan/plans/pipeline.nns", "small", "interleaved", 2, false},
                 Case{"examples/t5.nns", "tiny", "interlaced", 2, false}}) {
    INFO(c.file << " plan " << c.plan);
    test::Elaboration e(c.config);
    REQUIRE(e.load(std::string(NNS_SOURCE_DIR) + "/" + c.file));
    sema::Interpreter& interp = *e.interp;
    sema::Plan plan;
    REQUIRE(e.evaluate_plan(c.plan, c.devices, plan));
    LowerOptions o;
    o.communication_only = true;  // the same communication, in the same order, as the full lowering
    LoweredPlan lp = lower_plan(interp.graph(), plan, *interp.train(), o);
    size_t transfers = 0, out_of_order = 0;
    for (const RankProgram& p : lp.programs) {
      out_of_order += transfers_out_of_tag_order(p).empty() ? 0 : 1;
      for (const PInstr& in : p.instrs) transfers += in.kind == PInstr::Send ? 1 : 0;
    }
    CHECK(transfers > 0);
    CHECK((out_of_order == 0) == c.in_order);
  }
}

TEST_CASE("a program posting a channel's transfers out of tag order is named", "[collectives]") {
  RankProgram p;
  PInstr a = instr(PInstr::Send, 1, -1), b = instr(PInstr::Send, 2, -1), r = instr(PInstr::Recv, -1, 3);
  a.peer = b.peer = r.peer = 1;
  a.tag = 4;
  b.tag = 2;
  r.tag = 3;
  p.instrs = {r, a};
  CHECK(transfers_out_of_tag_order(p) == "");  // each direction on its own: in order
  p.instrs = {a, r, b};
  CHECK(transfers_out_of_tag_order(p) == "sends to rank 1");
}
