#!/usr/bin/env bash
# What to run first on a machine with a GPU (the device tool's machine).
# Configures with the CUDA backend required, builds, and runs in order:
#   1. the CUDA conformance table (every registry row, forward and backward,
#      against the CPU reference kernels; tests/cuda), then its cuDNN
#      fused-attention case alone with NNS_CUDNN_TRACE=1;
#   2. the NCCL communicator on a world of one rank, and the plan
#      executor's NCCL path on it (stream ordering, posted allreduces; a
#      plan with --comm nccl on one rank: NCCL's setup under the executor);
#   3. training on the GPU with --verify: one device, and plans whose ranks
#      share the one GPU with Gloo collectives staged through host memory
#      (the same list tests/plan/cuda_emulation.sh runs on the emulation);
#   4. the GPU benchmark against PyTorch (bench/gpu/gpt_step.sh).
# It prints the device and driver first. Without a GPU the table exits 77
# ("skipped") and so does this script.
#   scripts/gpu_check.sh [BUILD_DIR]     (default build-cuda)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNNS_CUDA=ON > "$build.configure.log" 2>&1 ||
  { tail -20 "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target nns_cuda_tests nns > "$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 1; }
"$build/tests/cuda/nns_cuda_tests" --durations yes
rc=$?
if [ $rc -eq 77 ]; then
  echo "gpu_check: skipped (no CUDA device visible)"
  exit 77
fi
echo "gpu_check: conformance exit $rc"
# cuDNN's fused attention on its own, with the trace of what ran on cuDNN.
NNS_CUDNN_TRACE=1 "$build/tests/cuda/nns_cuda_tests" "[cudnn]"
echo "gpu_check: cuDNN attention exit $?"
if cmake --build "$build" -j"$(nproc)" --target nns_nccl_tests nns_nccl_collectives_tests > /dev/null 2>&1; then
  "$build/tests/cuda/nns_nccl_tests"
  echo "gpu_check: nccl exit $?"
  "$build/tests/cuda/nns_nccl_collectives_tests"
  echo "gpu_check: nccl collectives exit $?"
  "$build/nns" run examples/gpt.nns --config tiny --plan dp --gpus 1 --steps 3 --device cuda --comm nccl --verify 2>&1 |
    grep -E "largest relative error|error" | head -1
fi
echo "== training on the GPU"
"$build/nns" run examples/gpt.nns --config tiny --steps 30 --device cuda | tail -2
for spec in "gpt.nns tiny dp 2" "gpt.nns tiny megatron 2" "gpt.nns tiny hybrid 4" "gpt.nns tiny_pipe pipeline 2" \
            "swin.nns tiny coshard 2" "t5.nns tiny interlaced 2" "llama.nns tiny megatron 2" "moe.nns tiny ep 2" \
            "resnet.nns tiny dp 2" "alphafold2.nns tiny pipeline3f1b 2"; do
  set -- $spec
  printf '%s %s %s on %s ranks sharing the GPU: ' "$1" "$2" "$3" "$4"
  "$build/nns" run "examples/$1" --config "$2" --plan "$3" --gpus "$4" --steps 3 --device cuda --verify 2>&1 |
    grep -E "largest relative error|error" | head -1
done
echo "== benchmark"
bash bench/gpu/gpt_step.sh --nns "$build/nns"
exit $rc
