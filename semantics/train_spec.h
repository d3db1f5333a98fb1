// What a train block says: loss, optimizer, learning-rate schedule, data,
// steps and micro-batches. Plain data read by the trainers; it lives apart
// from the interpreter so that the runtime can use it without including it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "frontend/source.h"

namespace nns::sema {

struct OptimizerSpec {
  std::string kind = "sgd";  // "sgd" | "adamw"
  double lr = 1e-3, momentum = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};
// The fp32 state buffers the optimizer keeps per parameter element, beside
// the weight and its gradient: AdamW 2 moments, SGD with momentum 1 buffer,
// plain SGD none. The one statement of the rule: the runtime's updates and
// checkpoints, the memory replay (backend/lowering/memory_replay.h) and the
// planner's search all read it here.
inline size_t optimizer_slots(const OptimizerSpec& o) { return o.kind == "adamw" ? 2 : (o.momentum > 0 ? 1 : 0); }
struct ScheduleSpec {
  std::string kind = "constant";  // "constant" | "cosine" | "linear"
  int64_t warmup = 0;
  double min_lr = 0;
  // The schedule's length in steps (its horizon): the `steps=` of
  // cosine_lr/linear_lr when given (pinned), else the run's step count: the
  // train block's `steps` (which `--set steps=N` sets) or `nns run --steps`.
  // Checkpoints save it and a resumed run keeps it (backend/runtime/lr_horizon.h),
  // so a run stopped (--stop-after) and resumed sees an unbroken run's rates.
  int64_t steps = 0;
  // True when the train block wrote `steps=` in the schedule call; the run
  // warns before its first step when such a horizon ends before the run.
  bool pinned = false;
};
struct DataSpec {
  // "synthetic" | "safetensors" | "token_file" (a flat uint16/uint32 file)
  // | "megatron_tokens" (PREFIX.bin + PREFIX.idx); the token sources are read by
  // backend/runtime/data/token_dataset.h.
  std::string kind = "synthetic";
  int64_t seed = 0;  // synthetic: the values; token sources: the window order
  std::string path;  // safetensors / token_file: the file; megatron: the prefix
  std::string token_dtype = "uint16";  // token_file: "uint16" or "uint32"
  // Token sources: the model inputs fed with windows of seq + 1 tokens,
  // `input` with w[0:seq] and `target` with w[1:seq+1].
  std::string input = "ids", target = "targets";
  // "arrays": (model input, .npy file) pairs; the files' rows are samples.
  std::vector<std::pair<std::string, std::string>> arrays;
};
// Dynamic loss scaling for precision = "fp16" (setting loss_scale =
// dynamic_loss_scale(...)). The defaults are PyTorch's GradScaler's
// (torch.amp.GradScaler: init_scale 2^16, growth_factor 2, backoff_factor
// 0.5, growth_interval 2000): the loss gradient starts at `init`; a step
// whose gradients hold an inf or NaN is skipped and the scale multiplied by
// `backoff`; after `interval` finite steps in a row it is multiplied by `growth`.
struct LossScaleSpec {
  double init = 65536, growth = 2, backoff = 0.5;
  int64_t interval = 2000;
};
// The most micro-batches a step may have: the rank programs number them in
// 16 bits (backend PInstr::mb: millions of instructions per program at
// 1,000 micro-batches).
constexpr int64_t kMaxMicroBatches = 32767;

struct TrainSpec {
  int loss = -1;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  DataSpec data;
  int64_t steps = 10;
  // The inputs declare ONE micro-batch; a step runs micro_batches of them
  // and accumulates their gradients (global batch = micro_batches x input batch).
  int64_t micro_batches = 1;
  double clip = 0;  // global-norm gradient clipping; 0 = off
  // "fp32", "bf16" or "fp16": the matrix products (linear, matmul, bmm)
  // take bfloat16 / binary16 operands with fp32 accumulation; weights,
  // gradients and the other ops stay fp32 (the runtime's Precision). fp16
  // trains with dynamic loss scaling (loss_scale).
  std::string precision = "fp32";
  LossScaleSpec loss_scale;  // read under precision "fp16" only
  // The data-parallel gradient reduction: "fp32", or "bf16" (each gradient
  // rounded to bfloat16 before it is summed over the replicas, as a bf16
  // allreduce does; the sum itself is still carried in fp32).
  std::string grad_reduce = "fp32";
  // Validation while training (driver/validation.h): every `eval_every`
  // steps (0: never) the loss of `eval_batches` batches of `val_data`,
  // forward only with dropout off, on the weights of that step. Each
  // evaluation reads the same batches: val_data's first eval_batches steps.
  int64_t eval_every = 0, eval_batches = 1;
  DataSpec val_data;
  bool has_val_data = false;
  // Tensors the block binds to names of its own (`let logits = ...`), by
  // name: what `nns run --eval --dump-outputs FILE` writes.
  std::map<std::string, int> named_tensors;
  front::SourceLoc loc;
};

}  // namespace nns::sema
