#!/usr/bin/env bash
# The kernel cache (backend/lowering/kernel_cache.h) as the driver uses it:
# `nns check --emit=program` and the check's report (less the times) are
# the same byte for byte with NNS_KERNEL_CACHE=0 (every sub-op elaborated)
# and with the cache, on plans whose blocks repeat, and a run trains to the
# same losses both ways. Every field of the kernel bodies is compared by
# tests/plan/kernel_cache_test.cpp; this checks the driver's wiring.
#   kernel_cache.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0

source tests/plan/same_output.sh
masked() { sed -E 's/[0-9]+(\.[0-9]+)? (ms|s|tokens\/s)\b/T \2/g; s/ +/ /g'; }
# Output and exit code without the cache and with it.
same() { same_under NNS_KERNEL_CACHE=0 "$@"; }

for a in "examples/alphafold2.nns tiny dap 2" "examples/swin.nns tiny coshard 2" "examples/t5.nns tiny interlaced 2" \
  "examples/gpt.nns tiny_pipe zero_bubble 2"; do
  set -- $a
  same "$1 $3 --emit=program" check "$1" --config "$2" --plan "$3" --gpus "$4" --emit=program
  same "$1 $3 check" check "$1" --config "$2" --plan "$3" --gpus "$4"
done
# Each rank process elaborates its own kernels: the losses are the same.
same "alphafold2 dap run" run examples/alphafold2.nns --config tiny --plan dap --gpus 2 --steps 2

[ "$fail" = 0 ] && echo "PASS: the kernel cache changes no program, report or loss"
exit "$fail"
