// Selective recompute in the plan search (issue 31, item 3; Korthikanti et
// al. 2022): the attention op whose body saves a softmax's [seq, seq]
// values is recomputed alone, the rest of each block keeps its values. On
// GPT tiny: the mode is found only for unfused attention, it lies between
// no recompute and block recompute in time and memory, and the plan text
// recomputes each attention op by a call of its own.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "backend/planner/cost_model.h"
#include "backend/planner/profiles.h"
#include "backend/planner/search.h"
#include "backend/planner/search_internal.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"
#include "semantics/interpreter.h"

using namespace nns::planner;

namespace {

// GPT tiny (fused = false: attention unfused, as the example ships it, or
// true: its core one sdpa op).
SearchModel gpt_tiny(bool fused) {
  std::ifstream in("examples/gpt.nns");  // the test runs in the source tree
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf() << "\nconfig tiny_fused_sel extends tiny {\n  fused_attention = true\n}\n";
  const std::string path = "/tmp/nns_search_selective_" + std::to_string(::getpid()) + ".nns";
  std::ofstream(path) << text.str();
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags{sources};
  nns::sema::EvalOptions eo;
  eo.stdlib_dirs = {NNS_STDLIB_DIR};
  eo.config = fused ? "tiny_fused_sel" : "tiny";
  nns::sema::Interpreter interp(sources, diags, eo);
  const bool ok = interp.parse(path) && interp.evaluate();
  std::remove(path.c_str());
  REQUIRE(ok);
  return build_search_model(interp.graph(), interp.new_plan("t", 2));
}

SearchOptions one_a100(int gpus) {
  SearchOptions o;
  o.gpus = gpus;
  std::string err;
  REQUIRE(load_device("a100", o.profile, err));
  o.global_batch = 4;  // GPT tiny's batch
  o.top = 1;
  return o;
}

int score_cores(const SearchModel& m) {
  int n = 0;
  for (const SearchOp& op : m.ops) n += op.score_core ? 1 : 0;
  return n;
}

Candidate best_with(const SearchModel& m, SearchOptions o, int mode) {
  o.fixed_recompute = mode;
  SearchResult r = search_plans(m, o);
  REQUIRE(!r.best.empty());
  return r.best[0];
}

}  // namespace

TEST_CASE("selective recompute: only an unfused attention is a score core") {
  SearchModel unfused = gpt_tiny(false);
  CHECK(score_cores(unfused) == 2);  // one attention op per layer
  for (const SearchOp& op : unfused.ops)
    if (op.score_core) CHECK(op.kind == "attention");
  SearchOptions o = one_a100(1);
  CHECK(search_detail::recompute_modes(unfused, o) == std::vector<int>{0, 1, 2});

  // sdpa keeps q, k and v and recomputes its probabilities itself: there
  // is nothing [seq, seq] for selective recompute to drop.
  SearchModel fused = gpt_tiny(true);
  CHECK(score_cores(fused) == 0);
  CHECK(search_detail::recompute_modes(fused, o) == std::vector<int>{0, 2});
  o.fixed_recompute = 1;
  CHECK(search_detail::recompute_modes(fused, o).empty());
  SearchResult r = search_plans(fused, o);
  CHECK(r.best.empty());
  CHECK(r.note.find("selective recompute has nothing to drop") != std::string::npos);
}

TEST_CASE("selective recompute: between none and block recompute in step time and memory") {
  SearchModel m = gpt_tiny(false);
  for (int gpus : {1, 2}) {
    INFO("gpus " << gpus);
    SearchOptions o = one_a100(gpus);
    const Candidate none = best_with(m, o, 0), sel = best_with(m, o, 1), block = best_with(m, o, 2);
    CHECK(!none.selective);
    CHECK(!none.recompute);
    CHECK(sel.selective);
    CHECK(!sel.recompute);
    CHECK(block.recompute);
    CHECK(!block.selective);
    CHECK(sel.describe().find(", selective recompute") != std::string::npos);
    CHECK(none.describe().find("recompute") == std::string::npos);
    // Every attention op recomputed alone, nothing else (no coshard here
    // at lambda 0 on this model's plan).
    REQUIRE(sel.ops.size() == m.ops.size());
    for (size_t i = 0; i < m.ops.size(); ++i)
      if (m.ops[i].score_core) CHECK(sel.ops[i].rc);
    // The same layouts cost more time with the attention's forward again
    // and keep less; block recompute runs every forward again and keeps
    // only the blocks' inputs. (The micro-batch counts may differ: the
    // comparison is of each mode's best.)
    if (sel.micro_batches == none.micro_batches && sel.pp == none.pp && sel.tp == none.tp) {
      CHECK(sel.step_time > none.step_time);
      CHECK(sel.memory < none.memory);
    }
    // (Which keeps less, selective or block, depends on the model: on this
    // tiny GPT, with the kernels dropping what their backward needs the
    // shape of only, the block's recompute at once outweighs the
    // attention bodies selective drops, and the replay agrees: 3.06 MiB
    // selective, 3.18 MiB block, 3.68 MiB none on one device.)
    if (sel.micro_batches == block.micro_batches && sel.pp == block.pp && sel.tp == block.tp)
      CHECK(sel.step_time < block.step_time);
  }
}

TEST_CASE("selective recompute: the attention op's own cost, forward twice and its body not kept") {
  SearchModel m = gpt_tiny(false);
  SearchOptions o = one_a100(1);
  int att = -1;
  for (size_t i = 0; i < m.ops.size() && att < 0; ++i)
    if (m.ops[i].score_core) att = static_cast<int>(i);
  REQUIRE(att >= 0);
  using namespace search_detail;
  const Env plain = make_env(m, o, 1, 1, 1.0, false);
  const Env sel = make_env(m, o, 1, 1, 1.0, false, false, 0, true);
  const std::vector<OpDecision> opts = op_options(m, att, 1, 1.0, false, true);
  REQUIRE(opts.size() >= 1);
  for (const OpDecision& d : opts) CHECK(d.rc);  // every option of a score core recomputes it
  for (const OpDecision& d : op_options(m, att, 1, 1.0, false, false)) CHECK((d.k > 1 || !d.rc));
  const OpCost kept = op_cost(plain, att, OpDecision{});
  const OpCost again = op_cost(sel, att, opts[0]);
  CHECK(again.fwd_time == Approx(kept.fwd_time));
  // Forward, backward (2 x forward), forward again: one more forward.
  CHECK((again.time - kept.time >= kept.fwd_time * 0.999));
  // Its body and outputs are not kept; the backward's moment holds them.
  CHECK(again.kept < kept.kept);
  CHECK(again.work > kept.work);
}

TEST_CASE("selective recompute: the plan text recomputes each attention op by its own call") {
  SearchModel m = gpt_tiny(false);
  SearchOptions o = one_a100(2);
  const Candidate sel = best_with(m, o, 1);
  const std::string text = plan_text(m, sel, "searched");
  CHECK(text.find("# Found by `nns plan`: " + sel.describe()) != std::string::npos);
  CHECK(text.find("  for op in ops_of([\"blocks.*.attn.attention#0\"]) {\n    recompute(op)\n  }\n") !=
        std::string::npos);
  // No block recompute: no unit's call.
  CHECK(text.find("recompute(ops_of(") == std::string::npos);
  // Rules do not recompute the attention a second time.
  CHECK(text.find("attention#0\", 0, 0, 1, true]") == std::string::npos);
}
