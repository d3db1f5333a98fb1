// The plan search against brute force (tests/planner, issue 12 part 4):
// the unit DP against enumerating every combination of op decisions of a
// unit, and the whole search against enumerating every combination per
// unit and every stage partition, on a small model.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "backend/planner/cost_model.h"
#include "backend/planner/search.h"
#include "backend/planner/search_internal.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"
#include "semantics/interpreter.h"

using namespace nns::planner;

namespace {

const char* kModel = R"(
config c {
  batch = 8
  dim = 16
  hidden = 32
  layers = 3
  mb = 2
}
model Block(d, h) {
  param w1: [h, d] = normal(0.02)
  param w2: [d, h] = normal(0.02)
  fn forward(x) {
    return x + linear(gelu(linear(x, w1)), w2)
  }
}
model Net(d, h, n) {
  blocks = [Block(d, h) for i in 0..n]
  fn forward(x) {
    for b in blocks {
      x = b(x)
    }
    return x
  }
}
train {
  model = Net(cfg.dim, cfg.hidden, cfg.layers)
  input x: [cfg.batch, cfg.dim] = randn()
  input y: [cfg.batch, cfg.dim] = randn()
  loss = mse(model(x), y)
  optimizer = adamw(lr = 0.01)
  data = synthetic(seed = 1)
  steps = 2
  micro_batches = cfg.mb
}
plan table(ngpus) {
  split_only(select("*linear#*"), ["batch", "n"], name = "linears: batch or output features")
  replicate(unassigned(), 0..ngpus)
}
)";

struct Loaded {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags{sources};
  std::unique_ptr<nns::sema::Interpreter> interp;
  SearchModel model;
};

// The same blocks on [batch, tokens, features] activations: their dim 1
// can carry a sequence-parallel residual stream between the units.
std::string tokens_model() {
  std::string s = kModel;
  const std::string from = "input x: [cfg.batch, cfg.dim]", y = "input y: [cfg.batch, cfg.dim]";
  s.replace(s.find(from), from.size(), "input x: [cfg.batch, 4, cfg.dim]");
  s.replace(s.find(y), y.size(), "input y: [cfg.batch, 4, cfg.dim]");
  return s;
}

void load(Loaded& l, const std::string& text = kModel) {
  std::string path = "/tmp/nns_search_test_" + std::to_string(::getpid()) + ".nns";
  std::ofstream(path) << text;
  nns::sema::EvalOptions eo;
  eo.stdlib_dirs = {NNS_STDLIB_DIR};
  l.interp = std::make_unique<nns::sema::Interpreter>(l.sources, l.diags, eo);
  REQUIRE(l.interp->parse(path));
  REQUIRE(l.interp->evaluate());
  std::remove(path.c_str());
  l.model = build_search_model(l.interp->graph(), l.interp->new_plan("t", 4));
}

DeviceProfile toy() {
  DeviceProfile p;
  std::string err;
  // Slow links make the layouts matter: 1 TFLOP/s, 100 GB/s memory, 2 per node.
  REQUIRE(parse_profile(R"({"name": "toy", "peak_flops": {"fp32": 1e9}, "memory_bytes": 1e9, "memory_bandwidth": 1e9,
    "devices_per_node": 2, "intra_bandwidth": 1e9, "intra_latency": 1e-7, "inter_bandwidth": 1e8, "inter_latency": 1e-6})",
                        p, err));
  return p;
}

}  // namespace

TEST_CASE("search model: units by layer, identical layers share a signature") {
  Loaded l;
  load(l);
  const SearchModel& m = l.model;
  // blocks.0, blocks.1, blocks.2, then the loss.
  REQUIRE(m.units.size() == 4);
  CHECK(m.units[0].key == "blocks.0.");
  CHECK(m.units[0].select == "blocks.0.*");
  // blocks.0 reads the data input (kept in memory), the others an activation.
  CHECK(m.units[0].signature != m.units[1].signature);
  CHECK(m.units[1].signature == m.units[2].signature);
  CHECK(m.units[3].signature != m.units[0].signature);
  CHECK(m.graph_batch == 8);
  // linear#0 of a block: batch (*0), contraction k and output features n.
  const SearchOp& fc1 = m.ops[m.units[0].ops[0]];
  CHECK(fc1.kind == "linear");
  CHECK(fc1.batch_ok);
  CHECK(fc1.choices.size() == 3);
}

TEST_CASE("unit DP equals brute force over every combination of op decisions") {
  Loaded l;
  load(l);
  SearchOptions o;
  o.profile = toy();
  o.global_batch = 16;
  int compared = 0;
  for (int unit : {0, 3})
    for (int tp : {1, 2, 4})
      for (bool rc : {false, true})
        for (double lambda : {0.0, 1e-9, 1e-6}) {
          std::vector<OpDecision> dp_out, bf_out;
          double v_dp = solve_unit(l.model, unit, tp, 1, 0.25, rc, lambda, lambda, o, false, dp_out);
          double v_bf = solve_unit(l.model, unit, tp, 1, 0.25, rc, lambda, lambda, o, true, bf_out);
          INFO("unit " << unit << " tp " << tp << " rc " << rc << " lambda " << lambda);
          REQUIRE(std::isfinite(v_bf));
          CHECK(v_dp == Approx(v_bf).epsilon(1e-12));
          // The DP's decisions cost what it says.
          CHECK(unit_objective(l.model, unit, dp_out, tp, 1, 0.25, rc, lambda, lambda, o) ==
                Approx(v_dp).epsilon(1e-12));
          ++compared;
        }
  CHECK(compared == 36);
}

TEST_CASE(
    "sequence-parallel boundaries: the unit DP equals brute force, and a replicated unit pays to gather its input") {
  Loaded l;
  load(l, tokens_model());
  const SearchModel& m = l.model;
  // The block's input (the previous block's output) has 4 tokens in dim 1.
  const SearchOp& fc1 = m.ops[m.units[1].ops[0]];
  REQUIRE(m.seq_len[fc1.in_tensor[0]] == 4);
  SearchOptions o;
  o.profile = toy();
  o.global_batch = 16;
  int compared = 0;
  for (int tp : {2, 4})
    for (bool rc : {false, true})
      for (double lambda : {0.0, 1e-9, 1e-6}) {
        std::vector<OpDecision> dp_out, bf_out;
        double v_dp = solve_unit(l.model, 1, tp, 1, 0.25, rc, lambda, lambda, o, false, dp_out, nullptr, true);
        double v_bf = solve_unit(l.model, 1, tp, 1, 0.25, rc, lambda, lambda, o, true, bf_out, nullptr, true);
        INFO("tp " << tp << " rc " << rc << " lambda " << lambda);
        REQUIRE(std::isfinite(v_bf));
        CHECK(v_dp == Approx(v_bf).epsilon(1e-12));
        CHECK(unit_objective(l.model, 1, dp_out, tp, 1, 0.25, rc, lambda, lambda, o, true) ==
              Approx(v_dp).epsilon(1e-12));
        // Every op replicated: under a sequence-parallel boundary the unit
        // gathers its input and scatters its output, which it does not
        // under a replicated one.
        std::vector<OpDecision> repl(m.units[1].ops.size());
        CHECK(unit_objective(l.model, 1, repl, tp, 1, 0.25, rc, lambda, lambda, o, true) >
              unit_objective(l.model, 1, repl, tp, 1, 0.25, rc, lambda, lambda, o, false));
        ++compared;
      }
  CHECK(compared == 12);
  // The whole search against brute force on this model too (sequence
  // parallel candidates included).
  SearchOptions s = o;
  s.gpus = 4;
  s.memory_cap = 1e12;
  SearchOptions bf = s;
  bf.exhaustive = true;
  SearchResult fast = search_plans(l.model, s);
  SearchResult brute = search_plans(l.model, bf);
  REQUIRE_FALSE(fast.best.empty());
  REQUIRE_FALSE(brute.best.empty());
  INFO("fast " << fast.best[0].describe() << " brute " << brute.best[0].describe());
  CHECK(fast.best[0].step_time == Approx(brute.best[0].step_time).epsilon(1e-9));
}

TEST_CASE("search equals brute force (every op combination, every stage partition) on 4 devices") {
  Loaded l;
  load(l);
  SearchOptions o;
  o.gpus = 4;
  o.profile = toy();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  SearchOptions bf = o;
  bf.exhaustive = true;
  SearchResult fast = search_plans(l.model, o);
  SearchResult brute = search_plans(l.model, bf);
  REQUIRE_FALSE(fast.best.empty());
  REQUIRE_FALSE(brute.best.empty());
  INFO("fast " << fast.best[0].describe() << " " << fast.best[0].step_time << " brute " << brute.best[0].describe()
               << " " << brute.best[0].step_time);
  CHECK(fast.best[0].step_time == Approx(brute.best[0].step_time).epsilon(1e-9));
  CHECK(brute.evaluated >= fast.evaluated / 8);
}

TEST_CASE("search under a memory bound: the plan found fits, and a tighter bound never speeds it up") {
  Loaded l;
  load(l);
  SearchOptions o;
  o.gpus = 4;
  o.profile = toy();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  SearchResult loose = search_plans(l.model, o);
  REQUIRE_FALSE(loose.best.empty());
  // A bound between the leanest runner-up and the best: the best no longer
  // fits, the leanest does.
  double leanest = loose.best[0].memory;
  for (const Candidate& c : loose.best) leanest = std::min(leanest, c.memory);
  REQUIRE(leanest < loose.best[0].memory);
  o.memory_cap = (leanest + loose.best[0].memory) / 2 / o.memory_margin;
  SearchResult tight = search_plans(l.model, o);
  REQUIRE_FALSE(tight.best.empty());
  CHECK(tight.best[0].memory <= o.memory_cap * o.memory_margin);
  CHECK(tight.best[0].step_time >= loose.best[0].step_time);
}

TEST_CASE("plan text: rules, stages and the directives of the candidate") {
  Loaded l;
  load(l);
  SearchOptions o;
  o.gpus = 4;
  o.profile = toy();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  SearchResult r = search_plans(l.model, o);
  REQUIRE_FALSE(r.best.empty());
  Candidate c = r.best[0];
  std::string text = plan_text(l.model, c, "found");
  CHECK(text.find("plan found(ngpus) {") != std::string::npos);
  CHECK(text.find("let tp = " + std::to_string(c.tp)) != std::string::npos);
  CHECK((text.find("schedule(\"1f1b\", stages)") != std::string::npos) == (c.pp > 1));
  // zero1 over plan replicas is the distributed optimizer, a flag of
  // nns simulate and check, not a directive of the plan.
  CHECK((text.find("zero1()") != std::string::npos) == (c.zero1 && !c.replicas));
  CHECK(text.find("let dp = " + std::to_string(c.replicas ? 1 : c.dp)) != std::string::npos);
}

TEST_CASE("data parallelism as plan replicas: dp 1 in the plan, --plan-gpus, zero1 as the distributed optimizer") {
  Loaded l;
  load(l);
  SearchOptions o;
  o.gpus = 4;
  o.profile = toy();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  o.top = 100;
  std::string why;
  CHECK(dp_as_replicas(l.model, o, 2, &why));
  CHECK(why.empty());
  CHECK_FALSE(dp_as_replicas(l.model, o, 1, &why));
  SearchResult r = search_plans(l.model, o);
  const Candidate* z1 = nullptr;
  for (const Candidate& c : r.best) {
    CHECK(c.replicas == (c.dp > 1));
    CHECK(c.plan_devices() == (c.dp > 1 ? c.pp * c.tp : 4));
    if (c.dp == 2 && c.zero1 && !z1) z1 = &c;
  }
  REQUIRE(z1 != nullptr);
  std::string text = plan_text(l.model, *z1, "found");
  INFO(text);
  CHECK(text.find("  let dp = 1 ") != std::string::npos);
  CHECK(text.find("--gpus 4 --plan-gpus " + std::to_string(z1->pp * z1->tp)) != std::string::npos);
  CHECK(text.find("zero1()") == std::string::npos);
  CHECK(text.find("distributed optimizer") != std::string::npos);

  // --dp-in-plan: the same grid points with dp inside the plan.
  o.dp_in_plan = true;
  CHECK_FALSE(dp_as_replicas(l.model, o, 2, &why));
  CHECK(why == "--dp-in-plan");
  SearchResult inside = search_plans(l.model, o);
  // The placement is costed as written: on the toy profile's nodes of 2, a
  // replica of pp 2 x tp 1 is devices {0, 1}, so its data-parallel group
  // {0, 2} crosses nodes (inside the plan it is {0, 1}, the stages apart).
  auto find = [](const SearchResult& res) -> const Candidate* {
    for (const Candidate& c : res.best)
      if (c.pp == 2 && c.tp == 1 && c.dp == 2 && !c.zero1 && c.micro_batches == 2) return &c;
    return nullptr;
  };
  const Candidate *as_replicas = find(r), *in_plan = find(inside);
  REQUIRE(as_replicas != nullptr);
  REQUIRE(in_plan != nullptr);
  CHECK(as_replicas->replicas);
  CHECK(as_replicas->sync_time > in_plan->sync_time);
  bool any_dp = false;
  for (const Candidate& c : inside.best) {
    CHECK_FALSE(c.replicas);
    any_dp = any_dp || c.dp > 1;
    if (c.dp > 1 && c.zero1) {
      std::string t = plan_text(l.model, c, "found");
      CHECK(t.find("  let dp = " + std::to_string(c.dp) + "\n") != std::string::npos);
      CHECK(t.find("  zero1()") != std::string::npos);
    }
  }
  CHECK(any_dp);
}

TEST_CASE("data parallelism stays inside the plan where replicas cannot express it") {
  // An op that reads the batch without splitting along it (a prefix sum
  // down the batch) runs on the whole batch inside the plan; replicas, each
  // on its own samples, would compute something else.
  std::string text = kModel;
  const std::string loop = "    for b in blocks {";
  text.replace(text.find(loop), loop.size(), "    x = x + cumsum(x, dim = 0)\n" + loop);
  Loaded l;
  load(l, text);
  SearchOptions o;
  o.gpus = 4;
  o.profile = toy();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  std::string why;
  CHECK_FALSE(dp_as_replicas(l.model, o, 2, &why));
  CHECK(why.find("cumsum") != std::string::npos);
  CHECK(why.find("reads the batch but does not split along it") != std::string::npos);
  for (const Candidate& c : search_plans(l.model, o).best) CHECK_FALSE(c.replicas);

  // A place_on table numbers the devices of the plan with dp inside.
  std::string placed = kModel;
  const std::string table = "plan table(ngpus) {";
  placed.replace(placed.find(table), table.size(),
                 "plan placed(ngpus) {\n  place_on(select(\"*linear#*\"), [0, 1, 2, 3])\n"
                 "  replicate(unassigned(), 0..ngpus)\n}\n" +
                     table);
  Loaded p;
  load(p, placed);
  nns::sema::Plan tables;
  REQUIRE(p.interp->evaluate_plan("placed", 4, tables));
  o.constraints = &tables.constraints;
  o.constraint_plan = &tables;
  CHECK_FALSE(dp_as_replicas(p.model, o, 2, &why));
  CHECK(why.find("place_on") != std::string::npos);
}

TEST_CASE("constraint tables prune the space and the decisions obey them") {
  Loaded l;
  load(l);
  nns::sema::Plan table;
  REQUIRE(l.interp->evaluate_plan("table", 4, table));
  REQUIRE(table.constraints.size() == 1);
  SearchOptions o;
  o.gpus = 4;
  o.profile = toy();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  SearchResult free = search_plans(l.model, o);
  o.constraints = &table.constraints;
  o.constraint_plan = &table;
  SearchResult pruned = search_plans(l.model, o);
  CHECK(free.log10_space == Approx(free.log10_space_constrained));
  CHECK(pruned.log10_space == Approx(free.log10_space));
  CHECK(pruned.log10_space_constrained < pruned.log10_space - 0.5);  // the contraction split of 6 linears gone
  REQUIRE_FALSE(pruned.best.empty());
  int linears = 0;
  for (const Candidate& c : pruned.best)
    for (size_t i = 0; i < l.model.ops.size(); ++i) {
      const SearchOp& op = l.model.ops[i];
      if (op.kind != "linear") continue;
      ++linears;
      if (c.ops[i].choice < 0) continue;
      const std::string& id = op.choices[c.ops[i].choice].id;
      CHECK((id == "n" || id == op.batch_id));
    }
  CHECK(linears > 0);
  CHECK(pruned.best[0].step_time >= free.best[0].step_time);
}

namespace {

// kModel with 8 blocks: 8 layer units divide over 2 ranks x 2 or 4 chunks.
std::string eight_layers() {
  std::string s = kModel;
  s.replace(s.find("layers = 3"), 10, "layers = 8");
  return s;
}

// toy() with fast links: the sends between chunks cost little, so the
// pipeline's bubble, not its sends, decides between the schedules.
DeviceProfile fast_links() {
  DeviceProfile p;
  std::string err;
  REQUIRE(parse_profile(R"({"name": "fast", "peak_flops": {"fp32": 1e9}, "memory_bytes": 1e9, "memory_bandwidth": 1e9,
    "devices_per_node": 2, "intra_bandwidth": 1e13, "intra_latency": 1e-9, "inter_bandwidth": 1e13, "inter_latency": 1e-9})",
                        p, err));
  return p;
}

}  // namespace

TEST_CASE("interleaved 1F1B: v chunks per rank where the layers divide, a smaller bubble, the plan's schedule") {
  Loaded l;
  load(l, eight_layers());
  SearchOptions o;
  o.gpus = 2;
  o.profile = fast_links();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  o.top = 20;
  o.fixed_micro_batches = 4;  // a multiple of pp = 2
  SearchResult any = search_plans(l.model, o);
  bool interleaved_seen = false;
  for (const Candidate& c : any.best) interleaved_seen = interleaved_seen || c.vp > 1;
  CHECK(interleaved_seen);  // searched without --vp

  o.fixed_vp = 1;
  SearchResult one = search_plans(l.model, o);
  o.fixed_vp = 2;
  SearchResult two = search_plans(l.model, o);
  REQUIRE_FALSE(two.best.empty());
  const Candidate* c1 = nullptr;
  for (const Candidate& c : one.best)
    if (c.pp == 2 && !c1) c1 = &c;
  REQUIRE(c1 != nullptr);
  const Candidate& c2 = two.best[0];
  CHECK(c2.pp == 2);  // pp 1 has nothing to interleave
  CHECK(c2.vp == 2);
  CHECK(c2.micro_batches % c2.pp == 0);
  // 4 chunks, contiguous, in order: chunk c on rank c % 2.
  std::vector<int> units_per_chunk(4, 0);
  for (size_t u = 0; u < c2.unit_stage.size(); ++u) {
    REQUIRE(c2.unit_stage[u] >= 0);
    REQUIRE(c2.unit_stage[u] < 4);
    if (u) CHECK(c2.unit_stage[u] >= c2.unit_stage[u - 1]);
    ++units_per_chunk[c2.unit_stage[u]];
  }
  for (int n : units_per_chunk) CHECK(n > 0);
  // The bubble's time: (p - 1) / (v m) of the step instead of (p - 1) / m
  // (near even chunks): interleaving halves it here.
  const double bubble1 = c1->bubble * c1->step_time, bubble2 = c2.bubble * c2.step_time;
  CHECK(bubble2 < 0.75 * bubble1);
  CHECK(c2.step_time < c1->step_time);
  // Interleaved warm-up keeps more micro-batches' activations on rank 0:
  // (v p + p - 1) / v = 2.5 of them against 1F1B's p = 2.
  CHECK(c2.memory > c1->memory);

  std::string text = plan_text(l.model, c2, "found");
  CHECK(text.find("let vp = 2") != std::string::npos);
  CHECK(text.find("schedule(\"interleaved\", stages, v = vp)") != std::string::npos);
  CHECK(text.find("schedule(\"1f1b\"") == std::string::npos);
  CHECK(text.find("let s = c % pp") != std::string::npos);
  size_t stages = 0;
  for (size_t at = text.find("ops_of(["); at != std::string::npos; at = text.find("ops_of([", at + 1)) ++stages;
  CHECK(stages == 4);
  CHECK(c2.describe().find("interleaved v 2") != std::string::npos);

  // v = 8 needs 16 chunks of 8 layers: not searched, so --vp 8 finds nothing.
  o.fixed_vp = 8;
  CHECK(search_plans(l.model, o).best.empty());
  // 3 micro-batches do not go through the chunks in groups of 2.
  o.fixed_vp = 2;
  o.fixed_micro_batches = 0;
  o.global_batch = 6;
  SearchResult six = search_plans(l.model, o);
  REQUIRE_FALSE(six.best.empty());
  for (const Candidate& c : six.best) CHECK(c.micro_batches % 2 == 0);
}

TEST_CASE("interleaved 1F1B is not searched where the layers do not divide over the chunks") {
  Loaded l;
  load(l);  // 3 blocks
  SearchOptions o;
  o.gpus = 2;
  o.profile = fast_links();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  o.top = 20;
  SearchResult r = search_plans(l.model, o);
  REQUIRE_FALSE(r.best.empty());
  for (const Candidate& c : r.best) CHECK(c.vp == 1);
}

TEST_CASE("zero1 pays each parameter's reduce-scatter and all-gather, as the lowering emits them") {
  Loaded l;
  load(l);  // 3 blocks of 2 weights
  SearchOptions o;
  o.gpus = 2;
  std::string err;
  // Slow collectives (1 ms latency), fast everything else.
  REQUIRE(parse_profile(R"({"name": "lat", "peak_flops": {"fp32": 1e15}, "memory_bytes": 1e9, "memory_bandwidth": 1e15,
    "devices_per_node": 2, "intra_bandwidth": 1e13, "intra_latency": 1e-3, "inter_bandwidth": 1e13, "inter_latency": 1e-3})",
                        o.profile, err));
  o.global_batch = 16;
  o.memory_cap = 1e12;
  o.top = 50;
  o.fixed_vp = 1;
  o.dp_in_plan = true;  // the plan's zero1 (over plan replicas: below)
  SearchResult r = search_plans(l.model, o);
  const Candidate *plain = nullptr, *z1 = nullptr;
  for (const Candidate& c : r.best)
    if (c.pp == 1 && c.tp == 1 && c.dp == 2 && c.micro_batches == 1 && !c.recompute) (c.zero1 ? z1 : plain) = &c;
  REQUIRE(plain != nullptr);
  REQUIRE(z1 != nullptr);
  // The 6 weights: one bucketed allreduce without zero1; with it, a
  // reduce-scatter and an all-gather each (1 ms apiece on 2 ranks), where
  // the bucket's one allreduce (2 ms) was all the search charged before.
  const double rs = collective_time(o.profile, Collective::ReduceScatter, 0, {0, 1});
  const double ag = collective_time(o.profile, Collective::AllGather, 0, {0, 1});
  CHECK(z1->step_time - plain->step_time == Approx(5 * (rs + ag)).epsilon(0.01));
  CHECK(r.best[0].zero1 == false);  // not worth it at this size

  // Over plan replicas zero1 is the distributed optimizer, whose
  // collectives go by gradient bucket: the 6 small weights make one, so
  // zero1 pays no extra latency there.
  o.dp_in_plan = false;
  SearchResult rr = search_plans(l.model, o);
  plain = z1 = nullptr;
  for (const Candidate& c : rr.best)
    if (c.pp == 1 && c.tp == 1 && c.dp == 2 && c.micro_batches == 1 && !c.recompute) (c.zero1 ? z1 : plain) = &c;
  REQUIRE(plain != nullptr);
  REQUIRE(z1 != nullptr);
  CHECK(z1->replicas);
  CHECK(std::abs(z1->step_time - plain->step_time) < 0.01 * (rs + ag));
}

namespace {

// Net with its first and last linears on one weight (tied, as GPT's wte)
// or on two of the same shape.
std::string tied_model(bool tied) {
  std::string s = kModel;
  const std::string net = "model Net(d, h, n) {\n  blocks = [Block(d, h) for i in 0..n]";
  const std::string with = std::string("model Net(d, h, n) {\n  param wi: [d, d] = normal(0.02)\n") +
                           (tied ? "" : "  param wo: [d, d] = normal(0.02)\n") +
                           "  blocks = [Block(d, h) for i in 0..n]";
  s.replace(s.find(net), net.size(), with);
  const std::string loop = "    for b in blocks {";
  s.replace(s.find(loop), loop.size(), "    x = linear(x, wi)\n" + loop);
  const std::string ret = "    return x\n  }\n}\ntrain";
  s.replace(s.find(ret), ret.size(), std::string("    return linear(x, ") + (tied ? "wi" : "wo") + ")\n  }\n}\ntrain");
  return s;
}

const Candidate* find_z1(const SearchResult& r) {
  for (const Candidate& c : r.best)
    if (c.pp == 2 && c.tp == 1 && c.dp == 4 && c.zero1 && c.micro_batches == 2 && !c.recompute && !c.selective)
      return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("zero1 does not shard a weight tied across pipeline stages, as the lowering does not") {
  SearchOptions o;
  o.gpus = 8;
  o.profile = fast_links();
  o.global_batch = 16;
  o.memory_cap = 1e12;
  o.top = 100;
  o.fixed_vp = 1;
  o.dp_in_plan = true;  // a plan's zero1; over plan replicas it is the distributed optimizer (below)
  Loaded t, u;
  load(t, tied_model(true));
  load(u, tied_model(false));
  const SearchResult rt = search_plans(t.model, o), ru = search_plans(u.model, o);
  const Candidate* ct = find_z1(rt);
  const Candidate* cu = find_z1(ru);
  REQUIRE(ct != nullptr);
  REQUIRE(cu != nullptr);
  REQUIRE(ct->unit_stage == cu->unit_stage);
  // Both stages hold a 16 x 16 weight; tied, AdamW's two slots are whole
  // on each stage instead of quarters, and there is no shard's gradient
  // and update: weight, gradient and slots, 4 bytes per weight byte,
  // against 1 + 1 + 2 / 4 + 2 / 4 = 3 sharded over dp 4.
  CHECK(ct->memory - cu->memory == Approx(16 * 16 * 4 * (4.0 - 3.0)).epsilon(0.01));

  // Over plan replicas zero1 is the distributed optimizer, which shards the
  // tied weight too (lower_step_end.cpp, shard_over_replicas).
  o.dp_in_plan = false;
  const SearchResult rt2 = search_plans(t.model, o), ru2 = search_plans(u.model, o);
  const Candidate* ct2 = find_z1(rt2);
  const Candidate* cu2 = find_z1(ru2);
  REQUIRE(ct2 != nullptr);
  REQUIRE(cu2 != nullptr);
  CHECK(ct2->replicas);
  REQUIRE(ct2->unit_stage == cu2->unit_stage);
  CHECK(ct2->memory == Approx(cu2->memory).epsilon(1e-9));
}

TEST_CASE("a composite's body: the nodes a split leaves whole run whole in every piece") {
  std::ifstream in("examples/swin.nns");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  Loaded l;
  load(l, text.str());  // config tiny
  const SearchOp* wa = nullptr;
  for (const SearchOp& op : l.model.ops)
    if (op.kind == "window_attention" && op.name.find("blocks.1.") != std::string::npos && !wa) wa = &op;
  REQUIRE(wa != nullptr);
  REQUIRE(wa->parts.size() > 10);
  const SearchChoice* heads = nullptr;
  for (const SearchChoice& c : wa->choices)
    if (c.id == "h") heads = &c;
  REQUIRE(heads != nullptr);
  REQUIRE(heads->part_split.size() == wa->parts.size());
  // reshape(x, ...) of the input the head split leaves whole; then the q
  // projection on the split wq, which the split divides.
  CHECK(wa->parts[0].kind == "reshape");
  CHECK(heads->part_split[0] == 0);
  CHECK(wa->parts[1].kind == "linear");
  CHECK(heads->part_split[1] == 1);
  // The output projection contracts the heads: partial sums, whole; the
  // reshape after it runs whole in every piece.
  CHECK(wa->parts.back().kind == "reshape");
  CHECK(heads->part_split.back() == 0);
  // The shifted block's mask carries no batch: its nodes do not scale with it.
  REQUIRE(wa->part_batch.size() == wa->parts.size());
  int without_batch = 0;
  for (char b : wa->part_batch) without_batch += b ? 0 : 1;
  CHECK(without_batch > 0);
  CHECK(wa->part_batch[0] == 1);
}

TEST_CASE("mixed precision: collectives move 2-byte elements, not the model's fp32 bytes") {
  Loaded l;
  load(l, tokens_model());
  SearchOptions o;
  o.gpus = 2;
  std::string err;
  // Compute and memory nearly free, links bandwidth-bound: the step is its
  // communication.
  REQUIRE(parse_profile(R"({"name": "comm", "peak_flops": {"fp32": 1e24, "fp16": 1e24}, "memory_bytes": 1e12,
    "memory_bandwidth": 1e24, "devices_per_node": 2, "intra_bandwidth": 1e6, "intra_latency": 0, "inter_bandwidth": 1e6,
    "inter_latency": 0})",
                        o.profile, err));
  o.global_batch = 16;
  o.memory_cap = 1e12;
  o.top = 100;
  o.fixed_vp = 1;
  auto step = [&](int bpe, int pp, int tp) {
    o.bytes_per_element = bpe;
    o.dtype = bpe == 2 ? "fp16" : "fp32";
    for (const Candidate& c : search_plans(l.model, o).best)
      if (c.pp == pp && c.tp == tp && c.micro_batches == 2 && !c.recompute && !c.zero1) return c.step_time;
    return -1.0;
  };
  const double tp32 = step(4, 1, 2), tp16 = step(2, 1, 2);
  REQUIRE(tp32 > 0);
  REQUIRE(tp16 > 0);
  CHECK(tp16 == Approx(tp32 / 2).epsilon(0.02));  // the reshards in the TP group, the loss allreduce
  const double pp32 = step(4, 2, 1), pp16 = step(2, 2, 1);
  REQUIRE(pp32 > 0);
  REQUIRE(pp16 > 0);
  CHECK(pp16 == Approx(pp32 / 2).epsilon(0.02));  // the pipeline's sends
}

// The interleaved step along the schedule's dependency chain
// (search_chain.cpp), an internal of the search tested on its own.
TEST_CASE("interleaved 1F1B step: the dependency chain through the ranks and the transfers between chunks") {
  using nns::planner::search_detail::interleaved_makespan;
  // v = 1 is 1F1B: (m + p - 1) x (F + B) with equal stages and free sends.
  CHECK(interleaved_makespan(4, 1, 8, std::vector<double>(4, 1.0), std::vector<double>(4, 2.0),
                             std::vector<double>(4, 0.0)) == Approx(33));
  // Even chunks, free sends: the closed form m x tmax + (tsum - tmax) / v
  // (p 2, v 2, m 4, F 1 and B 2 per chunk: 4 x 6 + (12 - 6) / 2 = 27).
  const std::vector<double> f(4, 1.0), b(4, 2.0);
  CHECK(interleaved_makespan(2, 2, 4, f, b, std::vector<double>(4, 0.0)) == Approx(27));
  // Sends that outweigh the work: no rank works while a micro-batch's
  // input crosses, so the step is at least one micro-batch's whole chain
  // (every forward and backward, and each of the 3 cuts crossed twice),
  // and at most the closed form's sum with each send counted on each rank.
  const double s = 10;
  const double span = interleaved_makespan(2, 2, 4, f, b, std::vector<double>(4, s));
  CHECK(span >= 4 * 3 + 2 * 3 * s);
  CHECK(span < 4 * (6 + 4 * s) + (12 + 6 * s) / 2);
}
