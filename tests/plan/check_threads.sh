#!/usr/bin/env bash
# nns check's per-rank work runs on all cores (backend/lowering/parallel.h):
# its report (less the times), its diagnoses, --emit=comm and --emit=program
# must be the same byte for byte as with NNS_CHECK_THREADS=1 (one thread),
# including the order of the diagnoses of a seeded bug caught on several
# ranks. (On a one-core machine both runs are serial and this only checks
# that the variable is accepted.)
#   check_threads.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0

source tests/plan/same_output.sh
# Times differ run to run: "(12.3 ms" and "in 12.3 ms" become "(T ms".
masked() { sed -E 's/[0-9]+(\.[0-9]+)? ms/T ms/g; s/ +/ /g'; }
# The check's output and exit code with one thread and with all (a seeded
# bug's check fails on both).
SAME_ANY_EXIT=1
same() { same_under NNS_CHECK_THREADS=1 "$@"; }

# (16 ranks and more are also lowered on all cores, lower_plan.cpp.)
for a in "examples/gpt.nns tiny hybrid 4" "examples/swin.nns tiny coshard 2" "examples/moe.nns tiny ep 4" \
  "tests/plan/plans/collectives.nns small alltoall 4" "examples/01_mlp.nns small dp 16"; do
  set -- $a
  same "check $a" check "$1" --config "$2" --plan "$3" --gpus "$4"
  same "comm $a" check "$1" --config "$2" --plan "$3" --gpus "$4" --emit=comm
  same "program $a" check "$1" --config "$2" --plan "$3" --gpus "$4" --emit=program
done
# Plan replicas (replica 0 verified, the others compared with it).
same "replicas" check examples/gpt.nns --config tiny --plan megatron --gpus 4 --plan-gpus 2
# Seeded bugs whose diagnoses come from the buffer check (every rank) and
# from the value check (every edge): the same diagnoses in the same order.
same "seeded double-inplace-allreduce" check tests/plan/plans/shared_partial.nns --config small --plan vs --gpus 2 \
  --seed-bug double-inplace-allreduce
same "seeded kernel-read-after-free" check examples/gpt.nns --config tiny --plan megatron --gpus 4 \
  --seed-bug kernel-read-after-free
same "seeded missing-allreduce" check examples/gpt.nns --config tiny --plan hybrid --gpus 4 --seed-bug missing-allreduce

# The seeded runs must have failed (a check that passes would compare nothing).
out="$(NNS_CHECK_THREADS=1 "$NNS" check examples/gpt.nns --config tiny --plan megatron --gpus 4 --seed-bug kernel-read-after-free 2>&1)"
if ! grep -q "nns: error: program:" <<<"$out"; then
  echo "FAIL: the seeded kernel-read-after-free was not caught"
  fail=1
fi

[ $fail -eq 0 ] && echo "PASS: nns check gives the same output on one thread and on all"
exit $fail
