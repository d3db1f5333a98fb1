#include "driver/commands.h"
#include "backend/runtime/comm/env_vars.h"
#include "driver/weights.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "backend/runtime/atomic_file.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/plan_runtime.h"
#include "backend/runtime/safetensors.h"
#include "driver/pipeline.h"
#include "driver/run_device.h"
#include "frontend/diagnostics.h"
#include "repl/repl.h"
#include "semantics/dimop.h"

namespace nns::driver {

// The options check and run share: FILE, --config, --plan, --seed-bug,
// --emit, --gpus/--plan-gpus and the checker's limits; kExitOk or the usage
// error's exit code. `check`: --gpus and --plan-gpus describe a plan only.
int pipeline_options(const Args& a, bool check, Stage last, PipelineOptions& o) {
  o.path = a.positional[0];
  o.config = a.config;
  o.sets = a.sets;
  o.plan = a.plan;
  o.seed_bug = a.seed_bug;
  o.last = last;
  if (!a.emit.empty()) {
    // --emit=program:PASS: the programs as they stand after that lowering pass.
    std::string stage = a.emit;
    if (stage.rfind("program:", 0) == 0) {
      o.program_pass = stage.substr(8);
      stage = "program";
    }
    if (!emit_stage(stage, o.last)) return usage_error(std::string("--emit must be one of ") + emit_stage_names() + " (got '" + a.emit + "')");
    o.emit = true;
    if ((stage_needs_plan(o.last) || !o.program_pass.empty()) && a.plan.empty()) return usage_error("--emit=" + a.emit + " needs --plan NAME");
  }
  std::string usage;
  if (!parse_topology(a, check, o.topo, usage) || !parse_check_limits(a, o.check, usage) || !parse_eval_budget(a, o.eval_budget, usage))
    return usage_error(usage);
  o.bf16_storage = a.precision == "bf16-storage";
  // Ranks this process would start itself: refused before the model is
  // elaborated and every rank's program lowered and verified (65536 ranks
  // took 18 s of that before the same refusal at launch).
  if (!check && !o.topo.external() && o.topo.ranks > 1)
    if (std::string why = backend::local_ranks_problem(o.topo.ranks); !why.empty())
      return usage_error("--gpus " + std::to_string(o.topo.ranks) + ": " + why);
  return kExitOk;
}

namespace {

// check's report after the stages: the model's size and its train block.
void print_summary(const PipelineOptions& o, Pipeline& p) {
  using sema::format_bytes;
  using sema::format_count;
  sema::GraphSummary s = sema::summarize(p.graph());
  const sema::Interpreter& interp = *p.interp;
  std::printf("%s", o.path.c_str());
  if (!interp.config_name().empty()) std::printf(" (config %s)", interp.config_name().c_str());
  std::printf("\n");
  std::printf("  ops:           %lld top-level (%lld including composite bodies)\n", (long long)s.top_level_ops, (long long)s.all_ops);
  std::printf("  parameters:    %s (%lld) = %s\n", format_count((double)s.param_count).c_str(), (long long)s.param_count,
              format_bytes(s.param_bytes).c_str());
  if (s.buffer_count > 0)
    std::printf("  buffers:       %s (%lld) = %s (no gradient, no update)\n", format_count((double)s.buffer_count).c_str(),
                (long long)s.buffer_count, format_bytes(s.buffer_bytes).c_str());
  std::printf("  inputs:        %s per step\n", format_bytes(s.input_bytes).c_str());
  std::printf("  activations:   %s (forward outputs of every op)\n", format_bytes(s.activation_bytes).c_str());
  std::printf("  forward:       %.3f GMACs = %.3f GFLOPs per step (multiply-adds of matmul/linear/conv)\n",
              (double)s.forward_macs / 1e9, 2.0 * (double)s.forward_macs / 1e9);
  if (const auto& t = interp.train()) {
    std::printf("  train:         loss %%%d, %s lr %g, %s schedule, %lld steps, %lld micro-batch(es), data %s\n", t->loss,
                t->optimizer.kind.c_str(), t->optimizer.lr, t->schedule.kind.c_str(), (long long)t->steps,
                (long long)t->micro_batches, t->data.kind.c_str());
  } else {
    std::printf("  train:         none (no train block: `nns run` has nothing to train)\n");
  }
  if (s.top_level_ops == 0) std::printf("  note:          the file defines no op (no model is called on a tensor)\n");
  if (!interp.plans().empty()) {
    std::string names;
    for (const auto& pl : interp.plans()) names += (names.empty() ? "" : ", ") + pl.name;
    std::printf("  plans:         %s\n", names.c_str());
  }
  std::printf("  elaborated in  %.1f ms\n", p.elaborate_ms);
}

// "[4,8],[8,16]" -> shapes; "?" for a non-tensor operand.
bool parse_shapes(const std::string& text, std::vector<sema::InputShape>& out, std::string& err) {
  size_t i = 0;
  auto skip = [&] { while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i; };
  skip();
  while (i < text.size()) {
    if (text[i] == '?') { out.push_back({false, {}}); ++i; skip(); continue; }
    if (text[i] != '[') { err = "expected '[' at offset " + std::to_string(i); return false; }
    ++i;
    sema::InputShape s;
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

}  // namespace

int cmd_check(const Args& a) {
  if (a.positional.size() != 1) return usage_error("check needs exactly one FILE");
  if (!a.trace.empty()) return usage_error("--trace is a flag of run (nns run FILE ... --trace OUT.json)");
  // The NNS_* variables check reads (NNS_SETUP_NOTICE), refused as run refuses them.
  if (std::string bad = backend::check_nns_variables(backend::process_env()); !bad.empty()) return usage_error(bad);
  PipelineOptions o;
  if (int rc = pipeline_options(a, /*check=*/true, Stage::Check, o); rc != kExitOk) return rc;
  Pipeline p;
  int rc = run_pipeline(o, p);
  if (rc == kExitOk && !o.emit) print_summary(o, p);
  keep_until_exit(std::move(p));
  return rc;
}

int cmd_run(const Args& a) {
  if (a.positional.size() != 1) return usage_error("run needs exactly one FILE");
  long long steps = -1, seed = 0, threads = 0;
  if (!a.steps.empty() && (!parse_int(a.steps, steps) || steps < 1)) return usage_error("--steps must be a positive integer");
  if (!parse_int(a.seed, seed) || seed < 0) return usage_error("--seed must be a non-negative integer");
  if (!a.threads.empty() && (!parse_int(a.threads, threads) || threads < 1)) return usage_error("--threads must be a positive integer");
  long long save_every = 0, stop_after = 0;
  if (!a.stop_after.empty() && (!parse_int(a.stop_after, stop_after) || stop_after < 1))
    return usage_error("--stop-after must be a positive number of steps");
  if (!a.save_every.empty() && (!parse_int(a.save_every, save_every) || save_every < 1))
    return usage_error("--save-every must be a positive number of steps");
  if (!a.save_every.empty() && a.save.empty()) return usage_error("--save-every needs --save (where to save)");
  if (std::string why = a.save.empty() ? "" : backend::save_target_problem(a.save); !why.empty())
    return usage_error("--save " + a.save + ": " + why);
  if (std::string why = a.save_best.empty() ? "" : backend::save_target_problem(a.save_best); !why.empty())
    return usage_error("--save-best " + a.save_best + ": " + why);
  if (const char* bad = backend::cpu::fast::check_bf16_env()) return usage_error(bad);
  // The device first, before anything starts threads: finding the GPUs
  // forks a probe (run_device.h).
  std::string device, device_err;
  bool device_usage = false;
  if (!resolve_run_device(a.device, device, device_err, device_usage)) {
    if (device_usage) return usage_error(device_err);
    std::cerr << "nns: error: " << device_err << "\n";
    return kExitRuntime;
  }
  // Counted now, before anything starts threads (the count forks a probe).
  const int gpus_visible = device == "cuda" ? visible_cuda_devices() : 0;
  if (cuda_code_device(device) && a.reference)
    return usage_error("--reference runs the CPU reference kernels; it does not take --device " + device + " (use --device cpu)");
  if (a.eval) {
    // Evaluation is forward passes: no gradients to verify or dump, no state to save.
    const char* clash = a.verify || a.verify_drift ? "--verify"
                        : !a.save.empty()          ? "--save"
                        : !a.save_best.empty()     ? "--save-best"
                        : !a.dump_grads.empty()    ? "--dump-grads"
                        : !a.trace.empty()         ? "--trace"
                        : !a.metrics.empty()       ? "--metrics"
                        : !a.tensorboard.empty()   ? "--tensorboard"
                        : a.stats                  ? "--stats"
                                                   : nullptr;
    if (clash) return usage_error(std::string("--eval runs forward passes only; it does not take ") + clash);
  }
  PipelineOptions o;
  if (int rc = pipeline_options(a, /*check=*/false, Stage::Run, o); rc != kExitOk) return rc;
  if (const backend::LaunchEnv& launch = o.topo.launch; o.topo.external()) {
    // Ranks started by torchrun, srun or mpirun: only rank 0 prints, as
    // under nns's own launcher; --trace needs that launcher, which merges
    // the ranks' parts.
    if (!a.trace.empty())
      return usage_error("--trace needs ranks launched by nns run --gpus N (these were started by " + launch.source + ": " +
                         launch.described + ")");
    const char* verbose = std::getenv("NNS_VERBOSE_RANKS");
    if (launch.rank > 0 && !(verbose && std::string(verbose) == "1") && !std::freopen("/dev/null", "w", stdout))
      std::cerr << "nns: warning: rank " << launch.rank << " could not silence its stdout\n";
  }
  o.steps = steps;
  o.run.seed = static_cast<uint64_t>(seed);
  o.run.threads = static_cast<int>(threads);
  o.run.init = a.init;
  o.run.init_map = a.init_map;
  o.run.init_partial = a.init_partial;
  o.run.dump_outputs = a.dump_outputs;
  if (!a.dump_outputs.empty() && (!a.eval || !a.plan.empty() || o.topo.ranks != 1))
    return usage_error(
        "--dump-outputs writes the train block's named tensors of an --eval on one device (no --plan, no --gpus N)");
  o.run.data = a.data;
  o.run.save = a.save;
  o.run.save_every = save_every;
  o.run.stop_after = stop_after;
  o.run.save_best = a.save_best;
  o.run.tensorboard = a.tensorboard;
  o.run.metrics = a.metrics;
  o.run.resume = a.resume;
  o.run.dump_grads = a.dump_grads;
  o.run.trace = a.trace;
  o.run.reference = a.reference;
  o.run.verify = a.verify || a.verify_drift;
  o.run.verify_drift = a.verify_drift;
  o.run.peak_by_rank = a.peak_by_rank;
  if (a.peak_by_rank && a.plan.empty()) return usage_error("--peak-by-rank needs --plan NAME (a partitioned run's ranks)");
  o.run.eval = a.eval;
  o.run.device = device;
  o.run.stats = a.stats;
  if (cuda_code_device(device) && o.topo.ranks > 1 && o.plan.empty())
    return usage_error("--device " + device +
                       " runs one device or a --plan; data-parallel replicas without a plan run on CPU ranks (--device cpu)");
  // Where a plan's collectives run (backend/runtime/collectives.h).
  if (!a.comm.empty() && o.plan.empty()) return usage_error("--comm picks where a plan's collectives run; it needs --plan NAME");
  {
    backend::CommFacts facts;
    facts.device = device;
    facts.nccl_built = built_with_nccl();
    facts.ranks = static_cast<int>(o.topo.ranks);
    // nns's own launcher starts every rank on this host; an outside one says how many it put here.
    facts.local_ranks = o.topo.external() ? o.topo.launch.local_world_size : static_cast<int>(o.topo.ranks);
    facts.visible_gpus = gpus_visible;
    std::string comm_err;
    bool comm_usage = false;
    // grad_reduce is a train setting, known once the file is read: the run checks it again (train.cpp).
    if (!backend::choose_collectives(a.comm.empty() ? "auto" : a.comm, facts, o.run.comm, o.run.comm_why, comm_err, comm_usage)) {
      if (comm_usage) return usage_error(comm_err);
      std::cerr << "nns: error: " << comm_err << "\n";
      return kExitRuntime;
    }
  }
  Pipeline p;
  return run_pipeline(o, p);
}

// nns ckpt merge DIR -o FILE
int cmd_ckpt(const Args& a) {
  if (!a.positional.empty() && a.positional[0] == "export") return cmd_ckpt_export(a);
  if (a.positional.size() != 2 || a.positional[0] != "merge" || a.output.empty())
    return usage_error("usage: nns ckpt merge DIR -o FILE (DIR: the folder 'nns run --plan P --save DIR' wrote; its last complete save is merged)");
  try {
    std::printf("%s\n", backend::merge_checkpoint_shards(a.positional[1], a.output).c_str());
  } catch (const backend::SafetensorsError& e) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const backend::RuntimeError& e) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitOk;
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
    BoundAnno bound = sema::bind(anno, shapes, given);
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
    bool colour = front::want_colour();
    std::cerr << (colour ? "\033[1m" : "") << "<annotation>:1:" << e.column + 1 << ": " << (colour ? "\033[1;31m" : "") << "error: "
              << (colour ? "\033[0m\033[1m" : "") << e.message << (colour ? "\033[0m" : "") << "\n  " << text << "\n  "
              << std::string(e.column, ' ') << "^\n";
    return kExitBadInput;
  }
}


int cmd_repl(const Args& a) {
  if (a.positional.size() > 1) return usage_error("repl takes at most one FILE");
  Topology topo;
  if (std::string usage; !parse_topology(a, /*plan_flags_only=*/false, topo, usage)) return usage_error(usage);
  repl::ReplOptions o;
  o.file = a.positional.empty() ? "" : a.positional[0];
  o.config = a.config;
  o.ngpus = topo.ranks;  // the session plan's devices; its `run` starts as many ranks
  o.stdlib_dirs = stdlib_dirs();
  if (std::string usage; !parse_eval_budget(a, o.budget, usage)) return usage_error(usage);
  // `run` starts this same executable's run command.
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  o.nns_binary = ec ? "nns" : self;
  return repl::run_repl(o);
}

}  // namespace nns::driver
