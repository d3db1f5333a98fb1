#!/usr/bin/env bash
# One training step of a GPT layer stack with GPT-3 1.3B's dimensions
# (examples/gpt.nns config gpu_stack: hidden 2048, 16 heads, seq 2048, 4
# layers, batch 8) in bf16 autocast on one GPU: nns (--device cuda) against
# its PyTorch twin (bench/torch/torch_step.py) eager and, where it works,
# torch.compile, on the same GPU. Prints each step time, the ratio nns/torch
# and the model FLOPs utilisation against the H100's dense bf16 peak
# (989 TFLOP/s; NVIDIA H100 SXM datasheet). A benchmark, not a test: it
# never fails on a ratio.
#
#   bench/gpu/gpt_step.sh [--steps S] [--config C] [--device cuda|cpu] [--nns PATH]
#
# --device cpu runs the same pipeline on the CPU backend and CPU torch (a
# dry run of this script with --config tiny; the MFU figure is then
# meaningless). Without a visible GPU and --device cuda it says so and
# exits 0 (skipped).
#
# FLOPs per step, no recompute (Narayanan et al., SC'21, with 3 passes
# instead of 4): 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STEPS=10
CONFIG=gpu_stack
DEVICE=cuda
NNS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --nns) NNS="$2"; shift 2 ;;
    *) echo "gpt_step.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done
if [ "$DEVICE" = cuda ] && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpt_step.sh: skipped: no GPU visible (nvidia-smi)"
  exit 0
fi
if [ -z "$NNS" ]; then
  if [ "$DEVICE" = cuda ]; then
    cmake -S "$ROOT" -B "$ROOT/build-cuda" -DCMAKE_BUILD_TYPE=Release -DNNS_CUDA=ON > /dev/null
    cmake --build "$ROOT/build-cuda" -j"$(nproc)" --target nns > /dev/null
    NNS="$ROOT/build-cuda/nns"
  else
    NNS="$ROOT/build/nns"
  fi
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# precision = "bf16" in the train block (as tests/plan/bf16.sh adds it).
sed 's/^  clip = 1.0$/  clip = 1.0\n  precision = "bf16"/' "$ROOT/examples/gpt.nns" > "$TMP/gpt.nns"
grep -q 'precision = "bf16"' "$TMP/gpt.nns" || { echo "gpt_step.sh: could not add the precision setting" >&2; exit 1; }
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

"$NNS" run "$TMP/gpt.nns" --config "$CONFIG" --device "$DEVICE" --steps $((STEPS + 1)) > "$TMP/nns.log" 2>&1 ||
  { tail -5 "$TMP/nns.log"; exit 1; }
nns_ms=$(sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' "$TMP/nns.log")
echo "nns ($DEVICE, bf16): $nns_ms ms/step  ($(grep '^done' "$TMP/nns.log"))"

PY=${PYTHON:-python3}
torch_ms() {  # extra torch_step.py flags -> ms per step (median), or "-"
  if "$PY" "$ROOT/bench/torch/torch_step.py" gpt --config "$CONFIG" --device "$DEVICE" --bf16 --steps "$STEPS" "$@" \
       > "$TMP/torch.log" 2>&1; then
    sed -n 's/.* median_ms=\([0-9.]*\) .*/\1/p' "$TMP/torch.log" | head -1
  else
    echo "-"
    tail -3 "$TMP/torch.log" >&2
  fi
}
eager=$(torch_ms)
compiled=$(torch_ms --compile)
python3 - "$nns_ms" "$eager" "$compiled" "$CONFIG" "$ROOT/examples/gpt.nns" <<'PY'
import re, sys
nns, eager, compiled, config, path = sys.argv[1:6]
text = open(path).read()
def cfg(name, seen=()):
    m = re.search(r"^config " + name + r"(?: extends (\w+))? \{(.*?)^\}", text, re.M | re.S)
    vals = cfg(m.group(1)) if m.group(1) else {}
    vals.update({k: int(v) for k, v in re.findall(r"^\s*(\w+) = (\d+)\s*$", m.group(2), re.M)})
    return vals
c = cfg(config)
B, s, V, h, l = c["batch"], c["seq"], c["vocab"], c["dim"], c["layers"]
flops = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
peak = 989e12
def show(label, ms):
    if ms in ("", "-"):
        print(f"{label}: not measured")
        return None
    t = float(ms) / 1e3
    print(f"{label}: {float(ms):.2f} ms/step, {flops / t / 1e12:.1f} TFLOP/s, MFU {100 * flops / t / peak:.1f}% of 989 TFLOP/s")
    return float(ms)
print(f"model FLOPs per step: {flops / 1e12:.2f} TFLOP (B={B} s={s} V={V} h={h} l={l})")
n = show("nns", nns)
e = show("torch eager", eager)
k = show("torch.compile", compiled)
if n and e: print(f"nns / torch eager step time: {n / e:.2f}x (speed {e / n:.2f}x)")
if n and k: print(f"nns / torch.compile step time: {n / k:.2f}x")
PY
