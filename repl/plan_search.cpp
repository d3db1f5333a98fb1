// plan search DEVICE [NODES]: the plan search of `nns plan`
// (backend/planner/search.h) on the session's model and device count. The
// session's graph is one micro-batch of its config, so the search keeps
// the config's micro-batch count; the best plan is declared in the session
// as `plan searched_N` and evaluated like `plan NAME` (checked; undo goes back).
#include <cstdio>
#include <cstdlib>

#include "backend/planner/cost_model.h"
#include "backend/planner/profiles.h"
#include "backend/planner/search.h"
#include "repl/session.h"

namespace nns::repl {

bool Session::cmd_plan_search(const Command& c) {
  if (c.args.size() < 2 || c.args.size() > 3) {
    err_ << "nns: error: usage: plan search DEVICE [NODES]   (DEVICE: " << planner::device_choices() << ")\n";
    return false;
  }
  if (!interp_->train()) {
    err_ << "nns: error: plan search needs a model with a train block\n";
    return false;
  }
  planner::DeviceProfile prof;
  std::string err;
  if (!planner::load_device(c.args[1], prof, err)) {
    err_ << "nns: error: " << err << "\n";
    return false;
  }
  const int64_t n = plan_.ngpus;
  if (c.args.size() == 3) {
    char* end = nullptr;
    long nodes = std::strtol(c.args[2].c_str(), &end, 10);
    if (*end || nodes < 1 || n % nodes) {
      err_ << "nns: error: NODES must be a positive divisor of the device count " << n << "\n";
      return false;
    }
    prof.devices_per_node = static_cast<int>(n / nodes);
  }
  planner::SearchModel model = planner::build_search_model(interp_->graph(), interp_->new_plan("search", n));
  planner::SearchOptions so;
  so.gpus = static_cast<int>(n);
  so.profile = prof;
  const sema::TrainSpec& spec = *interp_->train();
  so.fixed_micro_batches = spec.micro_batches;
  so.global_batch = model.graph_batch * spec.micro_batches;
  so.optimizer_slots = static_cast<int>(sema::optimizer_slots(spec.optimizer));
  so.top = 3;
  so.dp_in_plan = true;  // the session's plan covers all its devices: no replicas
  planner::SearchResult r = planner::search_plans(model, so);
  char line[400];
  std::snprintf(line, sizeof line, "search on %lld x %s: %lld candidates, %.1f ms, space 10^%.1f\n", static_cast<long long>(n), prof.name.c_str(),
                static_cast<long long>(r.evaluated), r.search_ms, r.log10_space);
  out_ << line;
  auto row = [&](const char* label, const planner::Candidate& k) {
    std::snprintf(line, sizeof line, "  %-10s %s: step %.3f ms, %.2f samples/s, %s per device%s\n", label, k.describe().c_str(), k.step_time * 1e3,
                  k.throughput(), sema::format_bytes(static_cast<int64_t>(k.memory)).c_str(), k.fits ? "" : " (does not fit)");
    out_ << line;
  };
  if (r.one_device.applies) row("1 device", r.one_device.best);
  if (r.megatron.applies) row("megatron", r.megatron.best);
  else
    out_ << "  megatron   skipped: " << r.megatron.why_not << "\n";
  if (r.best.empty()) {
    out_ << "no plan found: " << r.note << " (the session's config fixes " << spec.micro_batches << " micro-batch(es))\n";
    return false;
  }
  for (size_t i = 0; i < r.best.size(); ++i) row(i ? "runner-up" : "best", r.best[i]);
  // As nns plan says it: a best no faster than one device is no speedup.
  const planner::Baseline& one = r.one_device;
  if (n > 1 && one.applies && one.best.fits && r.best[0].throughput() <= one.best.throughput() * (1 + 1e-9))
    out_ << "no plan beats one device"
         << (r.best[0].replicated() ? " (the best splits no op: replication, not parallelism)" : "") << "\n";
  std::string name = "searched_" + std::to_string(++searches_);
  std::string text = planner::plan_text(model, r.best[0], name);
  out_ << text;
  if (!run_nns(text)) return false;
  return cmd_plan(Command{"plan", {name}});
}

}  // namespace nns::repl
