#include "driver/args.h"

#include <cstdlib>
#include <cerrno>
#include <cctype>
#include <iostream>

#include "backend/planner/profiles.h"
#include "frontend/suggest.h"

namespace nns::driver {

int usage_error(const std::string& msg) {
  std::cerr << "nns: error: " << msg << "\n(run 'nns --help' for usage)\n";
  return kExitUsage;
}

namespace {

// Every flag, once: those that take a value and those that are switches.
struct ValueFlag {
  const char* name;
  std::string Args::*field;
};
struct SwitchFlag {
  const char* name;
  bool Args::*field;
};
const ValueFlag kValueFlags[] = {
    {"--config", &Args::config},
    {"--emit", &Args::emit},
    {"--shapes", &Args::shapes},
    {"--gpus", &Args::gpus},
    {"--plan", &Args::plan},
    {"--plan-gpus", &Args::plan_gpus},
    {"-o", &Args::output},
    {"--seed-bug", &Args::seed_bug},
    {"--steps", &Args::steps},
    {"--stop-after", &Args::stop_after},
    {"--seed", &Args::seed},
    {"--threads", &Args::threads},
    {"--init", &Args::init},
    {"--init-map", &Args::init_map},
    {"--map", &Args::init_map},
    {"--dump-outputs", &Args::dump_outputs},
    {"--data", &Args::data},
    {"--save", &Args::save},
    {"--save-best", &Args::save_best},
    {"--resume", &Args::resume},
    {"--dump-grads", &Args::dump_grads},
    {"--trace", &Args::trace},
    {"--device-memory", &Args::device_memory},
    {"--check-timeout", &Args::check_timeout},
    {"--eval-budget", &Args::eval_budget},
    {"--eval-timeout", &Args::eval_timeout},
    {"--save-every", &Args::save_every},
    {"--metrics", &Args::metrics},
    {"--tensorboard", &Args::tensorboard},
    {"--device", &Args::device},
    {"--precision", &Args::precision},
    {"--nodes", &Args::nodes},
    {"--top", &Args::top},
    {"--vp", &Args::vp},
    {"--recompute", &Args::recompute},
    {"--out", &Args::output},
    {"--ranks", &Args::ranks},
    {"--comm", &Args::comm},
};
const SwitchFlag kSwitchFlags[] = {
    {"--reference", &Args::reference},
    {"--verify", &Args::verify},
    {"--verify-drift", &Args::verify_drift},
    {"--stats", &Args::stats},
    {"--peak-by-rank", &Args::peak_by_rank},
    {"--eval", &Args::eval},
    {"--overlap-grad-reduce", &Args::overlap_grad},
    {"--all-ranks", &Args::all_ranks},
    {"--verify-programs", &Args::verify_programs},
    {"--distributed-optimizer", &Args::distributed_optimizer},
    {"--overlap-param-gather", &Args::overlap_param_gather},
    {"--tp-comm-overlap", &Args::tp_comm_overlap},
    {"--no-check", &Args::no_check},
    {"--simulate", &Args::simulate},
    {"--dp-in-plan", &Args::dp_in_plan},
    {"--quick", &Args::quick},
    {"--init-partial", &Args::init_partial},
};

std::vector<std::string> flag_names() {
  std::vector<std::string> names = {"--help", "--set"};
  for (const ValueFlag& f : kValueFlags) names.push_back(f.name);
  for (const SwitchFlag& f : kSwitchFlags) names.push_back(f.name);
  return names;
}

}  // namespace

bool parse_args(int argc, char** argv, Args& a, std::string& err) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    // --set KEY=VALUE, repeatable: every occurrence kept.
    if (s == "--set" || s.rfind("--set=", 0) == 0) {
      if (s == "--set" && i + 1 >= argc) {
        err = "--set needs a value (--set KEY=VALUE)";
        return false;
      }
      a.sets.push_back(s == "--set" ? argv[++i] : s.substr(6));
      continue;
    }
    // A flag with its value, as "--flag VALUE" or "--flag=VALUE".
    const ValueFlag* valued = nullptr;
    for (const ValueFlag& f : kValueFlags) {
      const std::string flag = f.name;
      if (s == flag) {
        if (i + 1 >= argc) {
          err = flag + " needs a value";
          return false;
        }
        a.*f.field = argv[++i];
      } else if (s.rfind(flag + "=", 0) == 0) {
        a.*f.field = s.substr(flag.size() + 1);
      } else {
        continue;
      }
      valued = &f;
      break;
    }
    if (valued) {
      // No flag means anything when given empty (--device "", --precision "",
      // --save ""): a mistake in a script, refused rather than taken as unset.
      if ((a.*valued->field).empty()) {
        err = std::string(valued->name) + " needs a non-empty value";
        return false;
      }
      // --trace OUT: a file name, never empty or an option ("--trace --steps 2").
      if (valued->field == &Args::trace && (a.trace.empty() || a.trace[0] == '-')) {
        err = "--trace needs a file name (--trace OUT.json)";
        return false;
      }
      continue;
    }
    if (s.size() > 1 && s[0] == '-' && s != "-") {
      if (s == "--help" || s == "-h") {
        // nns --help: everything; nns CMD --help: that command's page.
        if (a.command.empty()) a.command = "help";
        else a.help = true;
        continue;
      }
      bool known = false;
      for (const SwitchFlag& f : kSwitchFlags)
        if (s == f.name) {
          a.*f.field = true;
          known = true;
        }
      if (known) continue;
      err = "unknown option '" + s + "'" + front::did_you_mean(s.substr(0, s.find('=')), flag_names());
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
    if (!a.plan_gpus.empty()) {
      usage = "--plan-gpus needs --plan NAME";
      return false;
    }
    if (a.distributed_optimizer) {
      usage = "--distributed-optimizer needs --plan NAME (it shards over the replicas of --plan-gpus)";
      return false;
    }
    // Every rank a data-parallel replica of the whole model: the implicit
    // plan (sema::implicit_plan) on one device, N replicas of it.
    t = Topology{n, 1, n, false, launch};
    return true;
  }
  long long k = n;
  if (!a.plan_gpus.empty() && (!parse_int(a.plan_gpus, k) || k < 1 || n % k != 0)) {
    usage = "--plan-gpus must be a positive divisor of --gpus";
    return false;
  }
  t = Topology{n, k, n / k, a.distributed_optimizer, launch};
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
  if (!a.device_memory.empty() && !planner::parse_device_memory(a.device_memory, opts.device_memory, opts.memory_label, usage)) return false;
  if (!a.check_timeout.empty()) {
    long long ms = 0;
    if (!parse_int(a.check_timeout, ms) || ms < 1 || ms > 86400000) {
      usage = "--check-timeout must be a number of milliseconds (1 to 86400000)";
      return false;
    }
    opts.timeout_ms = opts.total_timeout_ms = static_cast<unsigned>(ms);
  }
  if (a.precision == "fp16" || a.precision == "bf16") opts.bytes_per_element = 2;
  else if (!a.precision.empty() && a.precision != "fp32" &&
           a.precision != "bf16-storage") {  // bf16-storage: PipelineOptions::bf16_storage
    usage = "--precision must be fp32, bf16, fp16 or bf16-storage";
    return false;
  }
  if ((!a.device_memory.empty() || !a.check_timeout.empty()) && a.plan.empty()) {
    usage = "--device-memory and --check-timeout need --plan NAME";
    return false;
  }
  return true;
}

}  // namespace nns::driver
