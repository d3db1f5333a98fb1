#!/usr/bin/env bash
# A training step of a plan stays in backend memory: from step 2 on, rank 0
# moves nothing host->device and reads back exactly its loss scalars, 4
# bytes per loss-share instruction of its program (counted from `nns check
# --emit=program`, so a host round trip reintroduced anywhere in the
# executor fails this), and a CPU backend stages no collective through host
# copies. Step 1 uploads the synthetic inputs (counted: the counter is live).
#   host_traffic.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
first_uploads=0

case_() {  # FILE CONFIG PLAN GPUS PLAN_GPUS
  local args=("$1" --config "$2" --plan "$3" --gpus "$4" --plan-gpus "$5")
  if ! "$NNS" check "${args[@]}" --emit=program > "$tmp/program.txt" 2> "$tmp/err.txt"; then
    echo "FAIL: check --emit=program for $1 $3:"; tail -3 "$tmp/err.txt"; fail=1; return
  fi
  local shares
  shares=$(awk '/^program rank / { r = $3 } r == "0" && $2 == "loss-share" { n++ } END { print n + 0 }' "$tmp/program.txt")
  if ! "$NNS" run "${args[@]}" --device cpu --steps 3 --stats > "$tmp/run.txt" 2>&1; then
    echo "FAIL: run of $1 $3:"; tail -3 "$tmp/run.txt"; fail=1; return
  fi
  local lines
  lines=$(grep -c '^  stats (rank 0): ' "$tmp/run.txt")
  [ "$lines" = 3 ] || { echo "FAIL: $1 $3: $lines stats line(s) for 3 steps"; fail=1; return; }
  local step=0 h2d d2h sin sout before=$fail
  while read -r h2d d2h sin sout; do
    step=$((step + 1))
    if [ "$sin" != 0 ] || [ "$sout" != 0 ]; then
      echo "FAIL: $1 $3 step $step: a CPU backend staged collectives through the host ($sin B in, $sout B out)"; fail=1
    fi
    if [ "$d2h" != $((4 * shares)) ]; then
      echo "FAIL: $1 $3 step $step: $d2h B device->host, want $((4 * shares)) ($shares loss scalar(s))"; fail=1
    fi
    if [ "$step" = 1 ]; then
      first_uploads=$((first_uploads + h2d))
    elif [ "$h2d" != 0 ]; then
      echo "FAIL: $1 $3 step $step: $h2d B host->device after the first step"; fail=1
    fi
  done < <(sed -n 's/^  stats (rank 0): host->device \([0-9]*\) B, device->host \([0-9]*\) B; of these, collective staging \([0-9]*\) B host->device, \([0-9]*\) B device->host$/\1 \2 \3 \4/p' "$tmp/run.txt")
  [ "$fail" = "$before" ] && echo "$1 $3 on $4 ranks: rank 0 reads $((4 * shares)) B per step ($shares loss scalar(s)), uploads nothing after step 1"
}

case_ examples/01_mlp.nns small dp 2 2
case_ examples/gpt.nns tiny megatron 2 2
case_ examples/gpt.nns tiny megatron 4 2             # plan replicas: replica averaging
case_ examples/gpt.nns tiny_pipe megatron 2 2        # micro-batches: one loss scalar each
case_ examples/gpt.nns tiny_pipe pipeline 2 2        # send/recv; the loss is on rank 1
case_ examples/gpt.nns tiny dp_zero1 4 4             # reduce-scatter and allgather of zero1
case_ tests/plan/plans/pipeline.nns small onef1b 2 2
case_ tests/plan/plans/collectives.nns small alltoall 4 4
case_ tests/plan/plans/collectives.nns small allgather 2 2
[ "$first_uploads" -gt 0 ] || { echo "FAIL: no run counted its first step's input uploads: the counter counts nothing"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit $fail
