#include "driver/help.h"

namespace nns::driver {

const char* help_text() {
  return R"(nns — a parallelization engine with its own language

usage: nns <command> [options]

commands:
  check FILE [--config NAME] [--plan P [--gpus N] [--plan-gpus K] [--device-memory SIZE] [--precision fp16|bf16] [--check-timeout MS] [--seed-bug KIND]]
        [--emit=STAGE]
      parse and elaborate FILE with a config preset (default: the first one in
      the file) and print a summary: ops, parameters and their bytes,
      activation bytes, forward multiply-adds per step. --emit prints a stage
      instead (see stages below).
      --set KEY=VALUE (repeatable, check and run) overrides the preset's entry
      KEY, parsed as the type the file gives it (int, float, bool, string);
      entries computed from it follow.
      --plan evaluates plan P for N devices (trans/assign/replicate/order)
      and refuses an illegal one with the directive's location, then proves
      it legal with Z3 (split legality, coverage, devices, op-order, memory,
      the plan's constraint tables; symbolic sizes for every admissible
      value) and prints the verdict and the time spent; a conflict is one
      error at the first directive of the unsat core and a note at each
      other. --device-memory is a capacity per device (80GiB, 512MiB) or a
      preset (v100, a100-40g, a100, h100, h200); without it memory is
      reported, not checked. The memory model bounds what nns run
      allocates (kernel copies, gradient contributions, the largest kernel
      working set included); --precision fp16|bf16 counts mixed-precision
      training instead (2-byte weights, gradients and activations, fp32
      optimizer state and master weights), as nns simulate --precision. --check-timeout MS bounds the whole check (plan
      evaluation, device orders, Z3, communication, program verification;
      without it each Z3 call has 10000 ms); running out exits 70 and says
      which stage ran out. Then the lowered per-rank programs
      are verified against one device (every edge's collectives on every
      device, collective order across ranks, updates after reductions, each
      gradient counted once);
      exit 70 if wrong. --plan-gpus K checks P for K devices run as N/K
      replicas; --seed-bug KIND (a test hook) corrupts the programs first:
      missing-allreduce, allgather-for-allreduce, wrong-group,
      wrong-stage-device, replica-scale, early-update, double-count,
      collective-order, gradient-copies. --gpus, --plan-gpus, --device-memory and
      --check-timeout describe a plan: without --plan they are refused.
      --eval-budget SECONDS (check and run) bounds the wall time of
      evaluating the file and of evaluating the plan, each (default 60; 0:
      none): past it, an endless loop ends with a located error.
  simulate FILE --plan P [--gpus N [--plan-gpus K]] --device a100|v100|h100|h200|PATH.json [--config C]
           [--precision fp32|bf16|fp16] [--overlap-grad-reduce] [--all-ranks] [--trace OUT.json]
      lower plan P to its per-rank programs (what run executes) and replay
      them on a device profile (stdlib/profiles/, or a JSON file): kernels
      by roofline from their multiply-adds and bytes, collectives by an
      alpha-beta model over their links (inter-node rings over the NICs of
      the group's devices on each node); prints the step time and each
      rank's busy, exposed-communication and bubble time and peak memory.
      With plan replicas (N > K) only replica 0 is lowered and replayed (the
      replicas are identical; their gradient averaging is costed over its
      group); --all-ranks replays every rank. --precision costs kernels at
      the profile's peak for that dtype and every element at its size (the
      CPU runtime computes fp32; default fp32). --overlap-grad-reduce starts
      each gradient allreduce when its gradients are final, on a
      communication stream beside the compute. --trace writes the simulated
      timeline as a Chrome trace (the format of run --trace). A measured
      profile (nns profile; shipped: cpu, this machine's) adds per-kernel
      overhead, copies, updates and per-collective links.
  plan FILE --gpus N --device D [--config C] [--nodes K] [--plan CONSTRAINTS]
       [--precision fp16|bf16] [--out OUT.nns] [--top K] [--no-check]
      search a plan for N devices of profile D (K nodes; default the
      profile's devices per node): data-parallel degree, per-op splits from
      each op's transform space (coshard included), pipeline stages under
      1F1B, micro-batch count, recompute and zero1, under the device's
      memory and the constraint tables of plan CONSTRAINTS (the space size
      is reported with and without them). Prints the best plan as a plan
      block, its predicted step time and memory, the runners-up and the
      best Megatron-style (TP x PP x DP) plan; writes FILE plus the plan
      (and a config with the chosen micro-batches) to OUT.nns, proved by
      the checker unless --no-check: nns run OUT.nns --config C_plan
      --plan searched --gpus N. --precision fp16|bf16 searches, costs and
      checks mixed-precision training (2-byte weights, gradients and
      activations; fp32 optimizer state and master weights).
      docs/planner.md.
  profile --out FILE [--ranks R] [--threads T] [--quick]
      measure this machine's backend on R rank processes (default 2) with T
      kernel threads each (default cores / R, what a rank of run --gpus R
      gets): kernels per op class against size (linear, batched matmul,
      softmax, layer norm, elementwise; forward and backward), region
      copies, AdamW updates, and the collectives and send/recv over the
      runtime's communicator; fit the cost model's parameters and write a
      device profile for simulate --device FILE. --quick measures fewer
      sizes (seconds; for tests).
  ckpt merge DIR -o FILE
      assemble the last complete save a partitioned run made (nns run --plan
      P --save DIR: DIR/latest, its manifest, every shard's size and
      checksum checked) into one single-device checkpoint; it resumes any
      plan on any number of ranks (--resume FILE), or one device.
  verify-op FILE OP [--config C] [--reference]
      check op OP's annotation numerically (OP: an op kind such as linear,
      or a qualified-name glob; every call of a distinct shape): each
      partition of its transform space (every splittable identifier and the
      value split, into 2 and 4 parts) runs on slices of random inputs, its
      outputs and input gradients are reassembled as the annotation says
      (concatenated along split dims, summed over reduction identifiers) and
      compared with the whole op; exit 65 if one differs (relative error
      above 1e-5), naming the identifier.
  dimop 'ANNOTATION' [--shapes '[4,8],[8,16]']
      normalise a dimop annotation (nnScaler's language) and print its
      transform space: every legal partition and what it does to each
      operand. With --shapes the annotation is bound to input shapes first.
  run FILE [--gpus N] [--plan P [--plan-gpus K]] [--verify] [--config C] [--steps N] [--seed S]
         [--threads T] [--init W.safetensors] [--data D.safetensors]
         [--save CKPT [--save-every K]] [--resume CKPT] [--dump-grads G.safetensors] [--metrics M.jsonl]
         [--trace OUT.json] [--reference] [--eval] [--device cpu|cuda|cuda-emulation] [--stats] [--peak-by-rank]
         [--comm auto|gloo|nccl] [--emit=STAGE]
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
      into DIR/step-S/ and publishes them with a manifest and DIR/latest
      (a save cut short never costs the last complete one; see ckpt merge),
      --resume reads such a folder or a single-device file, --init a
      single-device file, and --data and --dump-grads work as on one device;
      --peak-by-rank prints every rank's exact peak piece memory in bytes
      after the last step (what nns simulate --device cpu predicts).
      --reference uses the plain reference kernels; --save writes
      a checkpoint (weights, optimizer state, step) atomically after the last
      step, and after every K-th with --save-every K; --resume continues one
      bit-identically (the learning-rate schedule's length is the train
      block's, not --steps); --metrics writes one JSON line per step (loss,
      lr, |g| exact, ms); --dump-grads writes step 1's
      gradients; --emit prints a stage instead of training. --eval runs the
      steps as forward passes (dropout off, no backward, no update; on one
      device, replicas or a plan, whose program is then forward only) on the
      weights of --init / --resume and prints each step's loss and the mean.
      --trace OUT.json writes a Chrome trace of every rank's steps (open it
      in ui.perfetto.dev or chrome://tracing): one row per rank, measured
      compute (each kernel's forward/backward), collectives, send/recv,
      updates and steps; then prints per rank "trace: rank R busy X%
      (compute), idle Y% of the last step" (idle: in communication or
      between instructions). --device cpu|cuda picks the backend (default
      cuda when this nns was built with CUDA and a GPU is visible, else cpu;
      --device cuda without a GPU exits 70); under a plan each rank takes
      GPU (local rank mod GPUs visible). --device cuda-emulation runs the
      CUDA backend's code with its kernels on the host (slow; device memory,
      host-staged collectives and every CUDA kernel, where no GPU is). --stats prints under each step the
      bytes it moved host->device and device->host (rank 0's), and the part
      of them staged through host memory for collectives. --comm picks where
      a plan's collectives run: nccl (on the GPUs' memory, on their own
      stream, the gradient buckets overlapping the backward) or gloo (over
      host memory, staged through host copies on CUDA ranks); auto (the
      default) takes nccl for --device cuda in a build with NCCL when every
      rank on the host has a GPU of its own, else gloo. The banner's second
      line says which and why; --comm nccl where it cannot run exits 70.
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

stages (--emit=STAGE for check and run: the stages run in this order up to
STAGE, which is printed instead of the command's usual output):
  tokens          the token stream
  ast             the syntax tree
  graph           the forward operator graph
  plan            every op's partition tree, operand slices and devices (--plan)
  check           the Z3 checker's verdict and the program verification (--plan)
  comm            every derived collective: primitive, groups, bytes (--plan)
  program         the lowered program: one device's, or every rank's of the plan
  schedule        a pipelined plan's tasks per rank as a text timeline (needs --plan)
  training-graph  the operator graph after autograd and the optimizer

environment:
  NNS_STDLIB   folder of the standard library (default: the source tree's stdlib/)
  NO_COLOR     disables coloured diagnostics
  OMP_WAIT_POLICY  nns sets PASSIVE unless it is set: idle OpenMP threads
               sleep instead of spinning, so ranks and other processes
               sharing the cores keep them (ACTIVE spins, as OpenMP's default)
  NNS_COMM_SPIN_US  microseconds a rank polls for a peer's message before it
               sleeps (default 50 when the host's ranks have a core each, else 0)
  NNS_BIND     0 leaves the local ranks of --gpus N unbound (default: each
               bound to its share of the cores when N <= cores)
  NNS_TRACE_EVERY_INSTRUCTION  1: --trace gives every bookkeeping instruction
               its own event instead of merged "local work" runs

exit codes: 0 ok, 64 usage error, 65 bad input, 70 runtime failure
)";
}

}  // namespace nns::driver
