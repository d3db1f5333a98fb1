// The nns command line. Exit codes: 0 ok, 64 usage, 65 bad input
// (syntax / semantic / plan errors), 70 runtime failure.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/ast_printer.h"
#include "frontend/diagnostics.h"
#include "frontend/parser.h"
#include "semantics/dimop.h"
#include "semantics/interpreter.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/launcher.h"
#include "backend/lowering/comm_plan.h"
#include "backend/runtime/plan_runtime.h"
#include "backend/lowering/program_check.h"
#include "backend/runtime/safetensors.h"
#include "backend/runtime/train_loop.h"
#include "backend/runtime/trainer.h"
#include "backend/runtime/cpu/kernels.h"
#include "semantics/autograd.h"
#include "repl/repl.h"
#include "semantics/checker/checker.h"

namespace {

int nns_default_threads() {
  int n = nns::backend::cpu::get_threads();
  return n > 0 ? n : 1;
}

constexpr int kExitOk = 0, kExitUsage = 64, kExitBadInput = 65, kExitRuntime = 70;

const char* kHelp = R"(nns — a parallelization engine with its own language

usage: nns <command> [options]

commands:
  check FILE [--config NAME] [--plan P --gpus N [--plan-gpus K] [--device-memory SIZE] [--check-timeout MS] [--seed-bug KIND]]
        [--emit=tokens|ast|graph|plan|comm]
      parse and elaborate FILE with a config preset (default: the first one in
      the file) and print a summary: ops, parameters and their bytes,
      activation bytes, forward multiply-adds per step. --emit prints a stage
      instead: the token stream, the syntax tree or the operator graph.
      --plan evaluates plan P for N devices (trans/assign/replicate/order)
      and refuses an illegal one with the directive's location, then proves
      it legal with Z3 (split legality, coverage, devices, op-order, memory,
      the plan's constraint tables; symbolic sizes for every admissible
      value) and prints the verdict and the time spent; a conflict is one
      error at the first directive of the unsat core and a note at each
      other. --device-memory is a capacity per device (80GiB, 512MiB) or a
      preset (v100, a100-40g, a100, h100, h200); without it memory is
      reported, not checked. --check-timeout bounds each Z3 call (default
      10000 ms); a time-out exits 70. Then the lowered per-rank programs
      are verified against one device (every edge's collectives on every
      device, collective order across ranks, updates after reductions);
      exit 70 if wrong. --plan-gpus K checks P for K devices run as N/K
      replicas; --seed-bug KIND (a test hook) corrupts the programs first:
      missing-allreduce, allgather-for-allreduce, wrong-group,
      wrong-stage-device, replica-scale, early-update, double-count,
      collective-order. --emit=plan
      prints every op's partition tree, operand slices and devices;
      --emit=comm every derived collective (primitive, groups, bytes).
  ckpt merge DIR -o FILE
      assemble the checkpoint shards a partitioned run saved (nns run --plan P
      --save DIR) into one single-device checkpoint; it resumes any plan on
      any number of ranks (--resume FILE), or one device.
  dimop 'ANNOTATION' [--shapes '[4,8],[8,16]']
      normalise a dimop annotation (nnScaler's language) and print its
      transform space: every legal partition and what it does to each
      operand. With --shapes the annotation is bound to input shapes first.
  run FILE [--gpus N] [--plan P [--plan-gpus K]] [--verify] [--config C] [--steps N] [--seed S]
         [--threads T] [--init W.safetensors] [--data D.safetensors]
         [--save CKPT] [--resume CKPT] [--dump-grads G.safetensors]
         [--reference] [--emit=graph|program]
      train the model of FILE's train block: one progress line per step
      (step, loss, step time, throughput, peak memory) and a summary.
      --gpus 1 trains on one device (CPU: oneDNN kernels, T threads, default
      all cores); --gpus N > 1 launches N CPU rank processes (Gloo over TCP,
      cores shared: threads per rank = cores / N) that train as data-parallel
      replicas, and --verify compares every step's loss, gradients and
      weights with one device running N x micro_batches (exit 70 beyond a
      relative error of 1e-5). --plan P runs FILE's plan P partitioned
      over the ranks: each rank runs its sub-ops and the collectives the plan
      derives, after the Z3 checker has proved the plan legal (--device-memory
      and --check-timeout as for check); --plan-gpus K evaluates P for K devices and runs N/K replicas
      of it (default K = N); with --plan, --save DIR writes per-rank shards
      (see ckpt merge) and --resume/--init read a single-device file.
      --reference uses the plain reference kernels; --save writes
      a checkpoint (weights, optimizer state, step) after the last step,
      --resume continues one bit-identically; --dump-grads writes step 1's
      gradients; --emit prints the training graph or the lowered program.
  repl [FILE] [--config C] [--gpus N]
      an interactive session over FILE's model (or the stdlib alone): any
      .nns statement or expression; plan directives (trans, assign,
      replicate, order, recompute) typed one at a time, each answered with
      the collectives it adds or removes, memory per device and the verdict;
      commands ops, show OP, status, comm, plan, undo, reset, gpus, save,
      run N [--verify], help. Line editing, history (~/.nns_history or
      $NNS_HISTORY) and Tab completion on a terminal; from a pipe it reads
      plain lines without prompts (exit 65 if any input failed).
  help, --help, -h
      this text.

environment:
  NNS_STDLIB   folder of the standard library (default: the source tree's stdlib/)
  NO_COLOR     disables coloured diagnostics

exit codes: 0 ok, 64 usage error, 65 bad input, 70 runtime failure
)";

int usage_error(const std::string& msg) {
  std::cerr << "nns: error: " << msg << "\n(run 'nns --help' for usage)\n";
  return kExitUsage;
}

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::string config, emit, shapes;
  std::string plan, plan_gpus, output, seed_bug;
  std::string device_memory, check_timeout;
  std::string gpus = "1", steps, seed = "0", threads, init, data, save, resume, dump_grads;
  bool reference = false, verify = false;
};

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
    if (value("--config", a.config) || value("--emit", a.emit) || value("--shapes", a.shapes) || value("--gpus", a.gpus) || value("--plan", a.plan) || value("--plan-gpus", a.plan_gpus) || value("-o", a.output) || value("--seed-bug", a.seed_bug) ||
        value("--steps", a.steps) || value("--seed", a.seed) || value("--threads", a.threads) || value("--init", a.init) ||
        value("--data", a.data) || value("--save", a.save) || value("--resume", a.resume) || value("--dump-grads", a.dump_grads) ||
        value("--device-memory", a.device_memory) || value("--check-timeout", a.check_timeout)) {
      if (!err.empty()) return false;
      continue;
    }
    if (!err.empty()) return false;
    if (s.size() > 1 && s[0] == '-' && s != "-") {
      if (s == "--help" || s == "-h") { a.command = "help"; continue; }
      if (s == "--reference") { a.reference = true; continue; }
      if (s == "--verify") { a.verify = true; continue; }
      err = "unknown option '" + s + "'";
      return false;
    }
    if (a.command.empty()) a.command = s;
    else a.positional.push_back(s);
  }
  return true;
}

std::vector<std::string> stdlib_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("NNS_STDLIB"); env && *env) dirs.push_back(env);
  dirs.push_back(NNS_STDLIB_DIR);
  return dirs;
}

bool parse_int(const std::string& text, long long& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtoll(text.c_str(), &end, 10);
  return *end == '\0';
}

// Program verification of the lowered per-rank programs (backend/program_check.h);
// prints the verdict line. False (and the diagnoses on stderr) when wrong.
bool verify_lowered(const nns::sema::Graph& g, const nns::sema::Plan& plan, int replicas, const std::string& seed_bug) {
  nns::backend::SeededBug bug = nns::backend::SeededBug::None;
  if (!seed_bug.empty() && !nns::backend::seeded_bug_from_name(seed_bug, bug)) {
    std::cerr << "nns: error: --seed-bug must be one of " << nns::backend::seeded_bug_names() << "\n";
    return false;
  }
  nns::backend::ProgramCheck pc = nns::backend::verify_programs(g, plan, replicas, bug);
  if (!pc.applied.empty()) std::printf("program: seeded bug (test hook): %s\n", pc.applied.c_str());
  std::printf("program: %d rank(s), %d edge(s), %d adapter step(s), %d collective(s) matched across ranks: %s (%.1f ms)\n", pc.ranks, pc.edges,
              pc.steps, pc.collectives, pc.ok ? "verified" : "WRONG", pc.ms);
  std::fflush(stdout);
  for (const std::string& e : pc.errors) std::cerr << "nns: error: program: " << e << "\n";
  return pc.ok;
}

// --device-memory and --check-timeout (check and run share them); false
// with the usage message when one is malformed.
bool parse_check_limits(const Args& a, nns::sema::check::CheckOptions& opts, std::string& usage) {
  if (!a.device_memory.empty() && !nns::sema::check::parse_memory_size(a.device_memory, opts.device_memory, opts.memory_label, usage)) return false;
  if (!a.check_timeout.empty()) {
    long long ms = 0;
    if (!parse_int(a.check_timeout, ms) || ms < 1 || ms > 86400000) {
      usage = "--check-timeout must be a number of milliseconds (1 to 86400000)";
      return false;
    }
    opts.timeout_ms = static_cast<unsigned>(ms);
  }
  return true;
}

int cmd_check(const Args& a) {
  if (a.positional.size() != 1) return usage_error("check needs exactly one FILE");
  if (!a.emit.empty() && a.emit != "tokens" && a.emit != "ast" && a.emit != "graph" && a.emit != "plan" && a.emit != "comm")
    return usage_error("--emit must be tokens, ast, graph, plan or comm (got '" + a.emit + "')");
  if ((a.emit == "plan" || a.emit == "comm") && a.plan.empty()) return usage_error("--emit=" + a.emit + " needs --plan NAME");
  long long check_gpus = 1;
  if (!parse_int(a.gpus, check_gpus) || check_gpus < 1) return usage_error("--gpus must be a positive integer");
  int check_replicas = 1;
  nns::sema::check::CheckOptions check_opts;
  if (std::string usage; !parse_check_limits(a, check_opts, usage)) return usage_error(usage);
  if ((!a.device_memory.empty() || !a.check_timeout.empty()) && a.plan.empty()) return usage_error("--device-memory and --check-timeout need --plan NAME");
  const std::string& path = a.positional[0];
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags(sources);
  bool colour = nns::front::want_colour();

  if (a.emit == "tokens") {
    int file = sources.load(path);
    if (file < 0) {
      std::cerr << "nns: error: cannot read file '" << path << "'\n";
      return kExitBadInput;
    }
    std::cout << nns::front::dump_tokens(sources, file);
    return kExitOk;
  }

  auto t0 = std::chrono::steady_clock::now();
  nns::sema::Interpreter interp(sources, diags, {a.config, stdlib_dirs()});
  if (!interp.parse(path)) {
    diags.print(std::cerr, colour);
    return kExitBadInput;
  }
  if (a.emit == "ast") {
    std::cout << nns::front::dump_ast(*interp.main_program());
    return kExitOk;
  }
  bool ok = interp.evaluate();
  auto t1 = std::chrono::steady_clock::now();
  // Unknown --config is a usage problem, not a bad file.
  if (!ok) {
    diags.print(std::cerr, colour);
    for (const auto& d : diags.all())
      if (d.message.rfind("unknown config '", 0) == 0) return kExitUsage;
    return kExitBadInput;
  }
  diags.print(std::cerr, colour);  // warnings
  const nns::sema::Graph& g = interp.graph();
  nns::sema::Plan plan;
  if (!a.plan.empty()) {
    auto p0 = std::chrono::steady_clock::now();
    // --plan-gpus K: the plan for K devices, run as --gpus / K replicas.
    long long check_plan_gpus = check_gpus;
    if (!a.plan_gpus.empty() && (!parse_int(a.plan_gpus, check_plan_gpus) || check_plan_gpus < 1 || check_gpus % check_plan_gpus != 0))
      return usage_error("--plan-gpus must be a positive divisor of --gpus");
    check_gpus = check_plan_gpus;
    check_replicas = static_cast<int>(std::stoll(a.gpus) / check_plan_gpus);
    if (!interp.evaluate_plan(a.plan, check_gpus, plan)) {
      diags.print(std::cerr, colour);
      for (const auto& d : diags.all())
        if (d.message.rfind("unknown plan '", 0) == 0) return kExitUsage;
      return kExitBadInput;
    }
    if (a.emit == "plan") {
      std::cout << plan.dump(g);
      return kExitOk;
    }
    if (a.emit == "comm") {
      std::cout << nns::backend::derive_communication(g, plan).dump(g);
      return kExitOk;
    }
    double pms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
    std::printf("plan %s on %lld device(s): %zu sub-ops, %zu order constraint(s), evaluated in %.1f ms\n", a.plan.c_str(), check_gpus,
                plan.leaves().size(), plan.orders.size(), pms);
    // The Z3 checker: exit 65 for an illegal plan, 70 when Z3 gives up.
    if (const auto& t = interp.train()) {
      check_opts.optimizer = t->optimizer.kind;
      check_opts.momentum = t->optimizer.momentum;
      check_opts.micro_batches = t->micro_batches;
    }
    check_opts.sources = &sources;
    nns::sema::check::Verdict verdict;
    nns::sema::check::check_plan(g, plan, check_opts, diags, std::cout, &verdict);
    if (verdict != nns::sema::check::Verdict::Legal) {
      std::cout.flush();
      diags.print(std::cerr, colour);
      return nns::sema::check::exit_code(verdict);
    }
    // The lowered programs: what every rank will run, checked against one device.
    if (!verify_lowered(g, plan, check_replicas, a.seed_bug)) return kExitRuntime;
  }
  if (a.emit == "graph") {
    std::cout << g.dump();
    return kExitOk;
  }
  using nns::sema::format_bytes;
  using nns::sema::format_count;
  nns::sema::GraphSummary s = nns::sema::summarize(g);
  double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  std::printf("%s", path.c_str());
  if (!interp.config_name().empty()) std::printf(" (config %s)", interp.config_name().c_str());
  std::printf("\n");
  std::printf("  ops:           %lld top-level (%lld including composite bodies)\n", (long long)s.top_level_ops, (long long)s.all_ops);
  std::printf("  parameters:    %s (%lld) = %s\n", format_count((double)s.param_count).c_str(), (long long)s.param_count,
              format_bytes(s.param_bytes).c_str());
  std::printf("  inputs:        %s per step\n", format_bytes(s.input_bytes).c_str());
  std::printf("  activations:   %s (forward outputs of every op)\n", format_bytes(s.activation_bytes).c_str());
  std::printf("  forward:       %.3f GMACs = %.3f GFLOPs per step (multiply-adds of matmul/linear/conv)\n",
              (double)s.forward_macs / 1e9, 2.0 * (double)s.forward_macs / 1e9);
  if (const auto& t = interp.train()) {
    std::printf("  train:         loss %%%d, %s lr %g, %s schedule, %lld steps, %lld micro-batch(es), data %s\n", t->loss,
                t->optimizer.kind.c_str(), t->optimizer.lr, t->schedule.kind.c_str(), (long long)t->steps,
                (long long)t->micro_batches, t->data.kind.c_str());
  }
  if (!interp.plans().empty()) {
    std::string names;
    for (const auto& p : interp.plans()) names += (names.empty() ? "" : ", ") + p.name;
    std::printf("  plans:         %s\n", names.c_str());
  }
  std::printf("  elaborated in  %.1f ms\n", ms);
  return kExitOk;
}

// "[4,8],[8,16]" -> shapes; "?" for a non-tensor operand.
bool parse_shapes(const std::string& text, std::vector<nns::sema::InputShape>& out, std::string& err) {
  size_t i = 0;
  auto skip = [&] { while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i; };
  skip();
  while (i < text.size()) {
    if (text[i] == '?') { out.push_back({false, {}}); ++i; skip(); continue; }
    if (text[i] != '[') { err = "expected '[' at offset " + std::to_string(i); return false; }
    ++i;
    nns::sema::InputShape s;
    while (i < text.size() && text[i] != ']') {
      if (text[i] == ' ' || text[i] == ',') { ++i; continue; }
      if (!isdigit(static_cast<unsigned char>(text[i]))) { err = "bad character '" + std::string(1, text[i]) + "' in shapes"; return false; }
      long long v = 0;
      while (i < text.size() && isdigit(static_cast<unsigned char>(text[i]))) v = v * 10 + (text[i++] - '0');
      s.shape.push_back(v);
    }
    if (i >= text.size()) { err = "unclosed '[' in shapes"; return false; }
    ++i;
    out.push_back(s);
    skip();
  }
  return true;
}


// nns ckpt merge DIR -o FILE
int cmd_ckpt(const Args& a) {
  if (a.positional.size() != 2 || a.positional[0] != "merge" || a.output.empty())
    return usage_error("usage: nns ckpt merge DIR -o FILE (DIR: the shards 'nns run --plan P --save DIR' wrote)");
  try {
    std::printf("%s\n", nns::backend::merge_checkpoint_shards(a.positional[1], a.output).c_str());
  } catch (const nns::backend::SafetensorsError& e) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const nns::backend::RuntimeError& e) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitOk;
}

// PlanTrainer as a TrainSession (until it implements the interface itself).
// The one place the driver builds a plan executor: when the per-rank program
// becomes data (lower_plan), this takes the rank's program instead.
struct PlanSession : nns::backend::TrainSession {
  nns::backend::PlanTrainer trainer;
  template <class... A>
  explicit PlanSession(A&&... args) : trainer(std::forward<A>(args)...) {}
  nns::backend::StepStats step() override { return trainer.step(); }
  int64_t steps_done() const override { return trainer.steps_done(); }
  int64_t samples_per_step() const override { return trainer.samples_per_step(); }
  bool counts_tokens() const override { return trainer.counts_tokens(); }
  int64_t peak_bytes() const override { return trainer.piece_bytes_peak(); }
  nns::backend::TensorMap parameters() override { return trainer.parameters(); }
  nns::backend::TensorMap last_gradients() override { return trainer.last_gradients(); }
};

std::unique_ptr<PlanSession> make_plan_session(nns::sema::Interpreter& interp, const nns::sema::Graph& g, const nns::sema::Plan& plan,
                                               const nns::sema::TrainSpec& spec, nns::backend::Backend& backend, nns::backend::Communicator* comm,
                                               uint64_t seed) {
  return std::make_unique<PlanSession>(interp, g, plan, spec, backend, comm, seed);
}

int cmd_run(const Args& a) {
  if (a.positional.size() != 1) return usage_error("run needs exactly one FILE");
  long long gpus = 1, steps = -1, seed = 0, threads = 0;
  if (!parse_int(a.gpus, gpus) || gpus < 1) return usage_error("--gpus must be a positive integer");
  if (!a.steps.empty() && (!parse_int(a.steps, steps) || steps < 1)) return usage_error("--steps must be a positive integer");
  if (!parse_int(a.seed, seed) || seed < 0) return usage_error("--seed must be a non-negative integer");
  if (!a.threads.empty() && (!parse_int(a.threads, threads) || threads < 1)) return usage_error("--threads must be a positive integer");
  if (!a.emit.empty() && a.emit != "graph" && a.emit != "program") return usage_error("run --emit must be graph or program");
  long long plan_gpus = gpus;
  if (!a.plan_gpus.empty() && (!parse_int(a.plan_gpus, plan_gpus) || plan_gpus < 1 || gpus % plan_gpus != 0))
    return usage_error("--plan-gpus must be a positive divisor of --gpus");
  if (!a.plan.empty() && (!a.data.empty() || !a.dump_grads.empty()))
    return usage_error("--plan trains on synthetic data for now: --data and --dump-grads work without --plan only");

  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags(sources);
  bool colour = nns::front::want_colour();
  nns::sema::Interpreter interp(sources, diags, {a.config, stdlib_dirs()});
  if (!interp.parse(a.positional[0]) || !interp.evaluate()) {
    diags.print(std::cerr, colour);
    for (const auto& d : diags.all())
      if (d.message.rfind("unknown config '", 0) == 0) return kExitUsage;
    return kExitBadInput;
  }
  diags.print(std::cerr, colour);
  if (!interp.train()) {
    std::cerr << "nns: error: " << a.positional[0] << " has no train block; nothing to run\n";
    return kExitBadInput;
  }
  nns::sema::TrainSpec spec = *interp.train();
  if (steps > 0) spec.steps = steps;
  nns::sema::Graph& g = interp.graph();
  // The plan is evaluated on the forward graph, before autograd adds to it.
  nns::sema::Plan plan;
  if (!a.plan.empty()) {
    bool ok = interp.evaluate_plan(a.plan, plan_gpus, plan);
    diags.print(std::cerr, colour);
    if (!ok) return kExitBadInput;
    // The Z3 checker runs before anything is lowered: an illegal plan never
    // starts a rank (exit 65; 70 when Z3 gives up).
    nns::sema::check::CheckOptions check_opts;
    check_opts.optimizer = spec.optimizer.kind;
    check_opts.momentum = spec.optimizer.momentum;
    check_opts.micro_batches = spec.micro_batches;
    check_opts.sources = &sources;
    if (std::string usage; !parse_check_limits(a, check_opts, usage)) return usage_error(usage);
    nns::sema::check::Verdict verdict;
    nns::sema::check::check_plan(g, plan, check_opts, diags, std::cout, &verdict);
    if (verdict != nns::sema::check::Verdict::Legal) {
      std::cout.flush();
      diags.print(std::cerr, colour);
      return nns::sema::check::exit_code(verdict);
    }
    if (!verify_lowered(g, plan, static_cast<int>(gpus / plan_gpus), a.seed_bug)) return kExitRuntime;
  }
  nns::sema::TrainingGraphInfo info = nns::sema::build_training_graph(g, spec.optimizer.kind);
  if (a.emit == "graph") {
    std::cout << g.dump();
    return kExitOk;
  }

  // One rank's training: the plan's share of it (PlanSession) or a data-parallel
  // replica of the whole model (Trainer), in the one loop of train_loop.h.
  // With --verify, rank 0 steps a single-device Trainer beside it (world x
  // micro_batches, what the replicas compute together) and compares.
  auto train = [&](nns::backend::Communicator* comm) -> int {
    int rank = comm ? comm->rank() : 0;
    int world = comm ? comm->size() : 1;
    auto backend = nns::backend::make_cpu_backend(a.reference);
    int rank_threads = threads > 0 ? static_cast<int>(threads) : (comm ? nns::backend::rank_threads() : 0);
    if (rank_threads > 0) backend->set_threads(rank_threads);
    nns::backend::TrainOptions opts;
    opts.comm = comm;
    opts.seed = static_cast<uint64_t>(seed);
    opts.init_path = a.init;
    opts.data_path = a.data;
    opts.resume_path = a.resume;
    std::unique_ptr<nns::backend::TrainSession> session;
    std::unique_ptr<nns::backend::Trainer> single;
    nns::backend::LoopOptions lo;
    lo.rank = rank;
    lo.steps = spec.steps;
    lo.verify = a.verify;
    int64_t replicas = world;
    const char* config = interp.config_name().empty() ? "-" : interp.config_name().c_str();
    int shown_threads = rank_threads > 0 ? rank_threads : nns_default_threads();
    char banner[1024];
    if (!a.plan.empty()) {
      auto ps = make_plan_session(interp, g, plan, spec, *backend, comm, static_cast<uint64_t>(seed));
      if (!a.init.empty()) ps->trainer.load(a.init, false);
      if (!a.resume.empty()) ps->trainer.load(a.resume, true);
      if (a.emit == "program") {
        // Ranks print in turn so the dump is deterministic.
        for (int r = 0; r < world; ++r) {
          if (r == rank) std::cout << ps->trainer.dump() << std::flush;
          if (comm) comm->barrier();
        }
        return kExitOk;
      }
      replicas = world / plan.ngpus;
      std::snprintf(banner, sizeof banner,
                    "nns: training %s (config %s) with plan %s on %d CPU rank(s) (%lld device(s) per plan replica, %lld replica(s); no CUDA "
                    "device in use), %s kernels, %d thread(s) per rank; %lld steps, %s %g\n",
                    a.positional[0].c_str(), config, plan.name.c_str(), world, static_cast<long long>(plan.ngpus),
                    static_cast<long long>(replicas), a.reference ? "reference" : "oneDNN", shown_threads, static_cast<long long>(spec.steps),
                    spec.optimizer.kind.c_str(), spec.optimizer.lr);
      lo.collective = true;
      lo.reference_adopts_weights = true;
      lo.peak_label = "peak piece memory";
      lo.peak_of_rank0 = true;
      if (!a.save.empty())
        lo.save = [&a, &ps] {
          ps->trainer.save_shards(a.save);
          return "checkpoint shards: " + a.save + "/rank-*.safetensors (step " + std::to_string(ps->trainer.steps_done()) + "); 'nns ckpt merge " +
                 a.save + " -o FILE' makes one checkpoint";
        };
      session = std::move(ps);
    } else {
      single = std::make_unique<nns::backend::Trainer>(g, info, spec, *backend, opts);
      if (a.emit == "program") {
        if (rank == 0) std::cout << single->program().dump(g);
        return kExitOk;
      }
      std::snprintf(banner, sizeof banner, "nns: training %s (config %s) on %d CPU rank(s)%s, %s kernels, %d thread(s) per rank; %lld steps, %s %g\n",
                    a.positional[0].c_str(), config, world, world > 1 ? " as data-parallel replicas (no CUDA device in use)" : "",
                    a.reference ? "reference" : "oneDNN", shown_threads, static_cast<long long>(spec.steps), spec.optimizer.kind.c_str(),
                    spec.optimizer.lr);
      lo.report_invariant_params = true;
      lo.peak_of_rank0 = world > 1;
      nns::backend::Trainer* t = single.get();
      if (!a.dump_grads.empty()) lo.dump_gradients = [t, &a] { t->save_gradients(a.dump_grads); };
      if (!a.save.empty())
        lo.save = [t, &a] {
          t->save_checkpoint(a.save);
          return "checkpoint: " + a.save + " (step " + std::to_string(t->steps_done()) + ")";
        };
    }
    lo.banner = banner;
    nns::backend::TrainSession& trainer = session ? *session : *single;
    std::unique_ptr<nns::backend::Backend> ref_backend;
    std::unique_ptr<nns::backend::Trainer> reference;
    if (a.verify && rank == 0 && trainer.steps_done() < spec.steps) {
      nns::sema::TrainSpec ref_spec = spec;
      ref_spec.micro_batches = spec.micro_batches * replicas;
      ref_backend = nns::backend::make_cpu_backend(a.reference);
      if (rank_threads > 0) ref_backend->set_threads(rank_threads);
      nns::backend::TrainOptions ref_opts = opts;
      ref_opts.comm = nullptr;
      reference = std::make_unique<nns::backend::Trainer>(g, info, ref_spec, *ref_backend, ref_opts);
      lo.reference = reference.get();
      lo.reference_micro_batches = ref_spec.micro_batches;
    }
    switch (nns::backend::run_train_loop(trainer, lo)) {
      case nns::backend::LoopResult::Ok: return kExitOk;
      case nns::backend::LoopResult::Diverged:
      case nns::backend::LoopResult::VerifyFailed: return kExitRuntime;
    }
    return kExitRuntime;
  };

  auto guarded = [&](nns::backend::Communicator* comm) -> int {
    try {
      return train(comm);
    } catch (const nns::backend::SafetensorsError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
    } catch (const nns::backend::RuntimeError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
    }
    return kExitRuntime;
  };
  if (gpus == 1) return guarded(nullptr);
  std::fflush(stdout);
  return nns::backend::launch_local_ranks(static_cast<int>(gpus), [&](int) -> int {
    try {
      nns::backend::Communicator comm(nns::backend::CommConfig::from_env());
      return guarded(&comm);
    } catch (const nns::backend::RuntimeError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
      return kExitRuntime;
    }
  });
}

int cmd_dimop(const Args& a) {
  if (a.positional.size() != 1) return usage_error("dimop needs exactly one quoted ANNOTATION");
  const std::string& text = a.positional[0];
  using namespace nns::sema;
  try {
    OpAnno anno = parse_normalized(text);
    std::cout << "annotation: " << anno.to_string() << "\n";
    std::vector<InputShape> shapes;
    if (!a.shapes.empty()) {
      std::string err;
      if (!parse_shapes(a.shapes, shapes, err)) return usage_error("--shapes: " + err);
    } else {
      // Without shapes, give every identifier a placeholder size so the
      // transform space can be listed; sizes are not printed then.
      shapes = placeholder_shapes(anno);
    }
    std::map<std::string, int64_t> given;
    if (a.shapes.empty()) {
      // Placeholder sizes also for output-only identifiers and bracket factors.
      for (const auto* side : {&anno.inputs, &anno.outputs})
        for (const OperandAnno& op : *side)
          for (const DimAnno& d : op.dims)
            for (const DimId& id : d.ids)
              if (!id.numeric) given[id.name] = 2;
    }
    BoundAnno bound = nns::sema::bind(anno, shapes, given);
    if (!a.shapes.empty()) {
      std::cout << "bound:      " << bound.anno.to_string() << "\n";
      for (size_t i = 0; i < bound.output_shapes.size(); ++i) {
        std::cout << "output " << i << ":   [";
        for (size_t d = 0; d < bound.output_shapes[i].size(); ++d) std::cout << (d ? ", " : "") << bound.output_shapes[i][d];
        std::cout << "]\n";
      }
    }
    std::vector<TransformChoice> space = transform_space(bound);
    std::cout << "transform space (" << space.size() << " choice" << (space.size() == 1 ? "" : "s") << "):\n";
    for (const TransformChoice& c : space) {
      std::string d = c.describe();
      if (a.shapes.empty()) {
        // drop " (size N)" — the sizes were placeholders
        size_t p = d.find(" (size ");
        if (p != std::string::npos) d.erase(p, d.find(')', p) - p + 1);
      }
      std::cout << "  " << d << "\n";
    }
    return kExitOk;
  } catch (const DimopError& e) {
    bool colour = nns::front::want_colour();
    std::cerr << (colour ? "\033[1m" : "") << "<annotation>:1:" << e.column + 1 << ": " << (colour ? "\033[1;31m" : "") << "error: "
              << (colour ? "\033[0m\033[1m" : "") << e.message << (colour ? "\033[0m" : "") << "\n  " << text << "\n  "
              << std::string(e.column, ' ') << "^\n";
    return kExitBadInput;
  }
}

}  // namespace

int cmd_repl(const Args& a) {
  if (a.positional.size() > 1) return usage_error("repl takes at most one FILE");
  long long gpus = 1;
  if (!parse_int(a.gpus, gpus) || gpus < 1) return usage_error("--gpus must be a positive integer");
  nns::repl::ReplOptions o;
  o.file = a.positional.empty() ? "" : a.positional[0];
  o.config = a.config;
  o.ngpus = gpus;
  o.stdlib_dirs = stdlib_dirs();
  // `run` starts this same executable's run command.
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  o.nns_binary = ec ? "nns" : self;
  return nns::repl::run_repl(o);
}

int main(int argc, char** argv) {
  Args a;
  std::string err;
  if (!parse_args(argc, argv, a, err)) return usage_error(err);
  if (a.command.empty()) {
    std::cerr << kHelp;
    return kExitUsage;
  }
  try {
    if (a.command == "help") {
      std::cout << kHelp;
      return kExitOk;
    }
    if (a.command == "check") return cmd_check(a);
    if (a.command == "dimop") return cmd_dimop(a);
    if (a.command == "ckpt") return cmd_ckpt(a);
    if (a.command == "run") return cmd_run(a);
    if (a.command == "repl") return cmd_repl(a);
    return usage_error("unknown command '" + a.command + "'");
  } catch (const std::exception& e) {
    std::cerr << "nns: internal error: " << e.what() << "\n";
    return kExitRuntime;
  }
}
