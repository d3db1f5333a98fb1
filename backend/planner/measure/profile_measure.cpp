// The measuring half of nns profile (profile_measure.h): collectives over
// the runtime's Communicator, kernels through the Backend's run_node and
// instructions through the real PlanExecutor, on every rank at once.
// This file is library nns_profile_measure, not nns_planner: it needs the
// runtime (kernels, communicator), which the planner must not use
// (backend/CMakeLists.txt); what it measures goes to profile_build.h.
//
// Copy timings keep the fastest of several batches (other processes only
// add time); collectives keep the median of calls issued back to back, as
// a step issues them; kernels the median of their runs in turn
// (time_in_turn): each kernel run with the other kernels of its size as a
// step runs them, each output a fresh zeroed block from the Backend's
// allocator as the plan executor gives it (plan_executor.cpp: run_local).
// Each series is lowered to its envelope (time does not fall as size grows).
#include "backend/planner/measure/profile_measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "backend/lowering/geometry.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/program_cost.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/launcher.h"
#include "backend/runtime/plan_executor.h"

namespace nns::planner {

namespace {

using Clock = std::chrono::steady_clock;
using Points = MeasuredPoints;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seconds of one call of `f`: the fastest of `reps` batches long enough to
// read the clock well (about `batch_s`). Local work is deterministic: other
// processes and preemption only ever add time, so the fastest batch is the
// machine's own speed (a median on a loaded machine measures the load).
double time_fastest(const std::function<void()>& f, const ProfileSettings& s) {
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

// Every rank calls it; each collective is timed on every rank, rank 0's
// fastest kept. Sizes are floats per member.
CommPoints measure_collectives(backend::Communicator& comm, const ProfileSettings& s) {
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
  for (auto& [name, pts] : out.by_name) pts = lower_envelope(pts);
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

// The kernels to measure, in the order a program would meet them.
struct KernelQueue {
  std::deque<KernelBench> benches;
  std::vector<std::pair<KernelBench*, int>> nodes;  // (its bench, node id)
  KernelBench& bench() { return benches.emplace_back(); }
};

void bench_node(backend::Backend&, KernelBench& kb, int id, const ProfileSettings&, KernelQueue& q) { q.nodes.emplace_back(&kb, id); }

// Times every queued kernel in turn, the way a training step meets them:
// each run follows a different kernel (whose code and data then fill the
// caches), its operands where earlier kernels left them and its outputs
// fresh blocks from the allocator; a kernel repeated on its own, its
// operands and code hot, ran 1.3-3x faster than the same kernel inside a
// plan's step (nns run --trace against this profile's earlier isolated
// timings, 2026-11-25). Passes over the whole list repeat; each kernel
// keeps the median of its runs, as a step's time is its runs' median.
void time_in_turn(backend::Backend& be, KernelQueue& q, const ProfileSettings& s, std::vector<KernelPoint>& out) {
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
    p.work = node_work(kb.g, kb.g.node(id));
    p.seconds = ts[i][ts[i].size() / 2];
    out.push_back(p);
  }
}

// Seconds per node of a chain of small nodes of many kinds, run in turn as
// a program runs them: the fixed cost of a kernel when the one before it
// was another kernel (the executor's dispatch, output allocation, the
// kernel's setup, with the caches holding someone else's code and data) —
// what a micro-benchmark repeating one kernel does not see.
double measure_kernel_overhead(backend::Backend& be, const ProfileSettings& s) {
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

std::vector<KernelPoint> measure_kernels(backend::Backend& be, const ProfileSettings& s) {
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
  for (auto& [kind, pts] : by_kind) pts = lower_envelope(pts);
  for (KernelPoint& k : out)
    for (const auto& [flops, t] : by_kind[k.kind])
      if (flops == k.work.flops) k.seconds = t;
  return out;
}

// ---- instructions of the plan executor ----

// Seconds per repetition of `body` run `reps` times as one program through
// the real PlanExecutor (one rank, no communicator): what an instruction
// costs there, dispatch, buffer allocation and bookkeeping included.
// Buffers: b0 the source [rows, 2 cols], b1 [rows, cols] (the left half of
// b0's box), b2 [rows, cols] (the same box as b1).
double executor_time(backend::Backend& be, int64_t rows, int64_t cols, backend::PInstr::Kind kind, const ProfileSettings& s,
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
double executor_dispatch(backend::Backend& be, const ProfileSettings& s) {
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

CopyPoints measure_instructions(backend::Backend& be, const ProfileSettings& s) {
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
    *pts = lower_envelope(*pts);
  return out;
}
}  // namespace

int measure_on_ranks(const ProfileSettings& s, const std::string& out_path) {
  return backend::launch_local_ranks(s.ranks, [&](int rank) -> int {
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
      return 70;
    }
    std::ofstream out(out_path);
    out << json;
    if (!out.flush()) {
      std::cerr << "nns: error: cannot write '" << out_path << "'\n";
      return 70;
    }
    std::cout << measurement_summary(cp, kp, copies);
    std::cout.flush();
    return 0;
  });
}

}  // namespace nns::planner
