#!/usr/bin/env bash
# The plan search (nns plan, docs/planner.md) on the issue's two models:
#   GPT-3 175B on 1024 simulated A100s (128 nodes of 8), with and without
#   the constraint table of plan search_table (the pruning ratio, and the
#   same best plan found both ways);
#   Swin (swin_32gpu, ~27B) on 32 simulated V100s (4 nodes of 8), in fp32
#   and in mixed precision (nnScaler trained it in fp16); where no plan of
#   the search space fits a V100's 32 GB the search says so. The plan it
#   finds is checked under the V100's memory and simulated (step,
#   images/s, peak), and so is nnScaler's own plan (pipeline_coshard,
#   4 stages x coshard over 8, micro-batches of one image, recompute,
#   config swin_32gpu_mb1_g4), and the two throughputs are compared.
#   GPT-3 175B in fp16 (issue 31 item 3): the best plan, written with its
#   data parallelism as plan replicas, and with --simulate-gpt the
#   simulate command nns plan prints for it (about 2 minutes, 3 GB): the
#   search's prediction over the simulated step.
# Each line: wall time of the whole command (elaborating the model, the
# search, writing and Z3-checking the plan) and the search's own time.
#   bash bench/search.sh [--simulate-gpt] [build/nns]
set -eu
SIM_GPT=0
if [ "${1:-}" = --simulate-gpt ]; then
  SIM_GPT=1
  shift
fi
NNS=${1:-build/nns}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

run() {
  local label=$1 rc=0
  shift
  local t0 t1
  t0=$(date +%s.%N)
  "$NNS" plan "$@" --out "$TMP/out.nns" > "$TMP/log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  # 65 with "no plan found": nothing in the space fits (reported, not a failure).
  if [ $rc != 0 ] && ! { [ $rc = 65 ] && grep -q "^no plan found" "$TMP/log"; }; then cat "$TMP/log"; exit 1; fi
  echo "== $label: nns plan $* ($(echo "$t1 - $t0" | bc) s wall)"
  grep -E "^(model|search|space)|^  (best|megatron|runner|1 device|data par)|^  +\(no |^best vs|^no plan beats|^\(the best|^check:|^  memory:|^no plan found|^wrote|^  simulate it as searched" "$TMP/log"
  [ $rc = 0 ] && sed -n '/^plan searched/,/^}/p' "$TMP/out.nns" > "$TMP/$label.plan" && cp "$TMP/out.nns" "$TMP/$label.nns"
  return 0
}

# replica_flags FILE: the --plan-gpus K (and --distributed-optimizer) that
# the plan nns plan wrote into FILE needs (its data parallelism as plan
# replicas), read from the simulate command it wrote there.
replica_flags() {
  sed -n 's/^# Simulated by: nns simulate .* --gpus [0-9]*\( --plan-gpus [0-9]*\)\{0,1\}.*/\1/p' "$1"
  grep -q '^# Simulated by: .* --distributed-optimizer$' "$1" && echo "--distributed-optimizer"
  return 0
}

# simulate LABEL FILE ARGS...: nns simulate's step, images/s (batch 32) and peak;
# sets $ips to the images/s.
simulate() {
  local label=$1
  shift
  "$NNS" simulate "$@" > "$TMP/sim.log" 2>&1 || { cat "$TMP/sim.log"; exit 1; }
  local step
  step=$(sed -n 's/^simulated .*: step \([0-9.]*\) ms/\1/p' "$TMP/sim.log")
  ips=$(echo "32 * 1000 / $step" | bc -l | cut -c1-6)
  echo "simulated $label: step $step ms, $ips images/s"
  grep "peak memory:" "$TMP/sim.log"
}

run gpt3_175b examples/gpt.nns --config gpt3_175b --gpus 1024 --device a100
run gpt3_175b_table examples/gpt.nns --config gpt3_175b --gpus 1024 --device a100 --plan search_table
if cmp -s "$TMP/gpt3_175b.plan" "$TMP/gpt3_175b_table.plan"; then
  echo "== the same best plan with and without the constraint table"
else
  echo "== the constraint table changed the best plan"
fi
run swin_32gpu examples/swin.nns --config swin_32gpu --gpus 32 --device v100
run swin_32gpu_fp16 examples/swin.nns --config swin_32gpu --gpus 32 --device v100 --precision fp16
# Per precision: the plan the search found (when one fits), checked under
# the V100's memory and simulated; nnScaler's plan likewise; the ratio.
for prec in fp32 fp16; do
  label=swin_32gpu; [ $prec = fp16 ] && label=swin_32gpu_fp16
  found=""
  if [ -f "$TMP/$label.nns" ]; then
    found=1
    # shellcheck disable=SC2207
    args=("$TMP/$label.nns" --config swin_32gpu_plan --plan searched --gpus 32 $(replica_flags "$TMP/$label.nns"))
    echo "== the plan nns plan found, swin_32gpu, $prec:"
    "$NNS" check "${args[@]}" --device-memory v100 --precision $prec 2>&1 | grep -E "^check:|^  memory:|^program:" | cut -c1-200
    simulate searched "${args[@]}" --device v100 --precision $prec
    found_ips=$ips
  else
    echo "== swin_32gpu, $prec: nns plan found no plan that fits"
  fi
  args=(examples/swin.nns --config swin_32gpu_mb1_g4 --plan pipeline_coshard --gpus 32)
  echo "== nnScaler's pipeline_coshard, swin_32gpu_mb1_g4, $prec:"
  "$NNS" check "${args[@]}" --device-memory v100 --precision $prec 2>&1 | grep -E "^check:|^  memory:" | cut -c1-200
  simulate pipeline_coshard "${args[@]}" --device v100 --precision $prec
  [ -n "$found" ] && echo "searched vs pipeline_coshard (simulated, $prec): $(echo "$found_ips / $ips" | bc -l | cut -c1-5)x images/s"
done

# GPT-3 175B in fp16: the best plan as plan replicas; its prediction over
# `nns simulate` of it, by the command nns plan printed (--simulate-gpt).
run gpt3_175b_fp16 examples/gpt.nns --config gpt3_175b --gpus 1024 --device a100 --precision fp16 --plan search_table
if [ $SIM_GPT = 1 ] && [ -f "$TMP/gpt3_175b_fp16.nns" ]; then
  pred=$(sed -n 's/^# Predicted on .*: step \([0-9.]*\) ms.*/\1/p' "$TMP/gpt3_175b_fp16.nns")
  cmd=$(sed -n 's/^# Simulated by: nns simulate [^ ]* //p' "$TMP/gpt3_175b_fp16.nns")
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$NNS" simulate "$TMP/gpt3_175b_fp16.nns" $cmd > "$TMP/sim.log" 2>&1 || { cat "$TMP/sim.log"; exit 1; }
  t1=$(date +%s.%N)
  step=$(sed -n 's/^simulated .*: step \([0-9.]*\) ms/\1/p' "$TMP/sim.log")
  echo "== nns simulate OUT $cmd ($(echo "$t1 - $t0" | bc) s wall): step $step ms; predicted $pred ms: $(echo "$pred / $step" | bc -l | cut -c1-5)"
  grep "peak memory:" "$TMP/sim.log"
fi
