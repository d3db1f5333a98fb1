// The simulator at scale (helper-megatron, issue 12): symmetry (one plan
// replica replayed gives the step time of replaying every rank), the
// gradient reduction overlapped with the backward on a hand-computed
// timeline, --precision's kernel cost, backward nodes of matmuls, peak
// memory from the buffers, and the simulated Chrome trace.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "backend/planner/cost_model.h"
#include "backend/planner/json.h"
#include "backend/lowering/memory_replay.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/sim_trace.h"
#include "backend/planner/simulator.h"
#include "backend/planner/topology_comm.h"

using namespace nns::planner;
using nns::backend::BufferDecl;
using nns::backend::LoweredPlan;
using nns::backend::MemoryPeak;
using nns::backend::peak_memory;
using nns::backend::PInstr;
using nns::backend::RankProgram;

namespace {

PInstr op(PInstr::Kind k, int a = -1, int b = -1, int group = -1) {
  PInstr in;
  in.kind = k;
  in.a = a;
  in.b = b;
  in.group = group;
  return in;
}

int intern(LoweredPlan& lp, std::vector<int> g) {
  for (size_t i = 0; i < lp.groups.size(); ++i)
    if (lp.groups[i] == g) return static_cast<int>(i);
  lp.groups.push_back(std::move(g));
  return static_cast<int>(lp.groups.size()) - 1;
}

// `devices` x `replicas` ranks (rank = replica * devices + device): forward,
// a tensor-parallel allreduce over the replica's devices, backward, the
// replicas' gradient average over the same device of every replica, the
// loss over every rank. Device d's kernels take d + 1 seconds, so the
// devices of a replica wait for each other at the allreduce.
LoweredPlan replicated(int devices, int replicas) {
  LoweredPlan lp;
  lp.devices = devices;
  lp.replicas = replicas;
  std::vector<int> world;
  for (int r = 0; r < devices * replicas; ++r) world.push_back(r);
  for (int r = 0; r < devices * replicas; ++r) {
    RankProgram prog;
    prog.rank = r;
    prog.device = r % devices;
    prog.replica = r / devices;
    std::vector<int> tp, dp;
    for (int d = 0; d < devices; ++d) tp.push_back(prog.replica * devices + d);
    for (int j = 0; j < replicas; ++j) dp.push_back(j * devices + prog.device);
    prog.instrs = {op(PInstr::Forward), op(PInstr::AllReduce, 0, -1, intern(lp, tp)), op(PInstr::Backward),
                   op(PInstr::ReplicaAverage, 1, -1, intern(lp, dp)), op(PInstr::LossAllReduce, -1, -1, intern(lp, world))};
    lp.programs.push_back(std::move(prog));
  }
  return lp;
}

double replicated_cost(const RankProgram& prog, const PInstr& in) {
  switch (in.kind) {
    case PInstr::Forward:
    case PInstr::Backward: return prog.device + 1.0;
    case PInstr::AllReduce: return 0.5;
    case PInstr::ReplicaAverage: return 2.0;
    case PInstr::LossAllReduce: return 0.25;
    default: return 0.0;
  }
}

}  // namespace

TEST_CASE("simulator symmetry: replaying one plan replica gives the step time of replaying every rank") {
  for (int replicas : {2, 3, 8}) {
    INFO("replicas=" << replicas);
    LoweredPlan all = replicated(2, replicas);
    LoweredPlan one = all;
    one.programs.resize(2);  // replica 0 only, as LowerOptions::first_ranks lowers it
    SimResult ra, r1;
    std::string err;
    REQUIRE(simulate(all, replicated_cost, ra, err));
    REQUIRE(simulate(one, replicated_cost, r1, err));
    // Hand timeline: forward 2 s (device 1), allreduce 0.5, backward 2, average 2, loss 0.25.
    CHECK(ra.step_time == Approx(6.75));
    CHECK(r1.step_time == Approx(ra.step_time));
    for (size_t i = 0; i < r1.ranks.size(); ++i) {
      CHECK(r1.ranks[i].end == Approx(ra.ranks[i].end));
      CHECK(r1.ranks[i].busy == Approx(ra.ranks[i].busy));
      CHECK(r1.ranks[i].bubble == Approx(ra.ranks[i].bubble));
      CHECK(r1.ranks[i].exposed_comm == Approx(ra.ranks[i].exposed_comm));
    }
    // Device 0 waits 1 s for device 1 at the allreduce and again before the loss.
    CHECK(r1.ranks[0].bubble == Approx(2.0));
  }
}

namespace {

// Two replicas of one device: a forward (1 s), a backward that finishes
// gradient g0 (kernel 0, 1 s) and then g1 (kernel 1, 4 s), then the two
// gradient averages (3 s each) and the update.
LoweredPlan two_gradients() {
  LoweredPlan lp;
  lp.devices = 1;
  lp.replicas = 2;
  int g = intern(lp, {0, 1});
  for (int r = 0; r < 2; ++r) {
    RankProgram prog;
    prog.rank = r;
    prog.replica = r;
    prog.buffers.resize(2);
    for (auto& b : prog.buffers) {
      b.role = BufferDecl::Accum;
      b.piece.start = {0};
      b.piece.length = {1};
    }
    PInstr f = op(PInstr::Forward), b0 = op(PInstr::Backward), b1 = op(PInstr::Backward);
    f.kernel = b0.kernel = 0;
    b1.kernel = 1;
    PInstr c0 = op(PInstr::CollectGrad, -1, 0), c1 = op(PInstr::CollectGrad, -1, 1);
    prog.instrs = {op(PInstr::Alloc, -1, 0), op(PInstr::Alloc, -1, 1), f, b0, c0, b1, c1,
                   op(PInstr::ReplicaAverage, 0, -1, g), op(PInstr::ReplicaAverage, 1, -1, g), op(PInstr::Update, 0, 0)};
    lp.programs.push_back(std::move(prog));
  }
  return lp;
}

double two_gradients_cost(const RankProgram&, const PInstr& in) {
  if (in.kind == PInstr::Forward) return 1.0;
  if (in.kind == PInstr::Backward) return in.kernel == 0 ? 1.0 : 4.0;
  if (in.kind == PInstr::ReplicaAverage) return 3.0;
  return 0.0;
}

}  // namespace

TEST_CASE("simulator overlap: a gradient's reduction starts when it is final and hides behind the backward") {
  LoweredPlan lp = two_gradients();
  SimResult blocking, overlapped;
  std::string err;
  REQUIRE(simulate(lp, two_gradients_cost, blocking, err));
  // Blocking: compute 1 + 1 + 4 = 6 s, then 3 + 3 s of averages.
  CHECK(blocking.step_time == Approx(12.0));
  CHECK(blocking.ranks[0].exposed_comm == Approx(6.0));
  SimOptions o;
  o.overlap_grad_reduce = true;
  REQUIRE(simulate(lp, two_gradients_cost, overlapped, err, o));
  // Overlapped: g0 is final at 2 s, its average runs 2..5 behind the second
  // backward (2..6); g1 is final at 6, its average runs 6..9, exposed.
  CHECK(overlapped.step_time == Approx(9.0));
  CHECK(overlapped.ranks[0].exposed_comm == Approx(3.0));
  CHECK(overlapped.ranks[0].overlapped_comm == Approx(3.0));
  CHECK(overlapped.ranks[0].busy == Approx(6.0));
  CHECK(overlapped.ranks[0].end - overlapped.ranks[0].busy ==
        Approx(overlapped.ranks[0].bubble + overlapped.ranks[0].exposed_comm));
  // Symmetry holds with the communication stream too.
  LoweredPlan one = lp;
  one.programs.resize(1);
  SimResult r1;
  REQUIRE(simulate(one, two_gradients_cost, r1, err, o));
  CHECK(r1.step_time == Approx(9.0));
}

TEST_CASE("simulator overlap: reductions run in the order their gradients become final") {
  // The program lists g1's average first, but g0 is final first: the
  // stream takes g0 at 2 s (2..5), then g1 at 6 (6..9), as above.
  LoweredPlan lp = two_gradients();
  for (RankProgram& p : lp.programs) std::swap(p.instrs[7], p.instrs[8]);
  SimOptions o;
  o.overlap_grad_reduce = true;
  SimResult r;
  std::string err;
  REQUIRE(simulate(lp, two_gradients_cost, r, err, o));
  CHECK(r.step_time == Approx(9.0));
  CHECK(r.ranks[0].exposed_comm == Approx(3.0));
}

TEST_CASE("simulator overlap: a fused bucket is reduced in chunks as its gradients become final") {
  // The two gradients in one bucket (equal sizes): one 6 s allreduce, blocking
  // after the backward, or 3 s chunks at 2..5 and 6..9 overlapped.
  LoweredPlan lp = two_gradients();
  for (RankProgram& p : lp.programs) {
    p.buckets = {{0, 1}};
    PInstr bucket = op(PInstr::BucketAllReduce, -1, -1, p.instrs[7].group);
    bucket.index = 0;
    p.instrs[7] = bucket;
    p.instrs.erase(p.instrs.begin() + 8);
  }
  auto cost = [](const RankProgram& prog, const PInstr& in) {
    return in.kind == PInstr::BucketAllReduce ? 6.0 : two_gradients_cost(prog, in);
  };
  SimResult blocking, overlapped;
  std::string err;
  REQUIRE(simulate(lp, cost, blocking, err));
  CHECK(blocking.step_time == Approx(12.0));
  SimOptions o;
  o.overlap_grad_reduce = true;
  REQUIRE(simulate(lp, cost, overlapped, err, o));
  CHECK(overlapped.step_time == Approx(9.0));
  CHECK(overlapped.ranks[0].exposed_comm == Approx(3.0));
}

namespace {

// fp32 1e12, fp16 4e12 (matmul efficiency 0.5 from 1e9 FLOPs), memory 1e11 B/s.
DeviceProfile toy16() {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(R"({"name": "toy", "peak_flops": {"fp32": 1e12, "fp16": 4e12},
    "memory_bytes": 1e9, "memory_bandwidth": 1e11, "devices_per_node": 4,
    "intra_bandwidth": 1e10, "intra_latency": 1e-6, "inter_bandwidth": 1e9, "inter_latency": 1e-5,
    "efficiency": {"matmul": [[1e9, 0.5], [1e6, 0.25]]}})",
                        p, err));
  return p;
}

}  // namespace

TEST_CASE("program cost: --precision recosts fp32 kernels at the dtype's peak and element size; matmul backwards cost their products") {
  DeviceProfile p = toy16();
  LoweredPlan lp;
  RankProgram prog;
  auto tensor = [&](nns::sema::Shape s) {
    nns::sema::TensorInfo t;
    t.shape = std::move(s);
    return prog.local.add_tensor(t);
  };
  int a = tensor({1000, 500}), b = tensor({500, 1000}), y = tensor({1000, 1000}), z = tensor({1000, 1000});
  int dy = tensor({1000, 1000}), da = tensor({1000, 500}), db = tensor({500, 1000});
  nns::sema::OpNode mm;
  mm.kind = "matmul";
  mm.inputs = {a, b};
  mm.outputs = {y};
  mm.macs = 1000 * 500 * 1000;
  int mm_id = prog.local.add_node(mm);
  nns::sema::OpNode act;
  act.kind = "gelu";
  act.inputs = {y};
  act.outputs = {z};
  int act_id = prog.local.add_node(act);
  // The autograd's backward node of the matmul: no macs of its own, two gradients.
  nns::sema::OpNode mmb;
  mmb.kind = "matmul_backward";
  mmb.forward_of = mm_id;
  mmb.inputs = {a, b, dy};
  mmb.outputs = {da, db};
  int mmb_id = prog.local.add_node(mmb);
  nns::backend::SubOpKernel k;
  k.inst.nodes = {mm_id, act_id};
  k.bwd.nodes = {mmb_id};
  prog.kernels = {k};
  PInstr fwd, bwd;
  fwd.kind = PInstr::Forward;
  bwd.kind = PInstr::Backward;
  fwd.kernel = bwd.kernel = 0;
  // fp32: matmul 1e9 / (1e12 * 0.5) = 2 ms; gelu 8e6 B / 1e11 = 80 us.
  CHECK(instr_time(p, lp, prog, fwd) == Approx(2e-3 + 8e-5));
  CHECK(instr_time(p, lp, prog, fwd, 4, "fp32") == Approx(2e-3 + 8e-5));
  // fp16: matmul 1e9 / (4e12 * 0.5) = 0.5 ms; gelu 4e6 B (2 bytes an element) / 1e11 = 40 us.
  CHECK(instr_time(p, lp, prog, fwd, 2, "fp16") == Approx(5e-4 + 4e-5));
  // bf16 is not in this profile: fp32's peak, 2-byte elements.
  CHECK(instr_time(p, lp, prog, fwd, 2, "bf16") == Approx(2e-3 + 4e-5));
  // The backward: dA and dB, each a product of the forward's 5e8 multiply-adds:
  // 2e9 FLOPs / (1e12 * 0.5) = 4 ms at fp32, 1 ms at fp16.
  CHECK(instr_time(p, lp, prog, bwd) == Approx(4e-3));
  CHECK(instr_time(p, lp, prog, bwd, 2, "fp16") == Approx(1e-3));
}

TEST_CASE("peak memory: persistent buffers and optimizer state, plus what is live between first use and Free") {
  RankProgram prog;
  auto buffer = [&](BufferDecl::Role role, int64_t n) {
    BufferDecl b;
    b.role = role;
    b.piece.start = {0};
    b.piece.length = {n};
    prog.buffers.push_back(b);
    return static_cast<int>(prog.buffers.size()) - 1;
  };
  int w = buffer(BufferDecl::Param, 1000), g = buffer(BufferDecl::Accum, 1000);
  int v1 = buffer(BufferDecl::Value, 500), v2 = buffer(BufferDecl::Value, 300), v3 = buffer(BufferDecl::Value, 100);
  nns::backend::ParamSlot s;
  s.param = w;
  s.accum = g;
  s.trainable = true;
  prog.params = {s};
  prog.instrs = {op(PInstr::LoadInput, -1, v1), op(PInstr::Extract, v1, v2), op(PInstr::Free, v1),
                 op(PInstr::Extract, v2, v3), op(PInstr::Free, v2), op(PInstr::Free, v3)};
  // fp32: weights and gradients 8000 B, AdamW's moments 8000 B; v1 + v2 live at once: 3200 B.
  MemoryPeak m = peak_memory(prog, 4);
  CHECK(m.persistent == Approx(16000));
  CHECK(m.peak == Approx(19200));
  CHECK(m.at_instr == 1);
  CHECK(m.buffers_at_peak == Approx(3200));
  CHECK(m.kernels_at_peak == 0.0);
  REQUIRE(m.roles_at_peak.size() == 1);
  CHECK(m.roles_at_peak.at(BufferDecl::Value) == Approx(3200));
  // fp16: 2-byte weights, gradients and activations; fp32 moments and master weights (12 B each).
  MemoryPeak h = peak_memory(prog, 2);
  CHECK(h.persistent == Approx(4000 + 12000));
  CHECK(h.peak == Approx(16000 + 1600));
}

TEST_CASE("peak memory: a kernel's forward tensors live until DropForward or FreeKernel, per micro-batch") {
  RankProgram prog;
  auto tensor = [&](nns::sema::Shape sh) {
    nns::sema::TensorInfo t;
    t.shape = std::move(sh);
    return prog.local.add_tensor(t);
  };
  int x = tensor({1000}), y = tensor({1000}), dx = tensor({500});
  nns::sema::OpNode f;
  f.kind = "gelu";
  f.inputs = {x};
  f.outputs = {y};
  int fid = prog.local.add_node(f);
  nns::sema::OpNode b;
  b.kind = "gelu_backward";
  b.forward_of = fid;
  b.inputs = {x, y};
  b.outputs = {dx};
  int bid = prog.local.add_node(b);
  nns::backend::SubOpKernel k;
  k.inst.nodes = {fid};
  k.bwd.nodes = {bid};
  prog.kernels = {k};
  auto kop = [](PInstr::Kind kind, int mb) {
    PInstr in = op(kind);
    in.kernel = 0;
    in.mb = mb;
    return in;
  };
  // Recompute: F, drop, two micro-batches in flight (2 x 4000 B), then the
  // re-run forward and backward of mb 0 (4000 + 2000 B beside mb 1's 4000).
  prog.instrs = {kop(PInstr::Forward, 0), kop(PInstr::DropForward, 0), kop(PInstr::Forward, 1), kop(PInstr::Forward, 0),
                 kop(PInstr::Backward, 0), kop(PInstr::FreeKernel, 0), kop(PInstr::FreeKernel, 1)};
  MemoryPeak m = peak_memory(prog, 4);
  CHECK(m.peak == Approx(10000));
  CHECK(m.at_instr == 4);
  CHECK(m.kernels_at_peak == Approx(10000));
  CHECK(peak_memory(prog, 2).peak == Approx(5000));
}

TEST_CASE("peak memory: kernel inputs read in place, release lists, deferred and parked frees (as the executor allocates)") {
  RankProgram prog;
  auto buffer = [&](BufferDecl::Role role, int64_t n) {
    BufferDecl b;
    b.role = role;
    b.piece.start = {0};
    b.piece.length = {n};
    prog.buffers.push_back(b);
    return static_cast<int>(prog.buffers.size()) - 1;
  };
  auto tensor = [&](int64_t n) {
    nns::sema::TensorInfo t;
    t.shape = {n};
    return prog.local.add_tensor(t);
  };
  // A forward-only kernel y = f(g(x)) over 100 floats: x is released after
  // g reads it (no backward reads it), h after f, y after its CollectOut;
  // x reads the value buffer in place.
  int x = tensor(100), h = tensor(100), y = tensor(100);
  nns::sema::OpNode g;
  g.kind = "gelu";
  g.inputs = {x};
  g.outputs = {h};
  int gid = prog.local.add_node(g);
  nns::sema::OpNode f;
  f.kind = "gelu";
  f.inputs = {h};
  f.outputs = {y};
  int fid = prog.local.add_node(f);
  nns::backend::SubOpKernel k;
  k.inst.inputs = {x};
  k.inst.outputs = {y};
  k.inst.nodes = {gid, fid};
  nns::backend::Piece whole;
  whole.start = {0};
  whole.length = {100};
  k.in_slices = {whole};
  k.out_slices = {whole};
  nns::backend::plan_releases(prog.local, k);
  REQUIRE(k.fwd_release.size() == 2);
  CHECK(k.fwd_release[0] == std::vector<int>{x});
  CHECK(k.fwd_release[1] == std::vector<int>{h});
  CHECK(k.drop_after_collect == std::vector<char>{1});
  prog.kernels = {k};
  int v = buffer(BufferDecl::Value, 100), out = buffer(BufferDecl::Value, 100);
  auto kop = [](PInstr::Kind kind, int a = -1, int b = -1) {
    PInstr in = op(kind, a, b);
    in.kernel = 0;
    in.mb = 0;
    in.index = 0;
    return in;
  };
  prog.instrs = {op(PInstr::LoadInput, -1, v), kop(PInstr::SliceIn, v), op(PInstr::Free, v), kop(PInstr::Forward),
                 op(PInstr::Alloc, -1, out), kop(PInstr::CollectOut, -1, out), kop(PInstr::FreeKernel), op(PInstr::Free, out)};
  CHECK(nns::backend::slice_in_place(prog, prog.instrs[1]) == 0);
  // v stays while x reads it (its Free deferred until g has read x): v + h
  // in the forward; then h + y, y + out (each 800 B), never three at once.
  MemoryPeak m = peak_memory(prog, 4, 0);
  CHECK(m.peak == Approx(800));
  CHECK(m.at_instr == 3);
  CHECK(m.buffers_at_peak == Approx(400));
  CHECK(m.kernels_at_peak == Approx(400));
  // A scaled slice is a copy: x holds its own 400 B beside v, at the SliceIn.
  prog.instrs[1].scale = 0.5f;
  CHECK(nns::backend::slice_in_place(prog, prog.instrs[1]) == -1);
  MemoryPeak c = peak_memory(prog, 4, 0);
  CHECK(c.peak == Approx(800));
  CHECK(c.at_instr == 1);
  CHECK(c.kernels_at_peak == Approx(400));
  // A buffer freed while its Send is in flight stays until the step ends.
  RankProgram sends;
  sends.buffers = {prog.buffers[0], prog.buffers[1]};
  PInstr send = op(PInstr::Send, 0);
  send.peer = 1;
  sends.instrs = {op(PInstr::LoadInput, -1, 0), send, op(PInstr::Free, 0), op(PInstr::LoadInput, -1, 1)};
  CHECK(peak_memory(sends, 4, 0).peak == Approx(800));
}

TEST_CASE("topology: an inter-node ring runs over the NICs of the group's devices on each node") {
  DeviceProfile p = toy16();  // 4 devices per node; intra 1e10 B/s, inter 1e9 B/s per device
  std::vector<int> one_per_node = {0, 4}, two_per_node = {0, 1, 4, 5}, node = {0, 1, 2, 3};
  CHECK(devices_per_node_in_group(p, one_per_node) == 1);
  CHECK(devices_per_node_in_group(p, two_per_node) == 2);
  // One device per node: collective_time's inter-node ring.
  CHECK(topology_collective_time(p, Collective::AllReduce, 1e9, one_per_node) ==
        Approx(collective_time(p, Collective::AllReduce, 1e9, one_per_node)));
  // Two per node: two rings, 2e9 B/s: 2*3*1e-5 + 2*3/4 * 1e9 / 2e9.
  CHECK(topology_collective_time(p, Collective::AllReduce, 1e9, two_per_node) == Approx(6e-5 + 0.75));
  // Inside a node: unchanged.
  CHECK(topology_collective_time(p, Collective::AllGather, 1e9, node) ==
        Approx(collective_time(p, Collective::AllGather, 1e9, node)));
}

TEST_CASE("simulated trace: a Chrome trace (run --trace's format) of every timed instruction") {
  LoweredPlan lp = two_gradients();
  SimOptions o;
  o.overlap_grad_reduce = true;
  o.record = true;
  SimResult r;
  std::string err;
  REQUIRE(simulate(lp, two_gradients_cost, r, err, o));
  // Per rank: forward, two backwards, two averages (zero-time instructions are left out).
  REQUIRE(r.events.size() == 10);
  std::string path = "sim_trace_test.json";
  REQUIRE(write_sim_trace(path, lp, nullptr, r, err));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path.c_str());
  Json j;
  REQUIRE(parse_json(ss.str(), j, err));
  const Json* events = field(j, "traceEvents");
  REQUIRE(events);
  REQUIRE(events->is_array());
  int x = 0, named = 0;
  double comm_us = 0;
  for (const Json& e : *events) {
    REQUIRE(e.is_object());
    REQUIRE(field(e, "ph"));
    REQUIRE(field(e, "pid"));
    if (string_or(field(e, "ph")) == "M") {
      if (string_or(field(e, "name")) == "process_name") ++named;
      continue;
    }
    REQUIRE(string_or(field(e, "ph")) == "X");
    ++x;
    REQUIRE(field(e, "ts"));
    REQUIRE(field(e, "dur"));
    CHECK(number_or(field(e, "dur")) > 0);
    CHECK(number_or(field(e, "ts")) + number_or(field(e, "dur")) <= r.step_time * 1e6 + 1e-6);
    if (number_or(field(e, "tid")) == 2) comm_us += number_or(field(e, "dur"));
  }
  CHECK(x == 10);
  CHECK(named == 2);
  CHECK(comm_us == Approx(2 * 6e6));  // two averages of 3 s on each rank
}
