#!/usr/bin/env bash
# Step time of every shipped plan on CPU ranks against the same model on
# one device with the same total thread count, measured in one run.
# A benchmark, not a test. On a machine with C cores, N ranks get C/N
# threads each, so the ratio shows what partitioning and the derived
# collectives cost (or save) at equal compute.
#   bench/plan_steps.sh [--steps S] [--gpus N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"  # NNS=path compares another build
STEPS=10
GPUS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --gpus) GPUS="$2"; shift 2 ;;
    *) echo "plan_steps.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"
ms() { sed -n 's/^done: .*, \([0-9.]*\) ms\/step.*/\1/p'; }
echo "plan step times, $GPUS CPU ranks vs 1 device ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)), mean of steps 2..$STEPS"
printf '%-22s %-10s %12s %12s %8s\n' model plan "1 dev ms" "plan ms" ratio
for entry in "gpt examples/gpt.nns tiny dp megatron hybrid" "swin examples/swin.nns tiny dp megatron coshard" \
             "mlp examples/01_mlp.nns small dp megatron pipeline"; do
  read -r name file config plans <<<"$entry"
  base="$("$NNS" run "$file" --config "$config" --steps "$STEPS" --threads "$(nproc)" | ms)"
  for plan in $plans; do
    # A plan that does not fit this many devices is refused by nns (with a
    # diagnostic): reported as such, and the other plans still run.
    if ! out="$("$NNS" run "$file" --config "$config" --gpus "$GPUS" --plan "$plan" --steps "$STEPS" 2>&1)"; then
      printf '%-22s %-10s %12.2f   refused: %s\n' "$name/$config" "$plan" "$base" "$(grep -m1 'error:' <<<"$out" | sed 's/^[^ ]* error: //')"
      continue
    fi
    t="$(ms <<<"$out")"
    awk -v n="$name/$config" -v p="$plan" -v b="$base" -v t="$t" 'BEGIN { printf "%-22s %-10s %12.2f %12.2f %8.2f\n", n, p, b, t, t / b }'
  done
done
