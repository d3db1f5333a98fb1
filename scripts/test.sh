#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite, printing
# how long each phase took (setup, build, tests) and the slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
phase_start=$SECONDS
phase() {  # phase NAME: the time since the last phase mark
  local now=$SECONDS
  echo "test.sh: $1 took $((now - phase_start)) s"
  phase_start=$now
}
total_start=$SECONDS
scripts/setup.sh
phase "setup (packages)"
scripts/build.sh
phase "build"
rc=0
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 300 || rc=$?
phase "tests (ctest)"
# The slowest tests of this run, from ctest's own record of it. Every stage
# reads its whole input: under pipefail, a `head` that exits early would let
# `sort` die of SIGPIPE and fail the run (exit 141) after all tests passed.
if [ -f build/Testing/Temporary/LastTest.log ]; then
  echo "test.sh: slowest tests:"
  grep -E '^[0-9]+/[0-9]+ Test: |Test time = ' build/Testing/Temporary/LastTest.log |
    awk '/ Test: /{name=$3} /Test time =/{print $4, name}' | sort -rn |
    awk 'NR <= 5 {printf "  %7.2f s  %s\n", $1, $2}'
fi
# The CPU-dependent paths once more as an AVX2-only CPU runs them: oneDNN
# capped at AVX2 has no bf16 matmul, so the bf16 products take the emulated
# path whatever this machine's CPU (issue 24: CI machines change CPU).
ONEDNN_MAX_CPU_ISA=AVX2 ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 300 \
  -R '^(backend|plan_bf16|plan_mixed_precision|plan_cuda_emulation)$' || rc=$?
phase "tests again with oneDNN capped at AVX2 (bf16 emulated)"
echo "test.sh: total $((SECONDS - total_start)) s"
exit $rc
