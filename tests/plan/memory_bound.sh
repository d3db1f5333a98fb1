#!/usr/bin/env bash
# The memory models against what runs: for several small plans on CPU
# ranks, the checker's per-device bound (nns check: "at most N bytes") is at
# least the largest rank's measured peak (nns run: "memory peak by rank"),
# and the simulator's peak (nns simulate --device cpu, which replays the
# executor's allocations) equals it. Prints each plan's figures and ratio.
#   memory_bound.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0

measure() {  # FILE CONFIG PLAN GPUS
  local f=$1 c=$2 p=$3 n=$4 cargs=()
  [ -n "$c" ] && cargs=(--config "$c")
  local chk sim run
  chk=$("$NNS" check "$f" "${cargs[@]}" --plan "$p" --gpus "$n" 2>&1 | sed -n 's/.*memory: at most [^(]*(\([0-9]*\) bytes).*/\1/p')
  sim=$("$NNS" simulate "$f" "${cargs[@]}" --plan "$p" --gpus "$n" --device cpu 2>&1 | sed -n 's/.*peak memory: rank [0-9]* [0-9.]* GiB (\([0-9]*\) bytes).*/\1/p')
  # Two steps: the accumulated gradients exist from the first on.
  run=$("$NNS" run "$f" "${cargs[@]}" --plan "$p" --gpus "$n" --steps 2 --peak-by-rank 2>&1 | sed -n 's/^memory peak by rank (bytes)://p' | tr ' ' '\n' | sort -n | tail -1)
  if [ -z "$chk" ] || [ -z "$sim" ] || [ -z "$run" ]; then
    echo "FAIL: $f $c $p $n: missing figure (check '$chk', simulate '$sim', run '$run')"
    fail=1
    return
  fi
  echo "$f ${c:-default} $p on $n: checker $chk, simulator $sim, run $run bytes ($(awk -v a="$chk" -v b="$run" 'BEGIN { printf "%.3f", a / b }') x)"
  if [ "$chk" -lt "$run" ]; then
    echo "FAIL: the checker's bound $chk is below the measured peak $run"
    fail=1
  fi
  if [ "$sim" != "$run" ]; then
    echo "FAIL: the simulator's peak $sim is not the measured $run"
    fail=1
  fi
}

measure examples/gpt.nns tiny dp 2
measure examples/gpt.nns tiny megatron 2
measure examples/gpt.nns tiny_pipe pipeline 2
measure examples/gpt.nns tiny dp_zero1 4
measure examples/swin.nns tiny coshard 2
measure examples/swin.nns tiny_pipe pipeline_coshard 4
measure examples/t5.nns tiny interlaced 2
measure tests/plan/plans/recompute.nns "" megatron 2
measure tests/plan/plans/recompute.nns "" pipeline 2

[ $fail = 0 ] && echo PASS
exit $fail
