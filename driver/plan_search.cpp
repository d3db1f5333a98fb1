// nns plan FILE --gpus N --device D [--config C] [--nodes K] [--plan CONSTRAINTS]
//               [--out OUT.nns] [--top K] [--no-check]
// The plan search (backend/planner/search.h): reads the model's forward
// graph, searches, prints the best plan, its runners-up and the best
// Megatron-style plan, writes FILE + a config + the plan block to OUT.nns
// and proves it there with the checker (the same stages as `nns check`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "backend/lowering/lower_plan.h"
#include "backend/planner/cost_model.h"
#include "backend/planner/program_cost.h"
#include "backend/planner/simulator.h"
#include "backend/planner/search.h"
#include "driver/commands.h"
#include "driver/pipeline.h"

namespace nns::driver {

namespace {

std::string gib(double bytes) { return sema::format_bytes(static_cast<int64_t>(bytes)); }

void print_candidate(const char* label, const planner::Candidate& c) {
  std::printf("  %-10s %-58s step %10.3f ms  %9.2f samples/s  memory %s  bubble %.1f%%\n", label, c.describe().c_str(), c.step_time * 1e3,
              c.throughput(), gib(c.memory).c_str(), c.bubble * 100);
}

std::string space_text(double l) {
  if (!std::isfinite(l)) return "0";
  char b[64];
  std::snprintf(b, sizeof b, "10^%.1f", l);
  return b;
}

// The capacity check lowers every rank with its kernel bodies: seconds for
// tens of ranks, minutes for a thousand (GPT-3 175B on 1024: over 4 min).
// Past this, nns plan leaves it to nns check and keeps the search's estimate.
constexpr int64_t kReplayedRanks = 64;

// Proves a written plan: the Z3 check and (up to kReplayedRanks ranks) the
// capacity check, as nns check OUT --config CFG --plan NAME --gpus N
// --device-memory CAP runs them. Returns the exit code.
int prove_plan(const std::string& out, const std::string& cfg, const std::string& plan_name, int64_t n, const sema::check::CheckOptions& check,
               const sema::EvalBudget& eval_budget) {
  PipelineOptions co;
  co.path = out;
  co.config = cfg;
  co.plan = plan_name;
  co.topo = Topology{n, n, 1, {}};
  co.check = check;
  // The plan stage (evaluation, order = "auto"), then the Z3 checker and
  // the capacity check as `nns check` runs them; program verification
  // and the run are left to `nns check` / `nns run` (lowering 1024 ranks'
  // programs for it here would cost minutes and gigabytes).
  co.last = Stage::Plan;
  co.eval_budget = eval_budget;
  Pipeline cp;
  int rc = run_pipeline(co, cp);
  if (rc == kExitOk) {
    sema::check::CheckOptions opts = co.check;
    const sema::TrainSpec& t = *cp.interp->train();
    opts.micro_batches = t.micro_batches;
    opts.sources = &cp.sources;
    sema::check::CheckResult cr = sema::check::check_plan(cp.graph(), cp.plan, opts);
    for (const front::Diagnostic& d : cr.diagnostics) cp.diags.report(d);
    rc = sema::check::exit_code(cr.verdict);
    // Then the capacity check, on the lowered programs as nns check runs it.
    std::optional<backend::MemoryCheck> mem;
    backend::MemoryCheckOptions mo = memory_options(co.check, &t);
    const bool replay = n <= kReplayedRanks;
    if (rc == kExitOk && replay) {
      try {
        cp.comm = backend::derive_communication(cp.graph(), cp.plan);
        mem = check_plan_memory(cp, co.topo, mo);
      } catch (const backend::LoweringError& e) {
        std::cerr << "nns: error: " << e.what() << "\n";
        rc = kExitRuntime;
      }
    }
    const bool overflow = mem && !mem->fits;
    if (overflow) {
      cp.diags.report(*mem->overflow);
      rc = sema::check::exit_code(sema::check::Verdict::Illegal);
    }
    std::cout << sema::check::verdict_line(cp.plan, cr, overflow) << "\n";
    if (mem) std::cout << "  " << backend::memory_line(*mem, mo) << "\n";
    if (!replay)
      std::cout << "  memory: not replayed for " << n << " ranks here (minutes; the search's estimate holds the capacity); nns check "
                << out << " --config " << cfg << " --plan " << plan_name << " --gpus " << n << " replays every rank\n";
    std::cout.flush();
    cp.diags.print(std::cerr, front::want_colour());
  }
  return rc;
}

}  // namespace

int cmd_plan(const Args& a) {
  if (a.positional.size() != 1) return usage_error("plan needs exactly one FILE");
  if (a.gpus.empty()) return usage_error("plan needs --gpus N");
  if (a.device.empty()) return usage_error("plan needs --device a100|v100|h100|h200|PATH.json");
  long long n = 0, nodes = 0, top = 5;
  if (!parse_int(a.gpus, n) || n < 1 || n > 65536) return usage_error("--gpus must be an integer from 1 to 65536");
  if (!a.nodes.empty() && (!parse_int(a.nodes, nodes) || nodes < 1 || n % nodes != 0))
    return usage_error("--nodes must be a positive divisor of --gpus");
  if (!a.top.empty() && (!parse_int(a.top, top) || top < 1 || top > 100)) return usage_error("--top must be an integer from 1 to 100");
  if (!a.plan_gpus.empty() || !a.emit.empty() || a.verify || !a.trace.empty())
    return usage_error("plan takes FILE, --config, --gpus, --device, --nodes, --plan, --out, --top, --no-check, --device-memory");
  const char* env = std::getenv("NNS_STDLIB");
  std::string profiles = std::string(env && *env ? env : NNS_STDLIB_DIR) + "/profiles";
  planner::DeviceProfile prof;
  std::string err;
  if (!planner::load_profile(a.device, profiles, prof, err)) {
    std::cerr << "nns: error: " << err << "\n";
    return kExitUsage;
  }
  if (nodes > 0) prof.devices_per_node = static_cast<int>(n / nodes);
  int64_t cap = static_cast<int64_t>(prof.memory_bytes);
  std::string cap_label = prof.name;
  if (!a.device_memory.empty() && !sema::check::parse_memory_size(a.device_memory, cap, cap_label, err)) return usage_error(err);

  // The model's forward graph.
  PipelineOptions o;
  o.path = a.positional[0];
  o.config = a.config;
  o.last = Stage::Graph;
  if (!parse_eval_budget(a, o.eval_budget, err)) return usage_error(err);
  Pipeline p;
  if (int rc = run_pipeline(o, p); rc != kExitOk) return rc;
  if (!p.interp->train()) {
    std::cerr << "nns: error: " << o.path << " has no train block; nothing to plan\n";
    return kExitBadInput;
  }
  const sema::TrainSpec spec = *p.interp->train();
  sema::Plan empty = p.interp->new_plan("search", n);
  planner::SearchModel model = planner::build_search_model(p.graph(), empty);

  // The constraint tables of --plan CONSTRAINTS.
  sema::Plan constraints;
  if (!a.plan.empty()) {
    if (!p.interp->evaluate_plan(a.plan, n, constraints)) {
      p.diags.print(std::cerr, front::want_colour());
      return p.interp->failure() == sema::Interpreter::Failure::UnknownPlan ? kExitUsage : kExitBadInput;
    }
    if (constraints.constraints.empty()) {
      std::cerr << "nns: error: plan " << a.plan << " declares no constraint table (same_split, split_only, split_counts, place_on)\n";
      return kExitBadInput;
    }
  }

  planner::SearchOptions so;
  so.gpus = static_cast<int>(n);
  so.profile = prof;
  so.global_batch = model.graph_batch * spec.micro_batches;
  so.optimizer_slots = static_cast<int>(sema::optimizer_slots(spec.optimizer));
  so.memory_cap = static_cast<double>(cap);
  // --precision fp16|bf16: mixed-precision training (2-byte weights,
  // gradients and activations, fp32 optimizer state and master weights),
  // searched, costed and checked as such.
  if (a.precision == "fp16" || a.precision == "bf16") {
    so.dtype = a.precision;
    so.bytes_per_element = 2;
  } else if (!a.precision.empty() && a.precision != "fp32") {
    return usage_error("--precision must be fp32, bf16 or fp16");
  }
  so.top = static_cast<int>(top);
  if (!a.plan.empty()) {
    so.constraints = &constraints.constraints;
    so.constraint_plan = &constraints;
  }
  planner::SearchResult r = planner::search_plans(model, so);

  std::printf("model %s (config %s): %zu ops in %zu units (%d distinct), %s parameters, global batch %lld\n", o.path.c_str(),
              p.interp->config_name().c_str(), model.ops.size(), model.units.size(), model.signatures,
              sema::format_bytes(model.param_bytes).c_str(), static_cast<long long>(so.global_batch));
  std::printf("search on %lld x %s (%d per node, %s each): %lld candidates costed, %lld unit solves, %.1f ms\n", n, prof.name.c_str(),
              prof.devices_per_node, gib(static_cast<double>(cap)).c_str(), static_cast<long long>(r.evaluated),
              static_cast<long long>(r.unit_solves), r.search_ms);
  std::printf("space: %s plans", space_text(r.log10_space).c_str());
  if (!a.plan.empty())
    std::printf("; under the constraint tables of plan %s: %s (pruned by 10^%.1f)", a.plan.c_str(), space_text(r.log10_space_constrained).c_str(),
                r.log10_space - r.log10_space_constrained);
  std::printf("\n");
  if (r.megatron_found) {
    print_candidate("megatron", r.megatron);
    if (!r.megatron.fits)
      std::printf("             (no Megatron-style plan fits %s per device: the one above needs the least memory)\n", gib(static_cast<double>(cap)).c_str());
  } else {
    std::printf("  megatron   no Megatron-style plan in the grid\n");
  }
  if (r.best.empty()) {
    std::printf("no plan found: %s\n", r.note.c_str());
    return kExitBadInput;
  }
  for (size_t i = 0; i < r.best.size(); ++i) print_candidate(i == 0 ? "best" : "runner-up", r.best[i]);
  if (r.megatron_found)
    std::printf("best vs Megatron-style: %.3fx throughput%s\n", r.best[0].throughput() / r.megatron.throughput(),
                r.megatron.fits ? "" : " (the Megatron-style plan does not fit)");

  // The output file: the model as written, a config with the chosen
  // micro-batches, the plan.
  std::ifstream in(o.path);
  std::stringstream src;
  src << in.rdbuf();
  std::string plan_name = "searched";
  for (int k = 2; true; ++k) {
    bool taken = false;
    for (const auto& pi : p.interp->plans()) taken = taken || pi.name == plan_name;
    if (!taken) break;
    plan_name = "searched" + std::to_string(k);
  }
  std::string base_cfg = p.interp->config_name();
  std::string cfg = base_cfg + "_plan";
  {
    std::vector<std::string> names = p.interp->config_names();
    for (int k = 2; std::find(names.begin(), names.end(), cfg) != names.end(); ++k) cfg = base_cfg + "_plan" + std::to_string(k);
  }
  std::string out_dir = o.path.find('/') == std::string::npos ? "." : o.path.substr(0, o.path.rfind('/'));
  std::string out = a.output;
  bool temp = out.empty();
  if (temp) out = out_dir + "/.nns_plan_" + std::to_string(getpid()) + ".nns";

  sema::check::CheckOptions co_check;
  co_check.device_memory = cap;
  co_check.bytes_per_element = so.bytes_per_element < 4 ? so.bytes_per_element : 0;
  co_check.memory_label = cap_label;
  co_check.total_timeout_ms = 0;
  int rc = kExitOk;
  bool written = false;
  for (size_t i = 0; i < r.best.size(); ++i) {
    const planner::Candidate& c = r.best[i];
    std::ostringstream extra;
    extra << "\n# ---- written by nns plan " << o.path << " --gpus " << n << " --device " << prof.name << " ----\n";
    extra << "config " << cfg << " extends " << base_cfg << " {\n  batch = " << c.micro_batch * c.dp
          << "\n  micro_batches = " << c.micro_batches << "\n}\n\n";
    char pred[256];
    std::snprintf(pred, sizeof pred, "# Predicted on %lld x %s: step %.3f ms, %.2f samples/s, %s per device.\n", n, prof.name.c_str(),
                  c.step_time * 1e3, c.throughput(), gib(c.memory).c_str());
    extra << pred << planner::plan_text(model, c, plan_name);
    {
      std::ofstream f(out);
      f << src.str() << extra.str();
      if (!f) {
        std::cerr << "nns: error: cannot write " << out << "\n";
        return kExitBadInput;
      }
    }
    if (i == 0) std::printf("\n%s\n", extra.str().c_str());
    if (a.no_check) {
      written = true;
      break;
    }
    std::printf("checking %s (plan %s, config %s):\n", c.describe().c_str(), plan_name.c_str(), cfg.c_str());
    std::fflush(stdout);
    rc = prove_plan(out, cfg, plan_name, n, co_check, o.eval_budget);
    if (rc == kExitOk) {
      if (i > 0) std::printf("\n(the best plans did not pass the checker; this is runner-up %zu)\n%s\n", i, extra.str().c_str());
      written = true;
      break;
    }
    std::printf("  the checker refused it (exit %d); trying the next\n", rc);
  }
  if (written && a.simulate) {
    // The plan lowered to its rank programs and replayed (what nns simulate does).
    PipelineOptions so2;
    so2.path = out;
    so2.config = cfg;
    so2.plan = plan_name;
    so2.topo = Topology{n, n, 1, {}};
    so2.last = Stage::Comm;
    so2.eval_budget = o.eval_budget;
    Pipeline sp;
    int src = run_pipeline(so2, sp);
    if (src == kExitOk) {
      try {
        sp.spec = *sp.interp->train();
        backend::LoweredPlan lp = lower_with_bodies(*sp.interp, sp.graph(), sp.plan, sp.comm, sp.spec, so2.topo, -1);
        planner::SimResult sr;
        if (planner::simulate(lp, planner::profile_cost(prof, lp, so.bytes_per_element, so.bytes_per_element < 4 ? so.dtype : ""), sr, err))
          std::printf("simulated (nns simulate): step %.6f ms; predicted by the search: %.6f ms\n", sr.step_time * 1e3, r.best[0].step_time * 1e3);
        else
          std::printf("simulate: %s\n", err.c_str());
      } catch (const backend::LoweringError& e) {
        std::printf("simulate: %s\n", e.what());
      }
    }
  }
  if (temp) std::remove(out.c_str());
  else if (written) std::printf("wrote %s: nns run %s --config %s --plan %s --gpus %lld\n", out.c_str(), out.c_str(), cfg.c_str(), plan_name.c_str(), n);
  return written ? kExitOk : (rc == kExitOk ? kExitRuntime : rc);
}

}  // namespace nns::driver
