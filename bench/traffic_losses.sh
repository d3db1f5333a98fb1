#!/usr/bin/env bash
# The losses of the plans bench/traffic_once.sh measures, under two nns
# binaries (before and after a lowering change), each run with --verify
# against one device: whether every step's loss is bit-identical, the
# largest difference otherwise (losses from --metrics, exact), and each
# run's verify verdict.
#   bench/traffic_losses.sh NNS_BEFORE NNS_AFTER [STEPS]   (default 5 steps)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BEFORE="$1"
AFTER="$2"
STEPS="${3:-5}"
cd "$ROOT"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

mapfile -t cases < <(grep -v '^#' bench/traffic_cases.txt)
for c in "${cases[@]}"; do
  read -r file config plan ranks <<< "$c"
  args=("$file" --config "$config" --plan "$plan" --gpus "$ranks" --steps "$STEPS" --verify)
  for which in before after; do
    bin="$BEFORE"
    [ "$which" = after ] && bin="$AFTER"
    rm -f "$tmp/$which.jsonl"
    "$bin" run "${args[@]}" --metrics "$tmp/$which.jsonl" > "$tmp/$which.out" 2>&1
    echo "rc $?" >> "$tmp/$which.out"
    # The exact losses (%.17g), one per step.
    grep -oE '"loss": *[-0-9.e+]+' "$tmp/$which.jsonl" 2>/dev/null | sed 's/.*: *//' > "$tmp/$which.loss"
  done
  verdicts="$(grep -h '^verify: largest' "$tmp/before.out" "$tmp/after.out" | sed 's/^verify: largest relative error //; s/ over losses and gradients.*: / /; s/ (fp32.*//' | tr '\n' '|')"
  if [ ! -s "$tmp/before.loss" ] || [ ! -s "$tmp/after.loss" ]; then
    same="no losses ($(tail -1 "$tmp/before.out"), $(tail -1 "$tmp/after.out"))"
  elif cmp -s "$tmp/before.loss" "$tmp/after.loss"; then
    same="bit-identical ($(wc -l < "$tmp/after.loss") steps, last $(tail -1 "$tmp/after.loss"))"
  else
    same="differ: largest |d| $(paste "$tmp/before.loss" "$tmp/after.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m }') (last $(tail -1 "$tmp/before.loss") vs $(tail -1 "$tmp/after.loss"))"
  fi
  printf '%-16s %-10s %-12s %s | %s | verify before|after: %s\n' "$(basename "$file")" "$config" "$plan" "$ranks" "$same" "$verdicts"
done
