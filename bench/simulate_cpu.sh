#!/usr/bin/env bash
# The planner's prediction against this machine: for every shipped plan on
# N CPU ranks, the measured step time (`nns run --gpus N --plan P`, the
# median of steps SKIP+1..S, each run R times, round-robin over the plans, and the median run kept) and the
# simulated one (`nns simulate --device PROFILE`), with the error. A
# benchmark, not a test: timings depend on the machine and its load.
#   bench/simulate_cpu.sh [--profile FILE|measure] [--steps S] [--skip K] [--runs R] [--gpus N]
# --profile measure (the default) runs `nns profile --ranks N` first, into
# a temporary file, so that the prediction and the runs see the same
# machine in the same state; --profile FILE uses FILE (the shipped one:
# --profile stdlib/profiles/cpu.json). Prints one line per plan
# and a summary: how many predictions are within +-20% of the measured
# median. "fastest" is the quickest later step of all runs: on a machine
# other processes load, the median includes the time the ranks wait for a
# core and the fastest step is the closer view of what the profile measured.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"
STEPS=20
SKIP=4  # warm-up steps left out of the median
RUNS=3
GPUS=2
PROFILE=measure
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --skip) SKIP="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --gpus) GPUS="$2"; shift 2 ;;
    *) echo "simulate_cpu.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ "$PROFILE" = measure ] || [ ! -f "$PROFILE" ]; then
  echo "measuring the profile: nns profile --ranks $GPUS (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$NNS" profile --out "$TMP/cpu.json" --ranks "$GPUS" | tail -1
  grep -o '"device_source": "[^"]*"' "$TMP/cpu.json" || true
  PROFILE="$TMP/cpu.json"
fi

# model file config plan [plan-args...]: every shipped plan (bench/plan_steps.sh's,
# the other examples', and the pipeline plans with their *_pipe configs).
PLANS=(
  "gpt examples/gpt.nns tiny dp" "gpt examples/gpt.nns tiny megatron" "gpt examples/gpt.nns tiny hybrid"
  "gpt examples/gpt.nns tiny dp_zero1"
  "gpt examples/gpt.nns tiny_pipe pipeline" "gpt examples/gpt.nns tiny_pipe zero_bubble"
  "swin examples/swin.nns tiny dp" "swin examples/swin.nns tiny megatron" "swin examples/swin.nns tiny coshard"
  "swin examples/swin.nns tiny_pipe pipeline_coshard"
  "mlp examples/01_mlp.nns small dp" "mlp examples/01_mlp.nns small megatron" "mlp examples/01_mlp.nns small pipeline"
  "llama examples/llama.nns tiny dp" "llama examples/llama.nns tiny megatron" "llama examples/llama.nns tiny hybrid"
  "resnet examples/resnet.nns tiny dp"
  "t5 examples/t5.nns tiny dp" "t5 examples/t5.nns tiny pipeline" "t5 examples/t5.nns tiny interlaced"
  "alphafold2 examples/alphafold2.nns tiny dap" "alphafold2 examples/alphafold2.nns tiny pipeline3f1b"
)

# Step times from --metrics (to the microsecond; the step lines print 10 us
# steps, too coarse for the 0.07 ms steps of mlp small).
# shellcheck source=bench/metrics.sh
source "$ROOT/bench/metrics.sh"

echo "simulate vs run: $GPUS CPU ranks, profile $PROFILE, $(nproc) cores, median of steps $((SKIP + 1))..$STEPS, median of $RUNS runs"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %-16s %12s %12s %9s %10s %9s\n' model plan "predicted ms" "measured ms" "error %" "fastest ms" "vs fast"
# Predictions first; then the runs round-robin over the plans (run 1 of
# every plan, then run 2, ...): a minute in which the shared VM is slow then
# costs one run of several plans, not every run of one plan (runs of the
# same plan minutes apart differed by up to 1.9x on 2026-11-25).
declare -A PRED RUNS MINS FAILED
for entry in "${PLANS[@]}"; do
  read -r name file config plan <<<"$entry"
  key="$name/$config/$plan"
  if ! sim="$("$NNS" simulate "$file" --config "$config" --gpus "$GPUS" --plan "$plan" --device "$PROFILE" 2>&1)"; then
    FAILED[$key]="simulate refused: $(grep -m1 'error' <<<"$sim" | cut -c1-100)"
    continue
  fi
  PRED[$key]="$(sed -n 's/^simulated .*: step \([0-9.]*\) ms.*/\1/p' <<<"$sim")"
done
for ((r = 0; r < RUNS; ++r)); do
  for entry in "${PLANS[@]}"; do
    read -r name file config plan <<<"$entry"
    key="$name/$config/$plan"
    [ -n "${FAILED[$key]:-}" ] && continue
    if ! out="$("$NNS" run "$file" --config "$config" --gpus "$GPUS" --plan "$plan" --steps "$STEPS" --metrics "$TMP/metrics.jsonl" 2>&1)"; then
      FAILED[$key]="run refused: $(grep -m1 'error' <<<"$out" | cut -c1-100)"
      continue
    fi
    RUNS[$key]="${RUNS[$key]:-} $(step_median "$TMP/metrics.jsonl")"
    MINS[$key]="${MINS[$key]:-} $(step_min "$TMP/metrics.jsonl")"
  done
done
within=0
total=0
skipped=0
for entry in "${PLANS[@]}"; do
  read -r name file config plan <<<"$entry"
  key="$name/$config/$plan"
  if [ -n "${FAILED[$key]:-}" ]; then
    printf '%-22s %-16s   skipped: %s\n' "$name/$config" "$plan" "${FAILED[$key]}"
    skipped=$((skipped + 1))
    continue
  fi
  pred="${PRED[$key]}"
  read -r -a runs <<<"${RUNS[$key]}"
  meas="$(printf '%s\n' "${runs[@]}" | median)"
  fastest="$(printf '%s\n' ${MINS[$key]} | sort -g | head -1)"
  load="$(cut -d' ' -f1 /proc/loadavg)"
  line="$(awk -v n="$name/$config" -v p="$plan" -v a="$pred" -v m="$meas" -v l="$load" -v rs="${runs[*]}" -v f="$fastest" \
    'BEGIN { e = (a - m) / m * 100; printf "%-22s %-16s %12.3f %12.3f %+8.1f%% %10.3f %+8.1f%%  (runs %s)\n", n, p, a, m, e, f, (a - f) / f * 100, rs; exit (e <= 20 && e >= -20) ? 0 : 1 }')" && within=$((within + 1)) || true
  echo "$line"
  total=$((total + 1))
done
echo "summary: $within of $total plans predicted within +-20% ($skipped skipped); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
