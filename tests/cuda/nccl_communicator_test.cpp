// The NCCL communicator (backend/runtime/comm/nccl_communicator.h) on one
// GPU as a world of one rank: every operation (allreduce, allgather,
// reduce-scatter, all-to-all, broadcast, send/recv, on the world and on a
// group made by ncclCommSplit) against expected values, the host-side
// refusals, and an NCCL error turning into a CommError. A world of one
// checks the calls, the id exchange, the stream handling and the error
// path, not multi-rank NCCL behaviour (no machine here has several GPUs).
//
// No GPU: prints why and exits 77, which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/runtime/comm/nccl_communicator.h"

using namespace nns::backend;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

struct DeviceBuf {
  float* p = nullptr;
  size_t n = 0;
  explicit DeviceBuf(size_t count) : n(count) {
    if (cudaMalloc(&p, count * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  }
  ~DeviceBuf() { cudaFree(p); }
  void put(const std::vector<float>& v) { cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice); }
  std::vector<float> get() const {
    std::vector<float> v(n);
    cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return v;
  }
};

std::vector<float> iota(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// Every operation over `group` ({} = the world) of a one-rank world: each
// is the identity on its data (a sum over one member, a gather of one).
void run_operations(NcclCommunicator& nc, const Group& group, const std::string& where) {
  const size_t n = 1000;
  DeviceBuf a(n), b(n);
  a.put(iota(n, 1));
  nc.allreduce(a.p, n, group);
  nc.synchronize();
  expect(a.get() == iota(n, 1), "allreduce" + where);

  a.put(iota(n, 2));
  b.put(std::vector<float>(n, -1));
  nc.allgather(a.p, b.p, n, group);
  nc.synchronize();
  expect(b.get() == iota(n, 2), "allgather" + where);

  a.put(iota(n, 3));
  b.put(std::vector<float>(n, -1));
  nc.reduce_scatter(a.p, b.p, n, group);
  nc.synchronize();
  expect(b.get() == iota(n, 3), "reduce_scatter" + where);

  a.put(iota(n, 4));
  b.put(std::vector<float>(n, -1));
  nc.all_to_all(a.p, b.p, n, group);
  nc.synchronize();
  expect(b.get() == iota(n, 4), "all_to_all (grouped send/recv)" + where);

  a.put(iota(n, 5));
  nc.broadcast(a.p, n, 0, group);
  nc.synchronize();
  expect(a.get() == iota(n, 5), "broadcast" + where);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device visible; the NCCL communicator test needs a GPU\n");
    return 77;
  }
  // NCCL checks buffer pointers only when asked (NCCL_CHECK_POINTERS, read
  // when it initialises): the error-path check below relies on it.
  ::setenv("NCCL_CHECK_POINTERS", "1", 1);
  try {
    Communicator host(CommConfig{});  // rank 0 of 1: the id exchange is local
    NcclCommunicator nc(host, 0, std::chrono::seconds(30));
    expect(nc.rank() == 0 && nc.size() == 1, "world of one rank");
    run_operations(nc, {}, " on the world");

    // A group made by ncclCommSplit (color 0, key 0): the same operations.
    nc.create_groups({{0}});
    run_operations(nc, {0}, " on group {0} (ncclCommSplit)");

    // Send to and receive from this rank itself, as one NCCL group.
    const size_t n = 257;
    DeviceBuf s(n), r(n);
    s.put(iota(n, 7));
    r.put(std::vector<float>(n, -1));
    nc.send_recv(s.p, n, 0, r.p, n, 0);
    nc.synchronize();
    expect(r.get() == iota(n, 7), "send_recv to itself");

    // Ordering after a compute stream: the copy queued there lands before
    // the allreduce reads the buffer.
    cudaStream_t compute;
    cudaStreamCreate(&compute);
    std::vector<float> host_vals = iota(n, 9);
    cudaMemcpyAsync(s.p, host_vals.data(), n * sizeof(float), cudaMemcpyHostToDevice, compute);
    nc.wait_for(compute);
    nc.allreduce(s.p, n);
    nc.synchronize();
    expect(s.get() == host_vals, "wait_for orders the collective stream after the compute stream");
    cudaStreamDestroy(compute);

    // Host-side refusals.
    auto refused = [&](const std::function<void()>& f, const std::string& what) {
      try {
        f();
      } catch (const std::invalid_argument&) {
        expect(true, what);
        return;
      }
      expect(false, what);
    };
    refused([&] { nc.allreduce(s.p, n, {0, 1}); }, "a group never created is refused");
    refused([&] { nc.create_groups({{1, 0}}); }, "a malformed group is refused");
    refused([&] { nc.broadcast(s.p, n, 3); }, "a broadcast root outside the group is refused");

    // An NCCL error becomes a CommError naming the call; the communicator
    // is aborted and refuses later calls.
    bool threw = false;
    try {
      nc.allreduce(nullptr, n);
      nc.synchronize();
    } catch (const CommError& e) {
      threw = std::string(e.what()).find("NCCL") != std::string::npos;
      std::printf("  (%s)\n", e.what());
    }
    expect(threw, "an allreduce on a null buffer fails as a CommError");
    threw = false;
    try {
      nc.allreduce(s.p, n);
    } catch (const CommError&) {
      threw = true;
    }
    expect(threw, "an aborted communicator refuses later calls");
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "FAILED" : "all NCCL communicator checks passed");
  return failures ? 1 : 0;
}
