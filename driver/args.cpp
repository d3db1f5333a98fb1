#include "driver/args.h"

#include <cstdlib>
#include <cerrno>
#include <cctype>
#include <iostream>

namespace nns::driver {

int usage_error(const std::string& msg) {
  std::cerr << "nns: error: " << msg << "\n(run 'nns --help' for usage)\n";
  return kExitUsage;
}

bool parse_args(int argc, char** argv, Args& a, std::string& err) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const std::string& flag, std::string& out) -> bool {
      if (s == flag) {
        if (i + 1 >= argc) { err = flag + " needs a value"; return false; }
        out = argv[++i];
        return true;
      }
      if (s.rfind(flag + "=", 0) == 0) { out = s.substr(flag.size() + 1); return true; }
      return false;
    };
    if (std::string set; value("--set", set)) {
      if (!err.empty()) return false;
      a.sets.push_back(set);
      continue;
    }
    if (value("--config", a.config) || value("--emit", a.emit) || value("--shapes", a.shapes) || value("--gpus", a.gpus) ||
        value("--plan", a.plan) || value("--plan-gpus", a.plan_gpus) || value("-o", a.output) || value("--seed-bug", a.seed_bug) ||
        value("--steps", a.steps) || value("--seed", a.seed) || value("--threads", a.threads) || value("--init", a.init) ||
        value("--data", a.data) || value("--save", a.save) || value("--resume", a.resume) || value("--dump-grads", a.dump_grads) ||
        value("--trace", a.trace) || value("--device-memory", a.device_memory) || value("--check-timeout", a.check_timeout) ||
        value("--eval-budget", a.eval_budget) || value("--eval-timeout", a.eval_timeout) || value("--save-every", a.save_every) || value("--metrics", a.metrics) ||
        value("--device", a.device) || value("--precision", a.precision) || value("--nodes", a.nodes) || value("--top", a.top) ||
        value("--out", a.output) || value("--ranks", a.ranks) || value("--comm", a.comm)) {
      if (!err.empty()) return false;
      // --trace OUT: a file name, never empty or an option ("--trace --steps 2").
      if ((s == "--trace" || s.rfind("--trace=", 0) == 0) && (a.trace.empty() || a.trace[0] == '-')) {
        err = "--trace needs a file name (--trace OUT.json)";
        return false;
      }
      continue;
    }
    if (!err.empty()) return false;
    if (s.size() > 1 && s[0] == '-' && s != "-") {
      if (s == "--help" || s == "-h") { a.command = "help"; continue; }
      if (s == "--reference") { a.reference = true; continue; }
      if (s == "--verify") { a.verify = true; continue; }
      if (s == "--stats") { a.stats = true; continue; }
      if (s == "--peak-by-rank") { a.peak_by_rank = true; continue; }
      if (s == "--eval") { a.eval = true; continue; }
      if (s == "--overlap-grad-reduce") { a.overlap_grad = true; continue; }
      if (s == "--all-ranks") { a.all_ranks = true; continue; }
      if (s == "--no-check") { a.no_check = true; continue; }
      if (s == "--simulate") { a.simulate = true; continue; }
      if (s == "--quick") { a.quick = true; continue; }
      err = "unknown option '" + s + "'";
      return false;
    }
    if (a.command.empty()) a.command = s;
    else a.positional.push_back(s);
  }
  return true;
}

bool parse_int(const std::string& text, long long& out) {
  // Digits only (an optional '-'): no spaces, no '+', nothing past the
  // range of a 64-bit integer (strtoll would saturate it silently).
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || (text[0] == '-' && text.size() > 1))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(text.c_str(), &end, 10);
  return *end == '\0' && errno != ERANGE;
}

std::vector<std::string> stdlib_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("NNS_STDLIB"); env && *env) dirs.push_back(env);
  dirs.push_back(NNS_STDLIB_DIR);
  return dirs;
}

bool parse_topology(const Args& a, bool plan_flags_only, Topology& t, std::string& usage) {
  long long n = 1;
  if (!a.gpus.empty() && (!parse_int(a.gpus, n) || n < 1 || n > 65536)) {
    usage = "--gpus must be an integer from 1 to 65536";
    return false;
  }
  backend::LaunchEnv launch;
  if (!plan_flags_only) {
    // Ranks that torchrun, srun or mpirun started: the world is theirs.
    std::string err;
    if (!backend::detect_launch_env(backend::process_env(), launch, err)) {
      usage = err;
      return false;
    }
    if (launch.world_size > 1) {
      if (a.gpus.empty()) {
        n = launch.world_size;
      } else if (n != launch.world_size) {
        usage = "--gpus " + a.gpus + " but " + launch.source + " started " + std::to_string(launch.world_size) +
                " ranks (" + launch.described + "); drop --gpus or make them agree (NNS_LAUNCHER=local ignores the launcher)";
        return false;
      }
    }
  }
  if (a.plan.empty()) {
    if (!a.plan_gpus.empty() || (plan_flags_only && !a.gpus.empty())) {
      usage = plan_flags_only ? "--gpus and --plan-gpus need --plan NAME" : "--plan-gpus needs --plan NAME";
      return false;
    }
    t = Topology{n, 1, n, launch};  // every rank a data-parallel replica of the whole model
    return true;
  }
  long long k = n;
  if (!a.plan_gpus.empty() && (!parse_int(a.plan_gpus, k) || k < 1 || n % k != 0)) {
    usage = "--plan-gpus must be a positive divisor of --gpus";
    return false;
  }
  t = Topology{n, k, n / k, launch};
  return true;
}

bool parse_eval_budget(const Args& a, sema::EvalBudget& budget, std::string& usage) {
  if (!a.eval_budget.empty()) {
    long long steps = 0;
    if (!parse_int(a.eval_budget, steps) || steps < 0) {
      usage = "--eval-budget must be a number of interpreter steps (a non-negative integer; 0 for no limit)";
      return false;
    }
    budget.steps = steps;
  }
  if (!a.eval_timeout.empty()) {
    char* end = nullptr;
    double v = std::strtod(a.eval_timeout.c_str(), &end);
    if (end == a.eval_timeout.c_str() || *end != '\0' || !(v >= 0) || v > 1e6) {
      usage = "--eval-timeout must be a number of seconds (0 for no limit, at most 1000000)";
      return false;
    }
    budget.seconds = v;
  }
  return true;
}

bool parse_check_limits(const Args& a, sema::check::CheckOptions& opts, std::string& usage) {
  if (!a.device_memory.empty() && !sema::check::parse_memory_size(a.device_memory, opts.device_memory, opts.memory_label, usage)) return false;
  if (!a.check_timeout.empty()) {
    long long ms = 0;
    if (!parse_int(a.check_timeout, ms) || ms < 1 || ms > 86400000) {
      usage = "--check-timeout must be a number of milliseconds (1 to 86400000)";
      return false;
    }
    opts.timeout_ms = opts.total_timeout_ms = static_cast<unsigned>(ms);
  }
  if (a.precision == "fp16" || a.precision == "bf16") opts.bytes_per_element = 2;
  else if (!a.precision.empty() && a.precision != "fp32") {
    usage = "--precision must be fp32, bf16 or fp16";
    return false;
  }
  if ((!a.device_memory.empty() || !a.check_timeout.empty()) && a.plan.empty()) {
    usage = "--device-memory and --check-timeout need --plan NAME";
    return false;
  }
  return true;
}

}  // namespace nns::driver
