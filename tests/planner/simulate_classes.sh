#!/usr/bin/env bash
# nns simulate replays one rank per class of equal programs
# (backend/planner/sim_classes.h); --all-ranks replays every rank. On plans
# of every kind (tensor, pipeline, interleaved, zero-bubble, coshard,
# expert, interlaced, layouts over other device lists, plan replicas) both
# give the same step time to the nanosecond and the same peak memory to
# the byte, and the classes replay fewer ranks wherever ranks repeat.
#   tests/planner/simulate_classes.sh NNS
set -euo pipefail
NNS="$1"
CASES=(
  "examples/gpt.nns:megatron:4:4:tiny"
  "examples/gpt.nns:hybrid:8:4:tiny"
  "examples/gpt.nns:megatron_sc21:8:4:tiny_sc21_tp2_pp2_vp2"
  "examples/gpt.nns:zero_bubble:2:2:tiny_pipe"
  "examples/llama.nns:megatron:4:4:tiny"
  "examples/swin.nns:pipeline_coshard:8:8:tiny_pipe"
  "examples/swin.nns:coshard:2:2:tiny"
  "examples/llama.nns:hybrid:4:4:tiny"
  "examples/alphafold2.nns:dap:2:2:tiny"
  "examples/moe.nns:ep:4:4:tiny"
  "examples/t5.nns:interlaced:2:2:tiny"
  "examples/alphafold2.nns:pipeline3f1b:2:2:tiny"
  "examples/bert.nns:pipeline:4:4:tiny_pipe"
  "tests/plan/plans/layouts.nns:replicated_split:8:8:small"
  "tests/plan/plans/collectives.nns:alltoall:4:4:small"
  "tests/plan/plans/pipeline.nns:interleaved:4:4:small"
)
fewer=0
for c in "${CASES[@]}"; do
  IFS=: read -r file plan gpus plan_gpus config <<<"$c"
  run() { "$NNS" simulate "$file" --plan "$plan" --gpus "$gpus" --plan-gpus "$plan_gpus" --config "$config" --device a100 "$@"; }
  classes=$(run) || { echo "FAIL: $c: simulate failed"; echo "$classes"; exit 1; }
  every=$(run --all-ranks) || { echo "FAIL: $c: simulate --all-ranks failed"; echo "$every"; exit 1; }
  step() { sed -n 's/^simulated .*: step \([0-9.]*\) ms$/\1/p' <<<"$1"; }
  peak() { sed -n 's/^  peak memory: rank [0-9]* [0-9.]* GiB (\([0-9]*\) bytes).*/\1/p' <<<"$1"; }
  replayed() { sed -n 's/.*; \([0-9]*\) of [0-9]* rank(s) replayed$/\1/p' <<<"$1"; }
  s1=$(step "$classes"); s2=$(step "$every"); p1=$(peak "$classes"); p2=$(peak "$every")
  r1=$(replayed "$classes"); r2=$(replayed "$every")
  echo "$file $plan on $gpus ($plan_gpus per replica): classes replay $r1 of $r2 rank(s): step $s1 vs $s2 ms, peak $p1 vs $p2 bytes"
  if [ -z "$s1" ] || [ "$s1" != "$s2" ] || [ -z "$p1" ] || [ "$p1" != "$p2" ]; then
    echo "FAIL: $c: the classes and every rank differ"
    exit 1
  fi
  [ "$r1" -lt "$r2" ] && fewer=$((fewer + 1))
done
# The classes must be doing something: most of these plans repeat ranks.
[ "$fewer" -ge 8 ] || { echo "FAIL: only $fewer case(s) replayed fewer ranks"; exit 1; }
echo "PASS: rank classes give every rank's step and peak ($fewer of ${#CASES[@]} cases with fewer ranks replayed)"
