// bench_collectives: our Communicator's allreduce / allgather /
// reduce_scatter against raw Gloo calls running the same algorithm on the
// same connections (the group's own gloo::Context), in the same run.
//
//   bench_collectives [--ranks 2,4] [--sizes 1,4,16,64] [--reps N]
//   bench_collectives --latency [--ranks 2,4] [--bytes 8] [--reps N]
//
// --latency: the median time of one small allreduce (default 8 bytes, two
// floats; --reps calls, default 2000, after 100 warm-up calls), ours and
// raw Gloo ring, calls back to back with no barrier between them, each
// timed on rank 0. What a step pays for a loss or a norm all-reduced.
//
// Sizes are MiB of the full buffer: the allreduce buffer, the allgather
// output, the reduce_scatter input. Ours and raw alternate rep by rep so
// that drift (page cache, other load) hits both alike; each figure is the
// median of the reps, timed on rank 0 between barriers. Bus bandwidth
// follows nccl-tests: allreduce S/t*2(n-1)/n, the others S/t*(n-1)/n.
//
// What "raw Gloo" means per op: gloo::allreduce (ring) and gloo::allgather
// with fresh options per call, exactly what the Communicator calls. Gloo
// has one reduce-scatter, ReduceScatterHalvingDoubling, built once on its
// buffer and run() repeatedly (how that API is meant to be used); ours is
// a ring over Gloo's transport (see communicator.cpp for why), so that
// row compares two algorithms with the same (n-1)/n traffic, and Gloo's
// results there are not checked (its buffer reuse races).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/launcher.h"

using namespace nns::backend;

namespace {

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double timed_call(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times fn on rank 0 after a barrier, so every rank starts together.
double timed(Communicator& c, const std::function<void()>& fn) {
  c.barrier();
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Pair {
  std::function<void()> ours, raw;
};

int bench_rank(const std::vector<int>& sizes_mib, int reps_override) {
  auto cfg = CommConfig::from_env();
  cfg.timeout = std::chrono::seconds(300);
  Communicator c(cfg);
  const int n = c.size();
  auto ctx = c.gloo_context(c.world());
  auto sum = static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>);
  // Raw calls get their own tags, far from the Communicator's counter.
  uint32_t raw_tag = 1u << 30;

  for (int mib : sizes_mib) {
    const size_t total = (size_t(mib) << 20) / sizeof(float);  // elements of the full buffer
    const size_t chunk = total / n;
    const int reps = reps_override > 0 ? reps_override : std::max(10, 128 / std::max(1, mib));
    std::vector<float> a(total, 1.0f), b(total, 2.0f), out(total), small(chunk, 1.0f);

    // Built once, outside the timing, as Gloo's old-style API intends.
    gloo::ReduceScatterHalvingDoubling<float> raw_rs(ctx, std::vector<float*>{b.data()}, static_cast<int>(chunk * n),
                                                     std::vector<int>(n, static_cast<int>(chunk)));
    struct Op {
      const char* name;
      double factor;  // bus bandwidth per algorithm bandwidth
      Pair fns;
    };
    std::vector<Op> ops = {
        {"allreduce", 2.0 * (n - 1) / n,
         {[&] { c.allreduce(a.data(), total); },
          [&] {
            gloo::AllreduceOptions o(ctx);
            o.setOutput(b.data(), total);
            o.setReduceFunction(sum);
            o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
            o.setTag(raw_tag++);
            gloo::allreduce(o);
          }}},
        {"allgather", double(n - 1) / n,
         {[&] { c.allgather(small.data(), out.data(), chunk); },
          [&] {
            gloo::AllgatherOptions o(ctx);
            o.setInput(small.data(), chunk);
            o.setOutput(out.data(), chunk * n);
            o.setTag(raw_tag++);
            gloo::allgather(o);
          }}},
        {"reduce_scatter", double(n - 1) / n,
         {[&] { c.reduce_scatter(a.data(), small.data(), chunk); }, [&] { raw_rs.run(); }}},
    };
    for (auto& op : ops) {
      op.fns.ours();  // warm-up: connections, caches, page faults
      op.fns.raw();
      std::vector<double> t_ours, t_raw;
      for (int r = 0; r < reps; ++r) {
        t_ours.push_back(timed(c, op.fns.ours));
        t_raw.push_back(timed(c, op.fns.raw));
      }
      if (c.rank() == 0) {
        const double bytes = double(chunk * n) * sizeof(float);
        const double ours = bytes / median(t_ours) * op.factor / 1e9;
        const double raw = bytes / median(t_raw) * op.factor / 1e9;
        std::printf("%5d  %-14s %6d MiB  %9.3f ms  %9.3f ms  %8.2f GB/s  %8.2f GB/s  %6.3f\n", n, op.name, mib,
                    median(t_ours) * 1e3, median(t_raw) * 1e3, ours, raw, ours / raw);
        std::fflush(stdout);
      }
    }
  }
  c.barrier();
  return 0;
}

// Median seconds of one call of fn on rank 0, calls back to back.
double call_latency(Communicator& c, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 100; ++i) fn();  // warm-up: connections, caches
  c.barrier();
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) t[i] = timed_call(fn);
  return median(t);
}

int latency_rank(size_t bytes, int reps) {
  auto cfg = CommConfig::from_env();
  cfg.timeout = std::chrono::seconds(300);
  Communicator c(cfg);
  auto ctx = c.gloo_context(c.world());
  auto sum = static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>);
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  std::vector<float> a(count, 1.0f), b(count, 1.0f);
  uint32_t raw_tag = 1u << 30;
  double ours = call_latency(c, reps, [&] { c.allreduce(a.data(), count); });
  double raw = call_latency(c, reps, [&] {
    gloo::AllreduceOptions o(ctx);
    o.setOutput(b.data(), count);
    o.setReduceFunction(sum);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setTag(raw_tag++);
    gloo::allreduce(o);
  });
  if (c.rank() == 0) {
    std::printf("%5d  allreduce %6zu B  %9.1f us  %9.1f us\n", c.size(), count * sizeof(float), ours * 1e6, raw * 1e6);
    std::fflush(stdout);
  }
  c.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4}, sizes = {1, 4, 16, 64};
  int reps = 0;
  size_t bytes = 8;
  bool latency = false;
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--latency") {
      latency = true;
      --i;  // no value
      continue;
    }
    if (i + 1 >= argc) k = "";
    if (k == "--ranks") ranks = parse_list(argv[i + 1]);
    else if (k == "--sizes") sizes = parse_list(argv[i + 1]);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--bytes") bytes = static_cast<size_t>(std::atoll(argv[i + 1]));
    else {
      std::fprintf(stderr,
                   "usage: bench_collectives [--ranks 2,4] [--sizes 1,4,16,64] [--reps N]\n"
                   "       bench_collectives --latency [--ranks 2,4] [--bytes 8] [--reps N]\n");
      return 64;
    }
  }
  if (latency) {
    std::printf("ranks  op          size   ours (median)  gloo ring (median)\n");
    for (int n : ranks) {
      int rc = launch_local_ranks(n, [&](int) { return latency_rank(bytes, reps > 0 ? reps : 2000); });
      if (rc != 0) return rc;
    }
    return 0;
  }
  std::printf("ranks  op               size   ours (median)  gloo (median)  ours busbw  gloo busbw  ours/gloo\n");
  for (int n : ranks) {
    int rc = launch_local_ranks(n, [&](int) { return bench_rank(sizes, reps); });
    if (rc != 0) return rc;
  }
  return 0;
}
