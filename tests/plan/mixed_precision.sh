#!/usr/bin/env bash
# Mixed precision, the issue's done-when on CPU: examples/gpt.nns (config
# tiny) trains 30 steps in fp32, bf16 (on both CPU paths: oneDNN's bf16
# matmul where this CPU has one, and the emulated path NNS_CPU_BF16=emulate
# forces) and fp16 (dynamic loss scaling), and
# each low-precision loss curve stays within 2% (relative, every step) of
# fp32's while not being equal to it (the products really round). Then
# --verify of plans dp and megatron on 2 ranks under fp16 and under a bf16
# gradient reduction (grad_reduce = "bf16"), and an fp16 run whose initial
# scale overflows: the ranks and one device skip the same steps.
set -uo pipefail
NNS=${1:?usage: mixed_precision.sh NNS_BINARY}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The train block's settings go in after its `clip = 1.0` line.
with() {  # with OUT SETTING...: examples/gpt.nns plus the settings
  local out=$1 add=""
  shift
  for s in "$@"; do add="$add\n  $s"; done
  sed "s/^  clip = 1.0\$/  clip = 1.0$add/" examples/gpt.nns > "$out"
  for s in "$@"; do grep -qF "  $s" "$out" || fail "could not add '$s' to examples/gpt.nns"; done
}
with "$tmp/bf16.nns" 'precision = "bf16"'
with "$tmp/fp16.nns" 'precision = "fp16"'
with "$tmp/reduce_bf16.nns" 'grad_reduce = "bf16"'
with "$tmp/fp16_reduce_bf16.nns" 'precision = "fp16"' 'grad_reduce = "bf16"'
with "$tmp/fp16_overflow.nns" 'precision = "fp16"' 'loss_scale = dynamic_loss_scale(init = 1e7, interval = 4)'
losses() { grep -E '^step +[0-9]+/' "$1" | awk '{print $4}'; }

"$NNS" run examples/gpt.nns --config tiny --steps 30 > "$tmp/fp32.out" 2>&1 || fail "fp32 run: $(tail -3 "$tmp/fp32.out")"
for p in bf16 fp16; do
  "$NNS" run "$tmp/$p.nns" --config tiny --steps 30 > "$tmp/$p.out" 2>&1 || fail "$p run: $(tail -3 "$tmp/$p.out")"
  grep -q "$p matrix products" "$tmp/$p.out" || fail "the banner does not say $p: $(head -1 "$tmp/$p.out")"
done
NNS_CPU_BF16=emulate "$NNS" run "$tmp/bf16.nns" --config tiny --steps 30 > "$tmp/bf16_emu.out" 2>&1 ||
  fail "bf16 emulated run: $(tail -3 "$tmp/bf16_emu.out")"
grep -q "bf16 matrix products.*emulated" "$tmp/bf16_emu.out" || fail "the banner does not say the bf16 products are emulated: $(head -1 "$tmp/bf16_emu.out")"
echo "bf16 path by default on this CPU: $(grep -o 'bf16 matrix products[^)]*' "$tmp/bf16.out")"
grep -q "loss scale 65536, 0 step(s) skipped" "$tmp/fp16.out" || fail "fp16 summary: $(grep '^done' "$tmp/fp16.out")"
python3 - <(losses "$tmp/fp32.out") <(losses "$tmp/bf16.out") <(losses "$tmp/fp16.out") <(losses "$tmp/bf16_emu.out") <<'PY' || exit 1
import sys
curves = [[float(x) for x in open(f)] for f in sys.argv[1:]]
f32 = curves[0]
if len(f32) != 30: sys.exit(f"FAIL: fp32 ran {len(f32)} steps, not 30")
if not f32[-1] < 0.8 * f32[0]: sys.exit(f"FAIL: the fp32 loss did not fall: {f32[0]} -> {f32[-1]}")
for name, c in zip(["bf16", "fp16", "bf16 (emulated path)"], curves[1:]):
    if len(c) != 30: sys.exit(f"FAIL: {name} ran {len(c)} steps, not 30")
    rel = [abs(a - b) / abs(b) for a, b in zip(c, f32)]
    worst = max(range(30), key=lambda i: rel[i])
    print(f"{name}: largest relative loss difference from fp32 {rel[worst]:.2e} (step {worst + 1}); loss {c[0]} -> {c[-1]}")
    if rel[worst] >= 0.02: sys.exit(f"FAIL: {name}'s loss at step {worst + 1} is {c[worst]}, fp32's {f32[worst]}: over 2%")
    if rel[worst] == 0: sys.exit(f"FAIL: {name}'s curve equals fp32's: nothing was rounded")
PY

verify() {  # verify FILE PLAN BOUND_TEXT: a 2-rank --verify run that must pass; prints its largest error
  "$NNS" run "$1" --config tiny --steps "${4:-10}" --plan "$2" --gpus 2 --verify > "$tmp/v.out" 2>&1 ||
    fail "$1 $2: $(grep -E 'verify|error' "$tmp/v.out" | tail -3)"
  grep -qF "PASS ($3; update 1e-06)" "$tmp/v.out" || fail "$1 $2: no '$3' verify line: $(grep 'verify:' "$tmp/v.out" | head -1)"
  grep 'largest relative error' "$tmp/v.out" | awk '{print $5}'
}
for p in dp megatron; do
  e=$(verify "$tmp/fp16.nns" $p "fp16 bound 1e-02") || { echo "$e"; exit 1; }
  echo "ok: fp16 $p --verify, largest relative error $e"
  e=$(verify "$tmp/reduce_bf16.nns" $p "fp32, bf16 gradient reduction, bound 1e-02") || { echo "$e"; exit 1; }
  echo "ok: grad_reduce bf16 $p --verify, largest relative error $e"
  # dp sums gradients over its 2 replicas: rounded to bf16 first, the run
  # must differ from one device's fp32 sum by more than fp32 reordering.
  if [ $p = dp ]; then
    python3 -c "import sys; sys.exit(0 if float('$e') > 1e-4 else 1)" || fail "grad_reduce bf16 dp agrees with fp32 to $e: the gradients were not rounded"
  fi
  e=$(verify "$tmp/fp16_reduce_bf16.nns" $p "fp16, bf16 gradient reduction, bound 1e-02") || { echo "$e"; exit 1; }
  echo "ok: fp16 + grad_reduce bf16 $p --verify, largest relative error $e"
done

# An initial scale of 1e7 overflows fp16 in the backward: those steps are
# skipped on every rank and on one device alike (--verify compares the
# decisions), the scale halves each time, then training proceeds.
for p in dp megatron; do
  verify "$tmp/fp16_overflow.nns" $p "fp16 bound 1e-02" 16 > /dev/null || exit 1
  skipped=$(grep -c 'update skipped' "$tmp/v.out")
  [ "$skipped" -ge 1 ] || fail "fp16 overflow $p: no step was skipped"
  grep -qE "loss scale [0-9.e+]+, $skipped step\(s\) skipped" "$tmp/v.out" || fail "fp16 overflow $p: summary $(grep '^done' "$tmp/v.out")"
  grep -q 'did not (loss scaling decided differently)' "$tmp/v.out" && fail "fp16 overflow $p: the ranks and one device skipped different steps"
  echo "ok: fp16 overflow $p: $skipped step(s) skipped, $(grep -o 'loss scale [^,]*' "$tmp/v.out" | tail -1)"
done

# A checkpoint carries the loss scale and the skipped-step count: a run
# stopped at step 6 and resumed continues exactly as the unbroken one (one
# device: the same losses and scales; plan dp: the same scale and count).
"$NNS" run "$tmp/fp16_overflow.nns" --config tiny --steps 12 > "$tmp/whole.out" 2>&1 || fail "fp16 overflow 12 steps: $(tail -2 "$tmp/whole.out")"
"$NNS" run "$tmp/fp16_overflow.nns" --config tiny --steps 12 --stop-after 6 --save "$tmp/ck.safetensors" > "$tmp/first.out" 2>&1 || fail "save: $(tail -2 "$tmp/first.out")"
"$NNS" run "$tmp/fp16_overflow.nns" --config tiny --steps 12 --resume "$tmp/ck.safetensors" > "$tmp/rest.out" 2>&1 || fail "resume: $(tail -2 "$tmp/rest.out")"
steps_after6() { grep -E '^step +([7-9]|1[0-2])/' "$1" | awk '{print $2, $4, $(NF-1), $NF}'; }
summary() { grep -o 'loss scale [^,]*, [0-9]* step(s) skipped' "$1"; }
[ "$(steps_after6 "$tmp/whole.out")" = "$(steps_after6 "$tmp/rest.out")" ] || fail "resumed steps differ from the unbroken run"
[ -n "$(summary "$tmp/whole.out")" ] && [ "$(summary "$tmp/whole.out")" = "$(summary "$tmp/rest.out")" ] ||
  fail "resumed summary '$(summary "$tmp/rest.out")' vs '$(summary "$tmp/whole.out")'"
grep -q 'update skipped' "$tmp/first.out" || fail "the first 6 steps skipped nothing: the resume test tests nothing"
"$NNS" run "$tmp/fp16_overflow.nns" --config tiny --steps 12 --stop-after 6 --plan dp --gpus 2 --save "$tmp/ckd" > "$tmp/pfirst.out" 2>&1 || fail "plan save: $(tail -2 "$tmp/pfirst.out")"
"$NNS" run "$tmp/fp16_overflow.nns" --config tiny --steps 12 --plan dp --gpus 2 --resume "$tmp/ckd" > "$tmp/prest.out" 2>&1 || fail "plan resume: $(tail -2 "$tmp/prest.out")"
[ "$(summary "$tmp/whole.out")" = "$(summary "$tmp/prest.out")" ] || fail "plan dp resumed summary '$(summary "$tmp/prest.out")' vs '$(summary "$tmp/whole.out")'"
echo "ok: resume keeps the loss scale: $(summary "$tmp/rest.out")"
