#!/usr/bin/env bash
# recompute(ops) regions (tests/plan/plans/recompute.nns): each block of
# one recompute() call keeps only its input and runs its forward again
# before its backward. Every plan --verifies against one device (one
# device, data parallel, Megatron on 2 and 4 ranks, a 1F1B pipeline); under
# Megatron the block's allreduce runs again in the recompute; the checker's
# activations and the run's peak memory are below the plan without it.
#   recompute.sh NNS_BINARY
set -uo pipefail
source "$(dirname "$0")/plan_checks.sh"  # NNS from $1, the source root, fail=0
FILE=tests/plan/plans/recompute.nns

verify_runs "blocks 1" "dp 2" "megatron 2" "megatron 4" "pipeline 2"

with=$(rank0 megatron) without=$(rank0 megatron_plain)
# 3 blocks x 2 micro-batches: one more allreduce each (the recompute's).
expect_eq "allreduces with recompute" "$(grep -c ' allreduce ' <<<"$with")" "$(( $(grep -c ' allreduce ' <<<"$without") + 6 ))"
# Each block's 5 ops run their forward twice per micro-batch.
expect_eq "forwards of micro-batch 0" "$(grep -c 'mb0 forward k' <<<"$with")" "$(( $(grep -c 'mb0 forward k' <<<"$without") + 15 ))"

act() { "$NNS" check "$FILE" --plan "$1" --gpus 2 | grep -o 'activations [0-9.]* [KMG]*i*B'; }
# The capacity check's activations at rank 0's peak (the replay of its
# program, what the run allocates beyond weights, gradients and optimizer
# state): the regions keep only their inputs, and come back one at a time
# (a parameter gradient goes into its sum as soon as it is final, so its
# contribution buffer is not held to the end of the backward; a kernel
# that needs its own output reads it in its buffer, plan_executor_zeros.cpp;
# what a backward needs the shape of only goes after the forward, 11.00 and
# 17.00 KiB before).
expect_eq "checker activations with recompute" "$(act megatron)" "activations 10.50 KiB"
expect_eq "checker activations without" "$(act megatron_plain)" "activations 15.50 KiB"
peak() { "$NNS" run "$FILE" --plan "$1" --gpus 2 2>&1 | grep -o 'peak piece memory [0-9.]*' | awk '{print $4}'; }
p_with=$(peak megatron) p_without=$(peak megatron_plain)
if ! awk -v a="$p_with" -v b="$p_without" 'BEGIN { exit !(a > 0 && a < b) }'; then
  echo "FAIL: peak memory with recompute $p_with KiB is not below $p_without KiB"
  fail=1
fi

[ $fail = 0 ] && echo PASS
exit $fail
