// fuzz_profile: device profile JSON (--device PATH.json) on arbitrary
// bytes. parse_profile must answer with a message or a profile; an accepted
// profile must then cost kernels and collectives with finite, non-negative
// times (the simulator and the search add thousands of them), whatever its
// efficiencies, links and curves say.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/planner/cost_model.h"
#include "fuzz/fuzz_util.h"

namespace {

void check_time(double t, const std::string& what) {
  if (!std::isfinite(t) || t < 0)
    nns::fuzz::internal_error("fuzz_profile", what + " of an accepted profile is " + std::to_string(t));
}

void run(const std::string& text) {
  using namespace nns::planner;
  DeviceProfile p;
  std::string err;
  if (!parse_profile(text, p, err)) {
    if (err.empty()) nns::fuzz::internal_error("fuzz_profile", "a refused profile without a message");
    return;
  }
  for (const char* op : {"matmul", "linear", "attention", "elementwise", "matmul_backward"})
    for (double flops : {1.0, 1e6, 1e12})
      for (const char* dtype : {"fp32", "bf16", "fp8"})
        check_time(compute_time(p, op, dtype, flops, flops / 4), std::string("compute_time(") + op + ")");
  for (Collective k : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll,
                       Collective::SendRecv})
    for (double bytes : {0.0, 4.0, 1e9}) {
      check_time(collective_time(p, k, bytes, {0, 1}), std::string("collective_time(") + collective_name(k) + ")");
      check_time(collective_time(p, k, bytes, {0, p.devices_per_node, 2 * p.devices_per_node}),
                 "a cross-node collective_time");
    }
  // The copy line is optional: callers ask present() first.
  if (p.copy.present())
    for (double bytes : {0.0, 64.0, 1e8}) check_time(p.copy.time(bytes), "copy time");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nns::fuzz::run_guarded("fuzz_profile", [&] { run(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
