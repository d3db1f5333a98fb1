// What a train block says: loss, optimizer, learning-rate schedule, data,
// steps and micro-batches. Plain data read by the trainers; it lives apart
// from the interpreter so that the runtime can use it without including it.
#pragma once

#include <cstdint>
#include <string>

#include "frontend/source.h"

namespace nns::sema {

struct OptimizerSpec {
  std::string kind = "sgd";  // "sgd" | "adamw"
  double lr = 1e-3, momentum = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};
struct ScheduleSpec {
  std::string kind = "constant";  // "constant" | "cosine" | "linear"
  int64_t warmup = 0;
  double min_lr = 0;
  // The schedule's length in steps: the `steps=` of cosine_lr/linear_lr, else
  // the train block's `steps`. Never `nns run --steps`, which only says how
  // far this run goes: a run stopped and resumed must see the same rates as
  // an unbroken one.
  int64_t steps = 0;
};
struct DataSpec {
  std::string kind = "synthetic";  // "synthetic" | "safetensors"
  int64_t seed = 0;
  std::string path;
};
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
  // "fp32", or "bf16": the matrix products (linear, matmul, bmm) take
  // bfloat16 operands with fp32 accumulation; weights, gradients and the
  // other ops stay fp32 (the runtime's Precision).
  std::string precision = "fp32";
  front::SourceLoc loc;
};

}  // namespace nns::sema
