#!/usr/bin/env bash
# How a rank waits for its peers, A/B on the same binary: spinning and core
# binding off (NNS_COMM_SPIN_US=0 NNS_BIND=0) against the defaults (poll up
# to 50 us before sleeping; local ranks bound to their cores), alternating
# runs, each the median of steps SKIP+1..S from --metrics, then the median
# run. A benchmark, not a test: the machine is shared and noisy.
#   bench/comm_wait.sh [--runs R] [--steps S]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"
RUNS=3
STEPS=20
SKIP=4
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "comm_wait.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=bench/metrics.sh
source "$ROOT/bench/metrics.sh"
one() { env "$@" "$NNS" run "$file" --config "$config" --plan "$plan" --gpus 2 --steps "$STEPS" --metrics "$TMP/m.jsonl" > /dev/null 2>&1 && step_median "$TMP/m.jsonl"; }
echo "comm wait A/B: 2 ranks, $(nproc) cores, $RUNS alternating runs each, load $(cut -d' ' -f1 /proc/loadavg)"
for spec in "examples/alphafold2.nns tiny dap" "examples/gpt.nns tiny dp_zero1" "examples/gpt.nns tiny megatron" \
            "examples/t5.nns tiny interlaced" "examples/gpt.nns tiny_pipe pipeline" "examples/swin.nns tiny dp"; do
  read -r file config plan <<<"$spec"
  off=()
  on=()
  for ((r = 0; r < RUNS; ++r)); do
    off+=("$(one NNS_COMM_SPIN_US=0 NNS_BIND=0)")
    on+=("$(one NNS_UNUSED=1)")
  done
  a="$(printf '%s\n' "${off[@]}" | median)"
  b="$(printf '%s\n' "${on[@]}" | median)"
  awk -v n="$file $config $plan" -v a="$a" -v b="$b" 'BEGIN { printf "%-40s off %9.3f ms   defaults %9.3f ms   %.2fx\n", n, a, b, a / b }'
done
