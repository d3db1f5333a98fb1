#!/usr/bin/env bash
# nns simulate replays one plan replica by default and every rank with
# --all-ranks: on a small case both give the same step time, with and
# without the overlapped gradient reduction, and with the distributed
# optimizer and the overlap switches (each replica updates its own shard).
#   tests/planner/simulate_symmetry.sh NNS
set -euo pipefail
NNS="$1"
step() { "$NNS" simulate examples/gpt.nns --config tiny_sc21_tp2_pp2 --plan megatron_sc21 --gpus 12 --plan-gpus 4 --device a100 "$@" |
         sed -n 's/^simulated .*: step \([0-9.]*\) ms$/\1/p'; }
for flags in "" "--overlap-grad-reduce" "--precision fp16" \
             "--distributed-optimizer --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap --precision bf16"; do
  one=$(step $flags)
  all=$(step $flags --all-ranks)
  [ -n "$one" ] && [ -n "$all" ] || { echo "no step time"; exit 1; }
  echo "flags '$flags': replica 0 ${one} ms, all ranks ${all} ms"
  [ "$one" = "$all" ] || { echo "MISMATCH"; exit 1; }
done
echo "symmetry: same step times"
