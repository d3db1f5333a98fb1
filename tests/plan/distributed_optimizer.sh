#!/usr/bin/env bash
# nns run --distributed-optimizer (tests/plan/plans/distributed_optimizer.nns):
# the optimizer state sharded over plan replicas, run by the CPU executor.
#   - every plan (data and tensor parallel, 2 and 4 replicas; AdamW and SGD
#     with momentum; clipping, 2 micro-batches) equals one device under
#     --verify, fp32 relative errors at most 1e-5, and so does gpt's
#     megatron; the host-staged collectives of the CUDA path too;
#   - the programs reduce-scatter the sharded gradients and gather the
#     shards, a parameter too short to cut averaged whole beside them;
#   - the executor's peak and optimizer state equal the checker's (the
#     lowered program's memory replay), both lower than without the switch;
#   - a checkpoint saved with the switch resumes without it, and back, to
#     the unbroken run's loss;
#   - seeded faults in the sharded path fail --verify.
#   distributed_optimizer.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
FILE=tests/plan/plans/distributed_optimizer.nns
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_eq() {  # WHAT ACTUAL EXPECTED
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: got '$2', expected '$3'"
    fail=1
  fi
}

# --verify passes, and its largest relative errors (losses and gradients,
# the update) are at most 1e-5.
verify() {  # MODEL ARGS...
  local model=$1 out line
  shift
  out=$("$NNS" run "$model" "$@" --distributed-optimizer --verify 2>&1)
  line=$(grep 'verify: largest relative error' <<<"$out")
  if ! grep -q ': PASS' <<<"$line" ||
    ! awk '{ if ($5 + 0 > 1e-5 || $10 + 0 > 1e-5) exit 1 }' <<<"$line"; then
    echo "FAIL: run $model $* --distributed-optimizer --verify:"
    tail -3 <<<"$out"
    fail=1
  fi
  case "$out" in *"optimizer state sharded over them"*) ;; *) echo "FAIL: $model $*: the banner does not say the state is sharded"; fail=1 ;; esac
}
for cfg in small small_sgd; do
  verify "$FILE" --config $cfg --plan dp --gpus 4 --plan-gpus 2
  verify "$FILE" --config $cfg --plan dp --gpus 4 --plan-gpus 1
  verify "$FILE" --config $cfg --plan tp --gpus 4 --plan-gpus 2
done
verify "$FILE" --config small --plan tp --gpus 4 --plan-gpus 1 --device cuda-emulation
verify examples/gpt.nns --config tiny --plan megatron --gpus 4 --plan-gpus 2 --steps 2

# Rank 1's program on 4 replicas: w1, b1, w2, w3 reduce-scattered and
# gathered (b1's shard is 1 of its 6 rows; w1's 4 of its 16 columns); b3
# (3 elements) averaged whole in the same bucket.
prog=$("$NNS" check "$FILE" --config small --plan dp --gpus 4 --plan-gpus 1 --distributed-optimizer --emit=program |
  awk '/^program rank 1 /{on=1} /^program rank 2 /{on=0} on')
expect_eq "reduce-scattered averages" "$(grep -c 'replica-average .*reduce-scattered into 4 shards' <<<"$prog")" 4
expect_eq "whole averages" "$(grep 'replica-average' <<<"$prog" | grep -vc 'reduce-scattered')" 1
expect_eq "gathers" "$(grep -c 'allgather .*(zero1: updated shards of' <<<"$prog")" 4
expect_eq "shard of w1" "$(grep -o 'buffer b[0-9]* shard w1 .*' <<<"$prog" | sed 's/^buffer b[0-9]* //')" "shard w1 [0:6, 4:8]"
expect_eq "shard of b1" "$(grep -o 'buffer b[0-9]* shard b1 .*' <<<"$prog" | sed 's/^buffer b[0-9]* //')" "shard b1 [2:3]"

# Memory: what ran equals the checker's replay, with and without the switch.
memory() {  # SWITCH... -> "run-peak check-peak run-optimizer check-optimizer"
  local run chk
  run=$("$NNS" run "$FILE" --config small --plan dp --gpus 4 --plan-gpus 1 --steps 1 --peak-by-rank "$@" 2>&1)
  chk=$("$NNS" check "$FILE" --config small --plan dp --gpus 4 --plan-gpus 1 "$@" 2>&1)
  echo "$(sed -n 's/^memory peak by rank (bytes): \([0-9]*\).*/\1/p' <<<"$run")" \
    "$(sed -n 's/^  memory: peak .* (\([0-9]*\) bytes) on device 0.*/\1/p' <<<"$chk")" \
    "$(grep -o 'optimizer state [0-9.]* [KMG]*i*B' <<<"$run" | sed 's/optimizer state //; s/ /_/')" \
    "$(grep -o 'optimizer [0-9.]* [KMG]*i*B' <<<"$chk" | sed 's/optimizer //; s/ /_/')"
}
read -r plain_run plain_chk plain_opt_run plain_opt_chk <<<"$(memory)"
read -r do_run do_chk do_opt_run do_opt_chk <<<"$(memory --distributed-optimizer)"
echo "rank 0 peak: $plain_run bytes plain, $do_run with the distributed optimizer; optimizer state $plain_opt_run -> $do_opt_run"
expect_eq "plain peak (run = check)" "$plain_run" "$plain_chk"
expect_eq "distributed optimizer peak (run = check)" "$do_run" "$do_chk"
expect_eq "plain optimizer state (run = check)" "$plain_opt_run" "$plain_opt_chk"
expect_eq "distributed optimizer state (run = check)" "$do_opt_run" "$do_opt_chk"
# AdamW, 2 floats per element: 249 elements whole (1992 B); rank 0's
# shards 24 + 2 + 24 + 12 and b3's 3 whole (520 B).
expect_eq "optimizer state, plain" "$plain_opt_run" "1.95_KiB"
expect_eq "optimizer state, sharded" "$do_opt_run" "520_B"
[ -n "$do_run" ] && [ -n "$plain_run" ] && [ "$do_run" -lt "$plain_run" ] || { echo "FAIL: the sharded peak is not lower"; fail=1; }

# Checkpoints: saved with the switch under dp at step 2, resumed without it
# under tp (and the other way round) to the unbroken run's final loss.
final() { grep -o 'loss [0-9.]* -> [0-9.]*' | awk '{print $4}'; }
args=(--config small --gpus 4 --plan-gpus 2 --steps 4)
whole=$("$NNS" run "$FILE" "${args[@]}" --plan dp 2>&1 | final)
"$NNS" run "$FILE" "${args[@]}" --plan dp --distributed-optimizer --stop-after 2 --save "$tmp/a" >/dev/null 2>&1 || { echo "FAIL: save with the switch"; fail=1; }
expect_eq "resumed without the switch" "$("$NNS" run "$FILE" "${args[@]}" --plan tp --resume "$tmp/a" 2>&1 | final)" "$whole"
"$NNS" run "$FILE" "${args[@]}" --plan tp --stop-after 2 --save "$tmp/b" >/dev/null 2>&1 || { echo "FAIL: save without the switch"; fail=1; }
expect_eq "resumed with the switch" "$("$NNS" run "$FILE" "${args[@]}" --plan dp --distributed-optimizer --resume "$tmp/b" 2>&1 | final)" "$whole"

# Seeded faults: a gather that keeps only the replica's own shard fails the
# update check; a reduce-scatter averaging 1% high fails the gradient check
# (clipping off: it would scale the error away).
fault() {  # FAULT EXPECTED-PATTERN ARGS...
  local f=$1 want=$2 out
  shift 2
  out=$(NNS_TEST_FAULT=$f "$NNS" run "$FILE" --config small "$@" --distributed-optimizer --verify 2>&1)
  grep -Eq "$want" <<<"$out" || { echo "FAIL: NNS_TEST_FAULT=$f not caught:"; grep 'verify:' <<<"$out" | head -2; fail=1; }
}
fault gather-own-shard 'over the update \([a-z0-9]+\): FAIL' --plan dp --gpus 4 --plan-gpus 2
fault grad-scale-1pct 'largest relative error 1\.0[0-9]e-02 over losses and gradients.*: FAIL' --set clip=0 --plan tp --gpus 4 --plan-gpus 2

[ $fail = 0 ] && echo PASS
exit $fail
