#!/usr/bin/env bash
# The GPU checks, on the GPU machine, from the repository root (the kit made
# by scripts/gpu_kit.sh beside this script). Unpacks the kit, finds the CUDA
# libraries, says which were loaded, then runs, each bounded in time:
#   1. the CUDA conformance tables (nns_cuda_tests), and their cuDNN
#      fused-attention case alone with its trace;
#   2. NCCL on one rank (nns_nccl_tests, nns_nccl_collectives_tests);
#   3. training on the GPU: one device, and ten plans whose ranks share
#      the GPU, each with --verify against one device;
#   4. the GPT layer-stack step against PyTorch eager and torch.compile
#      (bench/gpu/gpt_step.sh, the device's PyTorch).
# Everything goes to $OUT (default ./gpu-out): summary.txt and one log per
# check. Exit 0 when every check passed, 1 otherwise.
#
# Where the CUDA libraries are looked for, in order (the first that holds
# each library wins): $NNS_CUDA_LIB_DIRS (colon-separated), $CUDA_HOME/lib64,
# /usr/local/cuda/lib64, /usr/local/cuda/lib, then the nvidia wheels of the
# device's Python (site-packages/nvidia/*/lib: cudnn, nccl, cublas, ...).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(pwd)"
OUT="${OUT:-$ROOT/gpu-out}"
mkdir -p "$OUT"
KIT="$(mktemp -d)"
trap 'rm -rf "$KIT"' EXIT
xz -dc "$HERE/nns-gpu-kit.tar.xz" | tar -C "$KIT" -xf - || { echo "run.sh: cannot unpack $HERE/nns-gpu-kit.tar.xz"; exit 1; }

dirs=()
[ -n "${NNS_CUDA_LIB_DIRS:-}" ] && IFS=: read -r -a dirs <<<"$NNS_CUDA_LIB_DIRS"
[ -n "${CUDA_HOME:-}" ] && dirs+=("$CUDA_HOME/lib64")
dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/lib)
if command -v python3 > /dev/null; then
  while read -r d; do dirs+=("$d"); done < <(python3 - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        print(d)
PY
)
fi
libpath="$KIT/lib"
for d in "${dirs[@]}"; do [ -d "$d" ] && libpath="$libpath:$d"; done
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NNS_STDLIB="$ROOT/stdlib"
NNS="$KIT/bin/nns"

summary="$OUT/summary.txt"
{
  echo "nns GPU kit (commit $(cat "$KIT/COMMIT")), $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/device: /'
  echo "libraries loaded by nns:"
  ldd "$NNS" | grep -E 'libcuda|libcudart|libcublas|libcudnn|libnccl|not found' | sed 's/^/  /'
  "$NNS" --version 2>&1 | sed 's/^/  /'
} > "$summary"
fail=0
# The whole run stays within 8 minutes (a device slot is 15, start-up
# included): each check's limit is cut to what is left of NNS_KIT_BUDGET.
BUDGET=${NNS_KIT_BUDGET:-470}
check() {  # NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 5 ]; then
    printf '%-28s %s\n' "$name" "NOT RUN (the kit's time budget is spent)" >> "$summary"
    fail=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS rc
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  local verdict=PASS
  [ $rc = 0 ] || { verdict="FAIL (exit $rc)"; fail=1; }
  grep -qiE "skipped|no CUDA device" "$OUT/$name.log" && [ $rc = 0 ] && verdict="PASS (but the log says skipped: no device?)"
  printf '%-28s %s in %ds\n' "$name" "$verdict" $((SECONDS - t0)) >> "$summary"
}
check conformance 240 "$KIT/bin/nns_cuda_tests"
# cuDNN's fused attention (sdpa under bf16 storage) again on its own, with
# NNS_CUDNN_TRACE=1: the log names the shapes built on cuDNN and why any
# declined (the case is also part of the table above).
check cudnn_attention 60 env NNS_CUDNN_TRACE=1 "$KIT/bin/nns_cuda_tests" "[cudnn]"
[ -x "$KIT/bin/nns_nccl_tests" ] && check nccl_one_rank 60 "$KIT/bin/nns_nccl_tests"
[ -x "$KIT/bin/nns_nccl_collectives_tests" ] && check nccl_collectives 60 "$KIT/bin/nns_nccl_collectives_tests"
check nccl_plan_executor 120 "$NNS" run examples/gpt.nns --config tiny --plan dp --gpus 1 --steps 3 --device cuda --comm nccl --verify
check train_gpt_1gpu 120 "$NNS" run examples/gpt.nns --config tiny --steps 30 --device cuda
# Plans whose ranks share the one GPU (Gloo collectives staged through host
# memory), each against one device.
for spec in "gpt.nns tiny dp 2" "gpt.nns tiny megatron 2" "gpt.nns tiny hybrid 4" "gpt.nns tiny_pipe pipeline 2" \
            "swin.nns tiny coshard 2" "t5.nns tiny interlaced 2" "llama.nns tiny megatron 2" "moe.nns tiny ep 2" \
            "resnet.nns tiny dp 2" "alphafold2.nns tiny pipeline3f1b 2"; do
  set -- $spec
  check "verify_${1%.nns}_$3_$4" 120 "$NNS" run "examples/$1" --config "$2" --plan "$3" --gpus "$4" --steps 3 --device cuda --verify
done
# cuDNN's convolutions and pooling against the own kernels (NNS_CUDNN=0),
# and the fused attention op (sdpa) under a tensor-parallel plan.
check resnet_own_kernels 30 env NNS_CUDNN=0 "$NNS" run examples/resnet.nns --config tiny --plan dp --gpus 2 --steps 3 --device cuda --verify
check gpt_sdpa_megatron 30 "$NNS" run examples/gpt.nns --config tiny --set fused_attention=true --plan megatron --gpus 2 --steps 3 --device cuda --verify
# gpu_stack in bf16 with fused attention (head dim 128): its sdpa runs on
# cuDNN where the graph builds; the trace in the log says which.
check bench_vs_torch 240 env NNS_CUDNN_TRACE=1 bash bench/gpu/gpt_step.sh --nns "$NNS"
cat "$summary"
exit $fail
