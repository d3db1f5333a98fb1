#!/usr/bin/env bash
# bf16 autocast vs fp32 on one device: examples/gpt.nns with a config whose
# matrix products dominate the step (dim 512, 4 layers, 8 x 256 tokens),
# the same model with precision = "bf16" added, run alternately; prints the
# median step times and their ratio. Not a test (timings are noisy here).
#   bench/bf16.sh [--rounds R] [--steps S] [--threads T]
set -euo pipefail
cd "$(dirname "$0")/.."
NNS=${NNS:-build/nns}
rounds=3 steps=8 threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "usage: bench/bf16.sh [--rounds R] [--steps S] [--threads T]" >&2; exit 64 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
config='
config bench_bf16 extends tiny {
  batch = 8
  seq = 256
  vocab = 4096
  dim = 512
  heads = 8
  layers = 4
  lr = 0.0003
  steps = 100
  micro_batches = 1
}'
{ cat examples/gpt.nns; echo "$config"; } > "$tmp/fp32.nns"
sed 's/^  clip = 1.0$/  clip = 1.0\n  precision = "bf16"/' "$tmp/fp32.nns" > "$tmp/bf16.nns"
ms() { "$NNS" run "$1" --config bench_bf16 --steps "$steps" --threads "$threads" | sed -n 's/.*, \([0-9.]*\) ms\/step.*/\1/p'; }
f32=() bf=()
for r in $(seq "$rounds"); do
  f32+=("$(ms "$tmp/fp32.nns")")
  bf+=("$(ms "$tmp/bf16.nns")")
  echo "round $r: fp32 ${f32[-1]} ms/step, bf16 ${bf[-1]} ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "${f32[*]}" "${bf[*]}" "$threads" <<'PY'
import statistics, sys
f = statistics.median(map(float, sys.argv[1].split()))
b = statistics.median(map(float, sys.argv[2].split()))
print(f"gpt dim 512 x 4 layers, 8 x 256 tokens, {sys.argv[3]} thread(s): fp32 {f:.1f} ms/step, bf16 {b:.1f} ms/step: bf16/fp32 = {b / f:.2f}x")
PY
