#!/usr/bin/env bash
# What to run first on a machine with a GPU (the device tool's machine):
# configures with the CUDA backend required, builds the CUDA conformance
# table and runs it, printing the device, the driver and the table's
# result. Without a GPU the table exits 77 ("skipped") and so does this.
#   scripts/gpu_check.sh [BUILD_DIR]     (default build-cuda)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNNS_CUDA=ON > "$build.configure.log" 2>&1 ||
  { tail -20 "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target nns_cuda_tests || exit 1
"$build/tests/cuda/nns_cuda_tests" --durations yes
rc=$?
[ $rc -eq 77 ] && echo "gpu_check: skipped (no CUDA device visible)"
exit $rc
