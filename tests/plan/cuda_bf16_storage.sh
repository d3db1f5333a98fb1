#!/usr/bin/env bash
# bf16 activation storage on the CUDA backend's emulation (docs/cuda.md):
# with precision = "bf16", activations and activation gradients are held in
# bf16. For gpt tiny:
#   - one device: the measured peak is below the fp32 run's, and the losses
#     stay within the bf16 verify bound (1e-2) of the CPU backend's, which
#     stores everything in f32;
#   - plans dp and megatron on 2 ranks: --verify passes, the largest rank's
#     measured peak is below fp32's, and the checker (nns check --precision
#     bf16-storage) and the simulator (nns simulate --precision
#     bf16-storage) give exactly the measured peak, as memory_bound.sh
#     requires of fp32;
#   - every other plan of tests/plan/cuda_emulation.sh passes --verify
#     under bf16 storage.
#   tests/plan/cuda_bf16_storage.sh NNS_BINARY
set -uo pipefail
NNS=${1:?usage: cuda_bf16_storage.sh NNS_BINARY}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

bf16="$tmp/gpt_bf16.nns"
sed 's/^  clip = 1.0$/  clip = 1.0\n  precision = "bf16"/' examples/gpt.nns > "$bf16"
grep -q 'precision = "bf16"' "$bf16" || fail "could not add precision bf16"

# One device: the Trainer's tensors.
"$NNS" run examples/gpt.nns --config tiny --steps 3 --device cuda-emulation > "$tmp/one_fp32" 2>&1 || fail "one device fp32: $(tail -3 "$tmp/one_fp32")"
"$NNS" run "$bf16" --config tiny --steps 3 --device cuda-emulation > "$tmp/one_bf16" 2>&1 || fail "one device bf16: $(tail -3 "$tmp/one_bf16")"
"$NNS" run "$bf16" --config tiny --steps 3 --device cpu > "$tmp/one_cpu" 2>&1 || fail "one device bf16 on cpu: $(tail -3 "$tmp/one_cpu")"
python3 - "$tmp/one_fp32" "$tmp/one_bf16" "$tmp/one_cpu" <<'PY' || exit 1
import re, sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def peak(text):
    m = re.search(r"^done: .*peak memory ([0-9.]+) (B|KiB|MiB|GiB)", text, re.M)
    if not m: sys.exit("FAIL: no 'done: ... peak memory' line")
    return float(m.group(1)) * units[m.group(2)]
def losses(text):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ +loss ([0-9.]+)", text, re.M)]
fp32, bf16, cpu = (open(p).read() for p in sys.argv[1:4])
a, b = peak(fp32), peak(bf16)
print(f"one device: measured peak fp32 {a:.0f} B, bf16 storage {b:.0f} B ({b / a:.3f}x)")
if not b < a: sys.exit("FAIL: bf16 storage does not lower the one-device peak")
le, lc = losses(bf16), losses(cpu)
if len(le) != 3 or len(lc) != 3: sys.exit(f"FAIL: expected 3 losses, got {len(le)} and {len(lc)}")
worst = max(abs(x - y) / abs(y) for x, y in zip(le, lc))
print(f"one device: bf16 storage losses vs the CPU backend's (f32 storage): largest difference {worst:.2e} (bound 1e-2)")
if worst > 1e-2: sys.exit("FAIL: bf16 storage moves the losses beyond the bound")
PY

plan_peak() {  # FILE PLAN OUT-PREFIX: the largest rank's measured peak in bytes
  "$NNS" run "$1" --config tiny --plan "$2" --gpus 2 --steps 2 --device cuda-emulation --verify --peak-by-rank > "$3.run" 2>&1 ||
    fail "$1 $2: $(grep -E 'error|verify' "$3.run" | tail -3)"
  sed -n 's/^memory peak by rank (bytes)://p' "$3.run" | tr ' ' '\n' | sort -n | tail -1
}
for plan in dp megatron; do
  f32=$(plan_peak examples/gpt.nns "$plan" "$tmp/${plan}_fp32") || exit 1
  run=$(plan_peak "$bf16" "$plan" "$tmp/${plan}_bf16") || exit 1
  verify=$(grep 'largest relative error' "$tmp/${plan}_bf16.run")
  [ -n "$verify" ] || fail "$plan: no --verify summary under bf16 storage"
  chk_out=$("$NNS" check "$bf16" --config tiny --plan "$plan" --gpus 2 --precision bf16-storage 2>&1)
  chk=$(sed -n 's/.*memory: peak [^(]*(\([0-9]*\) bytes).*/\1/p' <<< "$chk_out")
  sim_out=$("$NNS" simulate "$bf16" --config tiny --plan "$plan" --gpus 2 --device cpu --precision bf16-storage 2>&1)
  sim=$(sed -n 's/.*peak memory: rank [0-9]* [0-9.]* GiB (\([0-9]*\) bytes).*/\1/p' <<< "$sim_out")
  [ -n "$f32" ] && [ -n "$run" ] && [ -n "$chk" ] && [ -n "$sim" ] || fail "$plan: missing figure (fp32 '$f32', run '$run', check '$chk', simulate '$sim')"
  echo "ok: gpt tiny $plan on 2: peak fp32 $f32, bf16 storage: run $run, checker $chk, simulator $sim bytes; $verify"
  [ "$run" -lt "$f32" ] || fail "$plan: bf16 storage does not lower the measured peak ($run >= $f32)"
  [ "$chk" = "$run" ] || fail "$plan: the checker's bf16-storage peak $chk is not the measured $run"
  [ "$sim" = "$run" ] || fail "$plan: the simulator's bf16-storage peak $sim is not the measured $run"
done

# Every plan tests/plan/cuda_emulation.sh trains, under bf16 storage: --verify
# passes against the one-device reference (which keeps f32 what the plan
# sums in f32: lowering/bf16_storage.h, partial_sum_tensors).
run_bf16() {  # FILE CONFIG PLAN GPUS STEPS
  local f="$tmp/$(basename "$1")" out="$tmp/$3.bf16.log"
  sed 's/^train {$/train {\n  precision = "bf16"/' "$1" > "$f"
  grep -q 'precision = "bf16"' "$f" || fail "could not add precision bf16 to $1"
  "$NNS" run "$f" --config "$2" --plan "$3" --gpus "$4" --steps "$5" --device cuda-emulation --verify > "$out" 2>&1 ||
    fail "$1 $3 on $4 under bf16 storage: $(grep -E 'error|verify' "$out" | tail -3)"
  echo "ok: $1 --config $2 --plan $3 --gpus $4 (bf16 storage): $(grep 'largest relative error' "$out")"
}
run_bf16 examples/gpt.nns tiny hybrid 4 2
run_bf16 examples/gpt.nns tiny_pipe pipeline 2 2
run_bf16 examples/gpt.nns tiny dp_zero1 2 2
run_bf16 examples/01_mlp.nns small megatron 2 3
run_bf16 examples/t5.nns tiny interlaced 2 2
run_bf16 examples/llama.nns tiny megatron 2 2
run_bf16 examples/moe.nns tiny ep 2 2
run_bf16 examples/swin.nns tiny coshard 2 1
run_bf16 examples/resnet.nns tiny dp 2 2
run_bf16 examples/alphafold2.nns tiny pipeline3f1b 2 2
echo PASS
