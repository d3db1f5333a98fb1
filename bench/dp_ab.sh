#!/usr/bin/env bash
# Plain data parallelism (`nns run FILE --gpus 2`, no plan) of two nns
# binaries, A against B: interleaved runs, the ms/step each prints (steps
# after the first), min and median per binary and their ratio. Used to
# show that the implicit plan run by the plan executor steps as the former
# Trainer replicas did (build commit 2e9c5cc beside main for B).
#   bench/dp_ab.sh A_NNS B_NNS [--runs N] [--steps S]
# Models: gpt 4 layers dim 256 (batch 8, seq 64) and swin tiny.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
A="$1" B="$2"
shift 2
RUNS=5 STEPS=15
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "dp_ab.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# gpt at a size where the step is compute, not start-up.
sed 's/^config tiny_pipe extends tiny {/config ab extends tiny {\n  dim = 256\n  layers = 4\n  batch = 8\n  seq = 64\n}\n\nconfig tiny_pipe extends tiny {/' \
  "$ROOT/examples/gpt.nns" > "$tmp/gpt.nns"
grep -q '^config ab ' "$tmp/gpt.nns" || { echo "dp_ab.sh: could not add config ab to gpt.nns" >&2; exit 70; }

ms() { "$1" run "$2" --config "$3" --gpus 2 --steps "$STEPS" 2>&1 | sed -n 's/.*, \([0-9.]*\) ms\/step.*/\1/p'; }
stats() { sort -n | awk '{x[NR] = $1} END {printf "%.1f %.1f\n", x[1], x[int((NR + 1) / 2)]}'; }

printf "%-10s %10s %10s %10s %10s %8s\n" model A_min A_median B_min B_median A/B
for m in "$tmp/gpt.nns ab" "$ROOT/examples/swin.nns tiny"; do
  set -- $m
  : > "$tmp/a"; : > "$tmp/b"
  for ((i = 0; i < RUNS; i++)); do
    ms "$A" "$1" "$2" >> "$tmp/a"
    ms "$B" "$1" "$2" >> "$tmp/b"
  done
  read -r amin amed < <(stats < "$tmp/a")
  read -r bmin bmed < <(stats < "$tmp/b")
  printf "%-10s %10s %10s %10s %10s %8s\n" "$(basename "$1" .nns)" "$amin" "$amed" "$bmin" "$bmed" "$(awk -v a="$amed" -v b="$bmed" 'BEGIN { printf "%.3f", a / b }')"
done
echo "(ms/step, $RUNS interleaved runs of $STEPS steps on 2 ranks; A/B: ratio of medians)"
