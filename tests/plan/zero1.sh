#!/usr/bin/env bash
# zero1(ops) (tests/plan/plans/zero1.nns): ZeRO-1 in plans. Every plan runs
# with --verify against one device (data parallel on 2 and 4 ranks, some
# parameters only, tensor x data parallel, plan replicas); the programs
# reduce-scatter the sharded gradients and allgather the updated shards
# (no bucketed allreduce of them); a parameter with no dimension divisible
# by the group is left whole with a note; the checker's optimizer memory is
# the sharded one; a checkpoint saved under one zero1 plan resumes under
# another to the unbroken run's loss; a seeded early update is caught.
#   zero1.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
FILE=tests/plan/plans/zero1.nns
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_eq() {  # WHAT ACTUAL EXPECTED
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: got '$2', expected '$3'"
    fail=1
  fi
}

verify() {  # ARGS...
  local out
  if ! out=$("$NNS" run "$FILE" "$@" --verify 2>&1) || ! grep -q 'verify: largest relative error .*: PASS' <<<"$out"; then
    echo "FAIL: run $* --verify:"
    tail -5 <<<"$out"
    fail=1
  fi
}
verify --plan dp --gpus 2
verify --plan dp --gpus 4
verify --plan dp_some --gpus 2
verify --plan hybrid --gpus 4
verify --plan dp --gpus 4 --plan-gpus 2
verify --plan replicated_groups --gpus 4

# Rank 0's program under dp on 4 devices: w1, b1, w2, w3 sharded (b3 has 3
# elements), b3 alone in a bucketed allreduce.
prog=$("$NNS" check "$FILE" --plan dp --gpus 4 --emit=program | awk '/^program rank 0 /{on=1} /^program rank 1 /{on=0} on')
expect_eq "zero1 reduce-scatters on rank 0" "$(grep -c 'reduce-scatter .*(zero1: gradient of' <<<"$prog")" 4
expect_eq "zero1 allgathers on rank 0" "$(grep -c 'allgather .*(zero1: updated shards of' <<<"$prog")" 4
expect_eq "shard of w1 on rank 0" "$(grep -o 'buffer b[0-9]* shard w1 .*' <<<"$prog" | sed 's/^buffer b[0-9]* //')" "shard w1 [0:8, 0:16]"
expect_eq "bucketed allreduces on rank 0" "$(grep -c 'bucket-allreduce' <<<"$prog")" 1
# Only linear#0's parameters under dp_some: w1 and b1 are not read by it.
prog=$("$NNS" check "$FILE" --plan dp_some --gpus 2 --emit=program | awk '/^program rank 0 /{on=1} /^program rank 1 /{on=0} on')
expect_eq "dp_some: sharded parameters" "$(grep -o '(zero1: gradient of [a-z0-9]*' <<<"$prog" | awk '{print $4}' | tr '\n' ' ')" "w1 "

check=$("$NNS" check "$FILE" --plan dp --gpus 4 2>&1)
expect_eq "note for b3" "$(grep -o 'note: zero1: b3 is not sharded.*' <<<"$check")" \
  "note: zero1: b3 is not sharded: no dimension of its piece [0:3] divides into 4 equal shards"
# AdamW keeps 2 floats per element: (1104 / 4 + 3) x 2 x 4 bytes = 2232 bytes.
expect_eq "optimizer memory on device 0" "$(grep -o 'optimizer [0-9.]* [KMG]*i*B' <<<"$check")" "optimizer 2.18 KiB"

# Save under dp (4 ranks) at step 2, resume under hybrid to step 4: the
# unbroken run's losses.
whole=$("$NNS" run "$FILE" --plan dp --gpus 4 --steps 4 2>&1 | grep -o 'loss [0-9.]* -> [0-9.]*' | awk '{print $4}')
"$NNS" run "$FILE" --plan dp --gpus 4 --steps 4 --stop-after 2 --save "$tmp/ck" > /dev/null 2>&1 || { echo "FAIL: save under dp"; fail=1; }
resumed=$("$NNS" run "$FILE" --plan hybrid --gpus 4 --steps 4 --resume "$tmp/ck" 2>&1 | grep -o 'loss [0-9.]* -> [0-9.]*' | awk '{print $4}')
expect_eq "final loss after resuming a dp zero1 checkpoint under hybrid" "$resumed" "$whole"

# The program verifier catches an update issued before its gradient's reduce-scatter.
out=$("$NNS" check "$FILE" --plan dp --gpus 2 --seed-bug early-update 2>&1)
rc=$?
expect_eq "seeded early update: exit" "$rc" 70
grep -q 'is issued before its gradient is reduced' <<<"$out" || { echo "FAIL: seeded early update not diagnosed:"; echo "$out" | tail -3; fail=1; }

[ $fail = 0 ] && echo PASS
exit $fail
