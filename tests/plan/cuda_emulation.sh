#!/usr/bin/env bash
# The CUDA backend's whole training path where no GPU is: shipped plans run
# with --device cuda-emulation (the CUDA backend's code, its kernels run on
# the host; device memory, so collectives are staged through host buffers
# as on a GPU with Gloo) and pass --verify against one device of the same
# kind (the emulation: the plan's partitioning and communication checked
# with the same kernels; the kernels themselves are checked against the CPU
# reference by ctest cuda_emulation); plus
# one device under bf16 and fp16 autocast, whose losses must equal the CPU
# backend's at the same precision within the verify bound.
#   tests/plan/cuda_emulation.sh NNS_BINARY
set -uo pipefail
NNS=${1:?usage: cuda_emulation.sh NNS_BINARY}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run_plan() {  # FILE CONFIG PLAN GPUS STEPS
  local out="$tmp/$3.log"
  "$NNS" run "$1" --config "$2" --plan "$3" --gpus "$4" --steps "$5" --device cuda-emulation --verify > "$out" 2>&1 ||
    fail "$1 $3 on $4: $(grep -E 'error|verify' "$out" | tail -3)"
  grep -q "CUDA-emulated" "$out" || fail "$1 $3: the banner does not name the emulated CUDA kernels"
  echo "ok: $1 --config $2 --plan $3 --gpus $4: $(grep 'largest relative error' "$out")"
}
run_plan examples/gpt.nns tiny dp 2 3
run_plan examples/gpt.nns tiny megatron 2 3
run_plan examples/gpt.nns tiny_sc21_tp2 megatron_h100_sp 2 2
run_plan examples/gpt.nns tiny hybrid 4 2
run_plan examples/gpt.nns tiny_pipe pipeline 2 2
run_plan examples/gpt.nns tiny dp_zero1 2 2
run_plan examples/01_mlp.nns small megatron 2 3
run_plan examples/t5.nns tiny interlaced 2 2
run_plan examples/llama.nns tiny megatron 2 2
run_plan examples/moe.nns tiny ep 2 2
run_plan examples/swin.nns tiny coshard 2 1
run_plan examples/resnet.nns tiny dp 2 2
run_plan examples/alphafold2.nns tiny pipeline3f1b 2 2

# One device under autocast: the emulated CUDA products round as the CPU's.
for precision in bf16 fp16; do
  sed "s/^  clip = 1.0\$/  clip = 1.0\n  precision = \"$precision\"/" examples/gpt.nns > "$tmp/gpt_$precision.nns"
  grep -q "precision = \"$precision\"" "$tmp/gpt_$precision.nns" || fail "could not add precision $precision"
  "$NNS" run "$tmp/gpt_$precision.nns" --config tiny --steps 5 --device cpu > "$tmp/cpu_$precision" 2>&1 || fail "cpu $precision"
  "$NNS" run "$tmp/gpt_$precision.nns" --config tiny --steps 5 --device cuda-emulation > "$tmp/emu_$precision" 2>&1 ||
    fail "cuda-emulation $precision: $(tail -3 "$tmp/emu_$precision")"
  python3 - "$tmp/cpu_$precision" "$tmp/emu_$precision" "$precision" <<'PY' || exit 1
import re, sys
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ +loss ([0-9.]+)", open(path).read(), re.M)]
cpu, emu, precision = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3]
if len(cpu) != 5 or len(emu) != 5: sys.exit(f"FAIL: {precision}: expected 5 losses, got {len(cpu)} and {len(emu)}")
worst = max(abs(a - b) / abs(a) for a, b in zip(cpu, emu))
print(f"ok: gpt tiny {precision} on one device, cuda-emulation vs cpu: largest loss difference {worst:.2e} (bound 1e-2)")
if worst > 1e-2: sys.exit(f"FAIL: {precision}: the emulated CUDA losses differ from the CPU's by {worst:.2e}")
PY
done
