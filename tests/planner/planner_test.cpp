// The planner's JSON reader, the shipped device profiles, and the cost model
// against hand-computed roofline and alpha-beta numbers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <sstream>

#include "backend/planner/cost_model.h"
#include "backend/planner/json.h"
#include "backend/planner/profiles.h"

using namespace nns::planner;

namespace {

// peak fp32 1 TFLOP/s, fp16 4 TFLOP/s, 100 GB/s memory, 4 devices per node,
// intra 10 GB/s + 1 us, inter 1 GB/s + 10 us; matmul efficiency 0.25 at
// 1e6 FLOPs rising to 0.5 at 1e9.
const char* kProfile = R"({
  "name": "toy",
  "peak_flops": {"fp32": 1e12, "fp16": 4e12},
  "memory_bytes": 1e9, "memory_bandwidth": 1e11,
  "devices_per_node": 4,
  "intra_bandwidth": 1e10, "intra_latency": 1e-6,
  "inter_bandwidth": 1e9, "inter_latency": 1e-5,
  "efficiency": {"matmul": [[1e9, 0.5], [1e6, 0.25]]}
})";

DeviceProfile toy() {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(kProfile, p, err));
  return p;
}

// The "<field>_source" of every figure of a shipped profile (numbers and
// objects at the top level), checked by `cites`.
template <typename Check>
void each_source(const std::string& profile, Check cites) {
  std::ifstream in("stdlib/profiles/" + profile + ".json");
  std::stringstream ss;
  ss << in.rdbuf();
  Json root;
  std::string err;
  REQUIRE(parse_json(ss.str(), root, err));
  for (const auto& [key, v] : root.items()) {
    if (!v.is_number() && !v.is_object()) continue;
    INFO(key);
    const Json* src = field(root, key + "_source");
    REQUIRE(src != nullptr);
    cites(string_or(src));
  }
}

}  // namespace

TEST_CASE("json reader: values, nesting and errors with offsets") {
  Json j;
  std::string err;
  REQUIRE(parse_json(R"( {"a": [1, -2.5e3, true, null], "b": {"c": "x\"y"}} )", j, err));
  REQUIRE(j.is_object());
  REQUIRE(field(j, "a")->size() == 4);
  CHECK(number_or(&(*field(j, "a"))[1]) == -2500.0);
  CHECK((*field(j, "a"))[2] == true);
  CHECK((*field(j, "a"))[3].is_null());
  CHECK(string_or(field(*field(j, "b"), "c")) == "x\"y");
  CHECK(field(j, "zz") == nullptr);
  CHECK(field((*field(j, "a")), "x") == nullptr);  // not an object
  CHECK(number_or(field(j, "b"), 7) == 7);          // not a number
  // Errors are messages with the place, never exceptions.
  CHECK_FALSE(parse_json("{\"a\": 1,}", j, err));
  CHECK(err.find("offset 9") != std::string::npos);
  CHECK(err.find("line 1, column 9") != std::string::npos);
  CHECK_FALSE(parse_json("[1, 2", j, err));
  CHECK(err.find("offset") != std::string::npos);
  CHECK_FALSE(parse_json("{} x", j, err));
  CHECK(err.find("offset") != std::string::npos);
  CHECK_FALSE(parse_json("", j, err));
  CHECK_FALSE(parse_json("{\"a\": \"\xff\"}", j, err));
  CHECK_FALSE(parse_json(std::string(100, '['), j, err));
  CHECK(err.find("too deep") != std::string::npos);
  CHECK_FALSE(parse_json(std::string(1000000, '[') + std::string(1000000, ']'), j, err));
  CHECK(err.find("too deep") != std::string::npos);
  REQUIRE(parse_json(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']'), j, err));
  // Brackets inside strings are no nesting.
  REQUIRE(parse_json("[\"" + std::string(100, '[') + "\\\"\"]", j, err));
  // Linear in the events of a trace (a callback parse was quadratic: this took minutes).
  std::string trace = "{\"traceEvents\": [";
  for (int i = 0; i < 300000; ++i) trace += std::string(i ? "," : "") + "{\"ph\":\"X\",\"dur\":1,\"args\":{\"step\":5}}";
  REQUIRE(parse_json(trace + "]}", j, err));
  CHECK(field(j, "traceEvents")->size() == 300000);
  // A malformed profile: the error names the place.
  DeviceProfile p;
  CHECK_FALSE(parse_profile("{\"peak_flops\": {\"fp32\": 1e11},", p, err));
  CHECK(err.find("offset") != std::string::npos);
}

TEST_CASE("cost model: roofline with the efficiency curve") {
  DeviceProfile p = toy();
  // Curve points are sorted; ends clamp; the log-midpoint interpolates halfway.
  CHECK(efficiency(p, "matmul", 1e3) == Approx(0.25));
  CHECK(efficiency(p, "matmul", 1e12) == Approx(0.5));
  CHECK(efficiency(p, "matmul", 3.1622776601683795e7) == Approx(0.375));
  CHECK(efficiency(p, "softmax", 1e3) == 1.0);
  // Compute bound: 1e9 / (1e12 * 0.5) = 2 ms > 1e6 B / 1e11 B/s = 10 us.
  CHECK(compute_time(p, "matmul", "fp32", 1e9, 1e6) == Approx(2e-3));
  // fp16 peak: 4e9 / (4e12 * 0.5) = 2 ms.
  CHECK(compute_time(p, "matmul", "fp16", 4e9, 0) == Approx(2e-3));
  // Memory bound: 1e9 B / 1e11 B/s = 10 ms > 1e6 / 1e12 = 1 us.
  CHECK(compute_time(p, "elementwise", "fp32", 1e6, 1e9) == Approx(1e-2));
  // A dtype the profile lacks runs at fp32's peak.
  CHECK(compute_time(p, "elementwise", "int8", 1e9, 0) == Approx(1e-3));
}

TEST_CASE("cost model: alpha-beta collectives over the slowest link") {
  DeviceProfile p = toy();
  std::vector<int> node0 = {0, 1, 2, 3}, across = {2, 5}, eight = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(&group_link(p, node0) == &p.intra);
  CHECK(&group_link(p, across) == &p.inter);
  // Ring allreduce of 4e8 B on 4 devices in a node: 2*3*1us + 2*3/4*4e8/1e10.
  CHECK(collective_time(p, Collective::AllReduce, 4e8, node0) == Approx(6e-6 + 0.06));
  // Across nodes: 2*1*10us + 2*1/2*4e8/1e9.
  CHECK(collective_time(p, Collective::AllReduce, 4e8, across) == Approx(2e-5 + 0.4));
  // Allgather / reducescatter: 3*1us + 3/4*4e8/1e10.
  CHECK(collective_time(p, Collective::AllGather, 4e8, node0) == Approx(3e-6 + 0.03));
  CHECK(collective_time(p, Collective::ReduceScatter, 4e8, node0) == Approx(3e-6 + 0.03));
  // All-to-all over two nodes: 7*10us + 7/8*8e8/1e9.
  CHECK(collective_time(p, Collective::AllToAll, 8e8, eight) == Approx(7e-5 + 0.7));
  // Send/recv: one message.
  CHECK(collective_time(p, Collective::SendRecv, 1e6, {0, 1}) == Approx(1e-6 + 1e-4));
  CHECK(collective_time(p, Collective::SendRecv, 1e6, {3, 4}) == Approx(1e-5 + 1e-3));
  CHECK(collective_time(p, Collective::AllReduce, 1e9, {5}) == 0.0);
}

TEST_CASE("profiles: a single-node profile may leave inter-node links out; errors name the field") {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(R"({"peak_flops": {"fp32": 1e11}, "memory_bytes": 1, "memory_bandwidth": 1e10,
      "devices_per_node": 2, "intra_bandwidth": 1e9, "intra_latency": 2e-5})", p, err));
  CHECK(p.inter.bandwidth == 1e9);
  CHECK(p.inter.latency == 2e-5);
  CHECK_FALSE(parse_profile(R"({"peak_flops": {"fp32": 1e11}})", p, err));
  CHECK(err == "missing field \"memory_bytes\"");
  CHECK_FALSE(parse_profile(R"({"peak_flops": {}})", p, err));
  CHECK(err.find("peak_flops") != std::string::npos);
  CHECK_FALSE(parse_profile(R"({"peak_flops": {"fp32": 1e11}, "memory_bytes": 1, "memory_bandwidth": 1e10,
      "devices_per_node": 2, "intra_bandwidth": 1e9, "intra_latency": 2e-5,
      "efficiency": {"matmul": [[1e6]]}})", p, err));
  CHECK(err.find("efficiency.matmul") != std::string::npos);
  CHECK_FALSE(load_profile("nosuch", "stdlib/profiles", p, err));
  CHECK(err.find("stdlib/profiles/nosuch.json") != std::string::npos);
}

TEST_CASE("profiles: the directory names the devices; --device-memory reads a profile's memory") {
  const std::vector<std::string> shipped = list_profiles("stdlib/profiles");
  for (const char* n : {"a100", "cpu", "h100", "h200", "v100"})
    CHECK(std::find(shipped.begin(), shipped.end(), n) != shipped.end());
  CHECK(std::is_sorted(shipped.begin(), shipped.end()));
  CHECK(device_choices("stdlib/profiles").find("a100|") != std::string::npos);
  int64_t b = 0;
  std::string label, err;
  REQUIRE(parse_device_memory("h200", b, label, err, "stdlib/profiles"));
  CHECK(b == int64_t{141} << 30);
  CHECK(label == "141 GiB (h200)");
  REQUIRE(parse_device_memory("512 MiB", b, label, err, "stdlib/profiles"));
  CHECK(b == int64_t{512} << 20);
  // A name without a profile is no device: the message lists the profiles.
  CHECK_FALSE(parse_device_memory("a100-40g", b, label, err, "stdlib/profiles"));
  CHECK(err.find("not a size") != std::string::npos);
  CHECK(err.find("a device profile (a100, cpu, h100, h200, v100") != std::string::npos);
  // Adding a device is adding its file.
  const std::string dir = "profiles_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const std::string& n : shipped) std::filesystem::copy_file("stdlib/profiles/" + n + ".json", dir + "/" + n + ".json");
  std::ifstream h200("stdlib/profiles/h200.json");
  std::stringstream text;
  text << h200.rdbuf();
  std::string b200 = text.str();
  b200.replace(b200.find("\"h200\""), 6, "\"b200\"");
  b200.replace(b200.find("151397597184"), 12, "206158430208");  // 192 GiB
  std::ofstream(dir + "/b200.json") << b200;
  const std::vector<std::string> with = list_profiles(dir);
  CHECK(with.size() == shipped.size() + 1);
  CHECK(std::find(with.begin(), with.end(), "b200") != with.end());
  REQUIRE(parse_device_memory("b200", b, label, err, dir));
  CHECK(b == int64_t{192} << 30);
  CHECK(label == "192 GiB (b200)");
  DeviceProfile p;
  REQUIRE(load_profile("b200", dir, p, err));
  CHECK(p.name == "b200");
  std::filesystem::remove_all(dir);
}

TEST_CASE("profiles: the shipped GPU profiles load, and every figure cites its source") {
  struct Expect { const char* name; double mem_gb; double bf16_tflops; };
  for (Expect e : {Expect{"v100", 32, 15.7}, Expect{"a100", 80, 312}, Expect{"h100", 80, 989.5},
                   Expect{"h200", 141, 989.5}}) {
    INFO(e.name);
    DeviceProfile p;
    std::string err;
    REQUIRE(load_profile(e.name, "stdlib/profiles", p, err));
    CHECK(p.name == e.name);
    for (const char* dt : {"fp32", "tf32", "fp16", "bf16"}) CHECK(p.peak_flops.count(dt) == 1);
    CHECK(p.peak_flops["bf16"] == Approx(e.bf16_tflops * 1e12));
    CHECK(p.memory_bytes == Approx(e.mem_gb * 1073741824.0));
    CHECK(p.devices_per_node == 8);
    CHECK(p.inter.bandwidth < p.intra.bandwidth);
    // Each figure has a sibling "<field>_source".
    each_source(e.name, [](const std::string& src) { CHECK(src.size() > 10); });
  }
}

#include "backend/planner/simulator.h"
#include "semantics/pipeline_schedule.h"

namespace {

using nns::backend::LoweredPlan;
using nns::backend::PInstr;
using nns::backend::RankProgram;

PInstr instr(PInstr::Kind k, int a = -1, int b = -1, int peer = -1, uint32_t tag = 0) {
  PInstr in;
  in.kind = k;
  in.a = a;
  in.b = b;
  in.peer = peer;
  in.tag = tag;
  return in;
}

// A p-stage pipeline with m micro-batches as RankPrograms, in the order
// `order` gives: a forward receives its activation from stage s-1, runs and
// sends to s+1; a backward receives its gradient from s+1, runs and sends
// to s-1. Forward and Backward cost 1, everything else 0.
LoweredPlan pipeline(const nns::sema::PipeOrder& order, int p) {
  LoweredPlan lp;
  lp.devices = p;
  for (int s = 0; s < p; ++s) {
    RankProgram prog;
    prog.rank = prog.device = s;
    for (const auto& task : order[static_cast<size_t>(s)]) {
      bool fwd = task.phase == nns::sema::PipeTask::F;
      int from = fwd ? s - 1 : s + 1, to = fwd ? s + 1 : s - 1;
      uint32_t tag = static_cast<uint32_t>(task.mb * 2 + (fwd ? 0 : 1));
      int buf = static_cast<int>(prog.instrs.size());
      if (from >= 0 && from < p) {
        prog.instrs.push_back(instr(PInstr::Recv, -1, buf, from, tag));
        prog.instrs.push_back(instr(PInstr::Wait, buf));
      }
      prog.instrs.push_back(instr(fwd ? PInstr::Forward : PInstr::Backward));
      if (to >= 0 && to < p) prog.instrs.push_back(instr(PInstr::Send, buf, -1, to, tag));
    }
    lp.programs.push_back(std::move(prog));
  }
  return lp;
}

double unit_cost(const RankProgram&, const PInstr& in) {
  return in.kind == PInstr::Forward || in.kind == PInstr::Backward ? 1.0 : 0.0;
}

}  // namespace

TEST_CASE("simulator: 1F1B on 4 stages has the (p-1)/(m+p-1) bubble with unit costs") {
  const int p = 4;
  for (int m : {1, 4, 8}) {
    INFO("m=" << m);
    LoweredPlan lp = pipeline(nns::sema::one_f_one_b_order(p, m), p);
    SimResult r;
    std::string err;
    REQUIRE(simulate(lp, unit_cost, r, err));
    // Hand timeline: the first backward starts on the last stage at p-1+1,
    // reaches stage 0 at 2(p-1)+1; stage 0 then runs its last B: 2(m+p-1).
    CHECK(r.step_time == Approx(2.0 * (m + p - 1)));
    for (const RankTimes& t : r.ranks) {
      CHECK(t.busy == Approx(2.0 * m));
      CHECK(t.end - t.busy == Approx(t.bubble + t.exposed_comm));
      CHECK(t.exposed_comm == Approx(0.0));  // free transfers
    }
    // Stage 0 idles 2(p-1) slots: share (p-1)/(m+p-1) of the step.
    CHECK(r.ranks[0].bubble / r.step_time == Approx(double(p - 1) / (m + p - 1)));
  }
}

TEST_CASE("simulator: transfer time is exposed; collectives wait for the last member") {
  // Two ranks: rank 0 computes 3 s then sends (2 s) to rank 1, which waits.
  LoweredPlan lp;
  lp.devices = 2;
  lp.groups = {{0, 1}};
  RankProgram a, b;
  a.rank = 0;
  b.rank = 1;
  b.device = 1;
  a.instrs = {instr(PInstr::Forward), instr(PInstr::Send, 0, -1, 1, 7)};
  b.instrs = {instr(PInstr::Recv, -1, 0, 0, 7), instr(PInstr::Backward), instr(PInstr::Wait, 0)};
  PInstr ar = instr(PInstr::AllReduce, 1);
  ar.group = 0;
  a.instrs.push_back(ar);
  b.instrs.push_back(ar);
  lp.programs = {a, b};
  auto cost = [](const RankProgram&, const PInstr& in) {
    switch (in.kind) {
      case PInstr::Forward: return 3.0;
      case PInstr::Backward: return 1.0;
      case PInstr::Send: return 2.0;
      case PInstr::AllReduce: return 0.5;
      default: return 0.0;
    }
  };
  SimResult r;
  std::string err;
  REQUIRE(simulate(lp, cost, r, err));
  // Rank 1: busy 1, idle 1..3 (bubble: the sender is still computing), the
  // message in flight 3..5 (exposed), allreduce 5..5.5. Rank 0 reaches the
  // allreduce at 3 and waits for rank 1 until 5.
  CHECK(r.step_time == Approx(5.5));
  CHECK(r.ranks[1].busy == Approx(1.0));
  CHECK(r.ranks[1].bubble == Approx(2.0));
  CHECK(r.ranks[1].exposed_comm == Approx(2.5));
  CHECK(r.ranks[0].bubble == Approx(2.0));
  CHECK(r.ranks[0].exposed_comm == Approx(0.5));
  // A Wait whose message is never sent is reported, not a hang.
  lp.programs[0].instrs.erase(lp.programs[0].instrs.begin() + 1);
  CHECK_FALSE(simulate(lp, cost, r, err));
  CHECK(err.find("blocks forever") != std::string::npos);
}

#include "backend/planner/comm_cost.h"

TEST_CASE("comm cost: bytes from the program's buffers, devices from the group") {
  DeviceProfile p = toy();  // 4 devices per node; intra 1e10 B/s + 1us, inter 1e9 + 10us
  LoweredPlan lp;
  lp.groups = {{0, 1, 2, 3}, {1, 6}};
  RankProgram prog;
  prog.rank = 1;
  nns::backend::BufferDecl a, b;
  a.piece.start = {0, 0};
  a.piece.length = {1000, 250};  // 250,000 elements
  b.piece.start = {0, 0};
  b.piece.length = {1000, 1000};  // 1,000,000 elements
  prog.buffers = {a, b};
  prog.buckets = {{0, 1}};
  PInstr ar = instr(PInstr::AllReduce, 0);
  ar.group = 0;
  // 250,000 fp32 = 1e6 B on a node: 2*3*1us + 2*3/4*1e6/1e10.
  CHECK(comm_bytes(prog, ar, 4) == 1e6);
  CHECK(comm_time(p, lp, prog, ar, 4) == Approx(6e-6 + 1.5e-4));
  PInstr ag = instr(PInstr::AllGather, 0, 1);
  ag.group = 0;
  // The gathered 4e6 B: 3*1us + 3/4*4e6/1e10.
  CHECK(comm_time(p, lp, prog, ag, 4) == Approx(3e-6 + 3e-4));
  PInstr bucket = instr(PInstr::BucketAllReduce);
  bucket.index = 0;
  bucket.group = 1;
  // Both buffers, 5e6 B, across nodes (1 and 6): 2*1*10us + 2*1/2*5e6/1e9.
  CHECK(comm_bytes(prog, bucket, 4) == 5e6);
  CHECK(comm_time(p, lp, prog, bucket, 4) == Approx(2e-5 + 5e-3));
  // A send from rank 1 to rank 5 crosses nodes: 10us + 1e6/1e9.
  CHECK(comm_time(p, lp, prog, instr(PInstr::Send, 0, -1, 5, 1), 4) == Approx(1e-5 + 1e-3));
  CHECK(comm_time(p, lp, prog, instr(PInstr::Recv, -1, 0, 5, 1), 4) == 0.0);
  CHECK(comm_time(p, lp, prog, instr(PInstr::Forward), 4) == 0.0);
}

TEST_CASE("comm cost: a run of replica averages is one bucket's allreduce, its latency paid once") {
  DeviceProfile p = toy();  // 4 devices per node; intra 1e10 B/s + 1us, inter 1e9 + 10us
  LoweredPlan lp;
  lp.groups = {{1, 6}, {2, 7}};
  RankProgram prog;
  prog.rank = 1;
  nns::backend::BufferDecl a, b;
  a.piece.start = {0};
  a.piece.length = {250000};  // 1e6 B
  b.piece.start = {0};
  b.piece.length = {1000000};  // 4e6 B
  prog.buffers = {a, b, a};
  auto avg = [](int buf, int group) {
    PInstr in = instr(PInstr::ReplicaAverage, buf);
    in.group = group;
    return in;
  };
  // Buffers 0 and 1 in one bucket, then a kernel, then buffer 2 alone on
  // its own; buffer 0 again over another group right after it.
  prog.instrs = {avg(0, 0), avg(1, 0), instr(PInstr::Forward), avg(2, 0), avg(0, 1)};
  // The bucket, 5e6 B across nodes: 2*10us + 5e6/1e9, shared by elements.
  const double bucket = 2e-5 + 5e-3;
  CHECK(comm_time(p, lp, prog, prog.instrs[0], 4) == Approx(bucket * 0.2));
  CHECK(comm_time(p, lp, prog, prog.instrs[1], 4) == Approx(bucket * 0.8));
  CHECK(comm_time(p, lp, prog, prog.instrs[3], 4) == Approx(2e-5 + 1e-3));
  CHECK(comm_time(p, lp, prog, prog.instrs[4], 4) == Approx(2e-5 + 1e-3));
  // An instruction outside the program: only its own buffer.
  CHECK(comm_time(p, lp, prog, avg(0, 0), 4) == Approx(2e-5 + 1e-3));
}

#include "backend/planner/program_cost.h"

TEST_CASE("program cost: kernels by the roofline of their nodes' macs and bytes; copies and updates at bandwidth") {
  DeviceProfile p = toy();  // fp32 1e12 (matmul eff 0.5 at 1e9 FLOPs), memory 1e11 B/s
  CHECK(op_class("linear") == "matmul");
  CHECK(op_class("softmax") == "softmax");
  CHECK(op_class("layer_norm") == "layer_norm");
  CHECK(op_class("gelu") == "elementwise");
  LoweredPlan lp;
  RankProgram prog;
  auto tensor = [&](nns::sema::Shape s) {
    nns::sema::TensorInfo t;
    t.shape = std::move(s);
    return prog.local.add_tensor(t);
  };
  int a = tensor({1000, 500}), b = tensor({500, 1000}), y = tensor({1000, 1000}), z = tensor({1000, 1000});
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
  nns::backend::SubOpKernel k;
  k.inst.nodes = {mm_id, act_id};
  k.bwd.nodes = {act_id, mm_id};
  k.wgrad_nodes = {mm_id};
  prog.kernels = {k};
  nns::backend::BufferDecl w;
  w.piece.start = {0, 0};
  w.piece.length = {1000, 1000};
  prog.buffers = {w};
  PInstr fwd = instr(PInstr::Forward), bwd = instr(PInstr::Backward), bw = instr(PInstr::BackwardW);
  fwd.kernel = bwd.kernel = bw.kernel = 0;
  // matmul: 1e9 FLOPs / (1e12 * 0.5) = 2 ms (its 8e6 B take 80 us);
  // gelu: 1e6 FLOPs take 1 us, its 8e6 B 80 us: memory bound.
  CHECK(instr_time(p, lp, prog, fwd) == Approx(2e-3 + 8e-5));
  CHECK(instr_time(p, lp, prog, bwd) == Approx(8e-5));  // the W part (matmul) runs later
  CHECK(instr_time(p, lp, prog, bw) == Approx(2e-3));
  // AdamW update of 1e6 fp32: 7 * 4e6 B / 1e11.
  PInstr up = instr(PInstr::Update, 0);
  CHECK(instr_time(p, lp, prog, up) == Approx(2.8e-4));
  // Replayed on one rank: the sum.
  prog.instrs = {fwd, bwd, bw, up};
  lp.programs = {prog};
  SimResult r;
  std::string err;
  REQUIRE(simulate(lp, profile_cost(p, lp), r, err));
  CHECK(r.step_time == Approx(2.08e-3 + 8e-5 + 2e-3 + 2.8e-4));
  CHECK(r.ranks[0].busy == Approx(r.step_time));
}

// ---- measured profiles (nns profile): fits, fields, overhead terms ----

TEST_CASE("fits: a line through exact points, and unmoved by a minority of outliers") {
  // t = 20 us + bytes / 2 GB/s.
  std::vector<std::pair<double, double>> pts;
  for (double b : {4.0, 1e3, 1e4, 1e5, 1e6, 1e7}) pts.emplace_back(b, 2e-5 + b / 2e9);
  LineCost l;
  REQUIRE(fit_line(pts, l));
  CHECK(l.overhead == Approx(2e-5));
  CHECK(l.bandwidth == Approx(2e9));
  // Two of eight points take 4 ms more (a peer that was asleep): the fit stays.
  pts.emplace_back(3e3, 4e-3);
  pts.emplace_back(3e5, 4e-3);
  REQUIRE(fit_line(pts, l));
  CHECK(l.overhead == Approx(2e-5).epsilon(0.05));
  CHECK(l.bandwidth == Approx(2e9).epsilon(0.05));
  // Time that does not grow with size: all overhead, infinite bandwidth.
  REQUIRE(fit_line({{1, 3e-6}, {1e6, 2e-6}, {1e3, 3e-6}}, l));
  CHECK(l.overhead == Approx(3e-6));
  CHECK(l.bandwidth >= 1e30);
  CHECK_FALSE(fit_line({{5, 1e-6}}, l));
  CHECK_FALSE(fit_line({{5, 1e-6}, {5, 2e-6}}, l));
}

TEST_CASE("fits: collective links divide out the algorithm's messages and volume") {
  // On 4 devices a link of 10 us + 1 GB/s gives, per collective_time, an
  // allreduce of 6 * 10us + 1.5 * S / 1e9; the fit recovers the link.
  DeviceProfile p;
  p.intra = LinkCost{1e9, 1e-5};
  p.inter = p.intra;
  p.devices_per_node = 4;
  p.memory_bandwidth = 1;
  std::vector<int> four = {0, 1, 2, 3};
  for (Collective k : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll,
                       Collective::SendRecv}) {
    INFO(collective_name(k));
    std::vector<std::pair<double, double>> pts;
    for (double b : {8.0, 1e4, 1e6, 1e8}) pts.emplace_back(b, collective_time(p, k, b, four));
    LinkCost l;
    REQUIRE(fit_collective(k, 4, pts, l));
    CHECK(l.latency == Approx(1e-5));
    CHECK(l.bandwidth == Approx(1e9));
  }
}

TEST_CASE("fits: efficiency points above the kernel overhead, repeated sizes averaged") {
  // peak 1e11, overhead 1 us: 1e6 FLOPs in 1 us + 1e6/(1e11*0.25) = 41 us; twice, at 0.25 and 0.5.
  auto curve = fit_efficiency({{1e6, 1e-6 + 4e-5}, {1e6, 1e-6 + 2e-5}, {1e3, 1e-6 + 1e-6}}, 1e11, 1e-6);
  REQUIRE(curve.size() == 2);
  CHECK(curve[0].first == 1e3);
  CHECK(curve[0].second == Approx(0.01));  // 1e3 / (1e11 * 1e-6)
  CHECK(curve[1].second == Approx((0.25 + 0.5) / 2));
  // Time at or under the overhead is floored at a tenth of the time, never divided by zero.
  auto floor = fit_efficiency({{1e3, 5e-7}}, 1e11, 1e-6);
  CHECK(floor[0].second == Approx(1e3 / (1e11 * 5e-8)));
}

namespace {

const char* kMeasured = R"({
  "name": "m", "peak_flops": {"fp32": 1e11}, "memory_bytes": 1e9, "memory_bandwidth": 1e10,
  "devices_per_node": 2, "intra_bandwidth": 1e9, "intra_latency": 1e-4,
  "threads": 1, "instr_overhead": 1e-7, "kernel_overhead": 2e-6,
  "copy": {"overhead": 5e-7, "bandwidth": 4e9}, "accumulate": {"overhead": 1e-6, "bandwidth": 2e9},
  "update": {"overhead": 3e-6, "bandwidth": 1e9},
  "collectives": {"allreduce": {"latency": 1e-5, "bandwidth": 2e9}, "sendrecv": {"latency": 5e-5, "bandwidth": 1e9}},
  "efficiency": {"matmul": [[1e6, 0.5]], "matmul_backward": [[1e6, 0.25]], "elementwise": [[1, 0.01]]}
})";

}  // namespace

TEST_CASE("profiles: the measured-profile fields round-trip; GPU-style profiles leave them off") {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(kMeasured, p, err));
  CHECK(p.threads == 1);
  CHECK(p.instr_overhead == 1e-7);
  CHECK(p.kernel_overhead == 2e-6);
  CHECK(p.copy.overhead == 5e-7);
  CHECK(p.copy.bandwidth == 4e9);
  CHECK(p.accumulate.time(2e6) == Approx(1e-6 + 1e-3));
  CHECK(p.update.present());
  CHECK(p.collective_links.at("allreduce").latency == 1e-5);
  // The per-collective link replaces intra for that collective only.
  CHECK(collective_time(p, Collective::AllReduce, 2e6, {0, 1}) == Approx(2e-5 + 1e-3));
  CHECK(collective_time(p, Collective::AllGather, 2e6, {0, 1}) == Approx(1e-4 + 1e-3));
  // Curves fall back: attention -> matmul, X_backward -> X.
  CHECK(efficiency(p, "attention", 1e6) == Approx(0.5));
  CHECK(efficiency(p, "attention_backward", 1e6) == Approx(0.5));
  CHECK(efficiency(p, "matmul_backward", 1e6) == Approx(0.25));
  CHECK(efficiency(p, "softmax_backward", 1e6) == 1.0);
  // A GPU profile has none of them.
  DeviceProfile g;
  REQUIRE(load_profile("h100", "stdlib/profiles", g, err));
  CHECK(g.kernel_overhead == 0);
  CHECK(g.instr_overhead == 0);
  CHECK_FALSE(g.copy.present());
  CHECK(g.collective_links.empty());
  // Malformed fields are named.
  std::string bad = kMeasured;
  bad.replace(bad.find("\"bandwidth\": 4e9"), 16, "\"bandwidth\": 0");
  CHECK_FALSE(parse_profile(bad, p, err));
  CHECK(err.find("copy") != std::string::npos);
  bad = kMeasured;
  bad.replace(bad.find("\"sendrecv\""), 10, "\"broadcast\"");
  CHECK_FALSE(parse_profile(bad, p, err));
  CHECK(err.find("collectives.broadcast") != std::string::npos);
}

TEST_CASE("profiles: gradient buckets as the training stack cuts them, or the lowering's rule") {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(kMeasured, p, err));
  CHECK(profile_bucket_bytes(p, 48) == 0);  // absent: backend::replica_bucket_bytes applies
  std::string with = kMeasured;
  with.insert(with.find("\"efficiency\""), "\"gradient_buckets\": {\"elements\": 4e7, \"per_replica\": 1e6}, ");
  REQUIRE(parse_profile(with, p, err));
  // Megatron-LM's DDP: max(40M, 1M x DP) elements, 4 bytes each.
  CHECK(profile_bucket_bytes(p, 1) == size_t{160000000});
  CHECK(profile_bucket_bytes(p, 40) == size_t{160000000});
  CHECK(profile_bucket_bytes(p, 48) == size_t{192000000});
  // The shipped H100 profile says so; the CPU one does not.
  DeviceProfile h, c;
  REQUIRE(load_profile("h100", "stdlib/profiles", h, err));
  REQUIRE(load_profile("cpu", "stdlib/profiles", c, err));
  CHECK(profile_bucket_bytes(h, 48) == size_t{192000000});
  CHECK(profile_bucket_bytes(c, 48) == 0);
  // Malformed: named.
  std::string bad = kMeasured;
  bad.insert(bad.find("\"efficiency\""), "\"gradient_buckets\": {\"elements\": 0}, ");
  CHECK_FALSE(parse_profile(bad, p, err));
  CHECK(err.find("gradient_buckets") != std::string::npos);
}

TEST_CASE("program cost: a measured profile's overhead terms, by hand") {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(kMeasured, p, err));
  LoweredPlan lp;
  lp.groups = {{0, 1}};
  RankProgram prog;
  auto tensor = [&](nns::sema::Shape s) {
    nns::sema::TensorInfo t;
    t.shape = std::move(s);
    return prog.local.add_tensor(t);
  };
  // linear x [100, 50] w [100, 50] -> y [100, 100]: 500,000 macs; its backward computes dx and dw.
  int x = tensor({100, 50}), w = tensor({100, 50}), y = tensor({100, 100});
  int dy = tensor({100, 100}), dx = tensor({100, 50}), dw = tensor({100, 50});
  nns::sema::OpNode f;
  f.kind = "linear";
  f.inputs = {x, w};
  f.outputs = {y};
  f.macs = 500000;
  int f_id = prog.local.add_node(f);
  nns::sema::OpNode b;
  b.kind = "linear_backward";
  b.inputs = {x, w, y, dy};
  b.outputs = {dx, dw};
  b.forward_of = f_id;
  int b_id = prog.local.add_node(b);
  nns::backend::SubOpKernel k;
  k.inst.nodes = {f_id};
  k.bwd.nodes = {b_id};
  nns::backend::Piece slice;
  slice.start = {0, 0};
  slice.length = {100, 50};  // 5,000 elements = 20,000 B
  k.in_slices = {slice, slice};
  k.out_slices = {slice};
  prog.kernels = {k};
  nns::backend::BufferDecl buf;
  buf.piece.start = {0, 0};
  buf.piece.length = {100, 100};  // 10,000 elements = 40,000 B
  prog.buffers = {buf, buf};
  prog.params = {nns::backend::ParamSlot{}};
  prog.params[0].accum = 1;
  CHECK(node_work(prog.local, prog.local.node(b_id)).flops == 2e6);  // 2 x 500,000 macs x 2 gradients
  CHECK(node_work(prog.local, prog.local.node(b_id)).op == "matmul_backward");
  PInstr fwd = instr(PInstr::Forward), bwd = instr(PInstr::Backward);
  fwd.kernel = bwd.kernel = 0;
  // Forward: 0.1 us dispatch + 2 us kernel + 1e6 / (1e11 * 0.5) = 20 us (its 100 KB at 1e10: 10 us).
  CHECK(instr_time(p, lp, prog, fwd) == Approx(1e-7 + 2e-6 + 2e-5));
  // Backward: 2e6 FLOPs at 0.25: 80 us.
  CHECK(instr_time(p, lp, prog, bwd) == Approx(1e-7 + 2e-6 + 8e-5));
  // SliceIn of input 1: its slice (20,000 B) on the copy line, dispatch included.
  PInstr slice_in = instr(PInstr::SliceIn, 0);
  slice_in.kernel = 0;
  slice_in.index = 1;
  CHECK(instr_time(p, lp, prog, slice_in) == Approx(5e-7 + 2e4 / 4e9));
  // CollectGrad accumulates its input slice; AddTo the whole buffer.
  PInstr cg = instr(PInstr::CollectGrad, -1, 1);
  cg.kernel = 0;
  cg.index = 0;
  CHECK(instr_time(p, lp, prog, cg) == Approx(1e-6 + 2e4 / 2e9));
  CHECK(instr_time(p, lp, prog, instr(PInstr::AddTo, 0, 1)) == Approx(1e-6 + 4e4 / 2e9));
  // Update: its line plus dispatch; a Free: dispatch only.
  CHECK(instr_time(p, lp, prog, instr(PInstr::Update, 0, 1)) == Approx(1e-7 + 3e-6 + 4e4 / 1e9));
  CHECK(instr_time(p, lp, prog, instr(PInstr::Free, 0)) == Approx(1e-7));
  // AllReduce of buffer 0 on {0,1}: its own link (2 x 10 us + 40,000 / 2e9), dispatch.
  PInstr ar = instr(PInstr::AllReduce, 0);
  ar.group = 0;
  CHECK(instr_time(p, lp, prog, ar) == Approx(1e-7 + 2e-5 + 2e-5));
  // LossAllReduce: the gradient norm reads every Accum buffer (copy line), then 8 B.
  PInstr loss = instr(PInstr::LossAllReduce);
  loss.group = 0;
  CHECK(instr_time(p, lp, prog, loss) == Approx(1e-7 + (5e-7 + 4e4 / 4e9) + (2e-5 + 8 / 2e9)));
  // Send to rank 1: the sendrecv link.
  CHECK(instr_time(p, lp, prog, instr(PInstr::Send, 0, -1, 1, 1)) == Approx(1e-7 + 5e-5 + 4e4 / 1e9));

  // Out of cache: the program holds 2 x 40,000 B of buffers and 6 local
  // tensors (5,000 x 4 + 10,000 x 2 + 5,000 x 2 = 50,000 elements = 200,000 B):
  // 280,000 B. A cache share of 100,000 B puts it out of cache.
  CHECK_FALSE(out_of_cache(p, prog));  // no cold lines in the profile: never
  p.copy_cold = LineCost{2e-6, 1e9, {}};
  p.accumulate_cold = LineCost{3e-6, 5e8, {}};
  p.memory_bandwidth_cold = 1e9;
  p.cache_bytes = 3e5;
  CHECK_FALSE(out_of_cache(p, prog));  // 280,000 B fit
  p.cache_bytes = 1e5;
  REQUIRE(out_of_cache(p, prog));
  // SliceIn and CollectGrad on the cold lines.
  CHECK(instr_time(p, lp, prog, slice_in) == Approx(2e-6 + 2e4 / 1e9));
  CHECK(instr_time(p, lp, prog, cg) == Approx(3e-6 + 2e4 / 5e8));
  // Forward: its own 80,000 B (x 20,000, w 20,000, y 40,000) fit the
  // 100,000 B share: the kernel finds its operands in cache, 20 us of compute.
  CHECK(instr_time(p, lp, prog, fwd) == Approx(1e-7 + 2e-6 + 2e-5));
  // With a 50,000 B share they do not: at the cold 1e9 B/s they take 80 us,
  // more than the compute.
  p.cache_bytes = 5e4;
  CHECK(instr_time(p, lp, prog, fwd) == Approx(1e-7 + 2e-6 + 8e-5));
}

TEST_CASE("profiles: in-situ extras parse, interpolate in log(program length) and add to an instruction's cost") {
  std::string text = kMeasured;
  text = text.substr(0, text.rfind('}')) +
         R"(, "in_situ": {"instructions": [100, 10000], "extra": {"free": [1e-6, 3e-6], "alloc": [-5e-6, -5e-6]}}})";
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(text, p, err));
  REQUIRE(p.in_situ_instructions == std::vector<double>{100, 10000});
  CHECK(in_situ_extra(p, "free", 100) == Approx(1e-6));
  CHECK(in_situ_extra(p, "free", 1000) == Approx(2e-6));  // halfway in log(length)
  CHECK(in_situ_extra(p, "free", 10) == Approx(1e-6));     // the nearest length outside them
  CHECK(in_situ_extra(p, "free", 1e6) == Approx(3e-6));
  CHECK(in_situ_extra(p, "update", 1000) == 0);           // a kind it has none for
  // A program of 1,000 instructions: a Free costs its dispatch plus 2 us;
  // an extra that would make a cost negative leaves it at zero.
  LoweredPlan lp;
  RankProgram prog;
  prog.buffers.resize(1);
  prog.instrs.assign(1000, instr(PInstr::Free, 0));
  CHECK(instr_time(p, lp, prog, prog.instrs[0]) == Approx(1e-7 + 2e-6));
  CHECK(instr_time(p, lp, prog, instr(PInstr::Alloc, -1, 0)) == 0);
  DeviceProfile without;
  REQUIRE(parse_profile(kMeasured, without, err));
  CHECK(instr_time(without, lp, prog, prog.instrs[0]) == Approx(1e-7));
  // Malformed: lengths not ascending, a list of the wrong length.
  std::string bad = text;
  bad.replace(bad.find("[100, 10000]"), 12, "[10000, 100]");
  CHECK_FALSE(parse_profile(bad, p, err));
  CHECK(err.find("in_situ") != std::string::npos);
  bad = text;
  bad.replace(bad.find("[1e-6, 3e-6]"), 12, "[1e-6]");
  CHECK_FALSE(parse_profile(bad, p, err));
  CHECK(err.find("in_situ") != std::string::npos);
}

TEST_CASE("fits: the lower envelope sorts and lowers a time above a larger size's") {
  auto e = lower_envelope({{100, 5.0}, {1, 2.0}, {10, 9.0}, {1000, 7.0}});
  REQUIRE(e.size() == 4);
  CHECK(e[0] == std::make_pair(1.0, 2.0));
  CHECK(e[1] == std::make_pair(10.0, 5.0));  // 9 > the 5 at size 100: noise
  CHECK(e[2] == std::make_pair(100.0, 5.0));
  CHECK(e[3] == std::make_pair(1000.0, 7.0));
}

TEST_CASE("profiles: measured points replace the line for copies and for collectives on the measured group size") {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(R"({"peak_flops": {"fp32": 1e11}, "memory_bytes": 1, "memory_bandwidth": 1e10,
      "devices_per_node": 4, "intra_bandwidth": 1e9, "intra_latency": 1e-4,
      "copy": {"overhead": 0, "bandwidth": 1e9, "points": [[1000, 1e-6], [100, 5e-7], [10000, 1e-5]]},
      "collectives": {"ranks": 2, "allreduce": {"latency": 1e-5, "bandwidth": 1e9, "points": [[8, 2e-5], [8000, 4e-5]]}}})",
                        p, err));
  CHECK(p.copy.time(10) == Approx(5e-7));        // below the first point: its time
  CHECK(p.copy.time(550) == Approx(7.5e-7));     // halfway between 100 and 1000
  CHECK(p.copy.time(20000) == Approx(2e-5));     // the last segment extended: 1e-5 + 1e4 * 1e-9
  CHECK(p.collective_ranks == 2);
  CHECK(collective_time(p, Collective::AllReduce, 4004, {0, 1}) == Approx(3e-5));
  // Three devices: the alpha-beta link (2*2*10us + 2*2/3*3000/1e9).
  CHECK(collective_time(p, Collective::AllReduce, 3000, {0, 1, 2}) == Approx(4e-5 + 4e-6));
  CHECK_FALSE(parse_profile(R"({"peak_flops": {"fp32": 1e11}, "memory_bytes": 1, "memory_bandwidth": 1e10,
      "devices_per_node": 4, "intra_bandwidth": 1e9, "intra_latency": 1e-4,
      "update": {"overhead": 0, "bandwidth": 1e9, "points": [[1000, 1e-6]]}})", p, err));
  CHECK(err.find("update.points") != std::string::npos);
}

TEST_CASE("profiles: the shipped cpu profile (measured by nns profile) loads, with a source for every figure") {
  DeviceProfile p;
  std::string err;
  REQUIRE(load_profile("cpu", "stdlib/profiles", p, err));
  CHECK(p.name == "cpu");
  CHECK(p.threads >= 1);
  CHECK(p.kernel_overhead > 0);
  CHECK(p.copy.points.size() >= 2);
  CHECK(p.collective_ranks >= 2);
  for (const char* c : {"allreduce", "allgather", "reduce_scatter", "all_to_all", "sendrecv"}) {
    INFO(c);
    CHECK(p.collective_links.count(c) == 1);
    CHECK(p.collective_curves.count(c) == 1);
  }
  for (const char* cls : {"matmul", "matmul_backward", "attention", "softmax", "layer_norm", "elementwise"}) CHECK(p.efficiency.count(cls) == 1);
  // The in-situ calibration: program lengths, an extra for the kernels and the copies.
  CHECK(p.in_situ_instructions.size() >= 2);
  for (const char* kind : {"forward", "backward", "slice-in", "collect-out", "collect-grad", "alloc"}) {
    INFO(kind);
    CHECK(p.in_situ_extra.count(kind) == 1);
  }
  each_source("cpu", [](const std::string& src) { CHECK(src.find("nns profile") != std::string::npos); });
}

#include "backend/planner/profile_build.h"

namespace nns::planner {

// A measured profile's peak is the fastest rate any kernel reached above its
// curve's fixed cost: a kernel measured faster than the fastest linear (noise
// on a loaded machine, or the linear's own fixed cost) raises the peak
// instead of writing an efficiency above 1, which the profile's schema
// refuses (nns profile used to exit 70 so under load). Predicted times stay
// peak x efficiency.
TEST_CASE("measured profile: every efficiency at most 1, the peak the fastest rate above fixed costs") {
  ProfileSettings s;
  CommPoints comm;
  for (const char* name : {"allreduce", "allgather", "reduce_scatter", "all_to_all", "sendrecv"})
    comm.by_name[name] = {{4, 1e-5}, {1024, 1.2e-5}, {65536, 5e-5}, {1048576, 4e-4}};
  CopyPoints copies;
  for (MeasuredPoints* m :
       {&copies.copy, &copies.accumulate, &copies.update, &copies.copy_cold, &copies.accumulate_cold})
    *m = {{1024, 1e-6}, {65536, 1e-5}, {1048576, 1.2e-4}};
  std::vector<KernelPoint> kernels;
  auto kernel = [&](const std::string& op, double flops, double seconds) {
    KernelPoint k;
    k.kind = op;
    k.work.op = op;
    k.work.kind = op;
    k.work.flops = flops;
    k.seconds = seconds;
    kernels.push_back(k);
  };
  kernel("matmul", 1e3, 2e-6);  // 0.5 GFLOP/s with its fixed cost
  kernel("matmul", 1e8, 1e-3);  // 100 GFLOP/s: the fastest linear
  kernel("softmax", 1e3, 1e-6);
  kernel("softmax", 2e8, 1e-3 + 1e-6);  // 200 GFLOP/s above its fixed cost: faster than the linear
  std::string err;
  std::string json = build_profile(s, comm, kernels, 1e-6, copies, err);
  INFO(err);
  REQUIRE(!json.empty());
  DeviceProfile p;
  REQUIRE(parse_profile(json, p, err));  // the schema refuses efficiencies above 1 (+1% noise)
  CHECK(p.peak_flops["fp32"] == Approx(2e11).epsilon(1e-4));
  for (const auto& [name, curve] : p.efficiency)
    for (const auto& [flops, eff] : curve) {
      INFO(name << " at " << flops);
      CHECK(eff <= 1.0 + 1e-9);
    }
}

}  // namespace nns::planner

TEST_CASE("program cost: a profile with a fused_attention curve runs the score path as one kernel") {
  namespace sema = nns::sema;
  sema::Graph g;
  auto tensor = [&](int64_t rows, int64_t cols) {
    sema::TensorInfo t;
    t.shape = {rows, cols};
    return g.add_tensor(t);
  };
  int q = tensor(1000, 100), k = tensor(100, 1000), scores = tensor(1000, 1000), probs = tensor(1000, 1000);
  sema::OpNode att;
  att.kind = "attention";
  att.composite = true;
  att.attrs["causal"] = true;
  int att_id = g.add_node(att);
  sema::OpNode mm;
  mm.kind = "matmul";
  mm.parent = att_id;
  mm.inputs = {q, k};
  mm.outputs = {scores};
  mm.macs = 100000000;  // 1000 x 1000 x 100
  sema::OpNode sm;
  sm.kind = "softmax";
  sm.parent = att_id;
  sm.inputs = {scores};
  sm.outputs = {probs};
  sema::OpNode outside = sm;  // a softmax outside any attention
  outside.parent = -1;
  const NodeWork wm = node_work(g, g.node(g.add_node(mm)));
  const NodeWork ws = node_work(g, g.node(g.add_node(sm)));
  const NodeWork wo = node_work(g, g.node(g.add_node(outside)));
  CHECK(wm.attention_part == NodeWork::AttentionPart::Product);
  CHECK(ws.attention_part == NodeWork::AttentionPart::Inner);
  CHECK(wo.attention_part == NodeWork::AttentionPart::None);
  DeviceProfile p = toy();
  // Unfused: the product at the matmul roofline, the softmax at its bytes.
  const double unfused_mm = node_time(p, wm), unfused_sm = node_time(p, ws);
  CHECK(unfused_sm > 0);
  p.efficiency["fused_attention"] = {{1e6, 0.8}};
  // Fused: 2e8 FLOPs, half of them skipped by the causal kernel, at 0.8 of 1 TFLOP/s.
  CHECK(node_time(p, wm) == Approx(1e8 / 0.8e12));
  CHECK(node_time(p, wm) < unfused_mm);
  CHECK(node_time(p, ws) == 0.0);
  CHECK(node_time(p, wo) == Approx(unfused_sm));
  // The product's backward: at the forward's curve until the profile has a
  // backward one (the fused backward kernel is slower), then at that.
  sema::OpNode mm_back;
  mm_back.kind = "matmul_backward";
  mm_back.parent = att_id;
  mm_back.forward_of = static_cast<int>(g.nodes().size()) - 3;  // mm, added above
  REQUIRE(g.node(mm_back.forward_of).kind == "matmul");
  mm_back.inputs = {scores, q, k};
  mm_back.outputs = {q, k};
  const NodeWork wb = node_work(g, g.node(g.add_node(mm_back)));
  CHECK(wb.backward);
  CHECK_FALSE(wm.backward);
  const double at_forward_curve = node_time(p, wb);
  CHECK(at_forward_curve == Approx(wb.flops / 2 / 0.8e12));
  p.efficiency["fused_attention_backward"] = {{1e6, 0.5}};
  CHECK(node_time(p, wb) == Approx(wb.flops / 2 / 0.5e12));
  CHECK(node_time(p, wm) == Approx(1e8 / 0.8e12));  // the forward keeps its own
}
