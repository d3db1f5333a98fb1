// nns profile --out FILE [--ranks R] [--threads T] [--quick]: measures the
// local backend and writes a device profile (cost_model.h) that `nns
// simulate --device FILE` reads.
//
// It starts R rank processes with the launcher `nns run --gpus R` uses
// (backend/runtime/comm/launcher.h), each with T kernel threads (default
// max(1, cores / R), what a rank of such a run gets), and on all of them at
// once — so they contend for cores and memory as a run's ranks do —
// measures:
//   - collectives over the runtime's Communicator on all R ranks (allreduce,
//     allgather, reduce-scatter, all-to-all) and send/recv between ranks 0
//     and 1 (half a ping-pong), at sizes from 4 B to 4 MiB;
//   - kernels through the Backend's run_node, each output a fresh zeroed
//     block from the Backend's allocator as the plan executor gives it
//     (plan_executor.cpp: run_local), for the op classes of program_cost.h:
//     linear (matmul), batched matmul (attention), softmax, layer norm,
//     elementwise (add, gelu, mul_scalar, ...), forward and backward, over a
//     range of sizes, run in turn with the other kernels of their size as a
//     step runs them (time_in_turn), each keeping its median run; and a
//     chain of 176 small nodes of 11 kinds run in turn (a kernel's fixed
//     cost when the one before it was another kernel, as in a program);
//   - instructions through the real PlanExecutor (one rank, a synthetic
//     program on distinct buffers, 8 MiB in all): a bookkeeping instruction
//     (Free of an empty buffer), Extract (a new buffer with a strided
//     region: what SliceIn, SliceGrad, LoadInput and Alloc also do) and
//     AddTo (what CollectOut and CollectGrad also do) against size; and
//     AdamW updates.
//   - after the measuring ranks exit, in situ: stdlib/profiles/calibration.nns
//     (a stack of MLP blocks, Megatron split; none of the shipped examples)
//     run by `nns run --trace` three times at each of three depths (about
//     1,000, 5,000 and 24,000 instructions per rank), lowered and costed with the
//     profile so far: per instruction kind, the median over its
//     instructions of measured (mean over the steps) minus predicted
//     ("in_situ"; cost_model.h), which the cost model interpolates in the
//     log of a program's length (measure_in_situ).
// Copy timings keep the fastest of several batches (other processes only
// add time); collectives keep the median of calls issued back to back, as
// a step issues them; kernels the median of their runs in turn. Each series is lowered to its envelope (time does not fall as
// size grows). Rank 0 fits the cost model's parameters: per
// collective the measured points (used for groups of R) and an alpha-beta
// link (fit_collective, other sizes); per copy kind the points and a
// Theil-Sen line (fit_line); kernel_overhead from the chain; an efficiency
// curve per class against the fp32 peak (the fastest linear measured,
// fit_efficiency). Every figure gets a "<field>_source" saying how, when,
// with how many ranks and threads, and at what load it was measured.
//
// The same command on a machine whose runtime has a CUDA backend would
// measure that backend through the same Backend and Communicator
// interfaces; this build's ranks run the CPU backend.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "backend/lowering/geometry.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/json.h"
#include "backend/planner/program_cost.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/launcher.h"
#include "backend/runtime/plan_executor.h"
#include "driver/args.h"
#include "driver/commands.h"
#include "driver/pipeline.h"

namespace nns::driver {

namespace {

using Clock = std::chrono::steady_clock;
using Points = std::vector<std::pair<double, double>>;  // (size, seconds)

struct Settings {
  bool quick = false;
  int threads = 1, ranks = 2;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seconds of one call of `f`: the fastest of `reps` batches long enough to
// read the clock well (about `batch_s`). Local work is deterministic: other
// processes and preemption only ever add time, so the fastest batch is the
// machine's own speed (a median on a loaded machine measures the load).
double time_fastest(const std::function<void()>& f, const Settings& s) {
  const double batch_s = s.quick ? 3e-4 : 2e-3;
  const int reps = s.quick ? 3 : 9;
  f();  // warm up (first-touch pages, oneDNN primitive creation)
  auto t0 = Clock::now();
  f();
  double one = std::max(seconds_since(t0), 1e-7);
  int inner = std::max(1, static_cast<int>(batch_s / one));
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < inner; ++i) f();
    ts.push_back(seconds_since(t0) / inner);
  }
  return *std::min_element(ts.begin(), ts.end());
}

// ---- collectives ----

struct CommPoints {
  std::map<std::string, Points> by_name;  // collective_name -> (bytes as collective_time takes them, seconds)
};

// Every rank calls it; each collective is timed on every rank, rank 0's
// fastest kept. Sizes are floats per member.
CommPoints measure_collectives(backend::Communicator& comm, const Settings& s) {
  CommPoints out;
  const int n = comm.size(), me = comm.rank();
  std::vector<size_t> sizes = s.quick ? std::vector<size_t>{1, 256, 16384, 262144}
                                      : std::vector<size_t>{1, 16, 256, 2048, 16384, 65536, 262144, 1048576};
  const int reps = s.quick ? 5 : 21;
  auto timed = [&](const std::function<void()>& f) {
    std::vector<double> ts;
    f();
    comm.barrier();
    // Back to back, as a step issues them, and the median: a collective
    // right after a barrier finds every rank ready and is the fastest case
    // (the fastest of such runs was 3-5x below what a training step's chain
    // of collectives takes per call: there a rank enters while the other is
    // still finishing the previous one, and waits for it).
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      f();
      ts.push_back(seconds_since(t0));
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  };
  uint32_t tag = 1;
  for (size_t count : sizes) {
    std::vector<float> a(count * n, 1.f), b(count * n, 0.f);
    double bytes = static_cast<double>(count) * 4;
    out.by_name["allreduce"].emplace_back(bytes, timed([&] { comm.allreduce(a.data(), count); }));
    // allgather / reduce-scatter / all-to-all: collective_time takes the
    // gathered result, the input, one member's whole send buffer.
    out.by_name["allgather"].emplace_back(bytes * n, timed([&] { comm.allgather(a.data(), b.data(), count); }));
    out.by_name["reduce_scatter"].emplace_back(bytes * n, timed([&] { comm.reduce_scatter(a.data(), b.data(), count); }));
    out.by_name["all_to_all"].emplace_back(bytes * n, timed([&] { comm.all_to_all(a.data(), b.data(), count); }));
    // Send/recv between ranks 0 and 1: half a round trip.
    double rtt = timed([&] {
      if (me == 0) {
        comm.isend(a.data(), count, 1, tag)->wait();
        comm.irecv(b.data(), count, 1, tag + 1)->wait();
      } else if (me == 1) {
        comm.irecv(b.data(), count, 0, tag)->wait();
        comm.isend(a.data(), count, 0, tag + 1)->wait();
      }
    });
    tag += 2;
    out.by_name["sendrecv"].emplace_back(bytes, rtt / 2);
  }
  for (auto& [name, pts] : out.by_name) pts = planner::lower_envelope(pts);
  return out;
}

// ---- kernels ----

struct KernelBench {
  sema::Graph g;
  std::vector<std::vector<float>> data;  // by tensor id
  int node = -1;

  int tensor(sema::Shape shape) {
    sema::TensorInfo t;
    t.shape = std::move(shape);
    int id = g.add_tensor(t);
    data.resize(g.tensors().size());
    data[static_cast<size_t>(id)].assign(static_cast<size_t>(sema::numel(g.tensor(id).shape)), 0.5f);
    return id;
  }
  int add(const std::string& kind, std::vector<int> in, std::vector<int> out, std::map<std::string, sema::Attr> attrs = {},
          int64_t macs = 0, int forward_of = -1) {
    sema::OpNode n;
    n.kind = kind;
    n.name = kind;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attrs = std::move(attrs);
    n.macs = macs;
    n.forward_of = forward_of;
    if (forward_of >= 0) n.phase = sema::Phase::Backward;
    return node = g.add_node(n);
  }
  // The forward node `f` and its backward (every input differentiated):
  // inputs = forward inputs, outputs, output gradients.
  int add_backward(int f, std::map<std::string, sema::Attr> attrs = {}) {
    const sema::OpNode fwd = g.node(f);
    std::vector<int> in = fwd.inputs, out;
    for (int y : fwd.outputs) in.push_back(y);
    for (int y : fwd.outputs) in.push_back(tensor(g.tensor(y).shape));
    for (int x : fwd.inputs) out.push_back(tensor(g.tensor(x).shape));
    attrs["grad_mask"] = std::vector<int64_t>(fwd.inputs.size(), 1);
    return add(fwd.kind + "_backward", in, out, attrs, 0, f);
  }
  // Runs node `id` as the executor does (plan_executor.cpp, run_local):
  // each output a fresh zeroed block from the Backend's allocator (the
  // block of its previous run goes back to the allocator first), then the
  // kernel. A tensor some run wrote is read from its latest block.
  void run(backend::Backend& be, int id) {
    backend_ = &be;
    const sema::OpNode& n = g.node(id);
    pooled.resize(g.tensors().size(), nullptr);
    auto bytes = [&](int t) { return static_cast<size_t>(sema::numel(g.tensor(t).shape)) * 4; };
    auto at = [&](int t) { return pooled[static_cast<size_t>(t)] ? pooled[static_cast<size_t>(t)] : data[static_cast<size_t>(t)].data(); };
    std::vector<backend::TensorView> ins, outs;
    for (int t : n.inputs) ins.push_back(backend::TensorView{at(t), sema::DType::F32, g.tensor(t).shape});
    for (int t : n.outputs) {
      void*& block = pooled[static_cast<size_t>(t)];
      if (block) be.release(block, bytes(t));
      block = be.allocate(bytes(t));
      outs.push_back(backend::TensorView{block, sema::DType::F32, g.tensor(t).shape});
    }
    be.run_node(g, n, ins, outs);
  }
  KernelBench() = default;
  KernelBench(const KernelBench&) = delete;
  KernelBench& operator=(const KernelBench&) = delete;
  ~KernelBench() {
    for (size_t t = 0; t < pooled.size(); ++t)
      if (pooled[t]) backend_->release(pooled[t], static_cast<size_t>(sema::numel(g.tensor(static_cast<int>(t)).shape)) * 4);
  }

 private:
  std::vector<void*> pooled;  // by tensor id: the block of its latest run, if any
  backend::Backend* backend_ = nullptr;
};

// One measured kernel: its class and work (program_cost's node_work, so the
// fit and the cost model count the same FLOPs) and its time.
struct KernelPoint {
  std::string kind;  // the node's kind (linear, gelu_backward, ...)
  planner::NodeWork work;
  double seconds = 0;
};

// The kernels to measure, in the order a program would meet them.
struct KernelQueue {
  std::deque<KernelBench> benches;
  std::vector<std::pair<KernelBench*, int>> nodes;  // (its bench, node id)
  KernelBench& bench() { return benches.emplace_back(); }
};

void bench_node(backend::Backend&, KernelBench& kb, int id, const Settings&, KernelQueue& q) { q.nodes.emplace_back(&kb, id); }

// Times every queued kernel in turn, the way a training step meets them:
// each run follows a different kernel (whose code and data then fill the
// caches), its operands where earlier kernels left them and its outputs
// fresh blocks from the allocator; a kernel repeated on its own, its
// operands and code hot, ran 1.3-3x faster than the same kernel inside a
// plan's step (nns run --trace against this profile's earlier isolated
// timings, 2026-11-25). Passes over the whole list repeat; each kernel
// keeps the median of its runs, as a step's time is its runs' median.
void time_in_turn(backend::Backend& be, KernelQueue& q, const Settings& s, std::vector<KernelPoint>& out) {
  const int passes = s.quick ? 5 : 15;
  // Kernels in turn with others of their size (their outputs' elements
  // within a factor of 4): a small model's step runs small kernels after
  // small kernels, its data in cache, not after a 16 MiB one.
  auto scale = [&](size_t i) {
    const sema::Graph& g = q.nodes[i].first->g;
    double elems = 0;
    for (int t : g.node(q.nodes[i].second).outputs) elems += static_cast<double>(sema::numel(g.tensor(t).shape));
    return static_cast<int>(std::floor(std::log2(std::max(elems, 1.0)) / 2));
  };
  std::map<int, std::vector<size_t>> groups;
  for (size_t i = 0; i < q.nodes.size(); ++i) groups[scale(i)].push_back(i);
  std::vector<std::vector<double>> ts(q.nodes.size());
  for (const auto& [sc, members] : groups) {
    for (size_t i : members) q.nodes[i].first->run(be, q.nodes[i].second);  // warm up: first-touch pages, oneDNN primitive creation
    for (int pass = 0; pass < passes; ++pass)
      for (size_t i : members) {
        auto t0 = Clock::now();
        q.nodes[i].first->run(be, q.nodes[i].second);
        ts[i].push_back(seconds_since(t0));
      }
  }
  for (size_t i = 0; i < q.nodes.size(); ++i) {
    KernelBench& kb = *q.nodes[i].first;
    const int id = q.nodes[i].second;
    std::sort(ts[i].begin(), ts[i].end());
    KernelPoint p;
    p.kind = kb.g.node(id).kind;
    p.work = planner::node_work(kb.g, kb.g.node(id));
    p.seconds = ts[i][ts[i].size() / 2];
    out.push_back(p);
  }
}

// Seconds per node of a chain of small nodes of many kinds, run in turn as
// a program runs them: the fixed cost of a kernel when the one before it
// was another kernel (the executor's dispatch, output allocation, the
// kernel's setup, with the caches holding someone else's code and data) —
// what a micro-benchmark repeating one kernel does not see.
double measure_kernel_overhead(backend::Backend& be, const Settings& s) {
  KernelBench kb;
  std::vector<int> nodes;
  for (int copy = 0; copy < 8; ++copy) {
    int a = kb.tensor({2, 8}), b = kb.tensor({2, 8}), w = kb.tensor({8}), bias = kb.tensor({8});
    auto out = [&] { return kb.tensor({2, 8}); };
    std::vector<int> fwd;
    for (const char* k : {"add", "sub", "mul"}) fwd.push_back(kb.add(k, {a, b}, {out()}));
    for (const char* k : {"gelu", "relu", "silu", "neg"}) fwd.push_back(kb.add(k, {a}, {out()}));
    fwd.push_back(kb.add("mul_scalar", {a}, {out()}, {{"s", 0.5}}));
    fwd.push_back(kb.add("add_scalar", {a}, {out()}, {{"s", 0.5}}));
    fwd.push_back(kb.add("softmax", {a}, {out()}, {{"dim", int64_t{-1}}}));
    fwd.push_back(kb.add("layer_norm", {a, w, bias}, {out()}, {{"eps", 1e-5}}));
    int w8 = kb.tensor({8, 8});
    fwd.push_back(kb.add("linear", {a, w8}, {out()}, {}, 2 * 8 * 8));
    for (int f : fwd) nodes.push_back(f);
    for (int f : fwd) nodes.push_back(kb.add_backward(f, kb.g.node(f).attrs));
  }
  double chain = time_fastest([&] { for (int n : nodes) kb.run(be, n); }, s);
  return chain / static_cast<double>(nodes.size());
}

std::vector<KernelPoint> measure_kernels(backend::Backend& be, const Settings& s) {
  std::vector<KernelPoint> out;
  KernelQueue q;
  std::vector<int64_t> dims = s.quick ? std::vector<int64_t>{8, 64, 256} : std::vector<int64_t>{8, 16, 32, 64, 128, 256, 512};
  for (int64_t d : dims) {
    // Linear: x [4d, d] times w [d, d]^T (the tokens x hidden shapes of a layer).
    KernelBench& kb = q.bench();
    int x = kb.tensor({4 * d, d}), w = kb.tensor({d, d}), y = kb.tensor({4 * d, d});
    int f = kb.add("linear", {x, w}, {y}, {}, 4 * d * d * d);
    bench_node(be, kb, f, s, q);
    bench_node(be, kb, kb.add_backward(f), s, q);
  }
  // Convolutions (3x3, stride 1, same padding) of the channel counts and
  // resolutions of small CNN blocks: conv2d has its own curve ("op:conv2d")
  // instead of borrowing the matmul one.
  std::vector<std::pair<int64_t, int64_t>> convs = s.quick ? std::vector<std::pair<int64_t, int64_t>>{{8, 8}, {32, 16}}
                                                           : std::vector<std::pair<int64_t, int64_t>>{{8, 8}, {16, 16}, {32, 16}, {64, 16}, {64, 32}};
  for (const auto& [ch, hw] : convs) {
    KernelBench& kb = q.bench();
    int x = kb.tensor({4, ch, hw, hw}), w = kb.tensor({ch, ch, 3, 3}), y = kb.tensor({4, ch, hw, hw});
    std::map<std::string, sema::Attr> attrs = {{"stride", int64_t{1}}, {"padding", int64_t{1}}};
    int f = kb.add("conv2d", {x, w}, {y}, attrs, 4 * ch * hw * hw * ch * 9);
    bench_node(be, kb, f, s, q);
    bench_node(be, kb, kb.add_backward(f, attrs), s, q);
  }
  for (int64_t t : dims) {
    if (t > 256) continue;
    // Attention scores: [8, t, 32] x [8, 32, t] (heads x sequence x head dim).
    KernelBench& kb = q.bench();
    int a = kb.tensor({8, t, 32}), b = kb.tensor({8, 32, t}), y = kb.tensor({8, t, t});
    int f = kb.add("matmul", {a, b}, {y}, {}, 8 * t * 32 * t);
    bench_node(be, kb, f, s, q);
    bench_node(be, kb, kb.add_backward(f), s, q);
  }
  std::vector<int64_t> elems = s.quick ? std::vector<int64_t>{64, 16384, 1 << 20}
                                       : std::vector<int64_t>{64, 1024, 8192, 65536, 262144, 1 << 20, 1 << 22};
  for (int64_t e : elems) {
    int64_t cols = std::min<int64_t>(e, 128), rows = e / cols;
    {
      KernelBench& kb = q.bench();
      int x = kb.tensor({rows, cols}), y = kb.tensor({rows, cols});
      int f = kb.add("softmax", {x}, {y}, {{"dim", int64_t{-1}}});
      bench_node(be, kb, f, s, q);
      bench_node(be, kb, kb.add_backward(f, {{"dim", int64_t{-1}}}), s, q);
    }
    {
      KernelBench& kb = q.bench();
      int x = kb.tensor({rows, cols}), w = kb.tensor({cols}), b = kb.tensor({cols}), y = kb.tensor({rows, cols});
      int f = kb.add("layer_norm", {x, w, b}, {y}, {{"eps", 1e-5}});
      bench_node(be, kb, f, s, q);
      bench_node(be, kb, kb.add_backward(f, {{"eps", 1e-5}}), s, q);
    }
    {
      KernelBench& kb = q.bench();
      int a = kb.tensor({rows, cols}), b = kb.tensor({rows, cols}), y = kb.tensor({rows, cols});
      int f = kb.add("add", {a, b}, {y});
      bench_node(be, kb, f, s, q);
      bench_node(be, kb, kb.add_backward(f), s, q);
      int y2 = kb.tensor({rows, cols});
      int gl = kb.add("gelu", {a}, {y2});
      bench_node(be, kb, gl, s, q);
      bench_node(be, kb, kb.add_backward(gl), s, q);
      int y3 = kb.tensor({rows, cols});
      int ms = kb.add("mul_scalar", {a}, {y3}, {{"s", 0.5}});
      bench_node(be, kb, ms, s, q);
      bench_node(be, kb, kb.add_backward(ms, {{"s", 0.5}}), s, q);
      // More of the elementwise kinds the shipped models run most; each gets
      // a curve of its own (a sigmoid costs several adds per element).
      for (const char* binary : {"mul", "sub"}) {
        int yb = kb.tensor({rows, cols});
        int f = kb.add(binary, {a, b}, {yb});
        bench_node(be, kb, f, s, q);
        bench_node(be, kb, kb.add_backward(f), s, q);
      }
      for (const char* unary : {"relu", "sigmoid"}) {
        int yu = kb.tensor({rows, cols});
        int f = kb.add(unary, {a}, {yu});
        bench_node(be, kb, f, s, q);
        bench_node(be, kb, kb.add_backward(f), s, q);
      }
    }
  }
  time_in_turn(be, q, s, out);
  // Per kind, time does not fall as the work grows (lower_envelope).
  std::map<std::string, Points> by_kind;
  for (const KernelPoint& k : out) by_kind[k.kind].emplace_back(k.work.flops, k.seconds);
  for (auto& [kind, pts] : by_kind) pts = planner::lower_envelope(pts);
  for (KernelPoint& k : out)
    for (const auto& [flops, t] : by_kind[k.kind])
      if (flops == k.work.flops) k.seconds = t;
  return out;
}

// ---- instructions of the plan executor ----

// The last-level cache of cpu0 (sysfs), 32 MiB when it cannot be read.
int64_t l3_cache_bytes() {
  int64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string text;
    if (!(f >> text) || text.empty()) continue;
    int64_t v = std::atoll(text.c_str());
    char unit = text.back();
    if (unit == 'K') v <<= 10;
    else if (unit == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best > 0 ? best : int64_t(32) << 20;
}

struct CopyPoints {
  Points copy, accumulate, update;  // (bytes of the region / parameter piece, seconds)
  Points copy_cold, accumulate_cold;  // the same over a working set 8 x the L3 (data from memory)
  double instr = 0;                 // seconds per bookkeeping instruction (a Free)
};

// Seconds per repetition of `body` run `reps` times as one program through
// the real PlanExecutor (one rank, no communicator): what an instruction
// costs there, dispatch, buffer allocation and bookkeeping included.
// Buffers: b0 the source [rows, 2 cols], b1 [rows, cols] (the left half of
// b0's box), b2 [rows, cols] (the same box as b1).
double executor_time(backend::Backend& be, int64_t rows, int64_t cols, backend::PInstr::Kind kind, const Settings& s,
                     int64_t working_set = int64_t(8) << 20) {
  backend::LoweredPlan lp;
  lp.plan = "profile";
  backend::RankProgram prog;
  backend::BufferDecl wide, half;
  wide.piece.start = {0, 0};
  wide.piece.length = {rows, 2 * cols};
  half.piece.start = {0, 0};
  half.piece.length = {rows, cols};
  // Distinct buffers, `working_set` bytes in all: 8 MiB (more than a
  // core's L2, inside the shared L3, as a small program's activations are)
  // or far more than the L3 (a program whose buffers stream from memory).
  // Sources b[3i], destinations b[3i+1], b[3i+2] for AddTo's accumulator.
  const int64_t bytes = rows * cols * 4;
  const int sets = static_cast<int>(std::clamp<int64_t>(working_set / (4 * bytes), 1, 4096));
  auto instr = [](backend::PInstr::Kind k, int a, int b) {
    backend::PInstr in;
    in.kind = k;
    in.a = a;
    in.b = b;
    return in;
  };
  for (int i = 0; i < sets; ++i) {
    prog.buffers.insert(prog.buffers.end(), {wide, half, half});
    for (int k = 0; k < 3; ++k) prog.instrs.push_back(instr(backend::PInstr::Alloc, -1, 3 * i + k));
  }
  std::vector<backend::PInstr> body;
  for (int i = 0; i < sets; ++i) {
    if (kind == backend::PInstr::Extract) body.push_back(instr(kind, 3 * i, 3 * i + 1));
    else if (kind == backend::PInstr::AddTo) body.push_back(instr(kind, 3 * i + 1, 3 * i + 2));
    else body.push_back(instr(kind, -1, 3 * i + 1));  // Alloc: re-zero (a new zeroed buffer replaces the old)
  }
  lp.programs.push_back(std::move(prog));
  sema::Graph g;
  sema::TrainSpec spec;
  backend::PlanExecutor ex(g, std::move(lp), spec, be, nullptr, 0);
  int64_t step = 1;
  ex.run_step(step++);  // the Allocs: every buffer exists from now on
  // From here each step runs the body alone (the executor holds its own
  // copy of the program; P refers to it).
  ex.lowered.programs[0].instrs = body;
  return time_fastest([&] { ex.run_step(step++); }, s) / sets;
}

// Seconds per Free of a buffer that holds nothing: the executor's dispatch
// and bookkeeping of one instruction, with no memory work.
double executor_dispatch(backend::Backend& be, const Settings& s) {
  backend::LoweredPlan lp;
  lp.plan = "profile";
  backend::RankProgram prog;
  backend::BufferDecl one;
  one.piece.start = {0};
  one.piece.length = {1};
  for (int i = 0; i < 256; ++i) {
    prog.buffers.push_back(one);
    backend::PInstr in;
    in.kind = backend::PInstr::Free;
    in.a = i;
    prog.instrs.push_back(in);
  }
  lp.programs.push_back(std::move(prog));
  sema::Graph g;
  sema::TrainSpec spec;
  backend::PlanExecutor ex(g, std::move(lp), spec, be, nullptr, 0);
  int64_t step = 1;
  return time_fastest([&] { ex.run_step(step++); }, s) / 256;
}

CopyPoints measure_instructions(backend::Backend& be, const Settings& s) {
  using K = backend::PInstr;
  CopyPoints out;
  std::vector<int64_t> elems = s.quick ? std::vector<int64_t>{64, 16384, 1 << 20}
                                       : std::vector<int64_t>{16, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20, 1 << 22};
  for (int64_t e : elems) {
    int64_t cols = std::min<int64_t>(e, 256), rows = e / cols;
    double bytes = static_cast<double>(e) * 4;
    // Extract: a new buffer with the region (strided: the left half of a wider source), replacing the old.
    out.copy.emplace_back(bytes, executor_time(be, rows, cols, K::Extract, s));
    // AddTo: b += a, same box.
    out.accumulate.emplace_back(bytes, executor_time(be, rows, cols, K::AddTo, s));
    // Both again with the buffers far larger than the last-level cache.
    const int64_t cold_set = std::max<int64_t>(int64_t(64) << 20, 8 * l3_cache_bytes());
    out.copy_cold.emplace_back(bytes, executor_time(be, rows, cols, K::Extract, s, cold_set));
    out.accumulate_cold.emplace_back(bytes, executor_time(be, rows, cols, K::AddTo, s, cold_set));
    std::vector<float> param(static_cast<size_t>(e), 0.1f), grad(static_cast<size_t>(e), 0.01f), m(static_cast<size_t>(e)),
        v(static_cast<size_t>(e));
    sema::Shape shape{e};
    backend::TensorView pv{param.data(), sema::DType::F32, shape}, gv{grad.data(), sema::DType::F32, shape};
    backend::OptimizerState st;
    st.buffers = {backend::TensorView{m.data(), sema::DType::F32, shape}, backend::TensorView{v.data(), sema::DType::F32, shape}};
    int64_t step = 1;
    out.update.emplace_back(bytes, time_fastest([&] { be.adamw_update(pv, gv, st, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step++); }, s));
  }
  out.instr = executor_dispatch(be, s);
  for (Points* pts : {&out.copy, &out.accumulate, &out.update, &out.copy_cold, &out.accumulate_cold})
    *pts = planner::lower_envelope(*pts);
  return out;
}

// ---- in situ: the calibration program ----

// What the simulator misses inside a running program, measured: the
// calibration program (stdlib/profiles/calibration.nns: a stack of MLP
// blocks, Megatron split, which is none of the shipped examples) runs
// through `nns run --gpus R --trace` with every instruction traced on its
// own (NNS_TRACE_EVERY_INSTRUCTION=1), three times at each of three depths,
// and is lowered and costed with the profile just measured. Per
// instruction kind, the median over rank 0's instructions of (its mean
// time over steps 5-12 minus its predicted time) is that kind's extra cost
// at that program's length. Inside a program the other instructions have
// the caches: a kernel, a slice or a collect cost 0.3-1.3 us more in a
// 24,000-instruction step than in a 1,000-instruction one (2026-11-25),
// and a collective pays its peer's lateness and wake-up, which a
// micro-benchmark of one kind keeps hot.
struct InSitu {
  std::vector<std::string> configs;                      // calibration.nns's configs, shortest program first
  std::vector<double> instructions;                      // rank 0's program length per config
  std::map<std::string, std::vector<double>> extra;      // instr_name -> seconds per config
};

bool measure_in_situ(const Settings& s, const std::string& profile_json, InSitu& out, std::string& err) {
  planner::DeviceProfile prof;
  if (!planner::parse_profile(profile_json, prof, err)) return false;
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::string file;
  for (const std::string& dir : stdlib_dirs())
    if (std::filesystem::exists(dir + "/profiles/calibration.nns")) {
      file = dir + "/profiles/calibration.nns";
      break;
    }
  if (ec || self.empty() || file.empty()) {
    err = "cannot find this program or stdlib/profiles/calibration.nns";
    return false;
  }
  auto quote_sh = [](const std::string& v) {
    std::string q = "'";
    for (char c : v) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  out.configs = {"calibrate", "calibrate_mid", "calibrate_large"};
  std::vector<std::map<std::string, double>> per_run;
  for (const std::string& config : out.configs) {
    // Measured: rank 0's instructions, steps 5 on, over three runs (a run
    // takes a second or two; one alone caught whatever minute the shared
    // machine was having).
    std::map<int, std::vector<double>> measured;
    for (int repeat = 0; repeat < 3; ++repeat) {
      char dir_template[] = "/tmp/nns-profile-XXXXXX";
      if (!::mkdtemp(dir_template)) {
        err = "cannot make a temporary folder";
        return false;
      }
      const std::string dir = dir_template, trace = dir + "/calibration.json";
      const std::string cmd = "NNS_TRACE_EVERY_INSTRUCTION=1 NNS_THREADS=" + std::to_string(s.threads) + " " + quote_sh(self) + " run " +
                              quote_sh(file) + " --config " + config + " --plan megatron --gpus " + std::to_string(s.ranks) +
                              " --steps 12 --trace " + quote_sh(trace) + " > " + quote_sh(dir + "/log") + " 2>&1";
      const int rc = std::system(cmd.c_str());
      std::ifstream in(trace);
      std::stringstream text;
      text << in.rdbuf();
      std::filesystem::remove_all(dir, ec);
      planner::Json root;
      if (rc != 0 || !planner::parse_json(text.str(), root, err)) {
        err = "the calibration run (" + config + ") failed" + (err.empty() ? "" : ": " + err);
        return false;
      }
      const planner::Json* events = planner::field(root, "traceEvents");
      static const planner::Json kNoEvents = planner::Json::array();
      for (const planner::Json& e : events && events->is_array() ? *events : kNoEvents) {
        const planner::Json *ph = planner::field(e, "ph"), *pid = planner::field(e, "pid"), *dur = planner::field(e, "dur");
        const planner::Json* args = planner::field(e, "args");
        const planner::Json* step = args ? planner::field(*args, "step") : nullptr;
        const planner::Json* instr = args ? planner::field(*args, "instr") : nullptr;
        if (planner::string_or(ph) != "X" || !pid || planner::number_or(pid) != 0 || !dur || !step || planner::number_or(step) < 5 || !instr)
          continue;
        measured[static_cast<int>(planner::number_or(instr))].push_back(planner::number_or(dur) * 1e-6);
      }
    }
    // Predicted: the same program lowered and costed (the pipeline's
    // reports are not this command's output).
    Args a;
    a.positional = {file};
    a.config = config;
    a.plan = "megatron";
    a.gpus = std::to_string(s.ranks);
    Pipeline p;
    backend::LoweredPlan lp;
    std::ostringstream quiet;
    std::streambuf* was = std::cout.rdbuf(quiet.rdbuf());
    const int lrc = lower_for_simulation(a, p, lp);
    std::cout.rdbuf(was);
    if (lrc != kExitOk || lp.programs.empty() || lp.programs[0].rank != 0) {
      err = "cannot lower the calibration program (" + config + ")";
      return false;
    }
    const backend::RankProgram& prog = lp.programs[0];
    std::map<std::string, std::vector<double>> residuals;
    for (const auto& [i, ts] : measured) {
      if (i < 0 || static_cast<size_t>(i) >= prog.instrs.size() || ts.empty()) continue;
      // The mean over the steps, not the median: a step takes the sum of
      // its instructions, and over thousands of them the occasional
      // preempted or interrupted one adds its share to every step.
      double mean = 0;
      for (double t : ts) mean += t / static_cast<double>(ts.size());
      const backend::PInstr& in = prog.instrs[static_cast<size_t>(i)];
      const double residual = mean - planner::instr_time(prof, lp, prog, in);
      const std::string kind = backend::instr_name(in.kind);
      // A one-node kernel's also under its node's kind ("forward:add").
      residuals[kind].push_back(residual);
      const auto nodes = planner::kernel_node_times(prof, prog, in);
      if (nodes.size() == 1) residuals[kind + ":" + prog.local.node(nodes[0].first).kind].push_back(residual);
    }
    if (residuals.empty()) {
      err = "the calibration run's trace has no instruction events";
      return false;
    }
    // Per kind the median over its instructions: one instruction preempted
    // for milliseconds in one step is then one vote, not a share of every
    // instruction's extra (a per-kind mean made a profile measured in a
    // noisy minute predict resnet tiny 54% over, 2026-11-25).
    std::map<std::string, double> extra;
    for (auto& [kind, r] : residuals) {
      std::sort(r.begin(), r.end());
      extra[kind] = r[r.size() / 2];
    }
    per_run.push_back(extra);
    out.instructions.push_back(static_cast<double>(prog.instrs.size()));
  }
  // The kinds every config's program has.
  for (const auto& [kind, e0] : per_run[0]) {
    std::vector<double> v;
    for (const auto& run : per_run)
      if (auto it = run.find(kind); it != run.end()) v.push_back(it->second);
    if (v.size() == per_run.size()) out.extra[kind] = v;
  }
  return true;
}

// ---- the profile ----

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
std::string quote(const std::string& s) { return "\"" + s + "\""; }

// The 1-minute load average: a profile measured on a loaded machine says so.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  in >> first;
  return first.empty() ? "unknown" : first;
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return b;
}

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

std::string build_profile(const Settings& s, const CommPoints& comm, const std::vector<KernelPoint>& kernels, double chain,
                          const CopyPoints& copies, std::string& err) {
  const std::string who = "measured by nns profile on " + today() + ", " + std::to_string(s.ranks) + " ranks x " +
                          std::to_string(s.threads) + " thread(s), " + std::to_string(std::thread::hardware_concurrency()) +
                          " cores, load " + load_average();
  std::ostringstream j;
  auto field = [&](const std::string& k, const std::string& v, const std::string& source) {
    j << "  " << quote(k) << ": " << v << ",\n";
    if (!source.empty()) j << "  " << quote(k + "_source") << ": " << quote(source) << ",\n";
  };
  // Peak: the fastest linear (forward) measured.
  double peak = 0;
  for (const KernelPoint& k : kernels)
    if (k.work.op == "matmul") peak = std::max(peak, k.work.flops / k.seconds);
  // Per-kernel overhead: a node of the chain of small kernels of many kinds.
  planner::LineCost ew_line;
  ew_line.overhead = chain;
  if (!(peak > 0) || !(chain > 0)) {
    err = "kernel measurements gave no fit";
    return "";
  }
  planner::LineCost cp, acc, up, cp_cold, acc_cold;
  if (!planner::fit_line(copies.copy, cp) || !planner::fit_line(copies.accumulate, acc) || !planner::fit_line(copies.update, up) ||
      !planner::fit_line(copies.copy_cold, cp_cold) || !planner::fit_line(copies.accumulate_cold, acc_cold)) {
    err = "copy measurements gave no fit";
    return "";
  }
  std::map<std::string, planner::LinkCost> links;
  for (planner::Collective c : {planner::Collective::AllReduce, planner::Collective::AllGather, planner::Collective::ReduceScatter,
                                planner::Collective::AllToAll, planner::Collective::SendRecv}) {
    auto it = comm.by_name.find(planner::collective_name(c));
    if (it == comm.by_name.end() || !planner::fit_collective(c, c == planner::Collective::SendRecv ? 2 : s.ranks, it->second,
                                                             links[it->first])) {
      err = std::string("no fit for ") + planner::collective_name(c);
      return "";
    }
  }
  j << "{\n";
  field("name", quote("cpu"), "");
  field("kind", quote("cpu"), "");
  field("device", quote("this host's CPU backend (oneDNN kernels, nns Communicator)"), who);
  field("threads", std::to_string(s.threads), who + ": kernel threads per rank; the efficiency curves and overhead hold for this count");
  field("ranks", std::to_string(s.ranks), who);
  j << "  \"peak_flops\": {\"fp32\": " << num(peak) << "},\n";
  j << "  \"peak_flops_source\": " << quote(who + ": fastest linear forward (x [4d,d] w [d,d], d up to 512)") << ",\n";
  double mem = mem_total_bytes() / s.ranks;
  field("memory_bytes", num(mem), who + ": /proc/meminfo MemTotal / " + std::to_string(s.ranks) + " ranks");
  // A copy reads and writes its region: the memory stream is twice the copy's rate.
  field("memory_bandwidth", num(2 * cp.bandwidth), who + ": 2 x the region-copy bandwidth (read + write)");
  field("devices_per_node", std::to_string(s.ranks), who + ": all ranks on this host");
  const planner::LinkCost& sr = links["sendrecv"];
  field("intra_bandwidth", num(sr.bandwidth), who + ": send/recv between ranks 0 and 1 (half a ping-pong), alpha-beta fit");
  field("intra_latency", num(sr.latency), who + ": as intra_bandwidth");
  field("instr_overhead", num(copies.instr), who + ": a Free of an empty buffer through the plan executor (dispatch and bookkeeping)");
  field("kernel_overhead", num(ew_line.overhead),
        who + ": a node of a chain of 176 small nodes of 11 kinds and their backwards, run in turn (outputs allocated zeroed as the plan executor does)");
  auto line = [&](const char* key, const planner::LineCost& l, const Points& pts) {
    j << "  " << quote(key) << ": {\"overhead\": " << num(l.overhead) << ", \"bandwidth\": " << num(l.bandwidth) << ", \"points\": [";
    for (size_t i = 0; i < pts.size(); ++i) j << (i ? ", " : "") << "[" << num(pts[i].first) << ", " << num(pts[i].second) << "]";
    j << "]},\n";
  };
  line("copy", cp, copies.copy);
  j << "  \"copy_source\": " << quote(who + ": Extract instructions through the plan executor on distinct buffers (8 MiB in all; a new buffer, a strided region), points (bytes, seconds) and a Theil-Sen line") << ",\n";
  line("accumulate", acc, copies.accumulate);
  j << "  \"accumulate_source\": " << quote(who + ": AddTo instructions through the plan executor, points (bytes, seconds) and a Theil-Sen line") << ",\n";
  line("copy_cold", cp_cold, copies.copy_cold);
  j << "  \"copy_cold_source\": " << quote(who + ": as copy, over buffers 8 x the last-level cache in all (data from memory)") << ",\n";
  line("accumulate_cold", acc_cold, copies.accumulate_cold);
  j << "  \"accumulate_cold_source\": " << quote(who + ": as accumulate, over buffers 8 x the last-level cache in all") << ",\n";
  field("memory_bandwidth_cold", num(2 * cp_cold.bandwidth), who + ": 2 x the cold region-copy bandwidth (read + write)");
  field("cache_bytes", num(static_cast<double>(l3_cache_bytes()) / s.ranks),
        who + ": the last-level cache (sysfs) shared by " + std::to_string(s.ranks) + " ranks; a program whose buffers exceed it is costed with the cold lines");
  line("update", up, copies.update);
  j << "  \"update_source\": " << quote(who + ": Backend::adamw_update, points (bytes, seconds) and a Theil-Sen line") << ",\n";
  j << "  \"collectives\": {\n    \"ranks\": " << s.ranks;
  bool first = true;
  for (const auto& [name, l] : links) {
    j << ",\n    " << quote(name) << ": {\"latency\": " << num(l.latency) << ", \"bandwidth\": " << num(l.bandwidth);
    // The measured points too, for groups of the measured size (send/recv: any pair).
    const Points& pts = comm.by_name.at(name);
    j << ", \"points\": [";
    for (size_t i = 0; i < pts.size(); ++i) j << (i ? ", " : "") << "[" << num(pts[i].first) << ", " << num(pts[i].second) << "]";
    j << "]}";
  }
  j << "\n  },\n";
  j << "  \"collectives_source\": "
    << quote(who + ": Communicator collectives on all ranks (sendrecv: ranks 0-1), 4 B to 4 MiB per member, the median of repetitions issued back to back per size (points, used for groups of `ranks` devices) and a Theil-Sen alpha-beta fit per algorithm (other group sizes)") << ",\n";
  // Efficiency curves per class, against the peak, above each curve's own
  // fixed cost: its cheapest kernel's time (at most the chain's per-node
  // cost). One fixed cost for every kind put a reshape's at a linear's
  // (oneDNN's primitive lookup), 3-4x its own.
  std::map<std::string, Points> curves;
  for (const KernelPoint& k : kernels) {
    curves[k.work.op].emplace_back(k.work.flops, k.seconds);
    curves["op:" + k.kind].emplace_back(k.work.flops, k.seconds);
  }
  std::map<std::string, double> overheads;
  for (const auto& [name, pts] : curves) {
    double least = chain;
    for (const auto& pt : pts) least = std::min(least, pt.second);
    overheads[name] = least;
  }
  j << "  \"efficiency\": {";
  first = true;
  for (const auto& [name, pts] : curves) {
    j << (first ? "\n" : ",\n") << "    " << quote(name) << ": [";
    bool f2 = true;
    for (const auto& [flops, eff] : planner::fit_efficiency(pts, peak, overheads[name])) {
      j << (f2 ? "" : ", ") << "[" << num(flops) << ", " << num(eff) << "]";
      f2 = false;
    }
    j << "]";
    first = false;
  }
  j << "\n  },\n";
  j << "  \"kernel_overheads\": {";
  first = true;
  for (const auto& [name, o] : overheads) {
    j << (first ? "" : ", ") << quote(name) << ": " << num(o);
    first = false;
  }
  j << "},\n";
  j << "  \"kernel_overheads_source\": " << quote(who + ": per efficiency curve, its cheapest kernel's median time run in turn (at most kernel_overhead)") << ",\n";
  j << "  \"efficiency_source\": "
    << quote(who + ": run_node per class (linear, batched matmul, softmax, layer_norm, add/gelu/mul_scalar/mul/sub/relu/sigmoid; forward and backward) and per measured kind, "
                   "eff = flops / (peak * (t - the curve's kernel_overheads entry))")
    << "\n}\n";
  return j.str();
}

std::string summary(const CommPoints& comm, const std::vector<KernelPoint>& kernels, const CopyPoints& copies) {
  std::ostringstream o;
  for (const auto& [name, pts] : {std::make_pair("copy", &copies.copy), std::make_pair("accumulate", &copies.accumulate),
                                  std::make_pair("update", &copies.update)}) {
    o << "  " << name << ":";
    for (const auto& [b, t] : *pts) o << " " << num(b) << "B=" << num(t * 1e6) << "us";
    o << "\n";
  }
  o << "  instruction: " << num(copies.instr * 1e6) << "us\n";
  for (const auto& [name, pts] : comm.by_name) {
    o << "  " << name << ":";
    for (const auto& [b, t] : pts) o << " " << num(b) << "B=" << num(t * 1e6) << "us";
    o << "\n";
  }
  std::map<std::string, int> n;
  for (const KernelPoint& k : kernels) ++n[k.work.op];
  o << "  kernels:";
  for (const auto& [cls, c] : n) o << " " << cls << " x" << c;
  o << "\n";
  return o.str();
}

}  // namespace

int cmd_profile(const Args& a) {
  if (!a.positional.empty()) return usage_error("profile takes no FILE (nns profile --out FILE [--ranks R] [--threads T] [--quick])");
  if (a.output.empty()) return usage_error("profile needs --out FILE");
  if (!a.plan.empty() || !a.gpus.empty() || !a.config.empty() || !a.device.empty() || !a.steps.empty())
    return usage_error("profile takes only --out, --ranks, --threads and --quick");
  Settings s;
  s.quick = a.quick;
  long long v = 0;
  if (!a.ranks.empty()) {
    if (!parse_int(a.ranks, v) || v < 2 || v > 64) return usage_error("--ranks must be an integer from 2 to 64 (collectives need two ranks)");
    s.ranks = static_cast<int>(v);
  }
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.threads = std::max(1, cores / s.ranks);
  if (!a.threads.empty()) {
    if (!parse_int(a.threads, v) || v < 1 || v > 1024) return usage_error("--threads must be a positive integer");
    s.threads = static_cast<int>(v);
  }
  const std::string tmp = a.output + ".tmp";
  {
    std::ofstream probe(tmp);  // a path we cannot write is the user's to fix: before minutes of measuring
    if (!probe) {
      std::cerr << "nns: error: cannot write '" << a.output << "'\n";
      return kExitUsage;
    }
  }
  std::remove(tmp.c_str());
  std::printf("nns profile: %d rank(s) x %d thread(s)%s, writing %s\n", s.ranks, s.threads, s.quick ? ", quick" : "", a.output.c_str());
  std::fflush(stdout);
  int rc = backend::launch_local_ranks(s.ranks, [&](int rank) -> int {
    backend::Communicator comm(backend::CommConfig::from_env());
    auto be = backend::make_cpu_backend();
    be->set_threads(s.threads);
    CommPoints cp = measure_collectives(comm, s);
    comm.barrier();
    std::vector<KernelPoint> kp = measure_kernels(*be, s);
    double chain = measure_kernel_overhead(*be, s);
    comm.barrier();
    CopyPoints copies = measure_instructions(*be, s);
    comm.barrier();
    if (rank != 0) return 0;
    std::string err;
    std::string json = build_profile(s, cp, kp, chain, copies, err);
    if (json.empty()) {
      std::cerr << "nns: error: " << err << "\n";
      return kExitRuntime;
    }
    std::ofstream out(tmp);
    out << json;
    if (!out.flush()) {
      std::cerr << "nns: error: cannot write '" << tmp << "'\n";
      return kExitRuntime;
    }
    std::cout << summary(cp, kp, copies);
    std::cout.flush();
    return 0;
  });
  if (rc != 0) {
    std::remove(tmp.c_str());
    return rc;
  }
  // What was written must be a profile simulate reads.
  planner::DeviceProfile prof;
  std::string err;
  std::ifstream written(tmp);
  std::stringstream text;
  text << written.rdbuf();
  written.close();
  // The calibration runs (their own ranks, after the measuring ones are gone).
  {
    InSitu situ;
    if (!measure_in_situ(s, text.str(), situ, err)) {
      std::remove(tmp.c_str());
      std::cerr << "nns: error: " << err << "\n";
      return kExitRuntime;
    }
    std::string json = text.str();
    json = json.substr(0, json.rfind('}'));
    while (!json.empty() && (json.back() == '\n' || json.back() == ' ')) json.pop_back();
    std::ostringstream add;
    auto join = [](const std::vector<std::string>& v) {
      std::string t;
      for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + v[i];
      return t;
    };
    auto list = [&](const std::vector<double>& v) {
      std::string t = "[";
      for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + num(v[i]);
      return t + "]";
    };
    add << ",\n  \"in_situ\": {\"instructions\": " << list(situ.instructions) << ", \"extra\": {";
    bool first = true;
    for (const auto& [kind, v] : situ.extra) {
      add << (first ? "" : ", ") << quote(kind) << ": " << list(v);
      first = false;
    }
    add << "}},\n  \"in_situ_source\": "
        << quote("measured by nns profile on " + today() + ": stdlib/profiles/calibration.nns (plan megatron, configs " + join(situ.configs) + ") run by nns run --gpus " +
                 std::to_string(s.ranks) + " --trace with every instruction traced; per instruction kind, the median over rank 0's instructions of "
                 "(its mean over steps 5-12 of three runs - this profile's cost without in_situ); interpolated in log(program instructions)")
        << "\n}\n";
    json += add.str();
    std::ofstream out(tmp);
    out << json;
    if (!out.flush()) {
      std::cerr << "nns: error: cannot write '" << tmp << "'\n";
      return kExitRuntime;
    }
    text.str(json);
  }
  if (!planner::parse_profile(text.str(), prof, err)) {
    std::cerr << "nns: internal error: the measured profile does not load: " << err << "\n";
    return kExitRuntime;
  }
  if (std::rename(tmp.c_str(), a.output.c_str()) != 0) {
    std::cerr << "nns: error: cannot write '" << a.output << "'\n";
    return kExitRuntime;
  }
  std::printf("wrote %s: fp32 peak %.3g GFLOP/s, kernel overhead %.3g us, copy %.3g GB/s, send/recv %.3g us + %.3g GB/s\n",
              a.output.c_str(), prof.peak_flops["fp32"] / 1e9, prof.kernel_overhead * 1e6, prof.copy.bandwidth / 1e9,
              prof.intra.latency * 1e6, prof.intra.bandwidth / 1e9);
  return kExitOk;
}

}  // namespace nns::driver
