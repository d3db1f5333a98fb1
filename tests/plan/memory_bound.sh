#!/usr/bin/env bash
# One memory model: for 14 shipped plans (and two recompute plans of the
# tests) on CPU ranks, the capacity check's figure (nns check: "memory:
# peak ... (N bytes)", the replay of each rank's lowered program,
# backend/lowering/memory_check.h), the simulator's peak (nns simulate
# --device cpu, the same replay) and the largest rank's peak measured by the
# executor (nns run --peak-by-rank) are the same number of bytes.
#   memory_bound.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0
plans=0

measure() {  # FILE CONFIG PLAN GPUS [EXTRA ARGS...]
  local f=$1 c=$2 p=$3 n=$4 cargs=()
  shift 4
  [ -n "$c" ] && cargs=(--config "$c")
  cargs+=("$@")
  local chk sim run
  chk=$("$NNS" check "$f" "${cargs[@]}" --plan "$p" --gpus "$n" 2>&1 | sed -n 's/.*memory: peak [^(]*(\([0-9]*\) bytes).*/\1/p')
  sim=$("$NNS" simulate "$f" "${cargs[@]}" --plan "$p" --gpus "$n" --device cpu 2>&1 | sed -n 's/.*peak memory: rank [0-9]* [0-9.]* GiB (\([0-9]*\) bytes).*/\1/p')
  # Two steps: the accumulated gradients exist from the first on.
  run=$("$NNS" run "$f" "${cargs[@]}" --plan "$p" --gpus "$n" --steps 2 --peak-by-rank 2>&1 | sed -n 's/^memory peak by rank (bytes)://p' | tr ' ' '\n' | sort -n | tail -1)
  plans=$((plans + 1))
  if [ -z "$chk" ] || [ -z "$sim" ] || [ -z "$run" ]; then
    echo "FAIL: $f $c $p $n $*: missing figure (check '$chk', simulate '$sim', run '$run')"
    fail=1
    return
  fi
  echo "$f ${c:-default} $p on $n $*: checker $chk, simulator $sim, run $run bytes"
  if [ "$chk" != "$run" ]; then
    echo "FAIL: the checker's peak $chk is not the measured $run"
    fail=1
  fi
  if [ "$sim" != "$run" ]; then
    echo "FAIL: the simulator's peak $sim is not the measured $run"
    fail=1
  fi
}

measure examples/gpt.nns tiny dp 2
measure examples/gpt.nns tiny megatron 2
measure examples/gpt.nns tiny hybrid 4
measure examples/gpt.nns tiny dp_zero1 4
measure examples/gpt.nns tiny_pipe pipeline 2
measure examples/gpt.nns tiny_pipe zero_bubble 2
# Interleaved (v = 2): sent activations released at their gradient's wait on
# both ranks (docs/verify.md, "Early send releases").
measure examples/gpt.nns tiny_sc21_pp2_vp2 megatron_sc21 2
# Sequence parallelism with regather(): the gathered inputs go after the forward.
measure examples/gpt.nns tiny_sc21_tp2_pp2 megatron_h100_sp 4
measure examples/swin.nns tiny coshard 2
measure examples/swin.nns tiny_pipe pipeline_coshard 4
measure examples/t5.nns tiny interlaced 2
measure examples/alphafold2.nns tiny dap 2
measure examples/llama.nns tiny hybrid 4
measure examples/01_mlp.nns small megatron 2
measure tests/plan/plans/recompute.nns "" megatron 2
measure tests/plan/plans/recompute.nns "" pipeline 2
# Plan replicas: replica 0's programs stand for the others.
measure examples/gpt.nns tiny megatron 4 --plan-gpus 2

echo "$plans plan(s) measured"
[ $fail = 0 ] && echo PASS
exit $fail
