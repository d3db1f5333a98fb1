// The planner's JSON reader, the shipped device profiles, and the cost model
// against hand-computed roofline and alpha-beta numbers.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "backend/planner/cost_model.h"
#include "backend/planner/json.h"

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

}  // namespace

TEST_CASE("json reader: values, nesting and errors with offsets") {
  Json j;
  std::string err;
  REQUIRE(parse_json(R"( {"a": [1, -2.5e3, true, null], "b": {"c": "x\"y"}} )", j, err));
  REQUIRE(j.kind == Json::Object);
  REQUIRE(j.find("a")->arr.size() == 4);
  CHECK(j.find("a")->arr[1].num == -2500.0);
  CHECK(j.find("a")->arr[2].b);
  CHECK(j.find("a")->arr[3].kind == Json::Null);
  CHECK(j.find("b")->find("c")->str == "x\"y");
  CHECK(j.find("zz") == nullptr);
  CHECK_FALSE(parse_json("{\"a\": 1,}", j, err));
  CHECK(err.find("offset 8") != std::string::npos);
  CHECK_FALSE(parse_json("[1, 2", j, err));
  CHECK_FALSE(parse_json("{} x", j, err));
  CHECK(err.find("trailing") != std::string::npos);
  CHECK_FALSE(parse_json(std::string(100, '['), j, err));
  CHECK(err.find("too deep") != std::string::npos);
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
    std::ifstream in(std::string("stdlib/profiles/") + e.name + ".json");
    std::stringstream ss;
    ss << in.rdbuf();
    Json root;
    REQUIRE(parse_json(ss.str(), root, err));
    for (const auto& [key, v] : root.obj) {
      if (v.kind != Json::Number && v.kind != Json::Object) continue;
      INFO(key);
      const Json* src = root.find(key + "_source");
      REQUIRE(src != nullptr);
      CHECK(src->str.size() > 10);
    }
  }
}
