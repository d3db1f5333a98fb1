// `nns help`: one entry per command (its usage lines and what it does), then
// the stages --emit names, the environment and the exit codes. help_text()
// lays the entries out: the usage at two spaces, continuation lines as
// written, the description at six.
#include "driver/help.h"

#include <algorithm>
#include <string>

#include "backend/planner/profiles.h"

namespace nns::driver {

namespace {

struct CommandHelp {
  const char* command;      // as typed after nns
  const char* usage;        // the synopsis; a continuation line carries its own indentation
  const char* description;  // what it does and what each option means, unindented
};

const CommandHelp kCommands[] = {
    {"check",
     "check FILE [--config NAME] [--gpus N] [--plan P [--plan-gpus K] [--device-memory SIZE] [--precision fp16|bf16|bf16-storage] [--check-timeout MS] [--seed-bug KIND]]\n"
     "        [--distributed-optimizer] [--emit=STAGE]\n",
     "parse and elaborate FILE with a config preset (default: the first one in\n"
     "the file) and print a summary: ops, parameters and their bytes,\n"
     "activation bytes, forward multiply-adds per step. --emit prints a stage\n"
     "instead (see stages below).\n"
     "--set KEY=VALUE (repeatable, check and run) overrides the preset's entry\n"
     "KEY, parsed as the type the file gives it (int, float, bool, string);\n"
     "entries computed from it follow.\n"
     "--plan evaluates plan P for N devices (trans/assign/replicate/order)\n"
     "and refuses an illegal one with the directive's location, then proves\n"
     "it legal with Z3 (split legality, coverage, devices, op-order, memory,\n"
     "the plan's constraint tables; symbolic sizes for every admissible\n"
     "value) and prints the verdict and the time spent; a conflict is one\n"
     "error at the first directive of the unsat core and a note at each\n"
     "other. --device-memory is a capacity per device (80GiB, 512MiB) or a\n"
     "device profile's name (its memory_bytes; the profiles are listed at\n"
     "the end); without it memory is\n"
     "reported, not checked. The memory model bounds what nns run\n"
     "allocates (kernel copies, gradient contributions, the largest kernel\n"
     "working set included); --precision fp16|bf16 counts mixed-precision\n"
     "training instead (2-byte weights, gradients and activations, fp32\n"
     "optimizer state and master weights), as nns simulate --precision;\n"
     "--precision bf16-storage counts what the CUDA backend holds under\n"
     "precision = \"bf16\" (bf16 kernel activations, the rest fp32; a run on\n"
     "a CUDA device counts this itself). --check-timeout MS bounds the whole check (plan\n"
     "evaluation, device orders, Z3, communication, program verification;\n"
     "without it each Z3 call has 10000 ms); running out exits 70 and says\n"
     "which stage ran out. Then the lowered per-rank programs\n"
     "are verified against one device (every edge's collectives on every\n"
     "device, collective order across ranks, updates after reductions, each\n"
     "gradient counted once, each rank's instructions over its buffers:\n"
     "lifetimes, partial sums reduced once, in-place reads);\n"
     "exit 70 if wrong. --plan-gpus K checks P for K devices run as N/K\n"
     "replicas; --distributed-optimizer (with replicas) shards each\n"
     "parameter's optimizer state and fp32 master weights over the replicas\n"
     "(Megatron-LM's distributed optimizer: gradients reduce-scattered,\n"
     "updated shards all-gathered) in the memory check's programs, as nns\n"
     "simulate and nns run do (program verification checks the unsharded\n"
     "programs); --seed-bug KIND (a test hook) corrupts the programs first:\n"
     "missing-allreduce, allgather-for-allreduce, wrong-group,\n"
     "wrong-stage-device, replica-scale, early-update, double-count,\n"
     "collective-order, gradient-copies, gradient-scale-1pct,\n"
     "double-inplace-allreduce, kernel-read-after-free (exit 69: the\n"
     "kind does not apply to the plan, nothing was changed). --plan-gpus,\n"
     "--device-memory and --check-timeout describe a plan: without --plan\n"
     "they are refused.\n"
     "--gpus N > 1 without --plan verifies the programs of N data-parallel\n"
     "replicas of one device (the implicit plan run uses; no Z3 check).\n"
     "--eval-budget STEPS (check and run) bounds the interpreter steps of\n"
     "evaluating the file and of evaluating the plan, each (default 50\n"
     "million; 0: none): past it, an endless loop ends with a located error,\n"
     "the same on any machine; --eval-timeout SECONDS adds a wall-clock cap.\n"},
    {"simulate",
     "simulate FILE --plan P [--gpus N [--plan-gpus K]] --device PROFILE|PATH.json [--config C]\n"
     "           [--precision fp32|bf16|fp16|bf16-storage] [--overlap-grad-reduce] [--all-ranks] [--trace OUT.json]\n"
     "           [--distributed-optimizer] [--overlap-param-gather] [--tp-comm-overlap] [--verify-programs]\n",
     "lower plan P to its per-rank programs (what run executes) and replay\n"
     "them on a device profile (stdlib/profiles/, or a JSON file): kernels\n"
     "by roofline from their multiply-adds and bytes, collectives by an\n"
     "alpha-beta model over their links (inter-node rings over the NICs of\n"
     "the group's devices on each node); prints the step time and each\n"
     "rank's busy, exposed-communication and bubble time and peak memory.\n"
     "Only one rank of each class of ranks running the same program is\n"
     "lowered and replayed (plan replicas, a stage's tensor-parallel ranks:\n"
     "the others meet them at their collectives on time; the gradient\n"
     "averaging is costed over its whole group); --all-ranks replays every\n"
     "rank. The programs are not verified here (nns check --plan verifies\n"
     "them); --verify-programs verifies plan replica 0's. --precision costs kernels at\n"
     "the profile's peak for that dtype and every element at its size (the\n"
     "CPU runtime computes fp32; default fp32); bf16-storage costs kernels in\n"
     "bf16 and memory as the CUDA backend's bf16 activation storage holds it.\n"
     "--overlap-grad-reduce starts\n"
     "each gradient allreduce when its gradients are final, on a\n"
     "communication stream beside the compute.\n"
     "--distributed-optimizer shards the optimizer state over the plan\n"
     "replicas (as check); --overlap-param-gather runs its (and zero1's)\n"
     "all-gathers of updated shards under the next step's forward, each\n"
     "parameter's first reader waiting for its gather. --tp-comm-overlap\n"
     "pipelines each tensor-parallel allreduce, as a reduce-scatter after\n"
     "the GEMM making it and an all-gather before the next GEMM, in chunks\n"
     "with those GEMMs (Megatron-LM's --tp-comm-overlap; docs/simulator.md).\n"
     "--trace writes the simulated\n"
     "timeline as a Chrome trace (the format of run --trace). A measured\n"
     "profile (nns profile; shipped: cpu, this machine's) adds per-kernel\n"
     "overhead, copies, updates and per-collective links.\n"},
    {"plan",
     "plan FILE --gpus N --device D [--config C] [--nodes K] [--plan CONSTRAINTS]\n"
     "       [--precision fp16|bf16] [--out OUT.nns] [--top K] [--vp V] [--recompute none|selective|block]\n"
     "       [--no-check] [--dp-in-plan]\n",
     "search a plan for N devices of profile D (K nodes; default the\n"
     "profile's devices per node): data-parallel degree, per-op splits from\n"
     "each op's transform space (coshard included), pipeline stages under\n"
     "1F1B or interleaved 1F1B (--vp V: V chunks per rank only),\n"
     "micro-batch count, recompute (none, selective: each attention op\n"
     "with [seq, seq] scores alone, block: every layer; --recompute M: M\n"
     "only) and zero1, under the device's\n"
     "memory and the constraint tables of plan CONSTRAINTS (the space size\n"
     "is reported with and without them). Prints the best plan as a plan\n"
     "block, its predicted step time and memory, the runners-up and the\n"
     "baselines that apply (one device; data parallelism where the batch\n"
     "splits over N; Megatron-style TP where the graph has attention +\n"
     "MLP blocks), naming those skipped and why, and says so when no plan\n"
     "beats one device. A search past 2 s shows its progress on a terminal\n"
     "(NNS_SETUP_NOTICE=SECONDS: also piped). Writes FILE plus the plan\n"
     "(and a config with the chosen micro-batches) to OUT.nns, proved by\n"
     "the checker unless --no-check: nns run OUT.nns --config C_plan\n"
     "--plan searched --gpus N [--plan-gpus K]: its data parallelism is\n"
     "N/K plan replicas where they express it (zero1 then is the\n"
     "distributed optimizer: simulate --distributed-optimizer; the printed\n"
     "simulate command reproduces the prediction), else inside the plan;\n"
     "--dp-in-plan keeps it inside. --precision fp16|bf16 searches, costs and\n"
     "checks mixed-precision training (2-byte weights, gradients and\n"
     "activations; fp32 optimizer state and master weights).\n"
     "docs/planner.md.\n"},
    {"profile", "profile --out FILE [--ranks R] [--threads T] [--quick]\n",
     "measure this machine's backend on R rank processes (default 2) with T\n"
     "kernel threads each (default cores / R, what a rank of run --gpus R\n"
     "gets): kernels per op class against size (linear, batched matmul,\n"
     "softmax, layer norm, elementwise; forward and backward), region\n"
     "copies, AdamW updates, and the collectives and send/recv over the\n"
     "runtime's communicator; fit the cost model's parameters and write a\n"
     "device profile for simulate --device FILE. --quick measures fewer\n"
     "sizes (seconds; for tests).\n"},
    {"ckpt merge",
     "ckpt merge DIR -o FILE\n       ckpt export CKPT FILE.nns --map NAME [--config C] -o OUT.safetensors\n",
     "merge: assemble the last complete save a partitioned run made (nns run --plan\n"
     "P --save DIR: DIR/latest, its manifest, every shard's size and\n"
     "checksum checked) into one single-device checkpoint; it resumes any\n"
     "plan on any number of ranks (--resume FILE), or one device.\n"
     "export: write CKPT's weights in the layout of FILE's `weights NAME`\n"
     "block (Hugging Face's, say): every take inverted, F32.\n"},
    {"verify-op", "verify-op FILE OP [--config C] [--reference]\n",
     "check op OP's annotation numerically (OP: an op kind such as linear,\n"
     "or a qualified-name glob; every call of a distinct shape): each\n"
     "partition of its transform space (every splittable identifier and the\n"
     "value split, into 2 and 4 parts) runs on slices of random inputs, its\n"
     "outputs and input gradients are reassembled as the annotation says\n"
     "(concatenated along split dims, summed over reduction identifiers) and\n"
     "compared with the whole op; exit 65 if one differs (relative error\n"
     "above 1e-5), naming the identifier.\n"},
    {"dimop", "dimop 'ANNOTATION' [--shapes '[4,8],[8,16]']\n",
     "normalise a dimop annotation (nnScaler's language) and print its\n"
     "transform space: every legal partition and what it does to each\n"
     "operand. With --shapes the annotation is bound to input shapes first.\n"},
    {"run",
     "run FILE [--gpus N] [--plan P [--plan-gpus K] [--distributed-optimizer]] [--verify | --verify-drift] [--config C] [--steps N] [--stop-after K] [--seed S]\n"
     "         [--threads T] [--init W.safetensors [--init-map NAME] [--init-partial]] [--data D.safetensors]\n"
     "         [--save CKPT [--save-every K]] [--save-best CKPT] [--resume CKPT] [--dump-grads G.safetensors] [--metrics M.jsonl]\n"
     "         [--tensorboard DIR] [--trace OUT.json] [--reference] [--eval] [--device cpu|cuda|cuda-emulation] [--stats] [--peak-by-rank]\n"
     "         [--comm auto|gloo|nccl] [--emit=STAGE]\n",
     "train the model of FILE's train block: one progress line per step\n"
     "(step, loss, step time, throughput, peak memory) and a summary.\n"
     "--gpus 1 trains on one device (CPU: oneDNN kernels, T threads, default\n"
     "all cores); --gpus N > 1 launches N CPU rank processes (Gloo over TCP,\n"
     "cores shared: threads per rank = cores / N) that train as data-parallel\n"
     "replicas (the implicit plan: every op on one device, N replicas,\n"
     "lowered and run as a plan is), and --verify compares every step's loss, gradients and\n"
     "update with one device running N x micro_batches (exit 70 when a\n"
     "gradient's error passes its bound, derived from the fp32 rounding of\n"
     "its reductions: docs/verify.md). --plan P runs FILE's plan P partitioned\n"
     "over the ranks: each rank runs its sub-ops and the collectives the plan\n"
     "derives, after the Z3 checker has proved the plan legal (--device-memory\n"
     "and --check-timeout as for check); --plan-gpus K evaluates P for K devices and runs N/K replicas\n"
     "of it (default K = N), and --distributed-optimizer shards each\n"
     "parameter's optimizer state over those replicas (gradients\n"
     "reduce-scattered, updated shards all-gathered; the summary prints the\n"
     "optimizer state rank 0 holds); with --plan, --save DIR writes per-rank shards\n"
     "into DIR/step-S/ and publishes them with a manifest and DIR/latest\n"
     "(a save cut short never costs the last complete one; see ckpt merge),\n"
     "--resume reads such a folder or a single-device file, --init a\n"
     "single-device file, and --data and --dump-grads work as on one device;\n"
     "--peak-by-rank prints every rank's exact peak piece memory in bytes\n"
     "after the last step (what nns simulate --device cpu predicts).\n"
     "--reference uses the plain reference kernels; --save writes\n"
     "a checkpoint (weights, optimizer state, step) atomically after the last\n"
     "step, and after every K-th with --save-every K; --resume continues one\n"
     "bit-identically (the learning-rate schedule's length is --steps or the\n"
     "block's steps unless the schedule pins it; checkpoints keep it;\n"
     "--stop-after K ends this invocation after step K); a train block\n"
     "with eval_every = K and val_data prints the validation loss every K\n"
     "steps, and --save-best CKPT saves at each new lowest one; --metrics writes one JSON line per step (loss,\n"
     "lr, |g| exact, ms); --dump-grads writes the gradients of the run's\n"
     "first step (step 1, or the one after --resume's); --emit prints a stage instead of training. --eval runs the\n"
     "steps as forward passes (dropout off, no backward, no update; on one\n"
     "device, replicas or a plan, whose program is then forward only) on the\n"
     "weights of --init / --resume and prints each step's loss and the mean.\n"
     "--trace OUT.json writes a Chrome trace of every rank's steps (open it\n"
     "in ui.perfetto.dev or chrome://tracing): one row per rank, measured\n"
     "compute (each kernel's forward/backward), collectives, send/recv,\n"
     "updates and steps; then prints per rank \"trace: rank R busy X%\n"
     "(compute), idle Y% of the last step\" (idle: in communication or\n"
     "between instructions). --device cpu|cuda picks the backend (default\n"
     "cuda when this nns was built with CUDA and a GPU is visible, else cpu;\n"
     "--device cuda without a GPU exits 70); under a plan each rank takes\n"
     "GPU (local rank mod GPUs visible). --device cuda-emulation runs the\n"
     "CUDA backend's code with its kernels on the host (slow; device memory,\n"
     "host-staged collectives and every CUDA kernel, where no GPU is). --stats prints under each step the\n"
     "bytes it moved host->device and device->host (rank 0's), and the part\n"
     "of them staged through host memory for collectives. --comm picks where\n"
     "a plan's collectives run: nccl (on the GPUs' memory, on their own\n"
     "stream, the gradient buckets overlapping the backward) or gloo (over\n"
     "host memory, staged through host copies on CUDA ranks); auto (the\n"
     "default) takes nccl for --device cuda in a build with NCCL when every\n"
     "rank on the host has a GPU of its own, else gloo. The banner's second\n"
     "line says which and why; --comm nccl where it cannot run exits 70.\n"},
    {"repl", "repl [FILE] [--config C] [--gpus N]\n",
     "an interactive session over FILE's model (or the stdlib alone): any\n"
     ".nns statement or expression; plan directives (trans, assign,\n"
     "replicate, order, recompute) typed one at a time, each answered with\n"
     "the collectives it adds or removes, memory per device and the verdict;\n"
     "commands ops, show OP, status, comm, plan, undo, reset, gpus, save,\n"
     "run N [--verify], help. Line editing, history (~/.nns_history or\n"
     "$NNS_HISTORY) and Tab completion on a terminal; from a pipe it reads\n"
     "plain lines without prompts (exit 65 if any input failed).\n"},
    {"help", "help, --help, -h\n",
     "this text.\n"
     "\n"},
};

// Before the commands.
const char* const kIntro = R"(nns — a parallelization engine with its own language

usage: nns <command> [options]

commands:
)";

// After the commands: the stages, the environment, the exit codes.
const char* const kOutro = R"(stages (--emit=STAGE for check and run: the stages run in this order up to
STAGE, which is printed instead of the command's usual output):
  tokens          the token stream
  ast             the syntax tree
  graph           the forward operator graph
  plan            every op's partition tree, operand slices and devices (--plan)
  check           the Z3 checker's verdict and the program verification (--plan)
  comm            every derived collective: primitive, groups, bytes (--plan)
  program         the lowered program: one device's, or every rank's of the plan
                  (program:PASS: as it stands after that lowering pass, docs/lowering.md)
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
  NNS_LOG_LOWERING  PASS[,PASS] or all: each rank's program printed to stderr
               after those lowering passes (kernels, params, emit, schedule,
               step_end, frees; docs/lowering.md)
  NNS_KERNEL_CACHE  0: lowering elaborates every sub-op's kernel instead of
               copying the first one of equal kernels (docs/lowering.md)

exit codes: 0 ok, 64 usage error, 65 bad input, 70 runtime failure
)";

// Each line of `text` with `indent` before it (empty lines stay empty).
void append_indented(std::string& out, const char* text, const char* indent) {
  bool line_start = true;
  for (const char* p = text; *p; ++p) {
    if (line_start && *p != '\n') out += indent;
    out += *p;
    line_start = *p == '\n';
  }
}

std::string build_help_text() {
  std::string out = kIntro;
  for (const CommandHelp& c : kCommands) {
    out += "  ";
    out += c.usage;
    append_indented(out, c.description, "      ");
  }
  return out + kOutro;
}

}  // namespace

namespace {

// `nns CMD --help` / `nns help CMD`: one command's usage, the flags in a
// line each, and an example; the full text of `nns help` has the details.
struct CommandPage {
  const char* command;
  const char* flags;
  const char* example;
};

const CommandPage kPages[] = {
    {"check",
     "  --config NAME        a config preset of FILE (default: the first)\n"
     "  --set KEY=VALUE      override a config entry (repeatable)\n"
     "  --emit=STAGE         print a stage: tokens ast graph plan check comm program[:PASS] schedule training-graph\n"
     "  --plan P --gpus N    evaluate plan P for N devices, prove it legal (Z3), check memory, verify the programs\n"
     "  --plan-gpus K        evaluate P for K devices, run as N/K replicas\n"
     "  --device-memory SIZE capacity per device (80GiB, 512MiB) or a device profile's name\n"
     "  --precision fp16|bf16|bf16-storage  count memory for mixed precision, or the CUDA bf16 storage\n"
     "  --check-timeout MS   bound the whole check\n"
     "  --eval-budget STEPS  interpreter steps one evaluation may take (default 50M); --eval-timeout SECONDS\n",
     "nns check examples/gpt.nns --config tiny --plan megatron --gpus 2 --emit=comm"},
    {"run",
     "  --gpus N             N rank processes (without --plan: data-parallel replicas)\n"
     "  --plan P [--plan-gpus K]  run plan P partitioned over the ranks (K devices per replica)\n"
     "  --distributed-optimizer  optimizer state sharded over the plan's replicas\n"
     "  --verify             compare every step with one device (fp32: each gradient against its derived bound; exit 70 beyond)\n"
     "  --verify-drift       --verify, and print the weights' drift from a free-running one-device copy (information)\n"
     "  --config C  --set KEY=VALUE  --steps N  --stop-after K  --seed S  --threads T\n"
     "  --init W  --data D   initial weights; input data (safetensors)\n"
     "  --init-map NAME      read --init (a file, an index.json or a folder) through FILE's weights block NAME\n"
     "  --init-partial       parameters --init lacks keep their initializers (listed)\n"
     "  --save CKPT [--save-every K]  --resume CKPT   checkpoints (bit-identical resume); --save-best CKPT\n"
     "  --dump-grads G       the gradients of the run's first step\n"
     "  --metrics M.jsonl    one JSON line per step; --trace OUT.json: Chrome trace of every rank\n"
     "  --tensorboard DIR    TensorBoard event file of the step scalars (loss, lr, |g|, throughput, memory, val loss)\n"
     "  --eval               forward passes only, on --init/--resume weights; --dump-outputs F: the block's named tensors\n"
     "  --device cpu|cuda|cuda-emulation  --comm auto|gloo|nccl  --reference (reference kernels)\n"
     "  --stats  --peak-by-rank  --emit=STAGE\n"
     "  NNS_CPU_BF16=emulate forces the emulated bf16 products (precision = \"bf16\")\n",
     "nns run examples/gpt.nns --config tiny --plan hybrid --gpus 4 --steps 10 --verify"},
    {"simulate",
     "  --plan P --gpus N [--plan-gpus K]  the plan and its devices\n"
     "  --device NAME|PATH.json  a device profile (stdlib/profiles/) or a file\n"
     "  --precision fp32|bf16|fp16|bf16-storage  --overlap-grad-reduce  --all-ranks  --verify-programs  --trace OUT.json\n"
     "  --distributed-optimizer  --overlap-param-gather  --tp-comm-overlap\n",
     "nns simulate examples/gpt.nns --config gpt3_1_3b --plan megatron --gpus 32 --plan-gpus 8 --device a100"},
    {"plan",
     "  --gpus N --device D  devices and their profile\n"
     "  --config C  --nodes K  --plan CONSTRAINTS  --out OUT.nns  --top K  --vp V  --simulate  --no-check\n"
     "  --device-memory SIZE  a capacity below the profile's\n"
     "  --dp-in-plan  data parallelism inside the plan, not as --plan-gpus replicas\n",
     "nns plan examples/gpt.nns --config tiny --gpus 4 --device a100 --out /tmp/searched.nns"},
    {"profile", "  --out FILE  --ranks R  --threads T  --quick\n", "nns profile --quick --out /tmp/cpu.json"},
    {"ckpt merge",
     "  -o FILE              the merged single-device checkpoint (export: the file in the map's layout)\n  --map NAME           export: the weights block\n",
     "nns ckpt merge /tmp/ckpt -o /tmp/merged.safetensors"},
    {"verify-op", "  --config C  --reference\n", "nns verify-op examples/gpt.nns linear --config tiny"},
    {"dimop", "  --shapes '[4,8],[8,16]'  the operands' shapes, to bind the identifiers\n",
     "nns dimop 'm k+, k+ n -> m n' --shapes '[4,8],[8,16]'"},
    {"repl", "  --config C  --gpus N\n", "nns repl examples/gpt.nns --config tiny --gpus 2"},
};

}  // namespace

std::string command_help(const std::string& command) {
  const CommandHelp* entry = nullptr;
  for (const CommandHelp& c : kCommands)
    if (command == c.command || (std::string(c.command).rfind(command + " ", 0) == 0)) entry = &c;
  const CommandPage* page = nullptr;
  for (const CommandPage& p : kPages)
    if (command == p.command || (std::string(p.command).rfind(command + " ", 0) == 0)) page = &p;
  if (!entry || !page) return "";
  std::string out = std::string("usage: nns ") + entry->usage;
  // The first sentence of the full description says what the command does.
  std::string what = entry->description;
  const size_t stop = std::min(what.find(". "), what.find(".\n"));
  if (stop != std::string::npos) what = what.substr(0, stop + 1);
  for (char& c : what)
    if (c == '\n') c = ' ';
  // Wrapped at 78 columns.
  std::string wrapped, line;
  size_t at = 0;
  while (at < what.size()) {
    size_t space = what.find(' ', at);
    std::string word = what.substr(at, space == std::string::npos ? std::string::npos : space - at);
    at = space == std::string::npos ? what.size() : space + 1;
    if (!line.empty() && line.size() + 1 + word.size() > 78) {
      wrapped += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  what = wrapped + line;
  out += "\n" + what + "\n\noptions:\n" + page->flags + "\nexample:\n  " + page->example +
         "\n\n'nns help' has every command in full; docs/cli.md every flag.\n";
  return out;
}

const char* help_text() {
  static const std::string text = build_help_text();
  return text.c_str();
}

std::string profiles_help() {
  std::string names;
  for (const std::string& n : planner::list_profiles(planner::profiles_dir())) names += (names.empty() ? "" : ", ") + n;
  return "device profiles (" + planner::profiles_dir() + "): " + (names.empty() ? "none" : names) + "\n";
}


}  // namespace nns::driver
