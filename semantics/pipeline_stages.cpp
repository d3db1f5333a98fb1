// pipeline_stages(S, blocks = "blocks"): a model's repeated blocks (the
// numbered children `blocks.0`, `blocks.1`, ... of a model list) cut into S
// contiguous stages of balanced cost, with every other ("loose") op attached
// by data flow: an op fed by block outputs goes to the stage of the latest
// block it depends on (the final norm, head and loss: the last stage); an
// op that no block feeds goes to the earliest stage that reads it (the
// embeddings: the first stage). The result is a list of S op lists for
// assign() and schedule(). Ops are named by structure only, so the stages
// do not change when an unrelated op is added elsewhere.
#include <algorithm>
#include <cctype>
#include <limits>

#include "semantics/builtin_args.h"
#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::sema {

namespace {

using builtin_args::arg;

// Which block (0..) an op name lies in under `prefix` ("blocks" -> blocks.3.attn.linear#0 is 3), or -1.
int block_of(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size() + 1, prefix + ".") != 0) return -1;
  size_t at = prefix.size() + 1, end = name.find('.', at);
  if (end == std::string::npos || end == at) return -1;
  for (size_t i = at; i < end; ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  return std::stoi(name.substr(at, end - at));
}

// A proxy of an op's run time: its multiply-adds, or the elements it
// writes for ops without (norms, activations, losses).
double op_cost(const Graph& g, int n) {
  const OpNode& op = g.node(n);
  int64_t elems = 0;
  for (int t : op.outputs) elems += numel(g.tensor(t).shape);
  return static_cast<double>(std::max<int64_t>(op.macs, elems));
}

// Cuts costs[0..n) into `stages` contiguous non-empty runs minimising the
// costliest run; `first_extra` and `last_extra` are added to the first and
// last run (the loose ops attached there). Returns each block's stage.
std::vector<int> balanced_cut(const std::vector<double>& costs, int stages, double first_extra, double last_extra) {
  const int n = static_cast<int>(costs.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // best[s][i]: the least max cost of blocks [0, i) in s stages; cut[s][i]: where stage s-1 starts.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = s; i <= n; ++i)
      for (int j = s - 1; j < i; ++j) {
        double run = prefix[i] - prefix[j] + (s == 1 ? first_extra : 0) + (s == stages && i == n ? last_extra : 0);
        double m = std::max(best[s - 1][j], run);
        if (m < best[s][i]) best[s][i] = m, cut[s][i] = j;
      }
  std::vector<int> stage_of(n, 0);
  for (int s = stages, i = n; s >= 1; i = cut[s][i], --s)
    for (int b = cut[s][i]; b < i; ++b) stage_of[b] = s - 1;
  return stage_of;
}

std::string where(const OpNode& op) { return "'" + op.name + "' (line " + std::to_string(op.loc.line) + ")"; }

}  // namespace

Value pipeline_stages_builtin(Interpreter& in, CallArgs& a) {
  Plan& p = builtin_args::active_plan(in, a, "pipeline_stages", "is a plan primitive");
  const Graph& g = in.graph();
  const Value* sv = arg(a, 0, "stages");
  if (!sv) in.fail(a.loc, "pipeline_stages(): missing argument 'stages' (the number of pipeline stages)");
  const int64_t stages = in.to_int(*sv, a.loc, "stages");
  // blocks: one module path or a list of them (T5: ["encoder.blocks", "decoder.blocks"]), numbered in that order.
  const Value* bv = arg(a, 1, "blocks");
  std::vector<std::string> prefixes;
  if (!bv) prefixes.push_back("blocks");
  if (bv && bv->is<std::string>()) prefixes.push_back(bv->as<std::string>());
  if (bv && bv->is<std::shared_ptr<List>>())
    for (const Value& v : *bv->as<std::shared_ptr<List>>())
      if (v.is<std::string>()) prefixes.push_back(v.as<std::string>());
  if (prefixes.empty())
    in.fail(a.loc, "pipeline_stages(): blocks must be a module path string (\"blocks\") or a list of them");
  std::string prefix;
  for (const std::string& pre : prefixes) prefix += (prefix.empty() ? "" : ", ") + pre;
  if (stages < 1) in.fail(a.loc, "pipeline_stages(): stages must be at least 1, got " + std::to_string(stages));

  std::vector<int> nodes;
  for (size_t n = 0; n < p.root_of_node.size(); ++n)
    if (p.root_of_node[n] >= 0) nodes.push_back(static_cast<int>(n));
  std::vector<int> block(p.root_of_node.size(), -1);
  int nblocks = 0;
  for (const std::string& pre : prefixes) {
    int here = 0;
    for (int n : nodes) {
      int b = block_of(g.node(n).name, pre);
      if (b >= 0) block[n] = nblocks + b, here = std::max(here, b + 1);
    }
    nblocks += here;
  }
  if (nblocks == 0)
    in.fail(
        a.loc,
        "pipeline_stages(): the model has no numbered blocks under '" + prefix +
            "' (ops named PATH.0.*, PATH.1.*, ...); pass blocks = \"PATH\" (or a list of paths) of its repeated layers");
  if (stages > nblocks)
    in.fail(a.loc, "pipeline_stages(" + std::to_string(stages) + "): the model has " + std::to_string(nblocks) +
                       " block(s) under '" + prefix + "', at most one stage per block (stages = 1 to " +
                       std::to_string(nblocks) + ")");

  // Loose ops fed by a block (directly or not) follow the blocks; the rest precede them.
  std::vector<bool> after_blocks(p.root_of_node.size(), false);
  for (int n : nodes)
    for (int t : g.node(n).inputs) {
      int prod = g.tensor(t).producer;
      if (prod >= 0 && prod < static_cast<int>(block.size()) && (block[prod] >= 0 || after_blocks[prod]))
        after_blocks[n] = true;
    }
  std::vector<double> costs(nblocks, 0);
  double pre = 0, post = 0;
  for (int n : nodes) {
    if (block[n] >= 0)
      costs[block[n]] += op_cost(g, n);
    else
      (after_blocks[n] ? post : pre) += op_cost(g, n);
  }
  std::vector<int> block_stage = balanced_cut(costs, static_cast<int>(stages), pre, post);

  // Stages: blocks by the cut; loose ops downstream of blocks at their
  // latest producer's stage (forward pass), the others at their earliest
  // consumer's stage (backward pass; ops that feed nothing: the first stage).
  std::vector<int> stage(p.root_of_node.size(), -1);
  for (int n : nodes) {
    if (block[n] >= 0) {
      stage[n] = block_stage[block[n]];
      continue;
    }
    if (!after_blocks[n]) continue;
    for (int t : g.node(n).inputs) {
      int prod = g.tensor(t).producer;
      if (prod >= 0 && prod < static_cast<int>(stage.size())) stage[n] = std::max(stage[n], stage[prod]);
    }
  }
  std::vector<std::vector<int>> consumers(p.root_of_node.size());
  for (int n : nodes)
    for (int t : g.node(n).inputs) {
      int prod = g.tensor(t).producer;
      if (prod >= 0 && prod < static_cast<int>(consumers.size())) consumers[prod].push_back(n);
    }
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (stage[*it] >= 0) continue;
    int earliest = -1;
    for (int c : consumers[*it])
      if (stage[c] >= 0) earliest = earliest < 0 ? stage[c] : std::min(earliest, stage[c]);
    stage[*it] = std::max(earliest, 0);
  }

  // The blocks must form a chain: no tensor may flow back to an earlier stage.
  for (int n : nodes)
    for (int t : g.node(n).inputs) {
      int prod = g.tensor(t).producer;
      if (prod < 0 || prod >= static_cast<int>(stage.size()) || stage[prod] <= stage[n]) continue;
      in.fail(a.loc, "pipeline_stages(): tensor " + g.tensor(t).name + " of " + where(g.node(prod)) + " (stage " +
                         std::to_string(stage[prod]) + ") feeds " + where(g.node(n)) + " (stage " +
                         std::to_string(stage[n]) + "): the blocks under '" + prefix +
                         "' are not a chain in data-flow order");
    }

  List out;
  for (int64_t s = 0; s < stages; ++s) {
    List ops;
    for (int n : nodes)
      if (stage[n] == s) ops.push_back(Value(OpHandle{p.root_of_node[n]}));
    out.push_back(make_list(std::move(ops)));
  }
  return make_list(std::move(out));
}

}  // namespace nns::sema
