#!/usr/bin/env bash
# --distributed-optimizer, one memory truth: on a small TP 2 x 4-replica
# config nns check's memory bound equals nns simulate's peak, with the
# switch and without it; the switch lowers both (the optimizer state and
# fp32 master weights sharded over the 4 replicas); the overlap switches
# leave the peak alone. (nns run runs the switch: tests/plan/distributed_optimizer.sh.)
#   tests/planner/distributed_optimizer.sh NNS
set -euo pipefail
NNS="$1"
args=(examples/gpt.nns --config tiny_sc21_tp2 --plan megatron_h100 --gpus 8 --plan-gpus 2 --precision bf16)
sim() {
  local out
  out=$("$NNS" simulate "${args[@]}" --device h100 "$@")
  sed -n 's/^  peak memory: rank [0-9]* [0-9.]* GiB (\([0-9]*\) bytes).*/\1/p' <<<"$out"
}
chk() {
  local out
  out=$("$NNS" check "${args[@]}" "$@")
  sed -n 's/^  memory: peak .* (\([0-9]*\) bytes) on device.*/\1/p' <<<"$out"
}
plain_sim=$(sim)
plain_chk=$(chk)
do_sim=$(sim --distributed-optimizer)
do_chk=$(chk --distributed-optimizer)
do_sim_overlap=$(sim --distributed-optimizer --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap)
echo "plain: simulate $plain_sim, check $plain_chk; distributed optimizer: simulate $do_sim, check $do_chk, with overlap $do_sim_overlap"
[ -n "$plain_sim" ] && [ -n "$do_sim" ] && [ -n "$plain_chk" ] && [ -n "$do_chk" ] || { echo "FAIL: a peak is missing"; exit 1; }
[ "$plain_sim" = "$plain_chk" ] || { echo "FAIL: checker and simulator disagree without the switch"; exit 1; }
[ "$do_sim" = "$do_chk" ] || { echo "FAIL: checker and simulator disagree with --distributed-optimizer"; exit 1; }
[ "$do_sim" -lt "$plain_sim" ] || { echo "FAIL: the distributed optimizer does not lower the peak"; exit 1; }
[ "$do_sim_overlap" = "$do_sim" ] || { echo "FAIL: an overlap switch changed the peak"; exit 1; }
echo "PASS: one memory truth with the distributed optimizer"
