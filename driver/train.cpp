#include "driver/train.h"
#include "driver/setup_notice.h"

#include "driver/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/lowering/bf16_storage.h"
#include "backend/lowering/lower_plan.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/checkpoint_store.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/launcher.h"
#include "backend/runtime/cpu/kernels.h"
#include "backend/runtime/cpu/thread_policy.h"
#include "backend/runtime/lr_horizon.h"
#include "backend/runtime/plan_runtime.h"
#include "backend/runtime/safetensors.h"
#include "backend/runtime/trace.h"
#include "backend/runtime/train_loop.h"
#include "backend/runtime/trainer.h"
#include "backend/runtime/verify_bound.h"
#include "driver/run_device.h"
#include "driver/validation.h"
#if NNS_HAVE_NCCL
#include "backend/runtime/comm/nccl_collectives.h"
#include "backend/runtime/cuda/cuda_backend.h"
#endif

namespace nns::driver {

namespace {

// --verify's bound under bf16 autocast: see the README's mixed-precision
// section for the measurements behind it.
constexpr double kBf16VerifyBound = 1e-2;
// bf16 keeps 8 significant bits: a gradient below 2^-8 of the largest is at
// its rounding level (fp32's verifier uses 1e-6 for the same purpose).
constexpr double kBf16Rounding = 1.0 / 256;
// fp16 autocast and the bf16 gradient reduction: docs/language.md (train
// block) gives the measurements behind these bounds.
constexpr double kFp16VerifyBound = 1e-2;
constexpr double kFp16Rounding = 1.0 / 2048;  // 11 significant bits
constexpr double kBf16ReduceVerifyBound = 1e-2;

// The --verify bound, rounding level and name for the run's precision and
// gradient reduction: the looser of the two governs.
void set_verify_bound(const sema::TrainSpec& s, backend::LoopOptions& lo) {
  if (s.precision == "bf16") {
    lo.verify_precision = "bf16";
    lo.verify_bound = kBf16VerifyBound;
    lo.verify_rounding = kBf16Rounding;
  } else if (s.precision == "fp16") {
    lo.verify_precision = "fp16";
    lo.verify_bound = kFp16VerifyBound;
    lo.verify_rounding = kFp16Rounding;
  }
  if (s.grad_reduce == "bf16") {
    lo.verify_precision += ", bf16 gradient reduction,";
    lo.verify_bound = std::max(lo.verify_bound, kBf16ReduceVerifyBound);
    lo.verify_rounding = std::max(lo.verify_rounding, kBf16Rounding);
  }
}

// The one place a rank's plan executor is built: the rank's program
// lowered (with its sub-op bodies) and handed to the runtime.
int local_rank(const PipelineOptions& o, backend::Communicator* comm);

// Where the plan's collectives run: --comm as cmd_run resolved it, less
// what only the train block says (grad_reduce = "bf16" rounds on the host:
// auto falls back to Gloo, a forced NCCL is refused). `why` for the banner.
std::string plan_collectives(const Pipeline& p, const PipelineOptions& o, std::string& why) {
  why = o.run.comm_why;
  if (o.run.comm != "nccl" || p.spec.grad_reduce != "bf16") return o.run.comm;
  const std::string reason = "grad_reduce = \"bf16\" rounds the gradients on the host; there is no device path for it yet";
  if (o.run.comm_why == "--comm nccl") throw backend::RuntimeError("--comm nccl: " + reason);
  why = reason;
  return "gloo";
}

// The one place a rank's plan executor is built: the rank's program
// lowered (with its sub-op bodies) and handed to the runtime, with its
// collectives on the host (Gloo) or on NCCL. `solo`: a one-rank run's host
// Communicator, which NCCL's setup needs (the caller keeps it alive).
// `why`: why the collectives run where they do (the banner's).
std::unique_ptr<backend::PlanTrainer> make_plan_trainer(Pipeline& p, const PipelineOptions& o, backend::Backend& backend,
                                                        backend::Communicator* comm, std::unique_ptr<backend::Communicator>& solo,
                                                        std::string& why) {
  int rank = comm ? comm->rank() : 0;
  backend::CollectivesFactory collectives;
  if (plan_collectives(p, o, why) == "nccl") {
#if NNS_HAVE_NCCL
    if (!comm) solo = std::make_unique<backend::Communicator>(backend::CommConfig{});
    backend::Communicator* host = comm ? comm : solo.get();
    // The backend's GPU (make_run_backend): local rank mod GPUs visible.
    const int device = local_rank(o, comm) % std::max(1, backend::cuda_device_count());
    // auto falls back to Gloo for a plan NCCL cannot match in order; a forced nccl is refused.
    const bool fallback = o.run.comm_why != "--comm nccl";
    collectives = [host, &backend, device, fallback, &why](const backend::LoweredPlan& lp) {
      return backend::make_nccl_collectives(*host, backend, device, lp, host->timeout(), fallback, &why);
    };
#else
    (void)solo;
    throw backend::RuntimeError("internal: NCCL collectives chosen in a build without NCCL");
#endif
  }
  return std::make_unique<backend::PlanTrainer>(p.graph(), lower_with_bodies(*p.interp, p.graph(), p.plan, p.comm, p.spec, o.topo, rank), p.spec,
                                                backend, comm, o.run.seed, backend::data_file(o.run.data, p.spec), collectives);
}

// This rank's index among the ranks on its host (which GPU it takes): nns's
// own launcher starts every rank here; torchrun, srun and mpirun say.
int local_rank(const PipelineOptions& o, backend::Communicator* comm) {
  if (o.topo.external()) return o.topo.launch.local_rank;
  return comm ? comm->rank() : 0;
}

// The train block's precision, as the backend takes it (the interpreter
// accepted only these names).
backend::Precision precision_of(const sema::TrainSpec& s) {
  backend::Precision p = backend::Precision::F32;
  if (!backend::parse_precision(s.precision, p)) throw backend::RuntimeError("internal: unknown precision " + s.precision);
  return p;
}

// --init into a plan's pieces: weights already read (through a map, or
// with --init-partial), else the file.
void load_init(backend::PlanTrainer& ps, const Pipeline& p, const RunOptions& r) {
  if (p.init_weights)
    ps.load_init(*p.init_weights, r.init, r.init_partial);
  else if (!r.init.empty())
    ps.load(r.init, false);
}

// What a one-device trainer reads: seed and files of the run.
backend::TrainOptions train_options(const Pipeline& p, const RunOptions& r) {
  backend::TrainOptions opts;
  opts.seed = r.seed;
  opts.init_path = r.init;
  opts.init_weights = p.init_weights;  // --init-map / --init-partial: read once (driver/weights.h)
  opts.init_partial = r.init_partial;
  opts.data_path = r.data;
  opts.resume_path = r.resume;
  return opts;
}

std::string format_scale(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// The kernels a run's backend runs, as the banners name them.
const char* kernels_name(const RunOptions& r) {
  if (r.device == "cuda") return "CUDA";
  if (r.device == "cuda-emulation") return "CUDA-emulated";
  return r.reference ? "reference" : "oneDNN";
}

// Rank 0's first line: what trains where.
// `collectives`, `why`: where a plan's collectives run (PlanTrainer::collectives_name) and why.
std::string banner(const Pipeline& p, const PipelineOptions& o, int threads, bool adaptive, const std::string& collectives, const std::string& why) {
  const Topology& t = o.topo;
  const sema::TrainSpec& s = p.spec;
  const char* config = p.interp->config_name().empty() ? "-" : p.interp->config_name().c_str();
  const bool cuda = o.run.device == "cuda";
  std::string kernels_text = kernels_name(o.run);
  if (o.run.device == "cuda-emulation") kernels_text += " (the CUDA backend's kernels run on the host)";
  if (s.precision == "bf16") {
    // Which bf16 products the CPU kernels run (cpu/kernels.h bf16_emulated).
    const char* path = "";
    if (o.run.device == "cpu" && !o.run.reference)
      path = backend::cpu::fast::bf16_emulated() ? "; emulated as fp32 products of bf16-rounded operands"
                                                 : "; native oneDNN bf16 matmul";
    kernels_text += std::string(" (bf16 matrix products, fp32 accumulation and weights") + path + ")";
  }
  if (s.precision == "fp16")
    kernels_text += " (fp16 matrix products, fp32 accumulation and weights, dynamic loss scaling from " + format_scale(s.loss_scale.init) + ")";
  if (s.grad_reduce == "bf16") kernels_text += " (gradients reduced in bf16)";
  const char* kernels = kernels_text.c_str();
  int shown_threads = threads > 0 ? threads : std::max(1, backend::cpu::get_threads());
  std::string per_rank = std::to_string(shown_threads) + " thread(s) per rank";
  if (adaptive) per_rank = "up to " + std::to_string(shown_threads) + " thread(s) (fewer while other processes keep cores busy)";
  if (cuda) per_rank = "each rank on GPU (local rank mod GPUs visible)";
  char line[1024];
  if (!o.plan.empty())
    std::snprintf(
        line, sizeof line,
        "nns: training %s (config %s) with plan %s on %lld %s rank(s) (%lld device(s) per plan replica, %lld replica(s)%s%s), %s "
        "kernels, %s; %lld steps, %s %g\n",
        o.path.c_str(), config, p.plan.name.c_str(), static_cast<long long>(t.ranks), cuda ? "CUDA" : "CPU",
        static_cast<long long>(t.devices), static_cast<long long>(t.replicas),
        t.distributed_optimizer && t.replicas > 1 ? ", optimizer state sharded over them" : "",
        cuda ? "" : "; no CUDA device in use", kernels, per_rank.c_str(), static_cast<long long>(s.steps),
        s.optimizer.kind.c_str(), s.optimizer.lr);
  else
    std::snprintf(line, sizeof line, "nns: training %s (config %s) on %lld %s rank(s)%s, %s kernels, %s; %lld steps, %s %g\n",
                  o.path.c_str(), config, static_cast<long long>(t.ranks), cuda ? "CUDA" : "CPU",
                  t.ranks > 1 ? " as data-parallel replicas (no CUDA device in use)" : "", kernels, per_rank.c_str(),
                  static_cast<long long>(s.steps), s.optimizer.kind.c_str(), s.optimizer.lr);
  std::string text = line;
  // A plan (the implicit one included) on several ranks: where its
  // collectives run, and why; not for CPU ranks left to the default, where
  // Gloo is the only choice (a normal run prints the banner, steps and summary).
  const bool cpu_default = !cuda_code_device(o.run.device) && collectives != "nccl" && why.rfind("NCCL needs the CUDA backend", 0) == 0;
  if (p.planned && t.ranks > 1 && !cpu_default) {
    if (collectives == "nccl")
      text += "nns: collectives: NCCL on each rank's GPU, on their own stream (gradient buckets overlap the backward); " + why + "\n";
    else
      text += std::string("nns: collectives: Gloo") + (cuda_code_device(o.run.device) ? ", staged through host memory" : "") + "; " + why + "\n";
  }
  return text;
}

// --save / --save-best under a plan: the implicit plan keeps a one-device
// run's checkpoint, one file, which every replica holds whole (rank 0 writes
// it); a plan saves one shard per rank. Returns the line rank 0 prints.
// The one-device Trainer's --save / --save-best: a whole checkpoint.
std::function<std::string()> trainer_saver(backend::Trainer* t, const std::string& path) {
  return [t, path] {
    t->save_checkpoint(path);
    return "checkpoint: " + path + " (step " + std::to_string(t->steps_done()) + ")";
  };
}

std::function<std::string()> plan_saver(backend::PlanTrainer* t, bool implicit, const std::string& path) {
  if (implicit)
    return [t, path] {
      t->save_whole(path);
      return "checkpoint: " + path + " (step " + std::to_string(t->steps_done()) + ")";
    };
  return [t, path] {
    t->save_shards(path);
    return "checkpoint: " + path + " (step " + std::to_string(t->steps_done()) + ", one shard per rank; --resume " +
           path + " continues it on any plan, 'nns ckpt merge " + path + " -o FILE' makes one file)";
  };
}

// One rank's training. --verify: rank 0 steps a single-device Trainer beside
// it with replicas x micro_batches (what the replicas compute together).
// `validation`: the eval_every pipeline (validation.h), or null.
int train_rank(Pipeline& p, const PipelineOptions& o, backend::Communicator* comm, Pipeline* validation) {
  const RunOptions& r = o.run;
  const int rank = comm ? comm->rank() : 0;
  auto be = make_run_backend(r.device, r.reference, local_rank(o, comm));
  be->set_precision(precision_of(p.spec));
  std::unique_ptr<backend::Communicator> solo_comm;  // --comm nccl on one rank (make_plan_trainer)
  std::string comm_used, comm_why;                    // where a plan's collectives run, and why (the banner)
  int threads = r.threads > 0 ? r.threads : (comm ? backend::rank_threads() : 0);
  // One device without --threads: as many threads as the work can use and
  // the idle cores allow, re-decided as the machine's load changes.
  std::unique_ptr<backend::cpu::ThreadGovernor> governor;
  if (threads == 0 && !comm) {
    int cores = std::max(1, backend::cpu::get_threads());
    threads = backend::cpu::work_threads(sema::summarize(p.graph()).forward_macs, cores);
    if (threads > 1) governor = std::make_unique<backend::cpu::ThreadGovernor>(threads, cores);
  }
  if (threads > 0) be->set_threads(threads);
  backend::TrainOptions opts = train_options(p, r);

  backend::LoopOptions lo;
  lo.rank = rank;
  lo.steps = p.spec.steps;
  lo.stop_after = r.stop_after;
  if (rank == 0)
    for (const std::string& w : backend::lr_horizon_warnings(p.spec.schedule, p.spec.optimizer.lr, p.spec.steps))
      std::fprintf(stderr, "nns: warning: %s\n", w.c_str());
  lo.verify = r.verify;
  set_verify_bound(p.spec, lo);
  lo.verify_hint = "nns verify-op " + o.path + " '*'" + (p.interp->config_name().empty() ? "" : " --config " + p.interp->config_name());
  lo.save_every = r.save_every;
  lo.metrics = r.metrics;
  lo.tensorboard = r.tensorboard;
  lo.stats = r.stats;
  std::unique_ptr<backend::TrainSession> session;
  std::unique_ptr<backend::TraceRecorder> tracer;  // --trace
  backend::TrainOptions ref_opts = opts;  // --verify's reference: f32 where rank 0's program sums in f32 (bf16 storage)
  if (p.planned) {  // --plan, or several ranks without one: the implicit plan
    std::optional<SetupNotice> notice;  // rank 0 says so when lowering its program runs long
    if (rank == 0)
      notice.emplace("lowering " + (p.implicit ? std::string("the data-parallel program") : "plan " + o.plan) +
                     " for rank 0");
    std::unique_ptr<backend::PlanTrainer> ps = make_plan_trainer(p, o, *be, comm, solo_comm, comm_why);
    if (r.verify && rank == 0) ref_opts.keep_f32 = backend::partial_sum_tensors(ps->program(), p.graph());
    notice.reset();
    comm_used = ps->collectives_name();
    if (!r.trace.empty()) {
      tracer = std::make_unique<backend::TraceRecorder>(rank, ps->program().device);
      ps->set_tracer(tracer.get(), p.spec.steps);
    }
    load_init(*ps, p, r);
    if (!r.resume.empty()) ps->load(r.resume, true);
    lo.collective = true;  // every rank assembles the full tensors
    if (p.implicit) {
      lo.report_invariant_params = true;  // as a one-device run: the parameters that do not affect the loss named
    } else {
      lo.peak_label = "peak piece memory";
      lo.peak_note = ", optimizer state " + sema::format_bytes(ps->optimizer_state_bytes());
    }
    lo.peak_of_rank0 = true;
    backend::PlanTrainer* t = ps.get();
    // A collective after the last step (so not among a step's collectives
    // that NNS_COMM_TRACE checks): only when asked for.
    if (r.peak_by_rank) lo.rank_peaks = [t] { return t->piece_bytes_peaks(); };
    // The full gradients are assembled from every rank's pieces (the
    // loop calls this on every rank: lo.collective); rank 0 writes them.
    if (!r.dump_grads.empty())
      lo.dump_gradients = [t, &r, &p, rank] {
        auto grads = t->last_gradients();
        if (rank == 0) backend::write_gradients(r.dump_grads, p.graph(), grads, t->steps_done());
      };
    if (!r.save.empty()) lo.save = plan_saver(t, p.implicit, r.save);
    if (!r.save_best.empty()) lo.save_best = plan_saver(t, p.implicit, r.save_best);
    session = std::move(ps);
  } else {
    auto trainer = std::make_unique<backend::Trainer>(p.graph(), p.info, p.spec, *be, opts);
    if (!r.trace.empty()) {
      tracer = std::make_unique<backend::TraceRecorder>(rank, 0);  // each rank a replica of one device
      trainer->set_tracer(tracer.get(), p.spec.steps);
    }
    lo.report_invariant_params = true;
    backend::Trainer* t = trainer.get();
    if (!r.dump_grads.empty()) lo.dump_gradients = [t, &r] { t->save_gradients(r.dump_grads); };
    if (!r.save.empty()) lo.save = trainer_saver(t, r.save);
    if (!r.save_best.empty()) lo.save_best = trainer_saver(t, r.save_best);
    session = std::move(trainer);
  }
  std::unique_ptr<Validator> validator;  // eval_every: its own forward-only session
  if (validation) {
    validator = std::make_unique<Validator>(*validation, o, comm);
    lo.eval_every = p.spec.eval_every;
    backend::TrainSession* trained = session.get();
    lo.validate = [&validator, trained] { return validator->evaluate(*trained); };
  }
  lo.banner = banner(p, o, threads, governor != nullptr, comm_used, comm_why);
  backend::Backend* backend_ptr = be.get();
  if (governor)
    lo.before_step = [&governor, backend_ptr] {
      int before = governor->current();
      if (int now = governor->decide(); now != before) backend_ptr->set_threads(now);
    };

  std::unique_ptr<backend::Backend> ref_be;
  std::unique_ptr<backend::Trainer> reference;
  backend::DerivedBounds bounds;               // --verify's per-tensor bounds (fp32)
  std::unique_ptr<backend::Backend> drift_be;  // --verify-drift: a free-running one-device copy
  std::unique_ptr<backend::Trainer> drift;
  if (r.verify && rank == 0 && session->steps_done() < p.spec.steps) {
    sema::TrainSpec ref_spec = p.spec;
    ref_spec.micro_batches = p.spec.micro_batches * o.topo.replicas;
    // One device of the same kind (the same kernels) at the same precision:
    // --verify checks the plan's partitioning and communication; the
    // kernels are checked against the CPU reference by the conformance tables.
    ref_be = make_run_backend(r.device, r.reference, local_rank(o, comm));
    ref_be->set_precision(precision_of(p.spec));
    if (threads > 0) ref_be->set_threads(threads);
    reference = std::make_unique<backend::Trainer>(p.graph(), p.info, ref_spec, *ref_be, ref_opts);
    lo.reference = reference.get();
    lo.reference_micro_batches = ref_spec.micro_batches;
    // fp32: every gradient against the bound its reductions' rounding
    // allows (verify_bound.h); the reduced precisions keep their constants.
    if (lo.verify_precision == "fp32") {
      backend::BoundShape shape;
      shape.plan_devices = o.topo.devices;
      shape.replicas = o.topo.replicas;
      shape.micro_batches = p.spec.micro_batches;
      shape.clip = p.spec.clip > 0;
      bounds = backend::derive_bounds(p.graph(), p.info, shape);
      lo.verify_bounds = &bounds;
      // Ops whose annotation could not be read count one rounding: said under NNS_VERIFY_DETAIL.
      if (bounds.unanalysed_nodes > 0 && std::getenv("NNS_VERIFY_DETAIL"))
        std::fprintf(stderr,
                     "verify: %lld node(s) without a readable annotation counted as one rounding each in the bounds\n",
                     static_cast<long long>(bounds.unanalysed_nodes));
    }
    if (r.verify_drift) {
      drift_be = make_run_backend(r.device, r.reference, local_rank(o, comm));
      drift_be->set_precision(precision_of(p.spec));
      if (threads > 0) drift_be->set_threads(threads);
      drift = std::make_unique<backend::Trainer>(p.graph(), p.info, ref_spec, *drift_be, ref_opts);
      lo.drift_reference = drift.get();
    }
  }
  if (backend::run_train_loop(*session, lo) != backend::LoopResult::Ok) return kExitRuntime;
  if (tracer) tracer->write_part(r.trace);  // merged by run_training once every rank has exited
  return kExitOk;
}

}  // namespace

int run_on_ranks(const Topology& topo, const std::function<int(backend::Communicator*)>& rank_main) {
  auto guarded = [&](backend::Communicator* comm) -> int {
    try {
      return rank_main(comm);
    } catch (const backend::SafetensorsError& e) {
      // A file given to --init, --data, --resume that is not what it must be: bad input.
      std::cerr << "nns: error: " << e.what() << "\n";
      return kExitBadInput;
    } catch (const backend::RuntimeError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
    } catch (const backend::LoweringError& e) {
      std::cerr << "nns: error: " << e.what() << "\n";
    }
    return kExitRuntime;
  };
  if (topo.ranks == 1) return guarded(nullptr);
  std::fflush(stdout);
  // One rank of several: its communicator from the environment, which the
  // local launcher sets for each child and an outside launcher for us.
  auto as_rank = [&]() -> int {
    try {
      backend::Communicator comm(backend::CommConfig::from_env());
      return guarded(&comm);
    } catch (const backend::RuntimeError& e) {
      // Under an outside launcher no "[rank R]" prefix says which rank failed.
      std::string who = topo.external() ? "rank " + std::to_string(topo.launch.rank) + ": " : "";
      std::cerr << "nns: error: " << who << e.what() << "\n";
      return kExitRuntime;
    }
  };
  // Started by torchrun, srun, mpirun (or NNS_* by hand): this process is
  // one rank; parse_topology made --gpus equal the launcher's world and
  // cmd_run silenced the stdout of ranks other than 0.
  if (topo.external()) return as_rank();
  // The local-rank cap (cores, memory) was checked with the options,
  // before elaboration (pipeline_options in commands.cpp).
  return backend::launch_local_ranks(static_cast<int>(topo.ranks), [&](int) { return as_rank(); });
}

void prepare_eval(sema::Graph& g) {
  g.inference = true;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    sema::OpNode& n = g.node(static_cast<int>(i));
    if (n.kind == "dropout") n.attrs["p"] = 0.0;
  }
}

EvalSession make_eval_session(Pipeline& p, const PipelineOptions& o, backend::Communicator* comm) {
  const RunOptions& r = o.run;
  EvalSession e;
  e.be = make_run_backend(r.device, r.reference, local_rank(o, comm));
  e.be->set_precision(precision_of(p.spec));
  std::string comm_why;
  int threads = r.threads > 0 ? r.threads : (comm ? backend::rank_threads() : 0);
  if (threads > 0) e.be->set_threads(threads);
  if (p.planned) {
    std::unique_ptr<backend::PlanTrainer> ps = make_plan_trainer(p, o, *e.be, comm, e.solo_comm, comm_why);
    load_init(*ps, p, r);
    if (!r.resume.empty()) ps->load(r.resume, true);
    e.plan = ps.get();
    e.session = std::move(ps);
  } else {
    auto t = std::make_unique<backend::Trainer>(p.graph(), p.info, p.spec, *e.be, train_options(p, r));
    e.one = t.get();
    e.session = std::move(t);
  }
  return e;
}

int run_eval(Pipeline& p, const PipelineOptions& o) {
  const RunOptions& r = o.run;
  const int64_t steps = p.spec.steps;
  return run_on_ranks(o.topo, [&](backend::Communicator* comm) -> int {
    const int rank = comm ? comm->rank() : 0;
    EvalSession e = make_eval_session(p, o, comm);
    backend::TrainSession* session = e.session.get();
    const char* config = p.interp->config_name().empty() ? "-" : p.interp->config_name().c_str();
    const std::string kind = r.device == "cuda" ? " CUDA rank(s)" : " CPU rank(s)";
    std::string where = o.plan.empty() ? std::to_string(o.topo.ranks) + kind + (o.topo.ranks > 1 ? " as data-parallel replicas" : "")
                                       : "plan " + o.plan + " on " + std::to_string(o.topo.ranks) + kind;
    const char* kernels = kernels_name(r);
    if (rank == 0)
      std::printf("nns: evaluating %s (config %s) with %s, %s kernels; %lld step(s) of data, forward only (dropout off, no update)\n",
                  o.path.c_str(), config, where.c_str(), kernels, static_cast<long long>(steps));
    std::vector<std::pair<std::string, int>> dumped;  // --dump-outputs: the train block's named f32 tensors
    if (!r.dump_outputs.empty()) {
      for (const auto& [name, t] : p.spec.named_tensors)
        if (p.graph().tensor(t).dtype == sema::DType::F32) dumped.emplace_back(name, t);
      std::vector<int> ids;
      for (const auto& [name, t] : dumped) ids.push_back(t);
      e.one->keep_tensors(ids);
    }
    double sum = 0;
    for (int64_t s = 1; s <= steps; ++s) {
      // The graph trains nothing (prepare_eval): a step is the forward and the loss.
      double loss = session->step().loss;
      if (s == 1 && !dumped.empty()) {
        std::vector<backend::StTensor> out;
        for (const auto& [name, t] : dumped) {
          std::vector<float> v = e.one->tensor_values(t);
          out.push_back(backend::f32_tensor(name, p.graph().tensor(t).shape, v.data(), v.size()));
        }
        backend::write_safetensors_atomic(r.dump_outputs, out, {{"format", "nns-outputs-1"}, {"step", "1"}});
        std::printf("nns: wrote %s: %zu tensor(s) of step 1's forward pass\n", r.dump_outputs.c_str(), out.size());
      }
      sum += loss;
      if (rank == 0) std::printf("eval %4lld/%lld  loss %.6f\n", static_cast<long long>(s), static_cast<long long>(steps), loss);
      std::fflush(stdout);
    }
    if (rank == 0) std::printf("eval: mean loss %.6f over %lld step(s)\n", sum / static_cast<double>(steps), static_cast<long long>(steps));
    return kExitOk;
  });
}

int run_training(Pipeline& p, const PipelineOptions& o) {
  // A resumed run keeps the learning-rate horizon its checkpoint saved
  // (lr_horizon.h), set here once for every rank and the --verify reference.
  // A checkpoint that cannot be read is left to the load, which says why.
  if (!o.run.resume.empty()) {
    std::string note;
    try {
      note = backend::adopt_saved_horizon(backend::checkpoint_metadata(o.run.resume), p.spec.schedule);
    } catch (const backend::SafetensorsError&) {}
    if (!note.empty()) std::printf("nns: note: %s\n", note.c_str());
  }
  std::unique_ptr<Pipeline> validation;
  if (int rc = build_validation(o, p, validation); rc != kExitOk) return rc;
  if (!o.run.save_best.empty() && !validation)
    return usage_error("--save-best needs validation: 'eval_every = K' and 'val_data' in the train block");
  int rc = run_on_ranks(o.topo, [&](backend::Communicator* comm) {
    try {
      return train_rank(p, o, comm, validation.get());
    } catch (const backend::LoweringError& e) {
      // A rank lowers its program with kernel bodies, which finds what the
      // structure-only check could not (a dropout split along another dim):
      // rank 0 names the directive's line, as `nns check` does.
      if (!comm || comm->rank() == 0) return report_lowering_error(p, e);
      std::cerr << "nns: error: " << e.what() << "\n";
      return kExitRuntime;
    }
  });
  const std::string& trace = o.run.trace;
  if (trace.empty()) return rc;
  // --trace: the launching process merges the ranks' parts (they have all
  // exited, so every part is complete) and prints each rank's share.
  int ranks = static_cast<int>(o.topo.ranks);
  if (rc != kExitOk) {
    backend::remove_trace_parts(trace, ranks);
    return rc;
  }
  std::vector<std::string> summary;
  std::string err;
  if (!backend::merge_trace_parts(trace, ranks, summary, err)) {
    std::cerr << "nns: error: " << err << "\n";
    return kExitRuntime;
  }
  for (const std::string& line : summary) std::printf("%s\n", line.c_str());
  std::printf("trace: %s (%d rank(s); open in ui.perfetto.dev or chrome://tracing)\n", trace.c_str(), ranks);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace nns::driver
