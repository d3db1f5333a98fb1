// The plan executor's NCCL path (backend/runtime/comm/nccl_collectives.h)
// on one GPU as a world of one rank: the CUDA backend hands out its compute
// stream; collectives on NCCL's own stream read what the compute stream
// wrote before them and the compute stream reads their results only after
// them, with no host synchronisation in between (large buffers, so that an
// unordered read would see the previous contents); a posted allreduce is
// complete for the compute stream after its wait(); the refusals (a
// backend without a CUDA stream, a bf16 reduction). A world of one cannot
// show multi-rank NCCL behaviour nor the pipeline channels (a channel joins
// two distinct ranks): no machine here has several GPUs.
//
// No GPU: prints why and exits 77, which ctest reports as skipped.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/lowering/rank_program.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/nccl_collectives.h"
#include "backend/runtime/cuda/cuda_backend.h"
#include "backend/runtime/device_buffer.h"

using namespace nns::backend;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Whether every element of b (downloaded) equals v.
bool all_equal(Backend& be, const DeviceBuffer& b, float v) {
  std::vector<float> host(static_cast<size_t>(b.numel()));
  be.copy_to_host(host.data(), b.data(), b.bytes());
  for (float x : host)
    if (x != v) return false;
  return true;
}

LoweredPlan one_rank_plan() {
  LoweredPlan lp;
  lp.plan = "one-rank";
  lp.programs.resize(1);
  return lp;
}

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device is visible\n");
    return 77;
  }
  try {
    std::string why;
    std::unique_ptr<Backend> be = make_cuda_backend(0, why);
    if (!be) {
      std::printf("FAIL: the CUDA backend: %s\n", why.c_str());
      return 1;
    }
    expect(be->native_stream() != nullptr, "the CUDA backend hands out its compute stream");
    Communicator host(CommConfig{});  // rank 0 of 1
    std::unique_ptr<Collectives> c = make_nccl_collectives(host, *be, 0, one_rank_plan(), std::chrono::milliseconds(60000));
    expect(c->name() == "nccl" && c->size() == 1 && c->rank() == 0, "a world of one NCCL rank");

    const int64_t n = int64_t{1} << 24;  // 64 MiB: a fill takes long enough for a missing wait to show
    DeviceBuffer a(*be, static_cast<size_t>(n) * 4), b(*be, static_cast<size_t>(n) * 4), out(*be, static_cast<size_t>(n) * 4);
    bool ordered = true;
    for (int round = 1; round <= 8; ++round) {
      const float v = static_cast<float>(round);
      be->fill(a.data(), n, v);                 // compute stream
      c->allgather(a.data(), b.data(), n, {});  // NCCL's stream: must wait for the fill
      be->copy(out.data(), b.data(), b.bytes());  // compute stream: must wait for the gather
      ordered &= all_equal(*be, out, v);
    }
    expect(ordered, "in-order collectives: NCCL reads after the compute stream's writes, the compute stream after NCCL's");

    bool posted = true;
    for (int round = 1; round <= 8; ++round) {
      const float v = 10.f + static_cast<float>(round);
      be->fill(a.data(), n, v);
      std::unique_ptr<PendingCollective> p = c->post_allreduce(a.data(), n, {}, false);
      p->wait();
      be->copy(out.data(), a.data(), a.bytes());
      posted &= all_equal(*be, out, v);
    }
    expect(posted, "a posted allreduce is complete for the compute stream after its wait()");

    bool refused = false;
    try {
      c->post_allreduce(a.data(), n, {}, true);
    } catch (const RuntimeError&) {
      refused = true;
    }
    expect(refused, "a bf16 reduction is refused on the NCCL path (the choice keeps it on Gloo)");

    std::unique_ptr<Backend> emu = make_cuda_emulation_backend(false);
    bool no_stream = false;
    try {
      make_nccl_collectives(host, *emu, 0, one_rank_plan(), std::chrono::milliseconds(60000));
    } catch (const RuntimeError& e) {
      no_stream = std::string(e.what()).find("no CUDA stream") != std::string::npos;
    }
    expect(no_stream, "the emulation (no CUDA stream) is refused");
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "FAILED" : "PASS");
  return failures ? 1 : 0;
}
