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
#include "backend/lowering/lower_plan.h"
#include "backend/runtime/plan_runtime.h"
#include "backend/lowering/program_check.h"
#include "backend/runtime/safetensors.h"
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
bool verify_lowered(const nns::sema::Graph& g, const nns::sema::Plan& plan, int replicas, const std::string& seed_bug,
                    const nns::sema::TrainSpec* spec) {
  nns::backend::SeededBug bug = nns::backend::SeededBug::None;
  if (!seed_bug.empty() && !nns::backend::seeded_bug_from_name(seed_bug, bug)) {
    std::cerr << "nns: error: --seed-bug must be one of " << nns::backend::seeded_bug_names() << "\n";
    return false;
  }
  nns::backend::ProgramCheck pc = nns::backend::verify_programs(g, plan, replicas, bug, spec);
  if (!pc.applied.empty()) std::printf("program: seeded bug (test hook): %s\n", pc.applied.c_str());
  std::printf("program: %d rank(s), %d edge(s), %d adapter step(s), %d collective(s) matched across ranks: %s (%.1f ms)\n", pc.ranks, pc.edges,
              pc.steps, pc.collectives, pc.ok ? "verified" : "WRONG", pc.ms);
  std::fflush(stdout);
  for (const std::string& e : pc.errors) std::cerr << "nns: error: program: " << e << "\n";
  return pc.ok;
}

// The plan lowered to per-rank programs with the sub-ops elaborated on
// their slices by the interpreter (only_rank < 0: every rank).
nns::backend::LoweredPlan lower_with_bodies(nns::sema::Interpreter& interp, const nns::sema::Graph& g, const nns::sema::Plan& plan,
                                            const nns::sema::TrainSpec& spec, int replicas, int only_rank) {
  nns::backend::LowerOptions lo;
  lo.replicas = replicas;
  lo.only_rank = only_rank;
  lo.elaborate = [&interp](int node, const std::vector<nns::sema::Shape>& ins, const std::vector<nns::sema::Shape>& outs,
                           const std::map<std::string, int64_t>& div, nns::sema::Graph& local) {
    return interp.instantiate_op(node, ins, outs, div, local);
  };
  return nns::backend::lower_plan(g, plan, spec, lo);
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
  if (!a.emit.empty() && a.emit != "tokens" && a.emit != "ast" && a.emit != "graph" && a.emit != "plan" && a.emit != "comm" && a.emit != "program")
    return usage_error("--emit must be tokens, ast, graph, plan, comm or program (got '" + a.emit + "')");
  if ((a.emit == "plan" || a.emit == "comm" || a.emit == "program") && a.plan.empty()) return usage_error("--emit=" + a.emit + " needs --plan NAME");
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
    nns::sema::TrainSpec spec = interp.train() ? *interp.train() : nns::sema::TrainSpec{};
    if (!verify_lowered(g, plan, check_replicas, a.seed_bug, &spec)) return kExitRuntime;
    if (a.emit == "program") {
      try {
        std::cout << lower_with_bodies(interp, g, plan, spec, check_replicas, -1).dump(g);
      } catch (const nns::backend::LoweringError& e) {
        std::cerr << "nns: error: " << e.what() << "\n";
        return kExitRuntime;
      }
      return kExitOk;
    }
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


// Largest normwise relative error between two sets of named tensors:
// ||a - b||_2 / ||b||_2 per tensor (elementwise ratios explode near zero,
// and AdamW amplifies rounding noise in a few tiny-gradient elements into
// isolated weight differences that a max-norm would report as the whole
// tensor's error). The denominator is floored at `floor`; tensors in `skip`
// are not compared.
// Elements flagged in `masks` (same name, 1 = skip) are left out of the difference.
using ElementMasks = std::map<std::string, std::vector<char>>;
double compare_tensors(const std::map<std::string, std::vector<float>>& got, const std::map<std::string, std::vector<float>>& want,
                       std::string& worst, double floor = 1e-30, const std::set<std::string>& skip = {}, const ElementMasks* masks = nullptr) {
  double max_err = 0;
  for (const auto& [name, ref] : want) {
    if (skip.count(name)) continue;
    auto it = got.find(name);
    if (it == got.end() || it->second.size() != ref.size()) {
      worst = name + " (missing)";
      return 1e30;
    }
    const std::vector<char>* mask = nullptr;
    if (masks)
      if (auto m = masks->find(name); m != masks->end() && m->second.size() == ref.size()) mask = &m->second;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      double d = mask && (*mask)[i] ? 0.0 : static_cast<double>(it->second[i]) - ref[i];
      diff += d * d;
      norm += static_cast<double>(ref[i]) * ref[i];
    }
    double err = std::sqrt(diff) / std::max(std::sqrt(norm), floor);
    if (std::getenv("NNS_VERIFY_DETAIL") && err > 1e-5) {
      size_t shown = 0;
      for (size_t i = 0; i < ref.size() && shown < 6; ++i)
        if (std::fabs(static_cast<double>(it->second[i]) - ref[i]) > 1e-5 * std::sqrt(norm)) {
          std::fprintf(stderr, "  %s[%zu]: %.9g vs %.9g\n", name.c_str(), i, it->second[i], ref[i]);
          ++shown;
        }
    }
    if (err > max_err) {
      max_err = err;
      worst = name;
    }
  }
  return max_err;
}

// Parameters the loss does not depend on (an attention key bias: softmax is
// invariant to it) have gradients at rounding level; AdamW turns that noise
// into lr-sized steps, so their values legitimately differ between any two
// summation orders. They are reported, not compared.
// Weight elements whose gradient has been at rounding level (|g| at most
// 1e-6 of the largest gradient element) in some step: AdamW divides such a
// gradient by its own magnitude, so rounding noise becomes an update of up
// to lr (the isolated differences the normwise weight error would otherwise
// report). They grow into `masks` step by step; the count is reported.
size_t mark_rounding_level(const std::map<std::string, std::vector<float>>& grads, ElementMasks& masks) {
  double gmax = 0;
  for (const auto& [name, g] : grads)
    for (float v : g) gmax = std::max(gmax, static_cast<double>(std::fabs(v)));
  size_t total = 0;
  for (const auto& [name, g] : grads) {
    std::vector<char>& m = masks[name];
    m.resize(g.size(), 0);
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::fabs(static_cast<double>(g[i])) <= 1e-6 * gmax) m[i] = 1;
      total += m[i] ? 1 : 0;
    }
  }
  return total;
}

std::set<std::string> loss_invariant(const std::map<std::string, std::vector<float>>& grads, double& global_max) {
  global_max = 0;
  std::map<std::string, double> local;
  for (const auto& [name, g] : grads) {
    double m = 0;
    for (float v : g) m += static_cast<double>(v) * v;
    m = std::sqrt(m);
    local[name] = m;
    global_max = std::max(global_max, m);
  }
  std::set<std::string> out;
  for (const auto& [name, m] : local)
    if (m <= 1e-6 * global_max) out.insert(name);
  return out;
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
    if (!verify_lowered(g, plan, static_cast<int>(gpus / plan_gpus), a.seed_bug, &spec)) return kExitRuntime;
    if (a.emit == "program") {
      // Every rank's program, without starting the ranks.
      try {
        std::cout << lower_with_bodies(interp, g, plan, spec, static_cast<int>(gpus / plan_gpus), -1).dump(g);
      } catch (const nns::backend::LoweringError& e) {
        std::cerr << "nns: error: " << e.what() << "\n";
        return kExitRuntime;
      }
      return kExitOk;
    }
  }
  nns::sema::TrainingGraphInfo info = nns::sema::build_training_graph(g, spec.optimizer.kind);
  if (a.emit == "graph") {
    std::cout << g.dump();
    return kExitOk;
  }

  // One rank's share of a partitioned plan; with --verify, every rank
  // assembles the full gradients and weights each step (collective) and
  // rank 0 compares them with one device running the whole model.
  auto train_plan = [&](nns::backend::Communicator* comm) -> int {
    int rank = comm ? comm->rank() : 0;
    int world = comm ? comm->size() : 1;
    auto backend = nns::backend::make_cpu_backend(a.reference);
    int rank_threads = threads > 0 ? static_cast<int>(threads) : (comm ? nns::backend::rank_threads() : 0);
    if (rank_threads > 0) backend->set_threads(rank_threads);
    nns::backend::PlanTrainer trainer(g, lower_with_bodies(interp, g, plan, spec, world / static_cast<int>(plan.ngpus), rank), spec, *backend, comm,
                                      static_cast<uint64_t>(seed));
    if (!a.init.empty()) trainer.load(a.init, false);
    if (!a.resume.empty()) trainer.load(a.resume, true);
    const int64_t start = trainer.steps_done();
    if (start >= spec.steps) {
      if (rank == 0) std::printf("nns: the checkpoint is at step %lld; nothing left to run (raise --steps)\n", static_cast<long long>(start));
      return kExitOk;
    }
    int64_t replicas = world / plan.ngpus;
    std::unique_ptr<nns::backend::Backend> ref_backend;
    std::unique_ptr<nns::backend::Trainer> reference;
    nns::sema::TrainSpec ref_spec = spec;
    if (a.verify && rank == 0) {
      ref_spec.micro_batches = spec.micro_batches * replicas;
      ref_backend = nns::backend::make_cpu_backend(a.reference);
      if (rank_threads > 0) ref_backend->set_threads(rank_threads);
      nns::backend::TrainOptions ref_opts;
      ref_opts.seed = static_cast<uint64_t>(seed);
      ref_opts.init_path = a.init;
      ref_opts.resume_path = a.resume;
      reference = std::make_unique<nns::backend::Trainer>(g, info, ref_spec, *ref_backend, ref_opts);
    }
    if (rank == 0)
      std::printf("nns: training %s (config %s) with plan %s on %d CPU rank(s) (%lld device(s) per plan replica, %lld replica(s); no CUDA "
                  "device in use), %s kernels, %d thread(s) per rank; %lld steps, %s %g\n",
                  a.positional[0].c_str(), interp.config_name().empty() ? "-" : interp.config_name().c_str(), plan.name.c_str(), world,
                  static_cast<long long>(plan.ngpus), static_cast<long long>(replicas), a.reference ? "reference" : "oneDNN",
                  rank_threads > 0 ? rank_threads : nns_default_threads(), static_cast<long long>(spec.steps), spec.optimizer.kind.c_str(),
                  spec.optimizer.lr);
    double total = 0, first_loss = 0, last_loss = 0, worst_verify = 0;
    std::set<std::string> invariant_params;
    ElementMasks rounding_masks;
    size_t rounding_elements = 0;
    for (int64_t s = start; s < spec.steps; ++s) {
      nns::backend::StepStats st = trainer.step();
      if (!std::isfinite(st.loss)) {
        if (rank == 0) std::fprintf(stderr, "nns: error: step %lld: the loss is %f (diverged)\n", static_cast<long long>(st.step), st.loss);
        return kExitRuntime;
      }
      if (s == start) first_loss = st.loss;
      last_loss = st.loss;
      if (s > start) total += st.seconds;
      std::map<std::string, std::vector<float>> grads, weights;
      if (a.verify) {
        grads = trainer.last_gradients();
        weights = trainer.parameters();
      }
      if (rank != 0) continue;
      double rate = static_cast<double>(trainer.samples_per_step()) / st.seconds;
      std::printf("step %4lld/%lld  loss %.6f  lr %.3g  |g| %.3f  %8.2f ms  %10.0f %s/s  peak %s\n", static_cast<long long>(st.step),
                  static_cast<long long>(spec.steps), st.loss, st.lr, st.grad_norm, st.seconds * 1e3, rate,
                  trainer.counts_tokens() ? "tokens" : "samples", nns::sema::format_bytes(trainer.piece_bytes_peak()).c_str());
      if (reference) {
        nns::backend::StepStats rs = reference->step();
        std::string wg, ww;
        auto ref_grads = reference->last_gradients();
        double gmax = 0;
        invariant_params = std::max(invariant_params, loss_invariant(ref_grads, gmax));
        double loss_err = std::fabs(st.loss - rs.loss) / std::max(1e-30, std::fabs(rs.loss));
        double grad_err = compare_tensors(grads, ref_grads, wg, 1e-6 * gmax, invariant_params);
        rounding_elements = mark_rounding_level(ref_grads, rounding_masks);
        double weight_err = compare_tensors(weights, reference->parameters(), ww, 1e-30, invariant_params, &rounding_masks);
        // Each step is checked from the same weights: the reference adopts the
        // plan's, so differences AdamW amplified out of rounding-level
        // gradients (left out above) do not compound into later steps.
        for (const auto& [name, w] : weights) reference->set_parameter(name, w);
        worst_verify = std::max({worst_verify, loss_err, grad_err, weight_err});
        std::printf("  verify vs 1 device x %lld micro-batches: loss %.2e, gradients %.2e%s, weights %.2e%s\n",
                    static_cast<long long>(ref_spec.micro_batches), loss_err, grad_err, wg.empty() ? "" : (" (" + wg + ")").c_str(),
                    weight_err, ww.empty() ? "" : (" (" + ww + ")").c_str());
      }
      std::fflush(stdout);
    }
    if (!a.save.empty()) {
      trainer.save_shards(a.save);
      if (rank == 0)
        std::printf("checkpoint shards: %s/rank-*.safetensors (step %lld); 'nns ckpt merge %s -o FILE' makes one checkpoint\n",
                    a.save.c_str(), static_cast<long long>(trainer.steps_done()), a.save.c_str());
    }
    if (rank != 0) return kExitOk;
    std::printf("done: %lld steps, loss %.6f -> %.6f", static_cast<long long>(spec.steps - start), first_loss, last_loss);
    if (spec.steps - start > 1) std::printf(", %.2f ms/step (steps after the first)", total / static_cast<double>(spec.steps - start - 1) * 1e3);
    std::printf(", peak piece memory %s (rank 0)\n", nns::sema::format_bytes(trainer.piece_bytes_peak()).c_str());
    if (reference) {
      bool ok = worst_verify <= 1e-5;
      std::printf("verify: largest relative error %.2e over losses, gradients and weights: %s (fp32 bound 1e-05)\n", worst_verify,
                  ok ? "PASS" : "FAIL");
      if (rounding_elements > 0)
        std::printf("verify: %zu weight element(s) whose gradient was at rounding level (<= 1e-6 of the largest) left out of the weight "
                    "comparison\n",
                    rounding_elements);
      if (!ok) return kExitRuntime;
    }
    return kExitOk;
  };

  // One rank's training loop; with gpus > 1 it runs in each forked rank.
  auto train = [&](nns::backend::Communicator* comm) -> int {
    if (!a.plan.empty()) return train_plan(comm);
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
    nns::backend::Trainer trainer(g, info, spec, *backend, opts);
    if (a.emit == "program") {
      if (rank == 0) std::cout << trainer.program().dump(g);
      return kExitOk;
    }
    // --verify: the same step on one device with world x micro_batches
    // micro-batches (what the replicas compute together), compared each step.
    std::unique_ptr<nns::backend::Backend> ref_backend;
    std::unique_ptr<nns::backend::Trainer> reference;
    nns::sema::TrainSpec ref_spec = spec;
    if (a.verify && rank == 0) {
      ref_spec.micro_batches = spec.micro_batches * world;
      ref_backend = nns::backend::make_cpu_backend(a.reference);
      if (rank_threads > 0) ref_backend->set_threads(rank_threads);
      nns::backend::TrainOptions ref_opts = opts;
      ref_opts.comm = nullptr;
      reference = std::make_unique<nns::backend::Trainer>(g, info, ref_spec, *ref_backend, ref_opts);
    }
    if (rank == 0)
      std::printf("nns: training %s (config %s) on %d CPU rank(s)%s, %s kernels, %d thread(s) per rank; %lld steps, %s %g\n",
                  a.positional[0].c_str(), interp.config_name().empty() ? "-" : interp.config_name().c_str(), world,
                  world > 1 ? " as data-parallel replicas (no CUDA device in use)" : "", a.reference ? "reference" : "oneDNN",
                  rank_threads > 0 ? rank_threads : nns_default_threads(), static_cast<long long>(spec.steps), spec.optimizer.kind.c_str(),
                  spec.optimizer.lr);
    double total = 0, first_loss = 0, last_loss = 0, worst_verify = 0;
    std::set<std::string> invariant_params;  // grows only: see loss_invariant
    ElementMasks rounding_masks;              // grows only: see mark_rounding_level
    size_t rounding_elements = 0;
    int64_t start = trainer.steps_done();
    if (start >= spec.steps) {
      if (rank == 0) std::printf("nns: the checkpoint is at step %lld; nothing left to run (raise --steps)\n", static_cast<long long>(start));
      return kExitOk;
    }
    for (int64_t s = start; s < spec.steps; ++s) {
      nns::backend::StepStats st = trainer.step();
      if (!std::isfinite(st.loss)) {
        std::fprintf(stderr, "nns: error: step %lld: the loss is %f (diverged)\n", static_cast<long long>(st.step), st.loss);
        return kExitRuntime;
      }
      if (s == start) first_loss = st.loss;
      last_loss = st.loss;
      if (s > start) total += st.seconds;  // the first step includes one-off setup (primitive creation)
      if (st.step == 1 && !a.dump_grads.empty() && rank == 0) trainer.save_gradients(a.dump_grads);
      if (rank != 0) continue;
      double rate = static_cast<double>(trainer.samples_per_step()) / st.seconds;
      std::printf("step %4lld/%lld  loss %.6f  lr %.3g  |g| %.3f  %8.2f ms  %10.0f %s/s  peak %s\n", static_cast<long long>(st.step),
                  static_cast<long long>(spec.steps), st.loss, st.lr, st.grad_norm, st.seconds * 1e3, rate,
                  trainer.counts_tokens() ? "tokens" : "samples", nns::sema::format_bytes(backend->peak_bytes()).c_str());
      if (reference) {
        nns::backend::StepStats rs = reference->step();
        std::string wg, ww;
        auto ref_grads = reference->last_gradients();
        double gmax = 0;
        invariant_params = std::max(invariant_params, loss_invariant(ref_grads, gmax));
        double loss_err = std::fabs(st.loss - rs.loss) / std::max(1e-30, std::fabs(rs.loss));
        // Gradient errors are relative to the tensor's norm, floored at a millionth of the largest gradient norm.
        double grad_err = compare_tensors(trainer.last_gradients(), ref_grads, wg, 1e-6 * gmax, invariant_params);
        rounding_elements = mark_rounding_level(ref_grads, rounding_masks);
        double weight_err = compare_tensors(trainer.parameters(), reference->parameters(), ww, 1e-30, invariant_params, &rounding_masks);
        worst_verify = std::max({worst_verify, loss_err, grad_err, weight_err});
        std::printf("  verify vs 1 device x %lld micro-batches: loss %.2e, gradients %.2e%s, weights %.2e%s\n",
                    static_cast<long long>(ref_spec.micro_batches), loss_err, grad_err, wg.empty() ? "" : (" (" + wg + ")").c_str(),
                    weight_err, ww.empty() ? "" : (" (" + ww + ")").c_str());
      }
      std::fflush(stdout);
    }
    if (rank != 0) return kExitOk;
    int64_t timed = spec.steps - start - 1;
    std::printf("done: %lld steps, loss %.6f -> %.6f", static_cast<long long>(spec.steps - start), first_loss, last_loss);
    if (timed > 0) std::printf(", %.2f ms/step (steps after the first)", total / static_cast<double>(timed) * 1e3);
    std::printf(", peak memory %s%s\n", nns::sema::format_bytes(backend->peak_bytes()).c_str(), world > 1 ? " (rank 0)" : "");
    if (!a.save.empty()) {
      trainer.save_checkpoint(a.save);
      std::printf("checkpoint: %s (step %lld)\n", a.save.c_str(), static_cast<long long>(trainer.steps_done()));
    }
    if (reference) {
      bool ok = worst_verify <= 1e-5;
      std::printf("verify: largest relative error %.2e over losses, gradients and weights: %s (fp32 bound 1e-05)\n", worst_verify,
                  ok ? "PASS" : "FAIL");
      if (rounding_elements > 0)
        std::printf("verify: %zu weight element(s) whose gradient was at rounding level (<= 1e-6 of the largest) left out of the weight "
                    "comparison\n",
                    rounding_elements);
      if (!invariant_params.empty()) {
        std::printf("verify: %zu parameter(s) do not affect the loss (gradient norm below 1e-6 of the largest) and were not compared:",
                    invariant_params.size());
        int shown = 0;
        for (const std::string& n : invariant_params)
          if (shown++ < 4) std::printf(" %s", n.c_str());
        std::printf("%s\n", invariant_params.size() > 4 ? " ..." : "");
      }
      if (!ok) return kExitRuntime;
    }
    return kExitOk;
  };

  auto guarded = [&](nns::backend::Communicator* comm) -> int {
    try {
      return train(comm);
    } catch (const nns::backend::SafetensorsError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
    } catch (const nns::backend::RuntimeError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
    } catch (const nns::backend::LoweringError& e) {
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
