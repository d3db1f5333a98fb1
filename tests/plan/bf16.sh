#!/usr/bin/env bash
# bf16 autocast (train setting precision = "bf16"): examples/gpt.nns with
# the setting added trains on one device with losses near fp32's but not
# equal to them (the matrix products really round), and its plans pass
# --verify against one device at the same precision (bf16 bound).
set -uo pipefail
NNS=${1:?usage: bf16.sh NNS_BINARY}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sed 's/^  clip = 1.0$/  clip = 1.0\n  precision = "bf16"/' examples/gpt.nns > "$tmp/gpt_bf16.nns"
grep -q 'precision = "bf16"' "$tmp/gpt_bf16.nns" || fail "could not add the precision setting to examples/gpt.nns"
loss1() { grep -E '^step +1/' "$1" | awk '{print $4}'; }

"$NNS" run examples/gpt.nns --config tiny --steps 3 > "$tmp/f32" 2>&1 || fail "fp32 run: $(tail -3 "$tmp/f32")"
"$NNS" run "$tmp/gpt_bf16.nns" --config tiny --steps 20 > "$tmp/bf16" 2>&1 || fail "bf16 run: $(tail -3 "$tmp/bf16")"
grep -q "bf16 matrix products" "$tmp/bf16" || fail "the banner does not say bf16: $(head -2 "$tmp/bf16")"
python3 - "$(loss1 "$tmp/f32")" "$(loss1 "$tmp/bf16")" "$(grep '^done' "$tmp/bf16")" <<'PY' || exit 1
import re, sys
f32, bf16, done = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rel = abs(bf16 - f32) / abs(f32)
print(f"step-1 loss fp32 {f32} bf16 {bf16}: relative difference {rel:.2e}")
if not (0 < rel < 1e-2): sys.exit("FAIL: bf16's first loss should differ from fp32's by rounding only")
first, last = map(float, re.search(r"loss ([0-9.]+) -> ([0-9.]+)", done).groups())
if not last < first * 0.8: sys.exit(f"FAIL: bf16 loss did not fall: {first} -> {last}")
print(f"bf16 loss {first} -> {last} in 20 steps")
PY
for p in dp megatron hybrid; do
  "$NNS" run "$tmp/gpt_bf16.nns" --config tiny --steps 5 --plan $p --gpus 2 --verify > "$tmp/$p" 2>&1 ||
    fail "$p: $(grep -E 'verify|error' "$tmp/$p" | tail -3)"
  grep -q "PASS (bf16 bound 1e-02; update 1e-06)" "$tmp/$p" || fail "$p: no bf16 verify line"
  echo "ok: $p $(grep 'largest relative error' "$tmp/$p")"
done
# The emulated bf16 path (every x86-64 CPU; forced here so that a CPU with
# a native bf16 matmul tests it too) under a plan, and a bad setting refused.
NNS_CPU_BF16=emulate "$NNS" run "$tmp/gpt_bf16.nns" --config tiny --steps 5 --plan megatron --gpus 2 --verify > "$tmp/emu" 2>&1 ||
  fail "emulated megatron: $(grep -E 'verify|error' "$tmp/emu" | tail -3)"
grep -q "PASS (bf16 bound 1e-02; update 1e-06)" "$tmp/emu" || fail "emulated megatron: no bf16 verify line"
grep -q "emulated" "$tmp/emu" || fail "emulated megatron: the banner does not say emulated: $(head -1 "$tmp/emu")"
echo "ok: emulated megatron $(grep 'largest relative error' "$tmp/emu")"
NNS_CPU_BF16=fast "$NNS" run "$tmp/gpt_bf16.nns" --config tiny --steps 1 > "$tmp/bad" 2>&1
rc=$?
[ $rc -eq 64 ] || fail "NNS_CPU_BF16=fast: exit $rc, not 64: $(tail -2 "$tmp/bad")"
grep -q "NNS_CPU_BF16 must be" "$tmp/bad" || fail "NNS_CPU_BF16=fast: $(tail -2 "$tmp/bad")"
