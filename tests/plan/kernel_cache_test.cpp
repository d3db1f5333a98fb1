// The kernel cache (backend/lowering/kernel_cache.h): a shipped plan lowered
// with its kernel bodies copied from the first elaboration of each key gives
// the programs the lowering that elaborates every sub-op gives, field by
// field: the --emit=program text, and every local tensor, node and kernel
// field (ids, names, locations, attrs, release lists). The cache must also
// be used: fewer elaborations than kernels where blocks repeat.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "backend/lowering/kernel_cache.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/memory_replay.h"
#include "tests/test_util.h"

using namespace nns;

namespace {

struct Cached : test::PlannedElaboration {
  int elaborations = 0;
  Cached(const std::string& file, const std::string& config, const std::string& plan_name, int64_t devices)
      : PlannedElaboration(NNS_SOURCE_DIR, file, config, plan_name, devices) {}
  backend::LoweredPlan lower(bool cache, bool shared = false) {
    backend::LowerOptions o;
    o.shared_kernel_bodies = shared;
    auto elaborate = elaborator();
    o.elaborate = [this, elaborate](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                                    const std::map<std::string, int64_t>& div, sema::Graph& local) {
      ++elaborations;
      return elaborate(node, ins, outs, div, local);
    };
    o.elaboration_key = elaboration_key();
    o.kernel_cache = cache;
    elaborations = 0;
    return backend::lower_plan(interp->graph(), plan, *interp->train(), o);
  }
};

size_t kernel_count(const backend::LoweredPlan& lp) {
  size_t n = 0;
  for (const backend::RankProgram& p : lp.programs) n += p.kernels.size();
  return n;
}

}  // namespace

TEST_CASE("kernel cache: shipped plans lower to the same programs with and without it", "[kernel_cache]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t devices;
    bool repeats;  // blocks repeat: the cache must save elaborations
  };
  for (Case c :
       {Case{"examples/gpt.nns", "tiny", "megatron", 2, true},
        Case{"examples/gpt.nns", "tiny_pipe", "pipeline", 2, true},
        Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2, true},
        Case{"examples/swin.nns", "tiny", "coshard", 2, true}, Case{"examples/alphafold2.nns", "tiny", "dap", 2, true},
        Case{"examples/t5.nns", "tiny", "interlaced", 2, true}, Case{"examples/moe.nns", "tiny", "ep", 2, true},
        Case{"examples/moe.nns", "tiny", "ep_recompute", 4, true},
        Case{"examples/llama.nns", "tiny", "megatron", 2, true}}) {
    INFO(c.file << " " << c.config << " " << c.plan << " on " << c.devices);
    Cached l(c.file, c.config, c.plan, c.devices);
    const backend::LoweredPlan every = l.lower(false);
    const int without = l.elaborations;
    const backend::LoweredPlan cached = l.lower(true);
    const int with = l.elaborations;
    CHECK(without == static_cast<int>(kernel_count(every)));
    if (c.repeats) CHECK(with < without);
    CHECK(with > 0);
    CHECK(cached.dump(l.interp->graph()) == every.dump(l.interp->graph()));
    REQUIRE(cached.programs.size() == every.programs.size());
    for (size_t r = 0; r < every.programs.size(); ++r) {
      INFO("rank " << r);
      const std::string a = backend::kernel_bodies_text(every.programs[r]);
      const std::string b = backend::kernel_bodies_text(cached.programs[r]);
      if (a != b) {  // the first line that differs, not two whole texts
        size_t at = 0;
        while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
        size_t line = a.rfind('\n', at);
        line = line == std::string::npos ? 0 : line + 1;
        FAIL_CHECK("without the cache: " << a.substr(line, a.find('\n', at) - line)
                                         << "\nwith the cache:    " << b.substr(line, b.find('\n', at) - line));
      }
    }
  }
}

// LowerOptions::shared_kernel_bodies (the capacity check's lowering): a
// repeated kernel reuses its first kernel's local tensors, and the memory
// replay, which keys them by kernel, finds the peak of the copying
// lowering: the same bytes at the same instruction and node, made of the
// same parts, fp32 and under bf16 storage.
TEST_CASE("kernel cache: shared bodies replay to the peaks of copied ones", "[kernel_cache][memory]") {
  struct Case {
    const char* file;
    const char* config;
    const char* plan;
    int64_t devices;
  };
  for (Case c :
       {Case{"examples/gpt.nns", "tiny", "megatron", 2}, Case{"examples/gpt.nns", "tiny_pipe", "zero_bubble", 2},
        Case{"examples/swin.nns", "tiny", "coshard", 2}, Case{"examples/alphafold2.nns", "tiny", "dap", 2},
        Case{"examples/t5.nns", "tiny", "interlaced", 2}, Case{"examples/moe.nns", "tiny", "ep_recompute", 4},
        Case{"examples/llama.nns", "tiny", "megatron", 2}}) {
    INFO(c.file << " " << c.config << " " << c.plan << " on " << c.devices);
    Cached l(c.file, c.config, c.plan, c.devices);
    const backend::LoweredPlan copied = l.lower(true);
    const backend::LoweredPlan shared = l.lower(true, true);
    REQUIRE(shared.programs.size() == copied.programs.size());
    size_t fewer = 0;
    for (size_t r = 0; r < copied.programs.size(); ++r) {
      const backend::RankProgram& a = copied.programs[r];
      const backend::RankProgram& b = shared.programs[r];
      INFO("rank " << r);
      REQUIRE(b.kernels.size() == a.kernels.size());
      CHECK(b.instrs.size() == a.instrs.size());
      CHECK(b.local.tensors().size() <= a.local.tensors().size());
      fewer += a.local.tensors().size() - b.local.tensors().size();
      for (bool bf16 : {false, true})
        for (int bpe : {4, 2}) {
          INFO("bf16 storage " << bf16 << ", " << bpe << " bytes an element");
          const backend::MemoryPeak x = backend::peak_memory(a, bpe, 2, bf16);
          const backend::MemoryPeak y = backend::peak_memory(b, bpe, 2, bf16);
          CHECK(y.peak == x.peak);
          CHECK(y.at_instr == x.at_instr);
          CHECK(y.persistent == x.persistent);
          CHECK(y.buffers_at_peak == x.buffers_at_peak);
          CHECK(y.kernels_at_peak == x.kernels_at_peak);
          CHECK(y.live_buffers == x.live_buffers);
          CHECK(y.kernel_bytes_at_peak == x.kernel_bytes_at_peak);
          CHECK(x.kernels_at_peak > 0);
        }
    }
    CHECK(fewer > 0);  // the blocks repeat: some body is shared, not copied
  }
}

TEST_CASE("kernel cache: the body text sees what the cache rewrites", "[kernel_cache]") {
  // The comparison above can fail: a name, a location or an attr changed in
  // a copy shows in the text.
  Cached l("examples/alphafold2.nns", "tiny", "dap", 2);
  backend::LoweredPlan lp = l.lower(true);
  backend::RankProgram& p = lp.programs[0];
  REQUIRE(p.local.nodes().size() > 2);
  const std::string before = backend::kernel_bodies_text(p);
  sema::OpNode& n = p.local.node(static_cast<int>(p.local.nodes().size()) - 1);
  n.name += "x";
  CHECK(backend::kernel_bodies_text(p) != before);
  n.name.pop_back();
  n.loc.line += 1;
  CHECK(backend::kernel_bodies_text(p) != before);
  n.loc.line -= 1;
  n.attrs["element_offset"] = int64_t{7};
  CHECK(backend::kernel_bodies_text(p) != before);
  n.attrs.erase("element_offset");
  CHECK(backend::kernel_bodies_text(p) == before);
}

TEST_CASE("kernel cache: names shift only their own tensor ids", "[kernel_cache]") {
  using backend::detail::shift_name;
  CHECK(shift_name("t17", 10, 10, 100) == "t117");
  CHECK(shift_name("dy.t17", 10, 10, 100) == "dy.t117");
  CHECK(shift_name("grad_12", 10, 10, 5) == "grad_17");
  CHECK(shift_name("grad_sum.grad_12", 10, 10, 5) == "grad_sum.grad_17");
  CHECK(shift_name("fill.t12", 10, 10, 5) == "fill.t17");
  // Outside the template's tensors, or not an id: unchanged.
  CHECK(shift_name("t9", 10, 10, 5) == "t9");
  CHECK(shift_name("t20", 10, 10, 5) == "t20");
  CHECK(shift_name("tanh#0.t12x", 10, 10, 5) == "tanh#0.t12x");
  CHECK(shift_name("linear#0.matmul#1.backward", 10, 10, 5) == "linear#0.matmul#1.backward");
  CHECK(shift_name("in0", 10, 10, 5) == "in0");
  CHECK(shift_name("", 10, 10, 5).empty());
  CHECK(shift_name("a..t12.", 10, 10, 5) == "a..t17.");
}

TEST_CASE("kernel cache: the elaboration key tells apart what the body reads", "[kernel_cache]") {
  Cached l("examples/gpt.nns", "tiny", "megatron", 2);
  const sema::Graph& g = l.interp->graph();
  // Two linears of the same shapes in different blocks: one key; another
  // slice shape or divisor: another key.
  std::vector<int> linears;
  for (int n : g.top_level_nodes())
    if (g.node(n).kind == "linear") linears.push_back(n);
  REQUIRE(linears.size() >= 2);
  auto shapes = [&](int n, bool outputs) {
    std::vector<sema::Shape> v;
    for (int t : outputs ? g.node(n).outputs : g.node(n).inputs) v.push_back(g.tensor(t).shape);
    return v;
  };
  const int a = linears.front();
  int same = -1;
  for (int n : linears)
    if (n != a && shapes(n, false) == shapes(a, false)) same = n;
  REQUIRE(same >= 0);
  const std::string ka = l.interp->instantiation_key(a, shapes(a, false), shapes(a, true), {});
  CHECK(ka == l.interp->instantiation_key(same, shapes(same, false), shapes(same, true), {}));
  std::vector<sema::Shape> half = shapes(a, false);
  half[0][0] /= 2;
  std::vector<sema::Shape> half_out = shapes(a, true);
  half_out[0][0] /= 2;
  CHECK(ka != l.interp->instantiation_key(a, half, half_out, {}));
  // A key throws what the elaboration would: a wrong operand count.
  CHECK_THROWS_WITH(l.interp->instantiation_key(a, {}, shapes(a, true), {}), Catch::Contains("slice shapes for"));
}
